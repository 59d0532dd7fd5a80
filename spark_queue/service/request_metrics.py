"""The service's own Prometheus series: requests by action and status, and their latency.

They live in ``spark_queue.ops.prometheus.REGISTRY``, beside the engine's counters
of this process (``bdq_sent_total``, ...), and ``GET /metrics`` on the service's
port (``app.py``) answers that registry:

- ``bdq_sqs_requests_total{action, status}``: requests answered, by SQS action and
  HTTP status code (``200``, ``400``, ``403``, ``500``, ...);
- ``bdq_sqs_request_duration_seconds{action}``: a histogram of the time from the
  request's arrival to its answer, long polls included (their buckets reach 20 s).

``action`` is one of the actions the server answers, or ``unknown`` for a request
naming none (so a client cannot grow the series without bound).

With ``--workers N`` the workers share one port, so a scrape reaches one of them
at random: ``server.py`` then gives them a folder in ``PROMETHEUS_MULTIPROC_DIR``
(prometheus-client's multiprocess mode, read when it is imported), where each
worker's counts live in files, and ``exposition`` sums every worker's. The
engine's counters (``ProcessCounters``) cannot be summed that way and are left
out of such a scrape.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

from spark_queue.ops.prometheus import REGISTRY

#: Set (to a folder) in every worker of ``bdq serve --workers N``, N > 1.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The ``action`` label of a request whose X-Amz-Target names no action answered here.
UNKNOWN_ACTION = "unknown"
#: Latency buckets (seconds): single-digit milliseconds up to a full 20 s long poll.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 25.0)

REQUESTS = Counter(
    "bdq_sqs_requests",
    "SQS requests answered by this server process, by action and HTTP status code.",
    labelnames=("action", "status"),
    registry=REGISTRY,
)
DURATION = Histogram(
    "bdq_sqs_request_duration_seconds",
    "Seconds from a request's arrival to its answer (long polls included), by action.",
    labelnames=("action",),
    buckets=BUCKETS,
    registry=REGISTRY,
)


def observe(action: str, status: int, seconds: float) -> None:
    """Count one answered request and its latency."""
    REQUESTS.labels(action=action, status=str(status)).inc()
    DURATION.labels(action=action).observe(seconds)


def exposition() -> bytes:
    """What ``GET /metrics`` answers: this process's registry, or every worker's series."""
    if not os.environ.get(MULTIPROCESS_ENV):
        return bytes(generate_latest(REGISTRY))
    workers = CollectorRegistry()
    multiprocess.MultiProcessCollector(workers)  # type: ignore[no-untyped-call]
    return bytes(generate_latest(workers))
