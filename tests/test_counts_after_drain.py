"""Counts right after a drain (issue 19, defect 11): the first ``stats()`` is already right.

A queue received and acked to its last message must count 0 at the very next
``stats()``, with one lane or eight, although it has more live buckets than one
count scans (``COUNT_BUDGET``): the acks that empty a bucket leave its count
behind (``engine/drains.py``). Runs on both stores (conftest.py's ``client``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from spark_queue import QueueClient
from spark_queue.defaults import COUNT_BUDGET
from spark_queue.message import Delivery
from spark_queue.queue import Queue
from spark_queue.store.buckets import Buckets

if TYPE_CHECKING:
    from tests.conftest import Backend

pytestmark = pytest.mark.both_stores

MESSAGES = 250
BUCKET_SIZE = 10


def filled(client: QueueClient, name: str, lanes: int) -> Queue:
    """A queue of 250 messages in 25 buckets, keyed so that they spread over every lane."""
    # A long seal delay: no maintenance pass drops a drained bucket during the test,
    # so the counts alone must say the buckets are empty.
    queue = client.create_queue(name, bucket_size=BUCKET_SIZE, lanes=lanes, seal_delay=300)
    queue.send_batch(
        [str(i).encode() for i in range(MESSAGES)], key=[str(i) for i in range(MESSAGES)]
    )
    assert MESSAGES // BUCKET_SIZE > COUNT_BUDGET  # more buckets than one count scans
    return queue


def drain_acking(queue: Queue, count: int) -> None:
    """Receive ``count`` messages in receives of 10, acking each receive's batch at once."""
    acked, deadline = 0, time.monotonic() + 60
    while acked < count:
        assert time.monotonic() < deadline, f"acked {acked} of {count}"
        deliveries = queue.receive(10, visibility_timeout=60, wait=1.0)
        queue.ack_batch([d.receipt for d in deliveries])
        acked += len(deliveries)


def receive_all(queue: Queue, count: int) -> list[Delivery]:
    """Receive ``count`` messages in receives of 10 (lanes are taken a few per receive)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + 60
    while len(got) < count:
        assert time.monotonic() < deadline, f"received {len(got)} of {count}"
        got += queue.receive(min(10, count - len(got)), visibility_timeout=60, wait=1.0)
    return got


@pytest.mark.parametrize("lanes", [1, 8])
def test_a_drained_queue_counts_zero_at_the_first_call(client: QueueClient, lanes: int) -> None:
    # Given a queue of 250 messages in 25 buckets
    queue = filled(client, f"drained_{lanes}", lanes)

    # When one client receives them in batches of 10 and acks each batch
    drain_acking(queue, MESSAGES)

    # Then the very first count says the queue is empty
    stats = queue.stats()
    assert (stats.visible, stats.in_flight, stats.delayed) == (0, 0, 0)
    assert stats.estimated_buckets == 0
    assert queue.stats(exact=True).visible == 0


@pytest.mark.parametrize("lanes", [1, 8])
def test_messages_left_after_a_near_drain_are_counted_exactly(
    client: QueueClient, lanes: int
) -> None:
    # Given a queue of 250 messages, all received, 240 acked, 5 made visible again
    queue = filled(client, f"near_drained_{lanes}", lanes)
    deliveries = receive_all(queue, MESSAGES)
    kept = deliveries[-10:]
    for start in range(0, MESSAGES - 10, 10):
        queue.ack_batch([d.receipt for d in deliveries[start : start + 10]])
    for d in kept[:5]:
        queue.change_visibility(d.receipt, 0)

    # When the queue is counted the first time
    stats = queue.stats()

    # Then the 10 left are counted as they are: the drained buckets count 0
    # and the few holding messages fit in the scans of one call
    assert (stats.visible, stats.in_flight, stats.delayed) == (5, 5, 0)
    assert stats.estimated_buckets == 0
    exact = queue.stats(exact=True)
    assert (exact.visible, exact.in_flight, exact.delayed) == (5, 5, 0)


@pytest.mark.parametrize("lanes", [1, 8])
def test_a_drain_probes_each_bucket_about_once_per_lane_not_once_per_ack(
    client: QueueClient, lanes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 17 buckets of 200 messages, and the probes of drained buckets counted
    probed: Counter[int] = Counter()
    has_unacked_many = Buckets.has_unacked_many

    def counting(self: Buckets, buckets: Sequence[int]) -> list[bool]:
        probed.update(buckets)
        return has_unacked_many(self, buckets)

    monkeypatch.setattr(Buckets, "has_unacked_many", counting)
    size, count = 200, 200 * (COUNT_BUDGET + 1)
    queue = client.create_queue(f"large_{lanes}", bucket_size=size, lanes=lanes, seal_delay=300)
    queue.send_batch([str(i).encode() for i in range(count)], key=[str(i) for i in range(count)])

    # When one client drains it in receives of 10, acking each (20 acks per bucket or more)
    drain_acking(queue, count)

    # Then the first count says 0, and each bucket was probed when a lane was done there
    stats = queue.stats()
    assert (stats.visible, stats.in_flight, stats.delayed) == (0, 0, 0)
    assert max(probed.values()) <= 2 * lanes < size // 10  # not once per ack


def test_consumers_draining_side_by_side_leave_zero_counts_for_another_client(
    backend: Backend,
) -> None:
    # Given a queue of 250 messages on 8 lanes, and two consumers of their own clients
    with backend.client() as admin:
        filled(admin, "side_by_side", 8)
    acked: list[int] = []

    def consume() -> None:
        with backend.client() as own:
            queue = own.queue("side_by_side")
            deadline = time.monotonic() + 60
            while sum(acked) < MESSAGES and time.monotonic() < deadline:
                deliveries = queue.receive(10, visibility_timeout=60, wait=0.2)
                queue.ack_batch([d.receipt for d in deliveries])
                acked.append(len(deliveries))

    # When both drain it at once
    threads = [threading.Thread(target=consume) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(acked) == MESSAGES

    # Then a third client's first count says the queue is empty
    with backend.client() as other:
        stats = other.queue("side_by_side").stats()
    assert (stats.visible, stats.in_flight, stats.delayed) == (0, 0, 0)
    assert stats.estimated_buckets == 0


def test_a_queue_drained_by_spark_steps_counts_zero_at_the_first_call(
    backend: Backend, client: QueueClient
) -> None:
    # Given a queue drained the Spark source's way: steps leasing whole buckets, acked
    # at their commit by the driver's own handle (which never received anything itself)
    queue = filled(client, "drained-by-steps", lanes=8)
    buckets = list(range(MESSAGES // BUCKET_SIZE))
    for step, part in enumerate(range(0, len(buckets), 5)):
        received = queue.steps.receive("q", step, 0, 50, buckets=buckets[part : part + 5])
        assert len(received) == 50
    with backend.client() as driver:
        acker = driver.queue("drained-by-steps")
        acked = [acker.steps.ack("q", step) for step in range(len(buckets) // 5)]
        assert sum(a for a, _ in acked) == MESSAGES

        # Then the first count says 0, in the queue and from another client
        counts = queue.stats()
        assert (counts.visible, counts.in_flight, counts.delayed) == (0, 0, 0)
        assert counts.estimated_buckets == 0
