"""A receive's look at the head buckets: which lanes and which keyless messages are visible.

A consumer whose lanes and shares come up short looks for more work: free
lanes with visible keyed messages (``lanes.py``) and free shares with visible
keyless ones (``shares.py``).

* **Lanes** (``HeadLook``): one read per head bucket of the id, lane and
  visibility columns of its unacked rows (no payloads), made at most once per
  receive. Buckets without a visible message are noted idle until their first
  lease or delay ends (at most ``IDLE_RECHECK``), known from the same read,
  and passed over, not counted.
* **Shares** (``KeylessLook``): the ids alone of visible keyless messages: a
  page of ``KEYLESS_PAGE`` ids (or the take's size) from the bucket's
  **keyless floor**, then, while the free shares found fall short of the
  take, only the id ranges of shares nobody holds (``shares.py`` reads the
  owners), so a look does not read through the runs others took. Below a
  bucket's floor no keyless message was visible when a look last read there
  (acked, in flight or delayed), so the rows a queue has already moved are
  not read again and again; a bucket read to its end without one is passed
  over without a query. As a lane's floor (``receiving.py``), a floor lasts
  ``IDLE_RECHECK`` seconds at most: a lease running out or a late write
  below it is seen by the look after that. Issue 22's looks read whole head
  buckets: 113 reads of 8-24 ms per 300 receives of one consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from spark_queue.defaults import IDLE_RECHECK, LANE_LOOK_BUCKETS
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.lanes import KEYLESS
from spark_queue.store.buckets import Buckets
from spark_queue.store.lane_scans import head_rows, visible_ids

#: Ids of visible keyless messages a look reads per page, at least.
KEYLESS_PAGE = 128
#: Keyless floors kept before those below the head are pruned.
FLOOR_NOTES = 256


class HeadLook:
    """The visible ``(id, lane)`` rows of the first head buckets, read lazily once.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head, tail and idle buckets.
        now: The receive's time (ms).
    """

    def __init__(self, buckets: Buckets, bounds: Bounds, now: int) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._now = now
        self._read: dict[int, list[tuple[int, int]]] = {}
        self._tail_refreshed = False

    def _visible(self) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """Up to ``LANE_LOOK_BUCKETS`` head buckets with visible rows, and those rows."""
        if not self._tail_refreshed:
            self._bounds.refresh_tail()
            self._tail_refreshed = True
        bucket, read = self._bounds.head, 0
        while read < LANE_LOOK_BUCKETS and bucket <= self._bounds.last_bucket():
            if not self._bounds.skipped(bucket, self._now):
                rows = self._read.get(bucket)
                if rows is None:
                    rows, first = head_rows(self._buckets, bucket, self._now)
                    self._read[bucket] = rows
                    if not rows:  # nothing visible in any lane: skip it, and it does not count
                        self._bounds.note_idle_until(bucket, self._now, first)
                if rows:
                    read += 1
                    yield bucket, rows
            bucket += 1

    def busy_lanes(self, owned: Collection[int]) -> list[int]:
        """Lanes with visible keyed messages, oldest first; stops at one not ``owned``."""
        busy: dict[int, None] = {}  # ordered: the lane of the oldest visible message first
        for _, rows in self._visible():
            busy.update(dict.fromkeys(lane for _, lane in rows if lane != KEYLESS))
            if set(busy) - set(owned):
                break
        return list(busy)


@dataclass(frozen=True, slots=True)
class KeylessFloor:
    """No keyless message of a bucket below ``id`` was visible; trusted until ``until`` (ms)."""

    id: int
    until: int


class KeylessLook:
    """Visible keyless ids of the head buckets, in pages from a floor per bucket (module doc).

    One per queue handle; safe to share between threads.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head, tail and idle buckets.
    """

    def __init__(self, buckets: Buckets, bounds: Bounds) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._lock = threading.Lock()
        self._floors: dict[int, KeylessFloor] = {}

    def buckets(self, now: int) -> Iterator[int]:
        """The buckets that may hold visible keyless messages, from the head, oldest first.

        Buckets noted idle and buckets whose floor is at their end are passed
        over; past the last known bucket the tail is read again, once.
        """
        bucket, refreshed = self._bounds.head, False
        self._prune(bucket)
        while True:
            if bucket > self._bounds.last_bucket():
                if refreshed or not self._bounds.refresh_tail():
                    return
                refreshed = True
                continue
            floor = self._floor(bucket, now)
            end = (bucket + 1) * self._buckets.bucket_size
            if not self._bounds.skipped(bucket, now) and (floor is None or floor.id < end):
                yield bucket
            bucket += 1

    def page(self, bucket: int, now: int, limit: int) -> tuple[list[int], bool]:
        """Up to ``limit`` ids of visible keyless messages of ``bucket`` from its floor, in order.

        Returns the ids and whether the page reached the bucket's end. The
        floor moves up to the page's first id (to the bucket's end when it
        found none in a bucket whose ids are all handed out: a tail bucket
        takes new messages any moment).
        """
        floor = self._floor(bucket, now)
        base = bucket * self._buckets.bucket_size
        end = base + self._buckets.bucket_size
        start = floor.id if floor is not None else base
        ids = visible_ids(self._buckets, bucket, (start, end), KEYLESS, now, limit)
        done = len(ids) < limit
        if ids:
            lowest = ids[0]
        elif done and end <= self._bounds.tail:
            lowest = end
        else:
            lowest = start
        until = floor.until if floor is not None else now + int(IDLE_RECHECK * 1000)
        with self._lock:
            self._floors[bucket] = KeylessFloor(lowest, until)
        return ids, done

    def ids_in(self, bucket: int, ids: tuple[int, int], now: int, limit: int) -> list[int]:
        """Up to ``limit`` ids of visible keyless messages with ids in ``[start, end)``."""
        return visible_ids(self._buckets, bucket, ids, KEYLESS, now, limit)

    def forget(self) -> None:
        """Read every bucket from its start again (a message may be visible below a floor)."""
        with self._lock:
            self._floors.clear()

    def _floor(self, bucket: int, now: int) -> KeylessFloor | None:
        floor = self._floors.get(bucket)
        return floor if floor is not None and floor.until > now else None

    def _prune(self, head: int) -> None:
        if len(self._floors) > FLOOR_NOTES:
            with self._lock:
                self._floors = {b: f for b, f in list(self._floors.items()) if b >= head}
