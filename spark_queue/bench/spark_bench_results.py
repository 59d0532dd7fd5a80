"""What a ``bdq bench spark`` run measured: one record per phase, and the run's result.

The connector's targets are here too: rates as ratios to the raw insert
baseline, latencies as bounds in milliseconds. A result says whether it met each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from spark_queue.bench.spark_bench_params import SparkBenchParams
from spark_queue.bench.spark_floor import FloorPhase

#: Sink rate over the raw baseline that the connector aims for (issue 9).
SINK_TARGET = 2.0
#: Source (receive + ack) rate over the raw baseline that the connector aims for.
SOURCE_TARGET = 1.3
#: Pipeline (queue -> queue with a writerId) rate over the raw baseline aimed for.
PIPELINE_TARGET = 0.9
#: Median end-to-end latency, in milliseconds, at a light load.
LATENCY_P50_TARGET_MS = 150.0
#: 99th percentile end-to-end latency, in milliseconds, at a light load.
LATENCY_P99_TARGET_MS = 300.0


@dataclass(frozen=True, kw_only=True)
class WarmUp:
    """The untimed first use of the data source in the session, on ``WARMUP_ROWS`` messages.

    Attributes:
        write_seconds: The first ``df.write.format("bdq")`` (data source lookup,
            Python workers started).
        drain_seconds: The first ``readStream.format("bdq")`` query, start to end,
            writing into a second queue through ``writeStream.format("bdq")`` with a
            ``writerId`` (the streaming runner, the stream reader and writer started).
    """

    write_seconds: float
    drain_seconds: float


@dataclass(frozen=True, kw_only=True)
class WritePhase:
    """The sink phase: one ``df.write.format("bdq")``.

    Attributes:
        seconds: Length of the write action.
        rate: Rows written per second.
        stored: Messages the target queue held afterwards (should be M).
    """

    seconds: float
    rate: float
    stored: int


@dataclass(frozen=True, kw_only=True)
class StreamPhase:
    """A throughput query that ran until its input was drained (``availableNow``).

    Attributes:
        seconds: From ``start()`` until the query ended.
        rate: Input rows per second over that time.
        batch_seconds: Time spent in triggers (Spark's ``triggerExecution``, summed):
            ``seconds`` without the query's start and stop.
        rows: Input rows of all its micro-batches.
        batches: Micro-batches that had input rows.
        empty_batches: Micro-batches without input (those that commit the last one).
        duration_ms: Each ``durationMs`` part of Spark's progress, summed over the batches.
        left: Messages left in the input queue afterwards (should be 0).
        delivered: Messages in the output queue afterwards, or None without one.
    """

    seconds: float
    rate: float
    batch_seconds: float
    rows: int
    batches: int
    empty_batches: int
    duration_ms: dict[str, int]
    left: int
    delivered: int | None = None

    @property
    def batch_rate(self) -> float | None:
        """Input rows per second of trigger time (the query's start and stop left out)."""
        return self.rows / self.batch_seconds if self.batch_seconds > 0 else None


@dataclass(frozen=True, kw_only=True)
class LatencyPhase:
    """End-to-end latency of a continuous query at a light steady load.

    Attributes:
        sent: Messages the producer sent.
        arrived: Of those, messages that reached the output queue in time.
        send_seconds: How long the producer took.
        send_rate: The rate it achieved (messages per second).
        p50_ms: Median latency, or None when nothing arrived.
        p99_ms: 99th percentile latency, or None when nothing arrived.
        max_ms: Longest latency, or None when nothing arrived.
        batches: Micro-batches with input rows while it ran.
        trigger_p50_ms: Median ``triggerExecution`` of those micro-batches.
        add_batch_p50_ms: Median ``addBatch`` of those micro-batches.
        trigger_parts_p50_ms: Median of each ``durationMs`` part of those
            micro-batches (``latestOffset``, ``walCommit``, ``addBatch``, ...):
            where a trigger's time goes.
    """

    sent: int
    arrived: int
    send_seconds: float
    send_rate: float
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    batches: int
    trigger_p50_ms: float | None = None
    add_batch_p50_ms: float | None = None
    trigger_parts_p50_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SparkBenchResult:
    """What one run measured. Rates are messages per second.

    Attributes:
        params: The run's parameters.
        spark_version: Version of the Spark that ran the queries.
        warmup: The untimed warm-up before the phases.
        sink: The sink phase.
        source: The source phase.
        pipeline: The queue -> queue phase.
        latency: The latency phase.
        floor: Spark's own cost per micro-batch of a no-op Python source into a
            no-op Python sink on the latency phase's trigger (``spark_floor``):
            what the latency query's triggers cannot go below.
        source_floor: M rows of a Python source with no queue behind it drained as
            the source phase drains its queue (``source_floor``): what Spark allows
            the source phase, or None when not measured.
        baseline_rate: Raw prepared inserts per second (mean of the measures before
            and after the Spark phases), or None when not measured.
        baseline_rates: Each measure of the raw baseline, in the order taken.
        pyspark_zip_bytecode: Whether the driver's ``pyspark.zip``, which Spark's
            Python processes import pyspark from, holds bytecode for this Python
            (``bdq spark compile-zip``); None when there is no such archive.
        package_lacking_bytecode: spark-queue's modules that Python compiles at
            each import, for want of current bytecode (``ops/package_bytecode.py``).
    """

    params: SparkBenchParams
    spark_version: str
    warmup: WarmUp
    sink: WritePhase
    source: StreamPhase
    pipeline: StreamPhase
    latency: LatencyPhase
    baseline_rate: float | None
    baseline_rates: list[float]
    floor: FloorPhase | None = None
    source_floor: StreamPhase | None = None
    pyspark_zip_bytecode: bool | None = None
    package_lacking_bytecode: int = 0

    def _ratio(self, rate: float) -> float | None:
        return rate / self.baseline_rate if self.baseline_rate else None

    @property
    def sink_ratio(self) -> float | None:
        """Sink rate over the raw baseline."""
        return self._ratio(self.sink.rate)

    @property
    def source_ratio(self) -> float | None:
        """Source rate over the raw baseline."""
        return self._ratio(self.source.rate)

    @property
    def pipeline_ratio(self) -> float | None:
        """Pipeline rate over the raw baseline."""
        return self._ratio(self.pipeline.rate)

    @property
    def source_floor_ratio(self) -> float | None:
        """Source rate over the source floor's: the share of Spark's allowance bdq reaches."""
        floor = self.source_floor
        return self.source.rate / floor.rate if floor is not None and floor.rate > 0 else None

    @property
    def sink_met(self) -> bool | None:
        """Whether the sink reached ``SINK_TARGET``; None without a baseline."""
        ratio = self.sink_ratio
        return None if ratio is None else ratio >= SINK_TARGET

    @property
    def source_met(self) -> bool | None:
        """Whether the source reached ``SOURCE_TARGET``; None without a baseline."""
        ratio = self.source_ratio
        return None if ratio is None else ratio >= SOURCE_TARGET

    @property
    def pipeline_met(self) -> bool | None:
        """Whether the pipeline reached ``PIPELINE_TARGET``; None without a baseline."""
        ratio = self.pipeline_ratio
        return None if ratio is None else ratio >= PIPELINE_TARGET

    @property
    def latency_met(self) -> bool | None:
        """Whether the median latency is within ``LATENCY_P50_TARGET_MS``; None if none arrived."""
        p50 = self.latency.p50_ms
        return None if p50 is None else p50 <= LATENCY_P50_TARGET_MS

    @property
    def latency_p99_met(self) -> bool | None:
        """Whether the p99 latency is within ``LATENCY_P99_TARGET_MS``; None if none arrived."""
        p99 = self.latency.p99_ms
        return None if p99 is None else p99 <= LATENCY_P99_TARGET_MS

    def to_dict(self) -> dict[str, Any]:
        """Every field, ratio and target as plain JSON-ready values."""
        values = asdict(self)
        values["source"]["batch_rate"] = self.source.batch_rate
        values["pipeline"]["batch_rate"] = self.pipeline.batch_rate
        values["source_floor_ratio"] = self.source_floor_ratio
        values["ratios"] = {
            "sink": self.sink_ratio,
            "source": self.source_ratio,
            "pipeline": self.pipeline_ratio,
        }
        values["targets"] = {
            "sink": {"min_ratio": SINK_TARGET, "met": self.sink_met},
            "source": {"min_ratio": SOURCE_TARGET, "met": self.source_met},
            "pipeline": {"min_ratio": PIPELINE_TARGET, "met": self.pipeline_met},
            "latency_p50": {"max_ms": LATENCY_P50_TARGET_MS, "met": self.latency_met},
            "latency_p99": {"max_ms": LATENCY_P99_TARGET_MS, "met": self.latency_p99_met},
        }
        return values
