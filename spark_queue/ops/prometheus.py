"""Prometheus: the queues' series, read from the store at scrape time, and the HTTP endpoint.

Needs the ``metrics`` extra (prometheus-client): importing this module without it
raises ``MissingExtra``. Every series is labelled ``keyspace`` and ``queue``.

``QueueCollector`` (which ``bdq metrics serve`` registers) reads, per queue and on
each scrape, what the store knows for the whole cluster, whoever sends or receives:

- gauges from the cheap counts of ``spark_queue.engine.counting`` (a bounded
  cost per queue, however long the backlog): ``bdq_visible_messages``,
  ``bdq_in_flight_messages``, ``bdq_delayed_messages``,
  ``bdq_oldest_message_age_seconds``, ``bdq_live_buckets``,
  ``bdq_counts_age_seconds`` and, for a queue with a dead-letter queue,
  ``bdq_dead_letters`` (the visible messages of its dead-letter queue);
- counters from the queue's id sequence: ``bdq_queue_sent_total``, the ids
  handed out to senders (the sequence's next id, which only grows), and
  ``bdq_queue_consumed_total``, those of them no longer in the queue (acked,
  dead-lettered, expired, purged). The store keeps no count of acks, so this
  is ids handed out minus the counted backlog, held from going down between
  scrapes. Both restart from 0 when a queue is deleted and created again,
  which ``rate()`` reads as a counter reset.

``ProcessCounters`` exports this process's own counters (``spark_queue.engine.counters``:
``bdq_sent_total``, ``bdq_received_total``, ...); ``REGISTRY`` holds it, and
``serve(port)`` serves ``REGISTRY`` (a worker's counters, and the gauges once a
``QueueCollector`` is registered there).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_queue.errors import MissingExtra, SparkQueueError

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as e:
    raise MissingExtra(
        "the Prometheus exporter (spark_queue.ops.prometheus)", "metrics", e.name
    ) from e

from spark_queue.engine import counters
from spark_queue.ops.patterns import matches

if TYPE_CHECKING:
    from spark_queue.client import QueueClient
    from spark_queue.message import QueueStats

__all__ = ["REGISTRY", "ProcessCounters", "QueueCollector", "matches", "serve"]

log = logging.getLogger(__name__)

LABELS = ["keyspace", "queue"]

#: ``(name, help, QueueStats attribute)`` of the gauges taken from the counts.
GAUGES = (
    ("bdq_visible_messages", "Messages a receive could return now.", "visible"),
    ("bdq_in_flight_messages", "Messages received and not acked yet.", "in_flight"),
    ("bdq_delayed_messages", "Messages whose send delay has not passed.", "delayed"),
    ("bdq_live_buckets", "Buckets not dropped yet.", "buckets"),
    ("bdq_counts_age_seconds", "Age of the oldest bucket count used.", "counts_age"),
)


class ProcessCounters(Collector):
    """This process's counters (``spark_queue.engine.counters``) as Prometheus counters."""

    def collect(self) -> Iterator[Metric]:
        for family in counters.FAMILIES:
            metric = CounterMetricFamily(family.name, family.documentation, labels=LABELS)
            for labels, value in family.samples():
                metric.add_metric(list(labels), value)
            yield metric


#: The registry of spark-queue's metrics in this process (its counters; ``bdq metrics
#: serve`` adds a ``QueueCollector``).
REGISTRY = CollectorRegistry(auto_describe=True)
REGISTRY.register(ProcessCounters())


@dataclass(frozen=True, slots=True)
class Look:
    """One scrape's look at a queue: its counts and how far its id sequence got."""

    stats: QueueStats
    tail: int
    queue_id: uuid.UUID


