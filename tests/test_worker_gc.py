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


def _walked(objects: list[list[int]]) -> int:
    """How many of ``objects`` the collector still walks (a frozen one it does not).

    Asked of the objects themselves: the freeze count also falls whenever any
    frozen object of this busy test process is freed, so it cannot say what froze.
    """
    walked = {id(o) for o in gc.get_objects(generation=2)}
    return sum(id(o) in walked for o in objects)


def _collected(objects: list[list[int]]) -> bool:
    return _walked(objects) == len(objects)


def _frozen(objects: list[list[int]]) -> bool:
    return _walked(objects) == 0


def test_outside_a_daemon_worker_nothing_is_frozen() -> None:
    # Given: this test process (pytest's __main__, not pyspark.daemon)
    kept = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)
    # When / Then: the collector is left as it is
    assert not worker_gc.in_daemon_worker()
    assert worker_gc.settle() is False
    assert _collected(kept)


def test_a_daemon_worker_freezes_its_survivors_at_most_max_freezes_times(
    daemon_worker: None,
) -> None:
    # Given: a worker that keeps many objects
    first = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)
    # When: it settles
    assert worker_gc.settle() is True
    # Then: what it kept is out of the collector's reach
    assert _frozen(first)
    # Few new survivors: nothing to freeze
    few = _survivors(10)
    assert worker_gc.settle() is False
    assert _collected(few)
    # Each time many more are kept it freezes again, up to MAX_FREEZES in all
    kept = [first, few]
    for _ in range(worker_gc.MAX_FREEZES - 1):
        kept.append(_survivors(2 * worker_gc.SURVIVORS_TO_FREEZE))
        assert worker_gc.settle() is True
        assert _frozen(kept[-1])
    late = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)
    assert worker_gc.settle() is False
    assert _collected(late)


def test_a_settled_entry_point_freezes_before_it_runs(daemon_worker: None) -> None:
    kept = _survivors(2 * worker_gc.SURVIVORS_TO_FREEZE)

    @worker_gc.settled
    def entry(a: int, *, b: int) -> tuple[int, bool]:
        return a + b, _frozen(kept)

    total, frozen_before_the_body = entry(1, b=2)
    assert total == 3
    assert frozen_before_the_body
    assert entry.__name__ == "entry"
