"""The source's rows and partitions: Arrow built column-wise, buckets grouped (pure, no cluster)."""

from __future__ import annotations

import uuid

import pytest

from spark_queue.engine.deliveries import LeasedColumns, delivery_of
from spark_queue.errors import InvalidSetting
from spark_queue.spark.offsets import Offset
from spark_queue.spark.planning import PARTITION_MESSAGES, group_buckets
from spark_queue.spark.reading import ARROW_SCHEMA, leased_record_batch, to_record_batch
from spark_queue.store.message_values import LeaseWrite, StoredMessage


def test_leased_rows_match_the_rows_built_from_deliveries() -> None:
    messages = [
        StoredMessage(
            id=i,
            bucket=i // 3,
            payload=b"p%d" % i,
            headers={"a": "1", "b": str(i)} if i % 2 else {},
            enqueued_at=1_763_800_000_123 + i,
            visible_at=0,
            expires_at=1_863_800_000_000,
            delivery_count=i,
            lease=5,
            key=f"k{i % 2}" if i % 3 else None,
        )
        for i in range(7)
    ]
    leased = [
        (m, LeaseWrite(m.bucket, m.id, 9, 99, m.delivery_count + 1, m.expires_at)) for m in messages
    ]
    queue_id = uuid.uuid4()

    rows = leased_record_batch("q", LeasedColumns.of(leased))

    assert rows.equals(to_record_batch("q", [delivery_of(queue_id, m, w) for m, w in leased]))
    assert rows.column("delivery_count").to_pylist() == [i + 1 for i in range(7)]
    assert rows.column("headers").to_pylist()[1] == [("a", "1"), ("b", "1")]
    assert rows.column("key").to_pylist() == [None, "k1", "k0", None, "k0", "k1", None]


def test_no_leased_rows_is_an_empty_batch_of_the_schema() -> None:
    rows = leased_record_batch("q", LeasedColumns.of([]))
    assert rows.num_rows == 0
    assert rows.schema == ARROW_SCHEMA


def test_buckets_of_one_queue_share_partitions_up_to_the_partition_limit() -> None:
    most = PARTITION_MESSAGES
    assert group_buckets([("a", most // 2)] * 5) == (0, 0, 1, 1, 2)
    # queues never share a partition, even when planned round-robin
    assert group_buckets([("a", 10), ("b", 10), ("a", 10), ("b", 10)]) == (0, 1, 0, 1)
    # a bucket as large as the limit keeps its own partition
    assert group_buckets([("a", most), ("a", 1), ("a", most)]) == (0, 1, 2)
    assert group_buckets([]) == ()


def test_offsets_keep_their_partitions_and_refuse_a_bad_list() -> None:
    offset = Offset("s", 3, (4, 5, 6), (10, 10, 10), ("a", "a", "a"), partition_of=(0, 0, 1))
    assert Offset.from_dict(offset.to_dict()) == offset
    # written before partitions grouped buckets: no "partitions", one per bucket
    assert "partitions" not in Offset("s", 3, (4,), (10,), ("a",)).to_dict()
    with pytest.raises(InvalidSetting, match="not a bdq offset"):
        Offset.from_dict({**offset.to_dict(), "partitions": [0, 1]})
