"""What one queue handle knows of where its live buckets are: head, tail, idle buckets.

The head (first bucket not dropped) and the tail (the sequence's next id) only
move forward, so a handle keeps the highest values it has seen and re-reads
them when a receive runs out of known buckets. Buckets found without visible
messages are skipped for a while, so an idle backlog costs no scans.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence

from spark_queue.defaults import IDLE_RECHECK, TAIL_REFRESH
from spark_queue.store.buckets import Buckets


class Bounds:
    """The head, tail and idle buckets of one queue, as one handle last saw them.

    Args:
        buckets: The queue's bucket store.
    """

    def __init__(self, buckets: Buckets) -> None:
        self._buckets = buckets
        self._lock = threading.Lock()
        self.head = 0
        self.tail = 0
        self._tail_read_at = 0.0
        self._skip_until: dict[int, int] = {}  # bucket -> wall ms until which it is skipped

    def note_tail(self, tail: int) -> None:
        with self._lock:
            self.tail = max(self.tail, tail)

    def note_head(self, head: int) -> None:
        """Move the head forward; forget idle marks of buckets below it."""
        with self._lock:
            self.head = max(self.head, head)
            self._skip_until = {b: t for b, t in self._skip_until.items() if b >= self.head}

    def refresh_tail(self) -> bool:
        """Re-read the sequence (at most every TAIL_REFRESH s); True if it moved."""
        if time.monotonic() - self._tail_read_at < TAIL_REFRESH:
            return False
        before = self.tail
        self.note_tail(self._buckets.tail())
        self._tail_read_at = time.monotonic()
        return self.tail > before

    def refresh(self) -> None:
        """Read head and tail afresh."""
        head, _ = self._buckets.pointers()
        tail = self._buckets.tail()
        with self._lock:
            self.head = max(self.head, head)
            self.tail = max(self.tail, tail)
            self._tail_read_at = time.monotonic()

    def last_bucket(self) -> int:
        """The bucket of the newest id seen (0 for an empty queue)."""
        return self._buckets.bucket_of(max(self.tail - 1, 0))

    def live_buckets(self) -> list[int]:
        """Buckets not dropped yet, from the head to the one of the newest id (fresh read)."""
        self.refresh()
        return list(range(self.head, self.last_bucket() + 1)) if self.tail > 0 else []

    def skipped(self, bucket: int, now: int) -> bool:
        """True while ``bucket`` was recently found idle."""
        return self._skip_until.get(bucket, 0) > now

    def unskip(self, bucket: int) -> None:
        """Look at ``bucket`` again on the next receive (a message may be visible there now)."""
        with self._lock:
            self._skip_until.pop(bucket, None)

    def note_drained(self, buckets: Sequence[int], until: int) -> None:
        """Skip fully allocated buckets an ack left without an unacked message until ``until``.

        Nothing in them can become visible again; only a send slow enough to
        land after the drain can add a message (until the bucket is sealed),
        and it is seen once the skip ends. No read: the drain's probe said so.
        """
        with self._lock:
            for bucket in buckets:
                if bucket >= self.head:
                    self._skip_until[bucket] = max(self._skip_until.get(bucket, 0), until)

    def note_idle(self, bucket: int, now: int) -> None:
        """Skip a fully allocated bucket without visible messages for a while."""
        self.note_idle_many([bucket], now)

    def note_idle_many(
        self, buckets: Sequence[int], now: int, *, leased_here: Collection[int] = ()
    ) -> None:
        """``note_idle`` for several buckets, their unacked messages read at once.

        A bucket is skipped until its first unacked message becomes visible,
        at most ``IDLE_RECHECK`` seconds. ``leased_here``: buckets whose leases
        the caller holds and keeps renewing (a Spark query's steps in flight):
        none of those ends within the recheck, so they are skipped for the
        whole of it without reading when their first lease ends.
        """
        full, recheck = self._full(buckets), _recheck(now)
        with self._lock:
            for bucket in full:
                if bucket in leased_here:
                    self._skip_until[bucket] = recheck
        full = [b for b in full if b not in leased_here]
        self._skip(full, self._buckets.next_visible_many(full), recheck)

    def note_idle_until(self, bucket: int, now: int, first: int | None) -> None:
        """``note_idle``, given when the bucket's first unacked message becomes visible (no read).

        ``first`` (ms; None: no unacked message) from a read the caller made anyway.
        """
        if self._full([bucket]):
            self._skip([bucket], [first], _recheck(now))

    def _full(self, buckets: Sequence[int]) -> list[int]:
        """The fully allocated ones of ``buckets`` (new messages may land in the tail bucket)."""
        return [b for b in buckets if (b + 1) * self._buckets.bucket_size <= self.tail]

    def _skip(self, buckets: Sequence[int], firsts: Sequence[int | None], recheck: int) -> None:
        with self._lock:
            for bucket, first in zip(buckets, firsts, strict=True):
                self._skip_until[bucket] = recheck if first is None else min(recheck, first)


def _recheck(now: int) -> int:
    """When a bucket found idle at ``now`` is read again at the latest (ms)."""
    return now + int(IDLE_RECHECK * 1000)
