"""The floor under the source phase: what Spark itself allows a Python source of M rows.

A Python data source with no queue behind it offers the source phase's rows:
the bdq source's schema and payload size, ``maxMessagesPerTrigger`` a trigger,
split into partitions as the bdq source groups a step's buckets
(``grouped_partition_messages`` each). Each partition is one Arrow batch made with
Arrow's own repeat, no Python per row. The query drains them into the noop
sink with ``availableNow``, as the source phase does, on the same session.

Its rate is what the micro-batch engine, the Python workers and the Arrow
hand-over let any Python source of that size reach. The source phase's rate
over it says how much of the gap to Kafka's source is bdq's own work: the
receive, the journal and the ack.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

#: Name the floor source is registered under.
SOURCE_FLOOR_FORMAT = "bdq_bench_source_floor"


def floor_parts(start: int, end: int, most: int) -> list[tuple[int, int]]:
    """``[start, end)`` as consecutive ranges of at most ``most`` rows, the last one shorter."""
    return [(low, min(low + most, end)) for low in range(start, end, most)]


def floor_batch(start: int, end: int, payload_bytes: int) -> pa.RecordBatch:
    """Rows ``start`` to ``end`` of the floor, in the bdq source's Arrow schema."""
    import pyarrow as pa

    from spark_queue.spark.reading import ARROW_SCHEMA

    rows = end - start
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar("floor", pa.string()), rows),
            pa.array(range(start, end), pa.int64()),
            pa.repeat(pa.scalar(0, pa.int64()), rows),
            pa.repeat(pa.scalar(b"\0" * payload_bytes, pa.binary()), rows),
            pa.MapArray.from_arrays(
                pa.repeat(pa.scalar(0, pa.int32()), rows + 1),
                pa.array([], pa.string()),
                pa.array([], pa.string()),
            ),
            pa.repeat(pa.scalar(0, pa.timestamp("us", tz="UTC")), rows),
            pa.repeat(pa.scalar(1, pa.int32()), rows),
            pa.nulls(rows, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )


def source_floor_format() -> type:
    """The floor's data source class (pyspark imported only when the floor runs)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    from spark_queue.spark.planning import grouped_partition_messages
    from spark_queue.spark.source import SCHEMA

    class FloorSourceReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, rows: int, per_trigger: int, payload_bytes: int) -> None:
            self.rows = rows
            self.per_trigger = per_trigger
            self.payload_bytes = payload_bytes

        def initialOffset(self) -> dict[str, int]:
            return {"rows": 0}

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # a fixed number of rows: nothing arrives meanwhile

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(self.per_trigger)

        def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
            step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.rows
            return {"rows": min(self.rows, start["rows"] + step)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            parts = floor_parts(start["rows"], end["rows"], grouped_partition_messages())
            return [InputPartition(part) for part in parts]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            start, end = partition.value
            yield floor_batch(start, end, self.payload_bytes)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return SOURCE_FLOOR_FORMAT

        def schema(self) -> Any:
            return SCHEMA

        def streamReader(self, schema: Any) -> FloorSourceReader:
            return FloorSourceReader(
                int(self.options["rows"]),
                int(self.options["perTrigger"]),
                int(self.options["payloadBytes"]),
            )

    return FloorSource
