"""``bdq bench stats``: what counting a queue costs at 10, 100 and 1000 live buckets.

For each size, a fresh queue gets that many full buckets of small messages.
Then one count is timed three ways: the first cheap count of the queue (no
bucket counted yet by anyone), the exact count (every live bucket scanned: the
baseline, which is what ``stats()`` cost before counts were kept), and the
cheap count in its steady state (the median of many calls, as the Spark source,
``bdq metrics serve`` and ``bdq top`` make them).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.message import QueueStats
from spark_queue.queue import Queue

DEFAULT_SIZES = (10, 100, 1000)


@dataclass(frozen=True)
class StatsCost:
    """Costs of one count of a queue of ``buckets`` live buckets, in ms."""

    buckets: int
    messages: int
    first_cheap_ms: float
    exact_ms: float
    cheap_p50_ms: float
    cheap_p90_ms: float
    buckets_scanned_per_call: int
    visible_exact: int
    visible_cheap: int

    @property
    def speedup(self) -> float:
        """How many times cheaper the steady cheap count is than the exact one."""
        return self.exact_ms / self.cheap_p50_ms if self.cheap_p50_ms else 0.0


def _timed(call: Callable[[], QueueStats]) -> tuple[float, QueueStats]:
    began = time.perf_counter()
    result = call()
    return (time.perf_counter() - began) * 1000, result


def _fill(queue: Queue, messages: int, batch: int = 5000) -> None:
    sent = 0
    while sent < messages:
        n = min(batch, messages - sent)
        queue.send_batch([b"count me %d" % i for i in range(sent, sent + n)])
        sent += n


def measure(
    queue: Queue, buckets: int, messages: int, *, samples: int, exact_samples: int
) -> StatsCost:
    """Time the three counts of an already filled queue."""
    first_ms, _ = _timed(queue.stats)
    exact_runs = [_timed(lambda: queue.stats(exact=True)) for _ in range(exact_samples)]
    cheap_runs = [_timed(queue.stats) for _ in range(samples)]
    cheap_times = sorted(ms for ms, _ in cheap_runs)
    return StatsCost(
        buckets=buckets,
        messages=messages,
        first_cheap_ms=first_ms,
        exact_ms=statistics.median(ms for ms, _ in exact_runs),
        cheap_p50_ms=statistics.median(cheap_times),
        cheap_p90_ms=cheap_times[min(len(cheap_times) - 1, int(len(cheap_times) * 0.9))],
        buckets_scanned_per_call=min(buckets, queue._counter.budget),
        visible_exact=exact_runs[-1][1].visible,
        visible_cheap=cheap_runs[-1][1].visible,
    )


def run_stats_bench(
    settings: ConnectionSettings,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    bucket_size: int = 100,
    samples: int = 30,
    exact_samples: int = 3,
    progress: Callable[[str], None] = lambda _: None,
) -> list[StatsCost]:
    """Measure counting at each number of live buckets in ``sizes`` (fresh queues)."""
    results = []
    with QueueClient(settings=settings) as client:
        for buckets in sizes:
            name = f"bench-stats-{uuid.uuid4().hex[:8]}"
            queue = client.create_queue(name, bucket_size=bucket_size)
            try:
                messages = buckets * bucket_size
                progress(f"{buckets} buckets: sending {messages:,} messages")
                _fill(queue, messages)
                progress(f"{buckets} buckets: counting")
                results.append(
                    measure(queue, buckets, messages, samples=samples, exact_samples=exact_samples)
                )
            finally:
                client.delete_queue(name, missing_ok=True)
    return results