class QueueCollector(Collector):
    """Series of every queue of a keyspace (or those matching a glob), read at scrape time.

    Args:
        client: The client whose keyspace is watched.
        patterns: Glob patterns of queue names; None or empty for every queue.
    """

    def __init__(self, client: QueueClient, patterns: Iterable[str] | None = None) -> None:
        self.client = client
        self.patterns = list(patterns or ())
        self._lock = threading.Lock()
        # The highest consumed count exported per queue incarnation: the counts are
        # approximate, and a counter must not go down between two scrapes.
        self._consumed: dict[tuple[str, uuid.UUID], int] = {}

    def describe(self) -> list[Metric]:
        # No scrape at registration: describe the families without values.
        return list(self._families(""))

    def collect(self) -> Iterator[Metric]:
        looks: dict[str, Look] = {}
        dead_letter_queues: dict[str, str] = {}
        try:
            names = [n for n in self.client.list_queues() if matches(n, self.patterns)]
        except SparkQueueError:
            log.warning("metrics: could not list the queues", exc_info=True)
            names = []
        for name in names:
            try:
                queue = self.client.queue(name)
                looks[name] = Look(queue.stats(), queue.tail, queue.queue_id)
                if queue.settings.dead_letter_queue is not None:
                    dead_letter_queues[name] = queue.settings.dead_letter_queue
            except SparkQueueError:  # deleted meanwhile, or Cassandra hiccuped: skip this scrape
                log.warning("metrics: could not count queue %r", name, exc_info=True)
        dead_letters: dict[str, float] = {}
        for name, dead in dead_letter_queues.items():
            try:
                found = looks.get(dead)
                stats = found.stats if found is not None else self.client.queue(dead).stats()
                dead_letters[name] = float(stats.visible)
            except SparkQueueError:
                log.warning("metrics: could not count dead-letter queue %r", dead, exc_info=True)
        yield from self._families(
            self.client.settings.keyspace, looks, dead_letter_queues, dead_letters
        )

    def consumed(self, name: str, look: Look) -> int:
        """Ids handed out that are no longer in the queue, never less than at the last scrape."""
        key = (name, look.queue_id)
        now = max(0, look.tail - look.stats.total)
        with self._lock:
            now = max(now, self._consumed.get(key, 0))
            self._consumed[key] = now
        return now

    def _families(
        self,
        keyspace: str,
        looks: dict[str, Look] | None = None,
        dead_letter_queues: dict[str, str] | None = None,
        dead_letters: dict[str, float] | None = None,
    ) -> Iterator[Metric]:
        looks = looks or {}
        for metric, doc, attribute in GAUGES:
            family = GaugeMetricFamily(metric, doc, labels=LABELS)
            for name, look in looks.items():
                family.add_metric([keyspace, name], float(getattr(look.stats, attribute)))
            yield family
        age = GaugeMetricFamily(
            "bdq_oldest_message_age_seconds",
            "Seconds since the oldest visible message was sent (0 when none is visible).",
            labels=LABELS,
        )
        for name, look in looks.items():
            age.add_metric([keyspace, name], look.stats.oldest_age or 0.0)
        yield age
        dead = GaugeMetricFamily(
            "bdq_dead_letters",
            "Visible messages in the queue's dead-letter queue.",
            labels=[*LABELS, "dead_letter_queue"],
        )
        for name, value in (dead_letters or {}).items():
            dead.add_metric([keyspace, name, (dead_letter_queues or {})[name]], value)
        yield dead
        sent = CounterMetricFamily(
            "bdq_queue_sent",
            "Ids the queue's sequence handed out to senders, by every process (each message"
            " sent takes one; unused ids of a writer's old block count too).",
            labels=LABELS,
        )
        consumed = CounterMetricFamily(
            "bdq_queue_consumed",
            "Ids handed out that are no longer in the queue (acked, dead-lettered, expired,"
            " purged, or never used), by every process: sent minus the counted backlog.",
            labels=LABELS,
        )
        for name, look in looks.items():
            sent.add_metric([keyspace, name], float(look.tail))
            consumed.add_metric([keyspace, name], float(self.consumed(name, look)))
        yield sent
        yield consumed


def serve(port: int, addr: str = "127.0.0.1") -> Any:
    """Expose ``REGISTRY`` over HTTP at ``http://addr:port/metrics`` from a daemon thread.

    Returns:
        The HTTP server (``shutdown()`` stops it).
    """
    server, _ = start_http_server(port, addr=addr, registry=REGISTRY)
    return server
