"""Small helpers shared by the tests that talk to a real queue."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from spark_queue import QueueClient
from spark_queue.bench.faults_pipeline import PHASES, PipelineFaultsResult
from spark_queue.message import Delivery
from spark_queue.queue import Queue
from spark_queue.store import acks
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import LeaseCheck
from spark_queue.store.session import Store

if TYPE_CHECKING:
    from tests.conftest import Backend


def drain_deliveries(queue: Queue, *, batch: int = 100, wait: float = 0.0) -> list[Delivery]:
    """Receive and ack until the queue has nothing visible; return every delivery."""
    got: list[Delivery] = []
    while deliveries := queue.receive(batch, wait=wait):
        got += deliveries
        queue.ack_batch([d.receipt for d in deliveries])
    return got


def drain(queue: Queue, *, batch: int = 100, wait: float = 0.0) -> list[bytes]:
    """Receive and ack until the queue has nothing visible; return the payloads."""
    return [d.payload for d in drain_deliveries(queue, batch=batch, wait=wait)]


def count_ack_paths(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the messages each conditional ack and each ack read of ``queue`` is asked for.

    Which way an ack went (``own_leases.py``, ``store/acks.py``) is seen here:
    an own lease costs neither, a plain ack a read, a checked one the condition.
    """
    counts = {"conditional": 0, "read": 0}
    conditional, read = queue.buckets.ack, acks.read

    def counted_ack(checks: list[LeaseCheck], now: int) -> set[tuple[int, int]]:
        counts["conditional"] += len(checks)
        return conditional(checks, now)

    def counted_read(buckets: Buckets, keys: list[tuple[int, int]]) -> dict[acks.Key, acks.Held]:
        counts["read"] += len(keys)
        return read(buckets, keys)

    monkeypatch.setattr(queue.buckets, "ack", counted_ack)
    monkeypatch.setattr(acks, "read", counted_read)
    return counts


def chosen_seed() -> int:
    """``BDQ_TEST_SEED`` when set, else a fresh seed (a test prints it and names it on failure)."""
    given = os.environ.get("BDQ_TEST_SEED", "").strip()
    return int(given) if given else random.SystemRandom().randrange(2**31)


def assert_killed_and_exactly_once(
    result: PipelineFaultsResult, messages: int, kills: int, why: str
) -> None:
    """Every planned kill happened, in every phase; each source id arrived once, intact."""
    killed = [k for k in result.kills if k.killed]
    assert len(killed) == kills, why
    assert {k.phase for k in killed} == set(PHASES), why
    # some kills mid-batch, some between a commit and the next batch
    assert any(k.landed.endswith("running") for k in killed), why
    assert any(k.landed.endswith("next not planned") for k in killed), why
    # one by one, so that a failure says which part of exactly-once broke
    assert result.missing == 0, why
    assert result.duplicates == 0, why
    assert result.extra == 0, why
    assert result.corrupt == 0, why
    assert result.delivered == messages, why
    assert result.source_left == 0, why
    assert result.target_left == 0, why


@contextmanager
def client_with_clock_offset(backend: Backend, seconds: float) -> Iterator[QueueClient]:
    """A client on ``backend`` whose plain writes are stamped ``seconds`` off the store's clock.

    As a host whose clock is off writes: the driver's timestamp generator is shifted
    (the memory store's ``with_clock_offset`` on the memory store). Clocks the engine
    reads itself (``sending.now_ms``, ...) are the caller's to shift.
    """
    if backend.store is not None:
        with QueueClient(store=backend.store.with_clock_offset(seconds)) as client:
            yield client
        return
    store = Store(backend.settings)
    generator = store.cluster.timestamp_generator
    store.cluster.timestamp_generator = lambda: generator() + int(seconds * 1_000_000)
    try:
        with QueueClient(store=store) as client:
            yield client
    finally:
        store.close()
