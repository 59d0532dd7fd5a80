"""The CQL of counting: scanning one bucket for its counts, and the per-bucket count table.

A bucket's count is what one scan of its unacked rows found: how many were
visible, in flight and delayed, the enqueue time of the oldest visible one, and
the earliest moment one of the others becomes visible (after which the count
is out of date even if nobody touched the bucket). Times are ms since the epoch.

A count is written with its ``counted_at`` as its write timestamp, so of two
counts of one bucket the later observation wins, whichever write lands last: a
count taken before an ack emptied the bucket cannot overwrite the 0 the ack
left (``engine/drains.py``). Between hosts whose clocks differ, the earlier of
two counts taken less than that difference apart may win: a count stale by
the clock difference, until the bucket is counted again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_queue.store.session import Store

SCAN = (
    "SELECT toUnixTimestamp(enqueued_at), toUnixTimestamp(visible_at), delivery_count"
    " FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND acked = false ALLOW FILTERING"
)
READ_RANGE = (
    "SELECT bucket, visible, in_flight, delayed, oldest_visible, next_change, counted_at"
    " FROM {ks}.bucket_counts WHERE queue_id = ? AND bucket >= ? AND bucket <= ?"
)
WRITE = (
    "INSERT INTO {ks}.bucket_counts (queue_id, bucket, visible, in_flight, delayed,"
    " oldest_visible, next_change, counted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " USING TIMESTAMP ?"
)

#: ``next_change`` of a bucket whose messages are all visible: nothing changes by itself.
NEVER = 2**62


@dataclass(frozen=True, slots=True)
class BucketCount:
    """What one bucket held when it was counted.

    Attributes:
        bucket: The bucket.
        visible: Unacked messages whose time had come.
        in_flight: Unacked messages under a lease (received at least once).
        delayed: Unacked messages never received whose delay had not passed.
        oldest_visible: Enqueue time (ms) of the oldest visible message, or None.
        next_change: Earliest ``visible_at`` (ms) among the in-flight and delayed
            ones: from then on the count is out of date. ``NEVER`` if none.
        counted_at: When the scan ran (ms).
    """

    bucket: int
    visible: int
    in_flight: int
    delayed: int
    oldest_visible: int | None
    next_change: int
    counted_at: int


def count_rows(bucket: int, rows: Iterable[Sequence[int | None]], now: int) -> BucketCount:
    """Classify scanned ``(enqueued_at, visible_at, delivery_count)`` rows as of ``now``."""
    visible = in_flight = delayed = 0
    oldest: int | None = None
    next_change = NEVER
    for enqueued_at, visible_at, deliveries in rows:
        if visible_at is None:
            continue  # cells of an expired message can outlive the row briefly
        if visible_at <= now:
            visible += 1
            if enqueued_at is not None and (oldest is None or enqueued_at < oldest):
                oldest = enqueued_at
            continue
        next_change = min(next_change, visible_at)
        if deliveries:
            in_flight += 1
        else:
            delayed += 1
    return BucketCount(bucket, visible, in_flight, delayed, oldest, next_change, now)


class BucketCounts:
    """Scans and the stored counts of one queue incarnation."""

    def __init__(self, store: Store, queue_id: uuid.UUID) -> None:
        self.store = store
        self.queue_id = queue_id

    def scan(self, buckets: Sequence[int], now: int) -> list[BucketCount]:
        """Count each bucket from its unacked rows (no payloads), concurrently."""
        results = self.store.execute_many(
            [(SCAN, (self.queue_id, b)) for b in buckets], what="counting messages"
        )
        return [count_rows(b, result, now) for b, result in zip(buckets, results, strict=True)]

    def read(self, first: int, last: int) -> dict[int, BucketCount]:
        """The stored counts of buckets ``first`` to ``last`` (one slice of one partition)."""
        rows = self.store.rows(
            READ_RANGE, (self.queue_id, first, last), what="reading bucket counts"
        )
        return {
            row[0]: BucketCount(
                row[0],
                row[1] or 0,
                row[2] or 0,
                row[3] or 0,
                row[4],
                NEVER if row[5] is None else row[5],
                row[6] or 0,
            )
            for row in rows
        }

    def write(self, counts: Sequence[BucketCount]) -> None:
        """Store counts: one single-partition batch (all rows share the queue's partition)."""
        if not counts:
            return
        rows = [
            (
                self.queue_id,
                c.bucket,
                c.visible,
                c.in_flight,
                c.delayed,
                c.oldest_visible,
                c.next_change,
                c.counted_at,
                c.counted_at * 1000,  # write timestamp, µs: the later count wins
            )
            for c in counts
        ]
        statement = (
            (self.store.prepare(WRITE), rows[0])
            if len(rows) == 1
            else (self.store.batch(WRITE, rows), ())
        )
        self.store.execute_many([statement], what="storing bucket counts")
