"""CassieQ's hard cases on a real node: delayed writes, ids never written, dropped buckets.

Each test forces one interleaving with two independent clients (two processes'
worth of state: separate sessions, id blocks and caches) on the same queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.bench.head_bench import traced_receive
from spark_queue.defaults import IDLE_RECHECK
from spark_queue.queue import Queue
from tests.helpers import drain

pytestmark = pytest.mark.cassandra

SEAL_DELAY = 0.5


@pytest.fixture
def clients(keyspace: ConnectionSettings) -> Iterator[tuple[QueueClient, QueueClient]]:
    with QueueClient(settings=keyspace) as a, QueueClient(settings=keyspace) as b:
        yield a, b


def seal_and_drop(queue: Queue) -> tuple[int, int]:
    """Two maintenance passes a seal delay apart: the first notes full buckets, the second seals."""
    queue.maintain()
    time.sleep(SEAL_DELAY + 0.1)
    return queue.maintain()


@pytest.mark.parametrize("how", ["send", "send-once", "batch"])
def test_write_delayed_past_the_seal_is_sent_again_not_lost(
    clients: tuple[QueueClient, QueueClient], how: str
) -> None:
    once = how == "send-once"
    # A batch over two buckets is written invisible, then released (all or nothing)
    late = [b"late"] * (12 if how == "batch" else 1)
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

    def send() -> None:
        if once:  # the repaired ids replace the reserved ones in the send log
            result.extend(slow.send_batch_once("w", 1, 0, late))
        else:
            result.extend(slow.send_batch(late))

    writer = threading.Thread(target=send)
    writer.start()
    deadline = time.monotonic() + 30
    while slow._sending.ids.high_water == 0:  # wait until A holds its block (ids 0..15)
        assert time.monotonic() < deadline, "writer A never reserved its ids"
        time.sleep(0.01)

    # And writer B's messages after it were consumed, bucket 0 sealed and dropped
    fast.send_batch([b"on-time"] * 30)
    assert drain(fast) == [b"on-time"] * 30
    _, head = seal_and_drop(fast)
    assert head >= 1, "bucket 0 should be sealed and dropped while A's write is pending"

    # When A's write finally lands in the dropped bucket
    release.set()
    writer.join(timeout=30)

    # Then A noticed the seal and sent the messages again under new ids, and they are delivered
    assert len(result) == len(late) and min(result) >= 16
    assert drain(fast) == late
    # And the copies in the sealed buckets were retired: nothing is left to count
    assert fast.stats(exact=True).total == 0
    if once:  # a retry of the same send finds it done, under the repaired id
        assert fast.send_batch_once("w", 1, 0, late) == result
        assert drain(fast) == []


def test_write_landing_just_before_the_seal_is_delivered(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    # A longer seal delay than the other tests: A's id block (good for half of
    # it) must still be fresh when A writes, however slow the machine is.
    seal_delay = 5.0
    a, b = clients
    b.create_queue("edge", bucket_size=10, seal_delay=seal_delay)
    slow, fast = a.queue("edge"), b.queue("edge")
    slow.send(b"first")  # A's block: ids 0..15, the rest unwritten for now
    fast.send_batch([b"x"] * 20)
    assert sorted(drain(fast)) == [b"first"] + [b"x"] * 20
    fast.maintain()  # B notes buckets 0.. fully allocated

    # A writes id 1 (bucket 0) inside the seal delay: the fast path, no check
    in_time = slow.send(b"in-time")
    assert in_time < 10, "the write must reuse A's block in bucket 0 for this interleaving"
    time.sleep(seal_delay + 0.1)
    sealed_upto, head = fast.maintain()

    # The sealer's scan saw it, so bucket 0 was sealed but kept, and it is delivered
    assert sealed_upto >= 1 and head == 0
    assert drain(fast) == [b"in-time"]
    fast.maintain()
    time.sleep(seal_delay + 0.1)
    assert fast.maintain()[1] >= 1


def test_ids_reserved_and_never_written_do_not_block_the_queue(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    b.create_queue("gaps", bucket_size=10, seal_delay=SEAL_DELAY)
    crashed, alive = a.queue("gaps"), b.queue("gaps")
    # Given a writer that reserved ids 0..15 and died before writing any
    blocks = crashed._sending.ids.take(1)
    assert blocks[0].start == 0

    # When another writer's messages are consumed
    alive.send_batch([str(i).encode() for i in range(30)])
    assert drain(alive) == [str(i).encode() for i in range(30)]

    # Then the buckets holding the gap are sealed and dropped all the same
    sealed_upto, head = seal_and_drop(alive)
    assert head == sealed_upto == 4  # ids 0..45 handed out: buckets 0..3 full
    alive.send(b"next")
    assert drain(alive) == [b"next"]


def test_reading_the_head_costs_the_same_after_moving_many_buckets(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    _, b = clients
    queue = b.create_queue("long-lived", bucket_size=100, seal_delay=SEAL_DELAY)
    # Given the cost of a receive on a fresh queue holding one message
    queue.send_batch([b"first"] * 100)  # exactly bucket 0
    queue.ack_batch([d.receipt for d in queue.receive(99)])
    time.sleep(IDLE_RECHECK)  # the lane's floor expired: a full scan of the bucket, the worst
    start = traced_receive(queue)
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
    payloads, scanned, live_rows, tombstones = traced_receive(queue)
    assert payloads == [b"latest"]
    assert scanned == [latest // 100] == [head]
    assert (live_rows, tombstones) == (1, 0)
    # and a receive at the start read a whole bucket of 100 (99 acked) rows
    assert start[1:] == ([0], 100, 0)
