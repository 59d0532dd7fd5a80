"""CassieQ's hard cases on a real node: delayed writes, ids never written, dropped buckets.

Each test forces one interleaving with two independent clients (two processes'
worth of state: separate sessions, id blocks and caches) on the same queue.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.queue import Queue
from spark_queue.store.buckets import SCAN_CANDIDATES, Candidate

pytestmark = pytest.mark.cassandra

SEAL_DELAY = 0.5


@pytest.fixture
def clients(keyspace: ConnectionSettings) -> Iterator[tuple[QueueClient, QueueClient]]:
    with QueueClient(settings=keyspace) as a, QueueClient(settings=keyspace) as b:
        yield a, b


def drain(queue: Queue) -> list[bytes]:
    payloads = []
    while deliveries := queue.receive(100):
        payloads += [d.payload for d in deliveries]
        queue.ack_batch([d.receipt for d in deliveries])
    return payloads


def seal_and_drop(queue: Queue) -> tuple[int, int]:
    """Two maintenance passes a seal delay apart: the first notes full buckets, the second seals."""
    queue.maintain()
    time.sleep(SEAL_DELAY + 0.1)
    return queue.maintain()


def test_write_delayed_past_the_seal_is_sent_again_not_lost(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    b.create_queue("repair", bucket_size=10, seal_delay=SEAL_DELAY)
    slow, fast = a.queue("repair"), b.queue("repair")
    # Given writer A reserved ids in bucket 0 but its write is held back
    release = threading.Event()
    original_insert = slow.buckets.insert

    def held_insert(*args: Any, **kwargs: Any) -> None:
        release.wait(timeout=30)
        original_insert(*args, **kwargs)

    slow.buckets.insert = held_insert  # type: ignore[method-assign]
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(slow.send(b"late")))
    writer.start()
    time.sleep(0.2)  # A now holds ids 0..15

    # And writer B's messages after it were consumed, bucket 0 sealed and dropped
    fast.send_batch([b"on-time"] * 30)
    assert drain(fast) == [b"on-time"] * 30
    _, head = seal_and_drop(fast)
    assert head >= 1, "bucket 0 should be sealed and dropped while A's write is pending"

    # When A's write finally lands in the dropped bucket
    release.set()
    writer.join(timeout=30)

    # Then A noticed the seal and sent the message again under a new id, and it is delivered
    assert result and result[0] >= 16
    assert drain(fast) == [b"late"]


def test_write_landing_just_before_the_seal_is_delivered(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    b.create_queue("edge", bucket_size=10, seal_delay=SEAL_DELAY)
    slow, fast = a.queue("edge"), b.queue("edge")
    slow.send(b"first")  # A's block: ids 0..15, the rest unwritten for now
    fast.send_batch([b"x"] * 20)
    assert sorted(drain(fast)) == [b"first"] + [b"x"] * 20
    fast.maintain()  # B notes buckets 0.. fully allocated

    # A writes id 1 (bucket 0) inside the seal delay: the fast path, no check
    slow.send(b"in-time")
    time.sleep(SEAL_DELAY + 0.1)
    sealed_upto, head = fast.maintain()

    # The sealer's scan saw it, so bucket 0 was sealed but kept, and it is delivered
    assert sealed_upto >= 1 and head == 0
    assert drain(fast) == [b"in-time"]
    assert seal_and_drop(fast)[1] >= 1


def test_ids_reserved_and_never_written_do_not_block_the_queue(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    b.create_queue("gaps", bucket_size=10, seal_delay=SEAL_DELAY)
    crashed, alive = a.queue("gaps"), b.queue("gaps")
    # Given a writer that reserved ids 0..15 and died before writing any
    leases = crashed._ids.take(1)
    assert leases[0].start == 0

    # When another writer's messages are consumed
    alive.send_batch([str(i).encode() for i in range(30)])
    assert drain(alive) == [str(i).encode() for i in range(30)]

    # Then the buckets holding the gap are sealed and dropped all the same
    sealed_upto, head = seal_and_drop(alive)
    assert head == sealed_upto == 4  # ids 0..45 handed out: buckets 0..3 full
    alive.send(b"next")
    assert drain(alive) == [b"next"]


def _traced_receive(queue: Queue) -> tuple[list[bytes], list[int], int, int]:
    """Receive (and ack) with every bucket scan traced by Cassandra.

    Returns the payloads, the buckets scanned, and the live rows and tombstone
    cells Cassandra read to answer those scans.
    """
    store, scanned, cost = queue.buckets.store, [], [0, 0]

    def traced_scan(bucket: int, now: int, limit: int) -> list[Candidate]:
        result = store.session.execute(
            store.prepare(SCAN_CANDIDATES), (queue.queue_id, bucket, now, limit), trace=True
        )
        for event in result.get_query_trace(10.0).events:
            match = re.search(r"Read (\d+) live rows and (\d+) tombstone cells", event.description)
            if match:
                cost[0] += int(match[1])
                cost[1] += int(match[2])
        scanned.append(bucket)
        return [Candidate(row[0], bucket, row[1], row[2] or 0, row[3] or 0) for row in result]

    queue.buckets.scan_candidates = traced_scan  # type: ignore[method-assign]
    try:
        deliveries = queue.receive(1)
    finally:
        del queue.buckets.scan_candidates
    queue.ack_batch([d.receipt for d in deliveries])
    return [d.payload for d in deliveries], scanned, cost[0], cost[1]


def test_reading_the_head_costs_the_same_after_moving_many_buckets(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    _, b = clients
    queue = b.create_queue("long-lived", bucket_size=100, seal_delay=SEAL_DELAY)
    # Given the cost of a receive on a fresh queue holding one message
    queue.send_batch([b"first"] * 100)  # exactly bucket 0
    queue.ack_batch([d.receipt for d in queue.receive(99)])
    start = _traced_receive(queue)
    assert start[0] == [b"first"]

    # When 5000 more messages have gone through it (50 full buckets) and were consumed
    for _ in range(10):
        queue.send_batch([b"m"] * 500)
    assert len(drain(queue)) == 5000
    full_buckets = queue.buckets.tail() // 100  # id blocks may run past message 5100
    sealed_upto, head = seal_and_drop(queue)
    assert head == sealed_upto == full_buckets > 50

    # Then receiving the newest message scans one bucket and reads no consumed message
    latest = queue.send(b"latest")
    payloads, scanned, live_rows, tombstones = _traced_receive(queue)
    assert payloads == [b"latest"]
    assert scanned == [latest // 100] == [head]
    assert (live_rows, tombstones) == (1, 0)
    # and a receive at the start read a whole bucket of 100 (99 acked) rows
    assert start[1:] == ([0], 100, 0)
