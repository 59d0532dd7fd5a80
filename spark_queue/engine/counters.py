"""The engine's counters: what this process did to each queue, kept in memory.

Every ``Queue`` handle counts its own operations here, per keyspace and queue:
``bdq_sent``, ``bdq_received``, ``bdq_acked``, ``bdq_stale_acks``,
``bdq_dead_lettered`` (moved to the dead-letter queue) and ``bdq_redriven``
(sent back by a redrive, by target queue). They are this process's counts,
as with any Prometheus client library.

They are plain in-process counters, so the queue needs nothing to send or
receive beyond the core install; ``spark_queue.ops.prometheus`` (the
``metrics`` extra) exports every family of ``FAMILIES`` as Prometheus
counters (``bdq_sent_total``, ...) at scrape time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = [
    "ACKED",
    "DEAD_LETTERED",
    "FAMILIES",
    "LABELS",
    "RECEIVED",
    "REDRIVEN",
    "SENT",
    "STALE_ACKS",
    "Count",
    "CounterFamily",
    "QueueCounters",
]

#: The labels of every family: a queue's name is unique within its keyspace only.
LABELS = ("keyspace", "queue")


class Count:
    """One counter: a number that only grows, safe to add to from any thread."""

    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        """Add ``amount`` (not negative: a counter never goes down)."""
        if amount < 0:
            raise ValueError(f"amount {amount!r}: a counter only grows; give 0 or more")
        with self._lock:
            self._value += amount

    @property
    def value(self) -> float:
        return self._value


class CounterFamily:
    """Counters of one name, one per ``(keyspace, queue)``.

    Args:
        name: The metric name, without Prometheus's ``_total`` suffix.
        documentation: What is counted (the exported help text).
    """

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], Count] = {}

    def labels(self, *, keyspace: str, queue: str) -> Count:
        """The counter of ``queue`` in ``keyspace``, made at its first use."""
        key = (keyspace, queue)
        count = self._counts.get(key)
        if count is None:
            with self._lock:
                count = self._counts.setdefault(key, Count())
        return count

    def samples(self) -> list[tuple[tuple[str, str], float]]:
        """``((keyspace, queue), value)`` of every counter used so far."""
        with self._lock:
            counts = list(self._counts.items())
        return [(key, count.value) for key, count in counts]


SENT = CounterFamily("bdq_sent", "Messages sent by this process.")
RECEIVED = CounterFamily("bdq_received", "Deliveries handed out to this process.")
ACKED = CounterFamily("bdq_acked", "Messages acked by this process.")
STALE_ACKS = CounterFamily(
    "bdq_stale_acks",
    "Acks refused because the receipt was stale (a duplicate delivery, or acked already).",
)
DEAD_LETTERED = CounterFamily(
    "bdq_dead_lettered", "Messages this process moved from the queue to its dead-letter queue."
)
REDRIVEN = CounterFamily(
    "bdq_redriven", "Dead letters this process sent back to the queue (the label)."
)

#: Every family, in the order they are exported.
FAMILIES = (SENT, RECEIVED, ACKED, STALE_ACKS, DEAD_LETTERED, REDRIVEN)


@dataclass(frozen=True, slots=True)
class QueueCounters:
    """The counters of one queue, looked up once per handle rather than per operation."""

    sent: Count
    received: Count
    acked: Count
    stale_acks: Count
    dead_lettered: Count

    @classmethod
    def of(cls, keyspace: str, queue: str) -> QueueCounters:
        """The counters of ``queue`` in ``keyspace``."""
        return cls(
            SENT.labels(keyspace=keyspace, queue=queue),
            RECEIVED.labels(keyspace=keyspace, queue=queue),
            ACKED.labels(keyspace=keyspace, queue=queue),
            STALE_ACKS.labels(keyspace=keyspace, queue=queue),
            DEAD_LETTERED.labels(keyspace=keyspace, queue=queue),
        )
