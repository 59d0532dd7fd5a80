"""Acks of committed steps, sent off Spark's commit path.

Spark commits step N inside ``walCommit`` of step N+1, on its one
micro-batch thread: an ack done there (a lease read and a write per bucket,
then releasing the buckets' ownership) delays every batch by its round
trips. ``StepAcks`` runs each commit's ack on a thread of its own while the
next batch is planned and read, with two rules that keep the guarantees:

* **One ack in flight.** Submitting an ack first waits for the previous one,
  so a driver that dies leaves at most the last committed step unacked, and a
  restarted reader acks exactly that step before it replays the next (see
  ``BdqStreamReader.partitions``). Nothing else can be left behind.
* **Planning waits for it.** ``wait`` is called before a step is planned and
  when the query stops, so ownership released by an ack never races the
  planner taking buckets, and an ack that failed fails the query there, with
  its own error (the step's messages stay leased and come back after their
  visibility timeout: a duplicate, never a loss).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class StepAcks:
    """One background thread that runs the acks of committed steps, one at a time."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy of the reader (Spark pickles it) starts with no thread and nothing pending.
        return {"_pool": None, "_pending": None}

    def submit(self, ack: Callable[[], None]) -> None:
        """Run ``ack`` in the background once the previous ack is done (raising its error)."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bdq-step-ack")
        self._pending = self._pool.submit(ack)

    def wait(self) -> None:
        """Block until the ack in flight (if any) is done; raise what it raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Finish the ack in flight, then stop the thread."""
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
