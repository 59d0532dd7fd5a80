"""Maintenance: sealing and dropping buckets, moving the head.

Once every id of a bucket has been handed out and ``seal_delay`` has passed,
the bucket is sealed (the ``sealed_upto`` pointer moves, by LWT). A sealed
bucket whose messages are all acked is dropped as one partition and the head
moves past it, so reads never wade through consumed messages (CassieQ's
tombstone trap). Receives run a pass about once a second; any handle may,
and the LWTs keep concurrent passes of many processes consistent.
"""

from __future__ import annotations

import logging
import threading
import time

from spark_queue.config import QueueSettings
from spark_queue.defaults import DROP_PER_PASS, MAINTENANCE_INTERVAL
from spark_queue.engine.bounds import Bounds
from spark_queue.errors import SparkQueueError
from spark_queue.store.buckets import Buckets

log = logging.getLogger(__name__)


class Maintenance:
    """Seal and drop passes of one queue handle; at most one thread runs a pass at a time.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head and tail, moved by each pass.
        name: The queue's name (for logs).
        settings: The queue's settings (``bucket_size``, ``seal_delay``).
    """

    def __init__(
        self, buckets: Buckets, bounds: Bounds, name: str, settings: QueueSettings
    ) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._name = name
        self._settings = settings
        self._lock = threading.Lock()
        self._maintained_at = 0.0
        # bucket -> monotonic time this handle first saw it fully allocated
        self._full_since: dict[int, float] = {}

    def maybe(self) -> None:
        """Run a pass if none ran for ``MAINTENANCE_INTERVAL``; never raises for a failed pass."""
        if time.monotonic() - self._maintained_at < MAINTENANCE_INTERVAL:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread of this process is on it
        try:
            self._pass()
        except SparkQueueError:
            log.warning("queue %r: maintenance pass failed; will retry", self._name, exc_info=True)
        finally:
            self._lock.release()

    def maybe_in_background(self) -> None:
        """``maybe`` on a thread of its own: the caller (the Spark planner) never waits for a pass.

        The planner probes on every trigger, and a pass there (a serial read, a
        scan of each bucket it may drop, LWTs) took 5-340 ms of its time while
        a backlog drained. A pass's effect (a higher head) reaches the probe
        one call later, which costs at most a look at a dropped bucket. A
        daemon thread: a pass cut short by the process's exit leaves what a
        crash leaves, which the next pass mends (``_drop``).
        """
        if time.monotonic() - self._maintained_at < MAINTENANCE_INTERVAL or self._lock.locked():
            return
        name = f"bdq-maintenance-{self._name}"
        threading.Thread(target=self._maybe_quietly, name=name, daemon=True).start()

    def _maybe_quietly(self) -> None:
        """``maybe`` for a thread nobody joins: whatever it raises is logged, never re-raised.

        A pass may outlive its handle (a closed client's session raises), and a
        failed pass only waits for the next one, as ``maybe``'s own do.
        """
        try:
            self.maybe()
        except Exception:
            log.warning("queue %r: background maintenance pass failed", self._name, exc_info=True)

    def run(self) -> tuple[int, int]:
        """Run a pass now; return ``(sealed_upto, head)`` after it."""
        with self._lock:
            return self._pass()

    def _pass(self) -> tuple[int, int]:
        self._maintained_at = time.monotonic()
        # Serial read: a seal we act on must be complete at a quorum (see sending.py, repair).
        head, sealed_upto = self._buckets.pointers(serial=True)
        tail = self._buckets.tail()
        self._bounds.note_tail(tail)
        sealed_upto = self._seal(sealed_upto, tail)
        head = self._drop(head, sealed_upto)
        self._bounds.note_head(head)
        return sealed_upto, head

    def _seal(self, sealed_upto: int, tail: int) -> int:
        now = time.monotonic()
        full_below = tail // self._settings.bucket_size  # every id below was handed out
        for bucket in range(sealed_upto, full_below):
            self._full_since.setdefault(bucket, now)
        ready = sealed_upto
        while ready < full_below and now - self._full_since[ready] >= self._settings.seal_delay:
            ready += 1
        if ready > sealed_upto:
            if self._buckets.seal(sealed_upto, ready):
                sealed_upto = ready
            else:  # another process sealed first: take its word
                sealed_upto = max(sealed_upto, self._buckets.pointers(serial=True)[1])
        self._full_since = {b: t for b, t in self._full_since.items() if b >= sealed_upto}
        return sealed_upto

    def _drop(self, head: int, sealed_upto: int) -> int:
        droppable = []
        for bucket in range(head, min(sealed_upto, head + DROP_PER_PASS)):
            if self._buckets.has_unacked(bucket):
                # Possibly a write that landed just before the seal: look again now
                # rather than when this handle's idle-skip of the bucket ends.
                self._bounds.unskip(bucket)
                break
            droppable.append(bucket)
        if not droppable:
            return head
        # Drop first, then move the head: a crash in between leaves the head on
        # an empty partition, which the next pass drops again.
        self._buckets.drop(droppable)
        new_head = droppable[-1] + 1
        if self._buckets.advance_head(head, new_head):
            return new_head
        return max(head, self._buckets.pointers(serial=True)[0])


def stored_range(buckets: Buckets) -> range:
    """Every bucket that may hold data, head to tail: what deleting a queue must drop.

    Read it before the queue's sequence and pointers are deleted.
    """
    tail = buckets.tail()
    head, _ = buckets.pointers()
    return range(head, buckets.bucket_of(max(tail - 1, 0)) + 1)
