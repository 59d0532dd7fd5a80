"""Drain marks: an ack that leaves a bucket without an unacked message stores its count, 0.

Why. A count (``counting.py``) reads the stored count of each live bucket and
scans at most ``COUNT_BUDGET`` of them; a bucket never counted is estimated as
full. A drained bucket stays live until it is sealed and dropped
(``seal_delay`` after its last id, ``lifecycle.py``), so without its count a
drained queue of more than ``COUNT_BUDGET`` buckets would show a phantom
backlog to ``stats()``, the Spark progress, ``bdq top`` and Prometheus. The
ack that empties a bucket is where that is known: it leaves the count behind.

When a handle probes. An ack notes the buckets it acked in; the handle then
reads whether each still holds an unacked message (``LIMIT 1``, all at once),
only where its ack may have been the bucket's last:

* the bucket is fully allocated: every id of it was handed out (newer ids go
  to the tail bucket, which every count scans anyway);
* the handle's lanes are done there (``Receiver.unfinished``): none has rows
  read ahead there, none had its last scan stop at its row limit there (more
  of the lane may be visible), and the receive settling it did not just lease
  there (those acks are still to come).

A bucket not done waits; the next ack, or the receive whose scan finds the
lanes done there (``settle``), probes it. It does not wait for a scan of the
bucket itself: lane scans start at their floors and skip drained buckets.
Each lane is received by one consumer at a time (``lanes.py``), so a drain
probes a bucket about once per lane, not once per ack, and the last consumer
to finish there finds it empty. Two consumers finishing at once miss nothing:
each probe follows its own ack, so the later probe follows both. A probe
never fails an ack: a failed one is logged, and the bucket is then counted as
before. What is left to the counts' round robin: a lane whose last scan
stopped at its limit exactly on its last row keeps that bucket waiting until
it is scanned again (the consumer's next receive).

A drained bucket is also skipped by this handle's receives and the Spark
planner's probes until the mark's ``next_change`` (``Bounds.note_drained``):
without it, each probe read its acked rows again every ``IDLE_RECHECK`` until
the bucket was dropped.

What a mark promises. An empty bucket gets a count of 0, taken after the probe
read (the later count of a bucket wins, ``store/counts.py``). A message that
lands in it after the probe (a slow write of an id handed out earlier: only
until the bucket is sealed, ``seal_delay`` after its last id; later ones are
sent again elsewhere, ``sending.py``) is not counted until the bucket is
counted again. The mark says when: its ``next_change`` is ``seal_delay`` after
it, from then on counts scan it among the buckets whose count is out of date
(and a queue of at most ``COUNT_BUDGET`` live buckets is scanned whole on
every count anyway). Counts never hide a message from a receive: receives
scan the buckets themselves.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable

from spark_queue.config import QueueSettings
from spark_queue.engine.bounds import Bounds
from spark_queue.errors import SparkQueueError
from spark_queue.store.buckets import Buckets
from spark_queue.store.counts import BucketCount, BucketCounts
from spark_queue.store.message_values import now_ms

log = logging.getLogger(__name__)

#: Buckets acked in and waiting for their probe before those below the head are forgotten.
PENDING_NOTES = 4096
#: Seconds between reads of the tail by a handle whose acks are beyond the tail it knows.
TAIL_REREAD = 1.0


class Drains:
    """Zero counts of the buckets this handle's acks empty; safe to share between threads.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head and tail.
        settings: Returns the queue's current settings (``seal_delay``).
        unfinished: Returns the buckets where the handle's lanes may still
            hand out a message it saw or may see: a scan stopped at its row
            limit there, or rows read ahead there (``Receiver.unfinished``).
    """

    def __init__(
        self,
        buckets: Buckets,
        bounds: Bounds,
        settings: Callable[[], QueueSettings],
        unfinished: Callable[[], Collection[int]],
    ) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._settings = settings
        self._unfinished = unfinished
        self._counts = BucketCounts(buckets.store, buckets.queue_id)
        self._lock = threading.Lock()
        self._pending: set[int] = set()  # acked in since their last probe
        self._tail_due = 0.0  # when ``_tail`` may read the sequence again

    def acked(self, buckets: Iterable[int]) -> list[int]:
        """After acks in ``buckets``: mark those left without an unacked message; return them."""
        with self._lock:
            self._pending.update(buckets)
            if len(self._pending) > PENDING_NOTES:
                head = self._bounds.head  # below it: dropped, nothing to count
                self._pending = {b for b in self._pending if b >= head}
        return self.settle()

    def _tail(self) -> int:
        """The tail, read again at most once a second (acks near the tail ask often)."""
        now = time.monotonic()
        if now >= self._tail_due:
            self._tail_due = now + TAIL_REREAD
            try:
                self._bounds.note_tail(self._buckets.tail())
            except SparkQueueError:
                log.warning("queue %s: could not read its tail", self._buckets.queue_id)
        return self._bounds.tail

    def settle(self, leased: Collection[int] = ()) -> list[int]:
        """Probe the buckets acked in where the lanes are done; mark the empty ones; return them.

        Run after each ack, and after each receive (whose scan may have found
        a lane done in a bucket acked in before); ``leased``: the buckets the
        receive just leased in, whose acks are still to come.
        """
        with self._lock:  # a copy: sibling threads' acks add to the set meanwhile
            pending = set(self._pending)
        if not pending:
            return []
        size, tail = self._buckets.bucket_size, self._bounds.tail
        if any((b + 1) * size > tail for b in pending):
            # This handle may not have seen the tail move (a Spark driver's handle
            # acks steps others received): one read of the sequence says.
            tail = self._tail()
        unfinished = {*self._unfinished(), *leased}
        with self._lock:
            # A bucket not fully allocated is the tail's: every count scans it anyway.
            probe = sorted(
                b for b in self._pending if b not in unfinished and (b + 1) * size <= tail
            )
            self._pending.difference_update(probe)
        if not probe:
            return []
        try:
            held = self._buckets.has_unacked_many(probe)
            now = now_ms()  # after the read: this count is newer than any taken before it
            recheck = now + int(self._settings().seal_delay * 1000)
            empty = [b for b, any_left in zip(probe, held, strict=True) if not any_left]
            self._counts.write([BucketCount(b, 0, 0, 0, None, recheck, now) for b in empty])
            self._bounds.note_drained(empty, recheck)
        except SparkQueueError:
            log.warning(
                "queue %s: could not store the counts of drained buckets %s; counts catch up later",
                self._buckets.queue_id,
                probe,
                exc_info=True,
            )
            return []
        return empty
