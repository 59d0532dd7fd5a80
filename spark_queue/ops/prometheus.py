"""Prometheus: the queues' gauges, counted at scrape time, and the HTTP endpoint.

Gauges (``QueueCollector``, which ``bdq metrics serve`` registers): per queue,
on each scrape, from the cheap counts of ``spark_queue.engine.counting`` (a bounded
cost per queue, however long the backlog): ``bdq_visible_messages``,
``bdq_in_flight_messages``, ``bdq_delayed_messages``,
``bdq_oldest_message_age_seconds``, ``bdq_live_buckets``, ``bdq_counts_age_seconds``
and, for a queue with a dead-letter queue, ``bdq_dead_letters`` (the visible
messages of its dead-letter queue).

A worker process exposes its own counters (``spark_queue.engine.counters``)
with ``serve(port)``.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spark_queue.engine.counters import REGISTRY
from spark_queue.errors import SparkQueueError

if TYPE_CHECKING:
    from spark_queue.client import QueueClient
    from spark_queue.message import QueueStats

__all__ = ["REGISTRY", "QueueCollector", "matches", "serve"]

log = logging.getLogger(__name__)


def matches(name: str, patterns: Iterable[str] | None) -> bool:
    """True when ``name`` matches one of the glob ``patterns`` (``orders-*``), or there are none."""
    patterns = list(patterns or ())
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


class QueueCollector(Collector):
    """Gauges of every queue of a keyspace (or those matching a glob), counted at scrape time.

    Args:
        client: The client whose keyspace is watched.
        patterns: Glob patterns of queue names; None or empty for every queue.
    """

    def __init__(self, client: QueueClient, patterns: Iterable[str] | None = None) -> None:
        self.client = client
        self.patterns = list(patterns or ())

    def describe(self) -> list[Metric]:
        # No scrape at registration: describe the families without values.
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        counted: dict[str, QueueStats] = {}
        dead_letter_queues: dict[str, str] = {}
        try:
            names = [n for n in self.client.list_queues() if matches(n, self.patterns)]
        except SparkQueueError:
            log.warning("metrics: could not list the queues", exc_info=True)
            names = []
        for name in names:
            try:
                queue = self.client.queue(name)
                counted[name] = queue.stats()
                if queue.settings.dead_letter_queue is not None:
                    dead_letter_queues[name] = queue.settings.dead_letter_queue
            except SparkQueueError:  # deleted meanwhile, or Cassandra hiccuped: skip this scrape
                log.warning("metrics: could not count queue %r", name, exc_info=True)
        for dead in set(dead_letter_queues.values()) - set(counted):
            try:
                counted[dead] = self.client.queue(dead).stats()
            except SparkQueueError:
                log.warning("metrics: could not count dead-letter queue %r", dead, exc_info=True)
        yield from self._families(
            {n: s for n, s in counted.items() if n in names}, dead_letter_queues, counted
        )

    def _families(
        self,
        stats: dict[str, QueueStats] | None = None,
        dead_letter_queues: dict[str, str] | None = None,
        counted: dict[str, QueueStats] | None = None,
    ) -> Iterator[Metric]:
        stats = stats or {}
        gauges = (
            ("bdq_visible_messages", "Messages a receive could return now.", "visible"),
            ("bdq_in_flight_messages", "Messages received and not acked yet.", "in_flight"),
            ("bdq_delayed_messages", "Messages whose send delay has not passed.", "delayed"),
            ("bdq_live_buckets", "Buckets not dropped yet.", "buckets"),
            ("bdq_counts_age_seconds", "Age of the oldest bucket count used.", "counts_age"),
        )
        for metric, doc, attribute in gauges:
            family = GaugeMetricFamily(metric, doc, labels=["queue"])
            for name, s in stats.items():
                family.add_metric([name], float(getattr(s, attribute)))
            yield family
        age = GaugeMetricFamily(
            "bdq_oldest_message_age_seconds",
            "Seconds since the oldest visible message was sent (0 when none is visible).",
            labels=["queue"],
        )
        for name, s in stats.items():
            age.add_metric([name], s.oldest_age or 0.0)
        yield age
        dead = GaugeMetricFamily(
            "bdq_dead_letters",
            "Visible messages in the queue's dead-letter queue.",
            labels=["queue", "dead_letter_queue"],
        )
        for name, dlq in (dead_letter_queues or {}).items():
            if counted and dlq in counted and name in stats:
                dead.add_metric([name, dlq], float(counted[dlq].visible))
        yield dead


def serve(port: int, addr: str = "127.0.0.1") -> Any:
    """Expose ``REGISTRY`` over HTTP at ``http://addr:port/metrics`` from a daemon thread.

    Returns:
        The HTTP server (``shutdown()`` stops it).
    """
    server, _ = start_http_server(port, addr=addr, registry=REGISTRY)
    return server
