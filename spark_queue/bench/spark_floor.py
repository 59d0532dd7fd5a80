"""The floor under the latency phase: Spark's own cost of a Python stream's micro-batch.

A stream of no-op Python data sources (a source that offers one small batch of
rows at every trigger, a sink that counts them and writes nothing) runs on the
bench's session with the latency query's trigger. What each of its micro-batches
takes (Spark's ``triggerExecution``) is what the micro-batch engine, its
checkpoint files and its Python workers cost before any queue work: the
latency query, a Python source into a Python sink as well, cannot trigger
faster, and a message waits for part of one trigger before its own.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

#: Name the no-op source and sink are registered under.
FLOOR_FORMAT = "bdq_bench_floor"
#: Micro-batches the floor query runs before its timing starts (workers start).
FLOOR_WARMUP_BATCHES = 3
#: Seconds the floor query is timed.
FLOOR_SECONDS = 10.0
#: Seconds the floor query may take to run its warm-up batches.
FLOOR_START_TIMEOUT = 120.0


@dataclass(frozen=True, kw_only=True)
class FloorPhase:
    """Spark's cost per micro-batch of a no-op Python source into a no-op Python sink.

    Attributes:
        batches: Micro-batches timed.
        trigger_p50_ms: Median ``triggerExecution``, or None when none was timed.
        add_batch_p50_ms: Median ``addBatch`` (the job that reads and writes).
        trigger_parts_p50_ms: Median of each ``durationMs`` part, by name.
    """

    batches: int
    trigger_p50_ms: float | None
    add_batch_p50_ms: float | None
    trigger_parts_p50_ms: dict[str, float] = field(default_factory=dict)


def median_ms(durations: Sequence[dict[str, int]], part: str) -> float | None:
    """The median of one ``durationMs`` part over micro-batches, None without any."""
    values = [d[part] for d in durations if part in d]
    return float(statistics.median(values)) if values else None


def parts_p50_ms(durations: Sequence[dict[str, int]]) -> dict[str, float]:
    """The median of every ``durationMs`` part over micro-batches, by part name."""
    names = sorted({name for d in durations for name in d})
    return {name: value for name in names if (value := median_ms(durations, name)) is not None}


def measure_floor(
    spark: SparkSession,
    *,
    trigger_interval: float,
    checkpoint: str,
    rows: int,
    payload_bytes: int,
    seconds: float = FLOOR_SECONDS,
) -> FloorPhase:
    """Run the no-op stream for ``seconds`` after its warm-up and time its micro-batches."""
    spark.dataSource.register(_floor_source())
    query = (
        spark.readStream.format(FLOOR_FORMAT)
        .option("rows", str(rows))
        .option("payloadBytes", str(payload_bytes))
        .load()
        .writeStream.format(FLOOR_FORMAT)
        .queryName(f"bench_floor_{int(time.time() * 1000)}")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{int(trigger_interval * 1000)} milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + FLOOR_START_TIMEOUT
        while _batches_done(query) < FLOOR_WARMUP_BATCHES and time.monotonic() < deadline:
            if query.awaitTermination(0.1):  # type: ignore[arg-type]  # ms precision
                break  # ended by itself: raises below
        first = _batches_done(query)
        time.sleep(seconds)
        timed = [
            dict(p.durationMs)
            for p in query.recentProgress
            if p.batchId >= first and p.numInputRows > 0
        ]
    finally:
        query.stop()
    if query.exception() is not None:
        query.awaitTermination()  # raises the query's error
    return FloorPhase(
        batches=len(timed),
        trigger_p50_ms=median_ms(timed, "triggerExecution"),
        add_batch_p50_ms=median_ms(timed, "addBatch"),
        trigger_parts_p50_ms=parts_p50_ms(timed),
    )


def _batches_done(query: Any) -> int:
    progress = query.lastProgress
    return 0 if progress is None else int(progress["batchId"]) + 1


def _floor_source() -> type:
    """The no-op data source class (pyspark imported only when the floor runs)."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceStreamArrowWriter,
        DataSourceStreamReader,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.streaming.datasource import ReadLimit

    class FloorReader(DataSourceStreamReader):
        def __init__(self, rows: int, payload_bytes: int) -> None:
            self.rows = rows
            self.payload_bytes = payload_bytes
            self.offered = 0

        def initialOffset(self) -> dict[str, int]:
            return {"batch": 0}

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            self.offered += 1  # new rows at every trigger, as a steady load gives
            return {"batch": self.offered}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition(end["batch"])]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            import pyarrow as pa

            payload = b"\0" * self.payload_bytes
            yield pa.RecordBatch.from_pydict({"payload": [payload] * self.rows})

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            pass

        def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return FLOOR_FORMAT

        def schema(self) -> str:
            return "payload binary"

        def streamReader(self, schema: Any) -> FloorReader:
            return FloorReader(int(self.options["rows"]), int(self.options["payloadBytes"]))

        def streamWriter(self, schema: Any, overwrite: bool) -> FloorWriter:
            return FloorWriter()

    return FloorSource
