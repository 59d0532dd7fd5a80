"""The sink: DataFrame rows become messages.

Columns: ``payload`` (binary or string, required), ``queue`` (string: routes the
row; the ``queue`` option is the default), ``headers`` (map<string,string>),
``delay_ms`` (bigint or int). Any other column is refused when the query starts.

Guarantees:

* Without ``writerId``: at-least-once. A retried task or a replayed
  micro-batch sends its rows again (like Spark's Kafka sink).
* With ``writerId``: no duplicates. Each task sends its rows in chunks keyed
  by (writerId and the query id, batch id, partition, chunk) through the
  queue's idempotent send, so a retried task or replayed batch finishes what
  the first attempt began instead of sending again. The query id comes from
  the checkpoint, so one writerId may serve several checkpoints safely.
  This needs deterministic input (the same rows in the same order on
  replay), as a bdq or Kafka source gives. For
  ``df.write`` (no batch id), one writerId names one write: running the same
  write again with the same writerId sends nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from spark_queue.errors import InvalidSetting
from spark_queue.queue import Queue
from spark_queue.spark.options import SinkOptions
from spark_queue.spark.source import shared_client

log = logging.getLogger(__name__)

#: Rows per send: one id block and a few single-partition batches each.
CHUNK_ROWS = 1000

_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "payload": (BinaryType, StringType),
    "queue": (StringType,),
    "headers": (MapType,),
    "delay_ms": (LongType, IntegerType),
}
_COLUMN_HELP = (
    "payload (binary or string, required), queue (string), headers (map<string,string>),"
    " delay_ms (bigint)"
)


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse, before anything is written, columns the sink cannot send."""
    names = [f.name for f in schema.fields]
    for f in schema.fields:
        types = _ACCEPTED.get(f.name)
        if types is None:
            raise InvalidSetting(
                f"column {f.name!r}: not accepted by the bdq sink; accepted columns: {_COLUMN_HELP}"
            )
        if not isinstance(f.dataType, types) or (
            isinstance(f.dataType, MapType)
            and not (
                isinstance(f.dataType.keyType, StringType)
                and isinstance(f.dataType.valueType, StringType)
            )
        ):
            raise InvalidSetting(
                f"column {f.name!r} of type {f.dataType.simpleString()}: wrong type; accepted"
                f" columns: {_COLUMN_HELP}"
            )
    if "payload" not in names:
        raise InvalidSetting(
            f"columns {names}: the bdq sink needs a 'payload' column;"
            f" accepted columns: {_COLUMN_HELP}"
        )
    if "queue" not in names and options.queue is None:
        raise InvalidSetting("option 'queue' is required when the DataFrame has no 'queue' column")


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task sent: messages per queue."""

    partition: int
    sent: dict[str, int] = field(default_factory=dict)


def write_batches(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    step: int | None,
    query_id: str | None = None,
) -> SinkCommit:
    """Send the rows of one task, chunk by chunk per target queue.

    With a writer id, sends are keyed by (writer id and the streaming query's
    id, step (Spark's batch id), partition, chunk). The query id lives in the
    checkpoint: a restart keeps it, a new checkpoint (whose batch ids start again at 0)
    gets a new one, so reusing a writer id never mistakes new rows for old.
    """
    writer = None
    if options.writer_id is not None:
        writer = options.writer_id if query_id is None else f"{options.writer_id}@{query_id}"
    context = TaskContext.get()
    part = context.partitionId() if context else 0
    client = shared_client(options.connection)
    queues: dict[str, Queue] = {}
    pending: dict[str, list[tuple[Any, dict[str, str], float]]] = defaultdict(list)
    chunks: dict[str, int] = defaultdict(int)
    sent = SinkCommit(part)

    def flush(name: str) -> None:
        rows = pending.pop(name, [])
        if not rows:
            return
        queue = queues.get(name) or queues.setdefault(name, client.queue(name))
        payloads = [r[0] for r in rows]
        headers = [r[1] for r in rows]
        delays = [r[2] for r in rows]
        if writer is None:
            queue.send_batch(payloads, headers=headers, delay=delays)
        else:
            queue.send_batch_once(
                writer,
                step or 0,
                part,
                payloads,
                headers=headers,
                delay=delays,
                chunk=chunks[name],
            )
        chunks[name] += 1
        sent.sent[name] = sent.sent.get(name, 0) + len(rows)

    row_number = 0
    for batch in batches:
        columns = batch.to_pydict()
        count = batch.num_rows
        payloads = columns["payload"]
        targets = columns.get("queue", [None] * count)
        headers = columns.get("headers", [None] * count)
        delays = columns.get("delay_ms", [None] * count)
        for i in range(count):
            row_number += 1
            name = targets[i] or options.queue
            if name is None:
                raise InvalidSetting(
                    f"row {row_number} of partition {part}: column 'queue' is null and the sink"
                    " has no 'queue' option to fall back on"
                )
            if payloads[i] is None:
                raise InvalidSetting(
                    f"row {row_number} of partition {part}: column 'payload' is null"
                )
            delay_ms = delays[i] or 0
            if delay_ms < 0:
                raise InvalidSetting(
                    f"row {row_number} of partition {part}: delay_ms {delay_ms} must be >= 0"
                )
            pending[name].append((payloads[i], dict(headers[i] or ()), delay_ms / 1000))
            if len(pending[name]) >= CHUNK_ROWS:
                flush(name)
    for name in list(pending):
        flush(name)
    return sent


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    totals: dict[str, int] = defaultdict(int)
    for m in messages:
        for name, n in (m.sent if isinstance(m, SinkCommit) else {}).items():
            totals[name] += n
    log.info("bdq sink %s: sent %s", what, dict(totals) or "nothing")


class BdqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("bdq")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        query = context.getLocalProperty("sql.streaming.queryId") if context else None
        return write_batches(
            self.options, iterator, int(batch) if batch is not None else None, query
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "bdq sink: batch %d aborted; messages already sent stay in their queues%s",
            batchId,
            "" if self.options.writer_id else " (the retry may send them again)",
        )


class BdqBatchWriter(DataSourceArrowWriter):
    """``df.write.format("bdq")``: append only."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_batches(self.options, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, "write")
