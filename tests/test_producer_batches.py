"""Pure logic of the producer: how a batch is cut into bucket writes (no Cassandra)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from spark_queue.bench.queue_bench_params import QueueBenchParams
from spark_queue.engine.producer_buffer import Accepted, Batch
from spark_queue.errors import InvalidSetting
from spark_queue.producer import Producer
from spark_queue.store.message_values import BATCH_BYTES, BATCH_ROWS


def producer(bucket_size: int) -> Producer:
    # Cutting a batch needs only the queue's bucket arithmetic.
    buckets: Any = SimpleNamespace(
        bucket_of=lambda i: i // bucket_size, store=SimpleNamespace(keyspace="ks")
    )
    sender: Any = SimpleNamespace()
    return Producer(sender, buckets, "q")


def accepted(count: int, size: int = 10) -> list[Accepted]:
    outgoing: Any = SimpleNamespace(payload=b"", headers={}, delay_ms=0)
    return [Accepted(n, outgoing, size, 0.0, Future()) for n in range(count)]


def test_one_write_per_bucket_in_id_order() -> None:
    items = accepted(7)
    ids = [(i, 0.0) for i in (8, 9, 10, 11, 12, 20, 21)]

    writes = producer(bucket_size=10)._split(Batch(0, 7), items, ids, 123)

    assert [[i for i, _ in w.ids] for w in writes] == [[8, 9], [10, 11, 12], [20, 21]]
    assert [len(w.items) for w in writes] == [2, 3, 2]
    assert [w.items for w in writes] == [items[0:2], items[2:5], items[5:7]]
    assert {w.enqueued_at for w in writes} == {123}


def test_a_bucket_is_cut_at_the_store_row_and_byte_limits() -> None:
    rows = accepted(BATCH_ROWS + 1)
    writes = producer(bucket_size=10**9)._split(
        Batch(0, len(rows)), rows, [(i, 0.0) for i in range(len(rows))], 0
    )
    assert [len(w.items) for w in writes] == [BATCH_ROWS, 1]

    big = accepted(3, size=BATCH_BYTES // 2)
    writes = producer(bucket_size=10**9)._split(Batch(0, 3), big, [(i, 0.0) for i in range(3)], 0)
    assert [len(w.items) for w in writes] == [2, 1]


def test_bench_async_send_takes_single_messages_only() -> None:
    with pytest.raises(InvalidSetting, match="send_batch 10: async_send sends single messages"):
        QueueBenchParams(send_batch=10, async_send=True)
