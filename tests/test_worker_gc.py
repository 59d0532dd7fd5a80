"""Freezing what a reused Python worker keeps, so pyspark's per-call collections stay cheap."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from importlib.machinery import ModuleSpec

import pytest

from spark_queue.spark import worker_gc


@pytest.fixture
def daemon_worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process passes for a worker of pyspark's daemon; what it froze is thawed after."""
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", ModuleSpec("pyspark.daemon", None))
    monkeypatch.setattr(worker_gc, "_freezes", {})
    try:
        yield
    finally:
        gc.unfreeze()


def _survivors(n: int) -> list[list[int]]:
    """``n`` tracked objects kept alive, moved to the oldest generation as a worker's would be."""
    kept = [[i] for i in range(n)]  # lists are always tracked (small dicts may not be)
    gc.collect()
    return kept


def test_outside_a_daemon_worker_nothing_is_frozen() -> None:
    # Given: this test process (pytest's __main__, not pyspark.daemon)
    kept = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)
    frozen = gc.get_freeze_count()
    # When / Then: the collector is left as it is
    assert not worker_gc.in_daemon_worker()
    assert worker_gc.settle() is False
    assert gc.get_freeze_count() == frozen
    assert kept


def test_a_daemon_worker_freezes_its_survivors_at_most_max_freezes_times(
    daemon_worker: None,
) -> None:
    # Given: a worker that keeps many objects
    kept = [_survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)]
    # When: it settles
    assert worker_gc.settle() is True
    # Then: what it kept is out of the collector's reach, and a collection walks little
    assert gc.get_freeze_count() >= 2 * worker_gc.SURVIVORS_TO_FREEZE
    assert len(gc.get_objects(generation=2)) < worker_gc.SURVIVORS_TO_FREEZE
    # Few new survivors: nothing to freeze
    kept.append(_survivors(10))
    assert worker_gc.settle() is False
    # Each time many more are kept it freezes again, up to MAX_FREEZES in all
    for _ in range(worker_gc.MAX_FREEZES - 1):
        kept.append(_survivors(2 * worker_gc.SURVIVORS_TO_FREEZE))
        assert worker_gc.settle() is True
    frozen = gc.get_freeze_count()
    kept.append(_survivors(2 * worker_gc.SURVIVORS_TO_FREEZE))
    assert worker_gc.settle() is False
    assert gc.get_freeze_count() == frozen


def test_a_settled_entry_point_freezes_before_it_runs(daemon_worker: None) -> None:
    kept = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)

    @worker_gc.settled
    def entry(a: int, *, b: int) -> tuple[int, int]:
        return a + b, gc.get_freeze_count()

    total, frozen_before_the_call = entry(1, b=2)
    assert total == 3
    assert frozen_before_the_call >= len(kept)
    assert entry.__name__ == "entry"
