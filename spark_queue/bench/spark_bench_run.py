"""The state one ``bdq bench spark`` run shares between its phases, and how a query is watched.

``BenchRun`` holds the session, the queue client, the parameters and where the
checkpoints go; ``Batches`` tallies a streaming query's progress by batch id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.spark_bench_params import SparkBenchParams
from spark_queue.client import QueueClient
from spark_queue.queue import Queue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

#: Seconds between two looks at a running query (progress lines, batch tally).
POLL_INTERVAL = 0.5


@dataclass(frozen=True)
class BenchRun:
    """What every phase of one run shares."""

    spark: SparkSession
    client: QueueClient
    params: SparkBenchParams
    options: dict[str, str]
    run_id: str
    checkpoints: Path
    progress: Progress

    def create_queue(self, role: str, *, bucket_size: int | None = None) -> Queue:
        return self.client.create_queue(
            f"bench-spark-{self.run_id}-{role}",
            bucket_size=bucket_size or self.params.bucket_size,
            visibility_timeout=self.params.visibility_timeout,
        )

    def checkpoint(self, role: str) -> str:
        return str(self.checkpoints / role)


def queue_total(queue: Queue) -> int:
    """Messages ``queue`` holds, counted exactly."""
    return queue.stats(exact=True).total  # a benchmark checks counts: scan every bucket


class Batches:
    """Progress of one query, tallied by batch id (Spark keeps only the recent ones)."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}
        self.durations: dict[int, dict[str, int]] = {}

    def update(self, query: StreamingQuery) -> None:
        for p in query.recentProgress:
            self.rows[p.batchId] = p.numInputRows
            self.durations[p.batchId] = dict(p.durationMs)

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def with_rows(self) -> int:
        return sum(1 for n in self.rows.values() if n > 0)

    def with_rows_durations(self) -> list[dict[str, int]]:
        return [self.durations[b] for b, n in self.rows.items() if n > 0 and b in self.durations]

    def summed_durations(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for parts in self.durations.values():
            for name, ms in parts.items():
                totals[name] = totals.get(name, 0) + int(ms)
        return totals


def ended(query: StreamingQuery, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``query`` to end; whether it has (raises its error if any)."""
    # pyspark takes fractions of a second (it waits int(timeout * 1000) ms) but types an int.
    return bool(query.awaitTermination(seconds))  # type: ignore[arg-type]


def read_stream(run: BenchRun, queue: Queue, names: str | None = None, **extra: str) -> DataFrame:
    """A ``bdq`` stream of ``queue`` (or of the comma list ``names``)."""
    return (
        run.spark.readStream.format("bdq")
        .options(**run.options)
        .option("queue", names or queue.name)
        .option("visibilityTimeout", f"{run.params.visibility_timeout:g}s")
        .options(**extra)
        .load()
    )
