"""The engine's counters: what this process did to each queue, as Prometheus counters.

Every ``Queue`` handle counts its own operations in ``REGISTRY``, per queue:
``bdq_sent_total``, ``bdq_received_total``, ``bdq_acked_total``,
``bdq_stale_acks_total``, ``bdq_dead_lettered_total`` (moved to the dead-letter
queue) and ``bdq_redriven_total`` (sent back by a redrive, by target queue).
They are this process's counts, as with any Prometheus client library;
``spark_queue.ops.prometheus`` serves them, and the queues' gauges beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter

#: The registry of spark-queue's metrics in this process.
REGISTRY = CollectorRegistry(auto_describe=True)

SENT = Counter("bdq_sent", "Messages sent by this process.", ["queue"], registry=REGISTRY)
RECEIVED = Counter(
    "bdq_received", "Deliveries handed out to this process.", ["queue"], registry=REGISTRY
)
ACKED = Counter("bdq_acked", "Messages acked by this process.", ["queue"], registry=REGISTRY)
STALE_ACKS = Counter(
    "bdq_stale_acks",
    "Acks refused because the receipt was stale (a duplicate delivery, or acked already).",
    ["queue"],
    registry=REGISTRY,
)
DEAD_LETTERED = Counter(
    "bdq_dead_lettered",
    "Messages this process moved from the queue to its dead-letter queue.",
    ["queue"],
    registry=REGISTRY,
)
REDRIVEN = Counter(
    "bdq_redriven",
    "Dead letters this process sent back to the queue (the label).",
    ["queue"],
    registry=REGISTRY,
)


@dataclass(frozen=True, slots=True)
class QueueCounters:
    """The counters of one queue, looked up once per handle rather than per operation."""

    sent: Any
    received: Any
    acked: Any
    stale_acks: Any
    dead_lettered: Any

    @classmethod
    def of(cls, queue: str) -> QueueCounters:
        """The counters labelled ``queue``."""
        return cls(
            SENT.labels(queue=queue),
            RECEIVED.labels(queue=queue),
            ACKED.labels(queue=queue),
            STALE_ACKS.labels(queue=queue),
            DEAD_LETTERED.labels(queue=queue),
        )
