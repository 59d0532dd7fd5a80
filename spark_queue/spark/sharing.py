"""Queries sharing a queue split its buckets through ownership (spark_queue.ownership).

Two streaming queries planning the same bucket would each lease its messages
(plain leases in a bucket a partition thinks it has to itself) and both hand
them out: duplicates. So the driver owns each bucket it plans from the moment
it plans it until the step is acked, renews that ownership with the leases
(the renewal thread), and releases it after the ack or when the query stops.
A bucket another query owns is left out of the plan. A driver that dies stops
renewing, and its buckets are free again one ownership period later (the
visibility timeout, so its messages and its buckets come back together); the
owner is named after the query's stream id, so the same query restarted from
its checkpoint owns them again at once.

Each bucket is one key ``(bucket, 0)``: the whole bucket.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from spark_queue.errors import SparkQueueError
from spark_queue.ownership import MAX_PERIOD, MIN_PERIOD, Ownership, new_owner
from spark_queue.queue import Queue

log = logging.getLogger(__name__)

OpenQueue = Callable[[str], Queue]


def ownership_period(visibility_timeout: float) -> float:
    """Ownership lasts as long as a lease: within the bounds Ownership accepts."""
    return min(MAX_PERIOD, max(MIN_PERIOD, visibility_timeout))


class BucketSharing:
    """The buckets one query's driver owns, by step (picklable: names and numbers only).

    Args:
        label: Names the owner (the stream).
    """

    def __init__(self, label: str) -> None:
        self.owner = new_owner(f"spark-{label}")
        self._held: dict[int, set[tuple[str, int]]] = {}

    def name_after(self, stream: str) -> None:
        """Own as the query of ``stream`` (its id, kept in Spark's checkpoint).

        A query restarted after a crash then holds again the buckets its dead
        driver took: else they stay refused for a whole ownership period, and an
        ``availableNow`` run ends leaving their messages in the queue.
        """
        self.owner = f"spark-{stream}"

    @staticmethod
    def _ownership(queue: Queue) -> Ownership:
        return Ownership(queue.buckets.store, queue.queue_id)

    def take(self, queue: Queue, buckets: Iterable[int], period: float) -> set[int]:
        """Own what of ``buckets`` no other query owns; return those."""
        wanted = sorted(set(buckets))
        if not wanted:
            return set()
        grant = self._ownership(queue).take(self.owner, [(b, 0) for b in wanted], period)
        return {bucket for bucket, _ in grant.keys}

    def hold(self, step: int, parts: Iterable[tuple[str, int]]) -> None:
        """Remember that ``step`` planned these ``(queue, bucket)`` (owned until acked)."""
        self._held.setdefault(step, set()).update(parts)

    def renew(self, queue: Queue, step: int, period: float) -> None:
        """Renew the buckets ``step`` holds on ``queue`` (the renewal thread)."""
        buckets = sorted(b for name, b in self._held.get(step, ()) if name == queue.name)
        if buckets:
            self._ownership(queue).renew(self.owner, [(b, 0) for b in buckets], period)

    def done(self, upto: int, open_queue: OpenQueue) -> None:
        """Release the buckets of steps up to ``upto`` (acked) that no later step holds."""
        later = {p for step, parts in self._held.items() if step > upto for p in parts}
        freed: set[tuple[str, int]] = set()
        for step in [s for s in self._held if s <= upto]:
            freed |= self._held.pop(step)
        self._release(freed - later, open_queue)

    def release(self, parts: Iterable[tuple[str, int]], open_queue: OpenQueue) -> None:
        """Release ``(queue, bucket)`` taken for a plan but left out of its step (never held)."""
        held = {p for parts in self._held.values() for p in parts}
        self._release(set(parts) - held, open_queue)

    def release_all(self, open_queue: OpenQueue) -> None:
        """The query stops: every bucket is free for other queries at once."""
        parts = {p for parts in self._held.values() for p in parts}
        self._held.clear()
        self._release(parts, open_queue)

    def _release(self, parts: set[tuple[str, int]], open_queue: OpenQueue) -> None:
        by_queue: dict[str, list[int]] = defaultdict(list)
        for name, bucket in parts:
            by_queue[name].append(bucket)
        for name, buckets in sorted(by_queue.items()):
            try:
                self._ownership(open_queue(name)).release(
                    self.owner, [(b, 0) for b in sorted(buckets)]
                )
            except SparkQueueError as e:
                # Not released: the rows expire after one period by their TTL.
                log.warning("bdq source: releasing buckets of %r failed: %s", name, e)
