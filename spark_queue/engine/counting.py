"""Cheap approximate counts of a queue: visible, in flight, delayed, age of the oldest message.

Counting every message means scanning every live bucket, and a backlog of a
million messages is a thousand buckets: seconds per count. The Spark source
reports its backlog every few seconds, ``bdq metrics serve`` on every scrape and
``bdq top`` every second, so a count must cost the same at any backlog.

How: each bucket's count (what one scan of its unacked rows found) is stored
in ``bucket_counts``, one small row per bucket, shared by every process. A call
reads the stored counts of the live buckets (one slice of one partition) and
scans again at most ``COUNT_BUDGET`` buckets, chosen in this order:

1. the head and the tail bucket, always: consumers receive and ack at the
   head, producers send into the tail, so that is where counts move;
2. buckets never counted yet, oldest first;
3. buckets in which a delayed message or a lease has come due since their
   count (the count says when: ``next_change``), longest-counted first;
4. the rest, longest-counted first (round robin).

Counts are written by acks too: an ack that leaves a fully allocated bucket
without an unacked message stores its count, 0 (``drains.py``), so a queue
drained by its consumers counts 0 at the first call after the last ack, not
once round robin has reached every bucket. Such a count is due for a scan
again ``seal_delay`` after it (its ``next_change``): a slow write landing in the
bucket after it is counted by the first call after that with scans to spare.

The approximation: a bucket's count may be as old as its last scan or ack-time
zero (``QueueStats.counts_age`` says how old the oldest one used is); a bucket
nobody has counted yet is estimated as holding every id handed out in it,
visible (``QueueStats.estimated_buckets`` says how many were). A queue with at
most ``COUNT_BUDGET`` live buckets is counted exactly on every call, and
``stats(exact=True)`` scans every live bucket (and stores what it found).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence

from spark_queue.defaults import COUNT_BUDGET
from spark_queue.message import QueueStats
from spark_queue.store.counts import BucketCount, BucketCounts
from spark_queue.store.session import Store


def plan_scans(
    live: Sequence[int], stored: Mapping[int, BucketCount], now: int, budget: int
) -> list[int]:
    """The buckets to scan in this call, most needed first (see the module docstring)."""
    if len(live) <= budget:
        return list(live)
    known = [b for b in live if b in stored]
    due = sorted(
        (b for b in known if stored[b].next_change <= now), key=lambda b: stored[b].counted_at
    )
    rest = sorted(
        (b for b in known if stored[b].next_change > now), key=lambda b: stored[b].counted_at
    )
    missing = [b for b in live if b not in stored]
    chosen: dict[int, None] = {}  # ordered set
    for bucket in [live[0], live[-1], *missing, *due, *rest]:
        if len(chosen) >= budget:
            break
        chosen.setdefault(bucket, None)
    return list(chosen)


def summarize(
    live: Sequence[int],
    counts: Mapping[int, BucketCount],
    allocated: Mapping[int, int],
    now: int,
) -> QueueStats:
    """Add up the counts of the live buckets; estimate the uncounted ones by their ids."""
    visible = in_flight = delayed = estimated = 0
    oldest: int | None = None
    counted_at = now
    for bucket in live:
        count = counts.get(bucket)
        if count is None:
            estimated += 1
            visible += allocated.get(bucket, 0)
            continue
        visible += count.visible
        in_flight += count.in_flight
        delayed += count.delayed
        counted_at = min(counted_at, count.counted_at)
        if count.oldest_visible is not None and (oldest is None or count.oldest_visible < oldest):
            oldest = count.oldest_visible
    return QueueStats(
        visible=visible,
        in_flight=in_flight,
        delayed=delayed,
        buckets=len(live),
        oldest_age=None if oldest is None else max(0.0, (now - oldest) / 1000),
        estimated_buckets=estimated,
        counts_age=(now - counted_at) / 1000,
    )


class QueueCounter:
    """Counts of one queue incarnation, at a bounded cost per call.

    Args:
        store: The Cassandra session.
        queue_id: The queue's incarnation.
        bucket_size: Ids per bucket.
        budget: Most buckets scanned per call.
    """

    def __init__(
        self, store: Store, queue_id: uuid.UUID, bucket_size: int, budget: int = COUNT_BUDGET
    ) -> None:
        self.counts = BucketCounts(store, queue_id)
        self.bucket_size = bucket_size
        self.budget = budget

    def stats(self, head: int, tail: int, *, exact: bool = False) -> QueueStats:
        """Counts of the live buckets ``head`` to the one holding id ``tail - 1``.

        Args:
            head: The first live bucket.
            tail: The sequence's next id.
            exact: Scan every live bucket instead of at most ``budget``.
        """
        now = int(time.time() * 1000)
        if tail <= 0:
            return QueueStats(visible=0, in_flight=0, delayed=0, buckets=0)
        live = list(range(head, (tail - 1) // self.bucket_size + 1))
        if exact or len(live) <= self.budget:
            # Everything gets scanned: the stored counts are not needed, and
            # they are only worth writing when later calls will rely on them.
            scanned = self.counts.scan(live, now) if live else []
            if len(live) > self.budget:
                self.counts.write(scanned)
            return summarize(live, {c.bucket: c for c in scanned}, {}, now)
        stored = self.counts.read(live[0], live[-1])
        scanned = self.counts.scan(plan_scans(live, stored, now, self.budget), now)
        self.counts.write(scanned)
        merged = {**stored, **{c.bucket: c for c in scanned}}
        allocated = {
            b: min(tail, (b + 1) * self.bucket_size) - b * self.bucket_size
            for b in live
            if b not in merged
        }
        return summarize(live, merged, allocated, now)
