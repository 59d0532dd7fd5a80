"""The stream reader's step bookkeeping: leases kept alive, acks on commit, the stop.

Every step the source plans (or replays) leases messages from some queues.
Until Spark commits it, the step's leases are renewed and its buckets held
(``spark.renewal``, ``spark.sharing``); a commit acks every step up to it on
the ack thread (``spark.commit_acks``), then stops their renewal and frees
their buckets. ``StepTrackingReader`` keeps that state for ``BdqStreamReader``,
which plans the steps.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader

from spark_queue.errors import QueueNotFound
from spark_queue.queue import Queue
from spark_queue.spark import stopping
from spark_queue.spark.commit_acks import StepAcks
from spark_queue.spark.offsets import Offset
from spark_queue.spark.options import SourceOptions
from spark_queue.spark.renewal import LeaseRenewal, renewal_period
from spark_queue.spark.sharing import BucketSharing, ownership_period
from spark_queue.spark.worker_handles import open_queue

# The acks are the source's own messages: they keep its logger, as before the split.
log = logging.getLogger("spark_queue.spark.source")


def leases_surely_held(planned: tuple[float, float] | None) -> bool:
    """Whether a step's leases surely still hold: planned here less than half a timeout ago.

    ``planned`` is ``(time.monotonic() at planning, visibility timeout)``, or
    None for a step planned before a restart. Its tasks leased after it was
    planned, for the whole timeout, so for half of it no consumer whose clock
    is within half a timeout of theirs can have taken a message over; the
    renewal thread extends them further. Such a step is acked without reading
    its leases back (``QueueSteps.ack(held=True)``).
    """
    if planned is None:
        return False
    at, timeout = planned
    return time.monotonic() - at < timeout / 2


class StepTrackingReader(DataSourceStreamReader):
    """A stream reader's planned steps until they are acked: renewal, ownership, commit, stop.

    Args:
        options: The source's options.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._acked_step: int | None = None
        self._renewal: LeaseRenewal | None = None
        self._acks = StepAcks()
        self._stream = ""
        #: Queues each planned, not yet acked step leased from.
        self._step_queues: dict[int, frozenset[str]] = {}
        #: When each such step was planned (``time.monotonic``) and its visibility timeout.
        self._step_leases: dict[int, tuple[float, float]] = {}
        self._sharing = BucketSharing("bdq")
        #: Acks of this query that found the lease lost (each a duplicate downstream).
        self.stale_acks = 0
        self._stopped = False

    def __getstate__(self) -> dict[str, Any]:
        # A thread does not pickle; a copy of the reader starts its own renewal.
        state = dict(self.__dict__)
        state["_renewal"] = None
        return state

    def _queue(self, name: str | None = None) -> Queue:
        return open_queue(self.options.connection, name or self.options.queue)

    def queue_names(self) -> tuple[str, ...]:
        """The queues steps may lease from (``BdqStreamReader`` adds ``queuePattern``'s matches)."""
        return self.options.queues

    def _ownership_period(self, queue: Queue) -> float:
        return ownership_period(
            self.options.visibility_timeout or queue.settings.visibility_timeout
        )

    def commit(self, end: dict[str, Any]) -> None:
        last = Offset.from_dict(end)
        first = last.step if self._acked_step is None else self._acked_step + 1
        # A step planned before a restart is not in memory: ack it on every queue.
        steps = [
            (
                step,
                sorted(queues or {*self.options.queues, *self.queue_names()}),
                self._step_leases.pop(step, None),
            )
            for step in range(first, last.step + 1)
            for queues in [self._step_queues.pop(step, None)]
        ]
        self._acked_step = max(last.step, self._acked_step or 0)
        self._acks.submit(functools.partial(self._ack_steps, last.stream, steps, self._acked_step))

    def _ack_steps(
        self, stream: str, steps: list[tuple[int, list[str], tuple[float, float] | None]], upto: int
    ) -> None:
        """Ack committed steps, then stop renewing them and free their buckets (background)."""
        for step, queues, leases in steps:
            held = leases_surely_held(leases)
            for name in queues:
                self._ack(name, stream, step, held)
        if self._renewal is not None:
            self._renewal.done(upto)
        self._sharing.done(upto, self._queue)

    def _ack(self, name: str, stream: str, step: int, held: bool) -> None:
        try:
            acked, stale = self._queue(name).steps.ack(stream, step, held=held)
        except QueueNotFound:
            log.warning("bdq source: queue %r was deleted before step %d was acked", name, step)
            return
        self.stale_acks += stale
        if stale:
            log.warning(
                "bdq source %r: step %d: %d message(s) were redelivered elsewhere before the"
                " commit (lease ran out): duplicates downstream",
                name,
                step,
                stale,
            )
        log.debug("bdq source %r: step %d acked %d message(s)", name, step, acked)

    # -- lease renewal (spark_queue.spark.renewal) ----------------------------------------

    def _track(self, step: Offset, *, replayed: bool = False) -> None:
        """Keep ``step``'s leases alive until it is acked."""
        parts = step.parts(self.options.queues)
        queues = frozenset(name for name, _, _ in parts)
        self._sharing.hold(step.step, [(name, bucket) for name, bucket, _ in parts])
        self._step_queues[step.step] = queues
        self._stream = step.stream
        timeout = self.options.visibility_timeout or min(
            self._queue(name).settings.visibility_timeout for name in queues
        )
        if replayed:  # planned by an earlier run: its leases may have run out since
            self._step_leases.pop(step.step, None)
        else:
            self._step_leases.setdefault(step.step, (time.monotonic(), timeout))
        if self._renewal is None:
            label = self.options.queue_pattern or ",".join(self.options.queues)
            self._renewal = LeaseRenewal(self._renew, renewal_period(timeout), label)
        self._renewal.set_period(min(self._renewal.period, renewal_period(timeout)))
        self._renewal.track(step.step, queues)

    def _renew(self, queue: str, step: int) -> tuple[int, int]:
        handle = self._queue(queue)
        self._sharing.renew(handle, step, self._ownership_period(handle))
        return handle.steps.renew(self._stream, step, self.options.visibility_timeout)

    def stop(self) -> None:
        """The query stops: the last ack finishes, renewal stops, buckets are freed.

        Leases of steps planned and never committed run out one timeout later.
        Runs once: a second call (the exit hook of ``spark.stopping``) does nothing.
        """
        if self._stopped:
            return
        self._stopped = True
        stopping.stop_begins()
        try:
            self._acks.close()
        finally:
            if self._renewal is not None:
                self._renewal.stop()
            self._sharing.release_all(self._queue)
