"""The producer (``send_async``, ``flush``, ``Queue.producer``) against a real Cassandra node."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from spark_queue import (
    BackendUnavailable,
    ConnectionSettings,
    InvalidMessage,
    InvalidSetting,
    MessageTooLarge,
    QueueClient,
    SparkQueueError,
)
from spark_queue.bench.queue_bench import run_queue_bench
from spark_queue.local import cql
from tests.helpers import drain

pytestmark = pytest.mark.cassandra

#: Long enough that nothing is sent by the linger clock while a test looks.
HOLD = 30.0


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def failure_of(future: Future[int]) -> BaseException | None:
    return future.exception(timeout=30)


# -- durable, once, in order ------------------------------------------------------------


def test_many_send_async_from_threads_then_flush_are_durable_and_received_once(
    client: QueueClient,
) -> None:
    queue = client.create_queue("async", bucket_size=50)
    # Given three threads sending single messages through the handle's producer
    futures: dict[int, list[Future[int]]] = {}

    def sender(t: int) -> None:
        futures[t] = [queue.send_async(f"{t}:{n}", headers={"t": str(t)}) for n in range(400)]

    threads = [threading.Thread(target=sender, args=(t,)) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # When the queue is flushed
    queue.flush()

    # Then every future holds a distinct id, in each sender's order
    ids = {t: [f.result(timeout=0) for f in fs] for t, fs in futures.items()}
    assert len({i for t in ids for i in ids[t]}) == 1200
    for t in ids:
        assert ids[t] == sorted(ids[t]), f"sender {t}'s ids are out of its send order"
    # And every message is received exactly once, headers kept
    received = drain(queue)
    assert Counter(received) == Counter(f"{t}:{n}".encode() for t in range(3) for n in range(400))
    assert queue.stats(exact=True).total == 0


def test_close_sends_everything_still_buffered(client: QueueClient) -> None:
    queue = client.create_queue("closing", bucket_size=30)
    producer = queue.producer(linger=HOLD, batch_size=2000)
    futures = [producer.send(f"m{n}", delay=0.0) for n in range(100)]
    assert not any(f.done() for f in futures)  # held by the linger clock

    producer.close()

    assert all(f.done() and f.exception() is None for f in futures)
    assert sorted(drain(queue)) == sorted(f"m{n}".encode() for n in range(100))
    with pytest.raises(SparkQueueError, match="closed"):
        producer.send("after close")


def test_the_client_sends_what_send_async_holds_when_it_closes(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as writer:
        queue = writer.create_queue("client-close")
        futures = [queue.send_async(f"m{n}") for n in range(50)]
    assert all(f.done() for f in futures)
    with QueueClient(settings=keyspace) as reader:
        assert len(drain(reader.queue("client-close"))) == 50


def test_delay_and_cancel_before_the_batch_is_taken(client: QueueClient) -> None:
    queue = client.create_queue("cancel")
    with queue.producer(linger=HOLD) as producer:
        kept = producer.send("kept")
        dropped = producer.send("never sent")
        later = producer.send("later", delay=60.0)
        assert dropped.cancel()
        producer.flush()
        assert kept.result(timeout=0) >= 0 and later.result(timeout=0) >= 0

    assert drain(queue) == [b"kept"]
    assert queue.stats().delayed == 1


# -- bad input ---------------------------------------------------------------------------


def test_bad_input_raises_at_the_call_and_queues_nothing(client: QueueClient) -> None:
    queue = client.create_queue("strict", max_message_bytes=100)
    producer = queue.producer(linger=HOLD)

    with pytest.raises(MessageTooLarge, match="payload of 101 bytes: over queue 'strict'"):
        producer.send(b"x" * 101)
    with pytest.raises(InvalidMessage, match="must be bytes or str, not int"):
        producer.send(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="keys and values must be str"):
        producer.send("ok", headers={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidSetting, match="delay -1"):
        producer.send("ok", delay=-1)

    assert producer._unresolved() == 0
    producer.close()
    assert queue.stats(exact=True).total == 0


def test_bad_producer_settings_name_the_value_and_the_rule(client: QueueClient) -> None:
    queue = client.create_queue("settings")
    with pytest.raises(InvalidSetting, match="linger -1"):
        queue.producer(linger=-1)
    with pytest.raises(InvalidSetting, match="batch_size 0: must be a whole number from 1"):
        queue.producer(batch_size=0)
    with pytest.raises(InvalidSetting, match="max_bytes_in_flight"):
        queue.producer(max_bytes_in_flight=0)


# -- the bound ---------------------------------------------------------------------------


def test_bytes_in_flight_bound_blocks_then_raises_and_frees_on_flush(client: QueueClient) -> None:
    queue = client.create_queue("bounded")
    producer = queue.producer(linger=HOLD, max_bytes_in_flight=10_000, max_block=0.3)
    accepted = [producer.send(b"a" * 2000) for _ in range(5)]  # 10,000 bytes: at the bound

    # A send past the bound blocks for max_block, then raises and buffers nothing
    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="max_bytes_in_flight = 10000"):
        producer.send(b"b" * 10)
    assert time.monotonic() - began >= 0.3
    assert producer._unresolved() == 5

    # A sender blocked on the bound goes on once a flush makes room
    producer.max_block = HOLD
    late: list[Future[int]] = []
    blocked = threading.Thread(target=lambda: late.append(producer.send(b"c" * 2000)))
    blocked.start()
    blocked.join(timeout=0.5)
    assert blocked.is_alive() and not late, "the send should wait for room"
    producer.flush()
    blocked.join(timeout=30)
    assert late
    producer.close()

    assert all(f.exception(timeout=0) is None for f in accepted)
    assert late[0].result(timeout=0) >= 0
    assert sorted(drain(queue)) == [b"a" * 2000] * 5 + [b"c" * 2000]


# -- failures -------------------------------------------------------------------------------


def test_a_dropped_keyspace_fails_every_future_and_the_flush(
    fresh_keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=fresh_keyspace) as client:
        queue = client.create_queue("doomed")
        queue.send_async("before").result(timeout=30)
        # Given the queue's keyspace is gone
        cql.drop_keyspace(fresh_keyspace)

        # When more messages are sent
        futures = [queue.send_async(f"m{n}") for n in range(20)]

        # Then the flush and every future report it as a SparkQueueError
        with pytest.raises(SparkQueueError, match="20 message"):
            queue.flush(timeout=60)
        assert all(isinstance(failure_of(f), SparkQueueError) for f in futures)


def test_a_session_shut_down_with_messages_buffered_fails_their_futures(
    keyspace: ConnectionSettings,
) -> None:
    client = QueueClient(settings=keyspace)
    queue = client.create_queue("shutdown")
    producer = queue.producer(linger=HOLD)
    futures = [producer.send(f"m{n}") for n in range(30)]
    # Given the driver session goes away while the messages wait in the buffer
    queue.buckets.store.close()

    # When they are sent, each future fails with a SparkQueueError (none is left pending)
    with pytest.raises(SparkQueueError):
        producer.close(timeout=60)
    failures = [failure_of(f) for f in futures]
    assert all(isinstance(e, SparkQueueError) for e in failures), failures


def test_a_write_delayed_past_the_seal_is_repaired_before_its_future_resolves(
    keyspace: ConnectionSettings,
) -> None:
    seal_delay = 0.5
    with QueueClient(settings=keyspace) as a, QueueClient(settings=keyspace) as b:
        b.create_queue("repair", bucket_size=10, seal_delay=seal_delay)
        slow, fast = a.queue("repair"), b.queue("repair")
        # Given the producer reserved ids in bucket 0 but its write is held back
        release = threading.Event()
        original = slow.buckets.insert_statement

        def held(*args: Any, **kwargs: Any) -> Any:
            release.wait(timeout=30)
            return original(*args, **kwargs)

        slow.buckets.insert_statement = held  # type: ignore[method-assign]
        future = slow.send_async(b"late")
        deadline = time.monotonic() + 30
        while slow._sending.ids.high_water == 0:
            assert time.monotonic() < deadline, "the producer never reserved its ids"
            time.sleep(0.01)
        # And later messages were consumed, bucket 0 sealed and dropped
        fast.send_batch([b"on-time"] * 30)
        assert drain(fast) == [b"on-time"] * 30
        fast.maintain()
        time.sleep(seal_delay + 0.1)
        _, head = fast.maintain()
        assert head >= 1

        # When the write finally lands in the dropped bucket
        assert not future.done()
        release.set()

        # Then the future resolves with the id it was sent again under, and it is delivered
        assert future.result(timeout=30) >= 16
        assert drain(fast) == [b"late"]


def test_a_callback_that_flushes_gets_an_error_instead_of_waiting_for_itself(
    client: QueueClient,
) -> None:
    queue = client.create_queue("callback")
    producer = queue.producer(linger=HOLD)
    seen: list[SparkQueueError] = []

    def callback(_: Future[int]) -> None:
        try:
            producer.flush()
        except SparkQueueError as e:
            seen.append(e)

    producer.send("x").add_done_callback(callback)  # runs on the producer's thread
    producer.close(timeout=60)

    assert seen and "would wait for itself" in str(seen[0])


# -- the benchmark's sender path ---------------------------------------------------------


def test_bench_queue_async_send_loses_nothing(keyspace: ConnectionSettings) -> None:
    result = run_queue_bench(
        keyspace, messages=600, recv_threads=1, receive_batch=100, async_send=True, baseline=False
    )

    assert result.params.async_send
    assert result.distinct == 600 and result.loss_rate == 0 and result.corrupt == 0
    assert result.send_ops == 600 and result.send_p50_ms is not None
