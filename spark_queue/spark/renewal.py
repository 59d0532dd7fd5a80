"""Lease renewal: the driver keeps the leases of every uncommitted step alive.

A micro-batch's messages are leased in executors under the visibility
timeout and acked only when Spark commits the batch. A batch that runs longer
than the timeout (a slow model, a stalled sink, a long GC) would let its leases
run out and another consumer would receive the same messages. So while the
query lives, one daemon thread of the driver-side reader renews the leases of
each step planned and not yet acked, every third of the visibility timeout:
one journal read per step and one conditional batch per bucket
(``IF lease = <recorded>``), never a write per message, and a lease already
lost is not revived.

The thread belongs to the reader: it stops in ``stop()`` (the query stops)
and dies with the driver process, so a crashed query's messages come back to
other consumers one visibility timeout after the last renewal. It also stops
when the process that started its own is gone (Spark's JVM, for the source
runner): a runner that outlived its JVM, as one stuck in a signal handler
did, would otherwise keep its steps' messages and buckets taken for as long
as it lived.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable

from spark_queue.errors import SparkQueueError

log = logging.getLogger(__name__)

#: Renewals per visibility timeout: a lease survives one failed or late round.
RENEWALS_PER_TIMEOUT = 3
#: Shortest period between two rounds (seconds), however short the timeout.
MIN_PERIOD = 0.1

#: ``renew(queue, step) -> (renewed, lost)``.
Renew = Callable[[str, int], tuple[int, int]]


def renewal_period(visibility_timeout: float) -> float:
    """Seconds between two renewal rounds for a lease of ``visibility_timeout`` seconds."""
    return max(MIN_PERIOD, visibility_timeout / RENEWALS_PER_TIMEOUT)


class LeaseRenewal:
    """Renews the leases of tracked steps on a daemon thread until stopped.

    Args:
        renew: Renews one step's leases on one queue.
        period: Seconds between rounds (``renewal_period``).
        name: Names the thread and the logs (the source's queues).
        parent: The pid whose end ends the renewals. Default: the parent of
            the process this object is made in (Spark's JVM, for the source
            runner).
    """

    def __init__(self, renew: Renew, period: float, name: str, parent: int | None = None) -> None:
        self._renew = renew
        self.period = period
        self._name = name
        self._parent = os.getppid() if parent is None else parent
        self._steps: dict[int, frozenset[str]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._wake = threading.Event()  # a shorter period, or the stop: look again at once
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def set_period(self, period: float) -> None:
        """Renew every ``period`` seconds from now on; a shorter one takes effect at once.

        A step with a shorter visibility timeout (``update_queue``, or a queue
        joining through ``queuePattern``) must not wait out a sleep computed
        from the longer one: its leases could run out meanwhile.
        """
        with self._lock:
            shorter = period < self.period
            self.period = period
        if shorter:
            self._wake.set()

    def track(self, step: int, queues: Iterable[str]) -> None:
        """Renew ``step``'s leases on ``queues`` from now until ``done`` covers it."""
        queues = frozenset(queues)
        if not queues:
            return
        with self._lock:
            self._steps[step] = self._steps.get(step, frozenset()) | queues
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._run, name=f"bdq-lease-renewal-{self._name}", daemon=True
                )
                self._thread.start()

    def done(self, upto: int) -> None:
        """Stop renewing steps up to and including ``upto`` (acked)."""
        with self._lock:
            for step in [s for s in self._steps if s <= upto]:
                del self._steps[step]

    def tracked(self) -> dict[int, frozenset[str]]:
        with self._lock:
            return dict(self._steps)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (the query stops); leases then run out one timeout later."""
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stopped.is_set():
            remaining = self.period - (time.monotonic() - last)
            if remaining > 0:
                self._wake.wait(remaining)
                self._wake.clear()
                continue  # the period may have changed, or the thread stopped: look again
            if os.getppid() != self._parent:
                # Re-parented: whatever started this process, and would commit
                # these steps, is gone. Let the leases run out.
                log.warning(
                    "bdq source %r: the process that started this one (pid %d) is gone;"
                    " no more lease renewals: the leased messages come back to other"
                    " consumers one visibility timeout after the last renewal",
                    self._name,
                    self._parent,
                )
                self._stopped.set()
                return
            self.renew_once()
            last = time.monotonic()

    def renew_once(self) -> None:
        """One round: every tracked step on each of its queues."""
        for step, queues in sorted(self.tracked().items()):
            for queue in sorted(queues):
                if self._stopped.is_set():
                    return
                try:
                    renewed, lost = self._renew(queue, step)
                except SparkQueueError as e:
                    # The next round tries again; a lease lasts a full timeout,
                    # so one failed round costs nothing.
                    log.warning("bdq source: renewing step %d on %r failed: %s", step, queue, e)
                    continue
                except Exception:
                    # Anything else (a driver bug, a closed session) must not end the
                    # thread: every lease of the query would then lapse one timeout
                    # later. Log it with its traceback and go on with the next step.
                    log.exception("bdq source: renewing step %d on %r failed", step, queue)
                    continue
                if lost:
                    # Acked between reading the journal and renewing (a commit
                    # raced us), or ran out before: the commit reports the latter.
                    log.debug(
                        "bdq source: step %d on %r: %d lease(s) not renewed", step, queue, lost
                    )
                log.debug("bdq source: step %d on %r: renewed %d lease(s)", step, queue, renewed)
        self.rounds += 1
