"""The source's Arrow rows built column-wise equal the per-message build (pure, no cluster)."""

from __future__ import annotations

import uuid

from spark_queue.receiving import delivery_of
from spark_queue.spark.source import ARROW_SCHEMA, leased_record_batch, to_record_batch
from spark_queue.store.buckets import LeaseWrite, StoredMessage


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
        )
        for i in range(7)
    ]
    leased = [
        (m, LeaseWrite(m.bucket, m.id, 9, 99, m.delivery_count + 1, m.expires_at)) for m in messages
    ]
    queue_id = uuid.uuid4()

    rows = leased_record_batch("q", leased)

    assert rows.equals(to_record_batch("q", [delivery_of(queue_id, m, w) for m, w in leased]))
    assert rows.column("delivery_count").to_pylist() == [i + 1 for i in range(7)]
    assert rows.column("headers").to_pylist()[1] == [("a", "1"), ("b", "1")]


def test_no_leased_rows_is_an_empty_batch_of_the_schema() -> None:
    rows = leased_record_batch("q", [])
    assert rows.num_rows == 0
    assert rows.schema == ARROW_SCHEMA
