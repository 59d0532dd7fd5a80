"""A receive's look at the head buckets: which lanes and which keyless messages are visible.

A consumer whose lanes and shares come up short looks for more work: free
lanes with visible keyed messages (``lanes.py``) and free shares with visible
keyless ones (``shares.py``). Both come from one read per head bucket of the
id and lane columns of its visible rows (no payloads), made at most once per
receive and shared by the two looks. Buckets without a visible message are
noted idle and passed over, not counted.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from spark_queue.defaults import LANE_LOOK_BUCKETS
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.lanes import KEYLESS
from spark_queue.store.buckets import Buckets
from spark_queue.store.lane_scans import visible_lanes


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
                    rows = self._read[bucket] = visible_lanes(self._buckets, bucket, self._now)
                if not rows:  # nothing visible in any lane: skip it, and it does not count
                    self._bounds.note_idle(bucket, self._now)
                else:
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

    def keyless(self) -> Iterator[tuple[int, list[int]]]:
        """Each head bucket with visible messages, and the ids of its visible keyless ones."""
        for bucket, rows in self._visible():
            yield bucket, [i for i, lane in rows if lane == KEYLESS]
