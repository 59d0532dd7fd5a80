"""The sink: DataFrame rows become messages.

Columns: ``payload`` (binary or string, required), ``queue`` (string: routes the
row; the ``queue`` option is the default), ``headers`` (map<string,string>),
``delay_ms`` (bigint or int), ``key`` (string: the unit of order, ``lanes.py``;
null or absent: keyless; the bdq source's ``key`` column passes on as it is).
Any other column is refused when the query starts. Every row of a task is
checked (columns, then each target queue's rules: size, headers, delay, key)
before its first message is written, and the error names the row's position
and the rule; the task holds its rows in memory until then.

All or nothing: tasks write their messages invisible, in chunks keyed by
(writer, batch id, partition, chunk) through the queue's send-once
(``engine/staging.py``), and hand what they staged to the driver. The
writer's ``commit`` makes everything visible at once; ``abort`` leaves
nothing visible. So a ``df.write`` that fails on a bad row in any task, or
loses a task for good, writes nothing, and a micro-batch is visible whole or
not at all. A retried task adopts what its failed attempt staged: the retry
writes nothing twice.

Guarantees across restarts:

* Without ``writerId``: at-least-once. The writer is named for the write (or
  the micro-batch: Spark makes a streaming writer anew for each); ``abort``
  drops what it staged, every task's, by the name their commit messages carry.
  A micro-batch replayed after a crash of the driver is written again, under
  a new name (like Spark's Kafka sink). What the crashed run staged and never
  committed stays invisible until its TTL.
* With ``writerId``: no duplicates. The writer is the writerId and the query
  id, so a replayed batch finishes what the first run began instead of
  writing again, and ``abort`` keeps what was staged for the replay. The
  query id comes from the checkpoint, so one writerId may serve several
  checkpoints safely. This needs deterministic input (the same rows in the
  same order on replay), as a bdq or Kafka source gives. For ``df.write``
  (no batch id), one writerId names one write: running the same write again
  with the same writerId sends nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
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

from spark_queue.engine.staging import Staged
from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import SinkOptions
from spark_queue.spark.worker_gc import settled
from spark_queue.spark.worker_handles import open_queue

log = logging.getLogger(__name__)

#: Rows per send: a few id blocks and single-partition batches each. Each send costs
#: its conditional record and id reservations in sequence, so a task of 5,000 rows
#: (a source partition's) staged in two sends instead of five: 139 ms against 179.
CHUNK_ROWS = 2500

_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "payload": (BinaryType, StringType),
    "queue": (StringType,),
    "headers": (MapType,),
    "delay_ms": (LongType, IntegerType),
    "key": (StringType,),
}
_COLUMN_HELP = (
    "payload (binary or string, required), queue (string), headers (map<string,string>),"
    " delay_ms (bigint), key (string)"
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
    """What one task staged: messages per queue, the sends the driver publishes, and its writer.

    ``writer`` is the send-once writer the task staged under: Spark makes a
    streaming writer anew for each micro-batch's tasks and again for its
    commit or abort, so the name travels to the driver here.
    """

    partition: int
    sent: dict[str, int] = field(default_factory=dict)
    staged: dict[str, list[Staged]] = field(default_factory=dict)
    writer: str = ""


def writer_name(options: SinkOptions, run: str, query_id: str | None) -> str:
    """The send-once writer of a write: ``run`` (unique to this write), or the writerId.

    A writerId gets the streaming query's id (from the checkpoint) appended:
    a restart keeps it, a new checkpoint (whose batch ids start again at 0)
    gets a new one, so reusing a writerId never mistakes new rows for old.
    """
    if options.writer_id is None:
        return run
    return options.writer_id if query_id is None else f"{options.writer_id}@{query_id}"


def write_batches(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    step: int | None,
    writer: str,
) -> SinkCommit:
    """Check every row of one task, then stage them chunk by chunk per target queue.

    Sends are keyed by (``writer``, step (Spark's batch id, 0 for ``df.write``),
    partition, chunk); nothing is visible until the driver publishes them.
    """
    context = TaskContext.get()
    part = context.partitionId() if context else 0
    pending: dict[str, _Rows] = {}
    rows_before = 0
    for batch in batches:
        for name, rows in _split(batch, options.queue, part, rows_before):
            pending.setdefault(name, _Rows([], None, None)).extend(rows)
        rows_before += batch.num_rows
    # Every row of the task is checked before the first is sent: a bad row
    # late in a partition must not fail the task after earlier chunks are visible.
    queues = {name: open_queue(options.connection, name) for name in pending}
    checked = {
        name: [
            queues[name].check_batch(
                rows.payloads,
                headers=rows.headers,
                delay=rows.delays if rows.delays is not None else 0.0,
                key=rows.keys,
                position=rows.position(part),
            )
            for rows in pending[name].chunks(CHUNK_ROWS)
        ]
        for name in pending
    }
    sent = SinkCommit(part, writer=writer)
    for name, chunks in checked.items():
        messages = [o for outgoing in chunks for o in outgoing]
        staging = queues[name].staging
        sent.staged[name] = staging.stage_part(writer, step or 0, part, messages, CHUNK_ROWS)
        sent.sent[name] = len(messages)
    return sent


def publish(options: SinkOptions, messages: list[WriterCommitMessage | None]) -> None:
    """The driver's commit: make every task's staged messages visible."""
    staged: dict[str, list[Staged]] = defaultdict(list)
    for m in messages:
        for name, sends in (m.staged if isinstance(m, SinkCommit) else {}).items():
            staged[name] += sends
    for name, sends in staged.items():
        open_queue(options.connection, name).staging.publish(sends)


def discard(
    options: SinkOptions, messages: list[WriterCommitMessage | None], writer: str, step: int
) -> None:
    """The driver's abort of a write named for itself: drop what its tasks staged.

    Every queue a finished task wrote to, and the ``queue`` option's, is
    cleared of the step's unpublished sends (a failed task's too: the send
    log names them).
    """
    names = {name for m in messages if isinstance(m, SinkCommit) for name in m.staged}
    if options.queue is not None:
        names.add(options.queue)
    for name in sorted(names):
        dropped = open_queue(options.connection, name).staging.discard(writer, step)
        log.info("bdq sink: dropped %d staged message(s) of queue %r", dropped, name)


@dataclass
class _Rows:
    """Rows bound for one queue, as the columns ``send_batch`` takes.

    ``headers``, ``delays`` and ``keys`` stay None while no row has any (the
    common case: nothing per row to convert or check).
    """

    payloads: list[Any]
    headers: list[dict[str, str] | None] | None
    delays: list[float] | None
    keys: list[str | None] | None = None
    #: Each row's place in the task's input (0-based), for errors that name it.
    origin: list[int] = field(default_factory=list)

    def extend(self, other: _Rows) -> None:
        n = len(self.payloads)
        self.payloads += other.payloads
        self.origin += other.origin
        if other.headers is not None or self.headers is not None:
            self.headers = (self.headers or [None] * n) + (
                other.headers or [None] * len(other.payloads)
            )
        if other.delays is not None or self.delays is not None:
            self.delays = (self.delays or [0.0] * n) + (other.delays or [0.0] * len(other.payloads))
        if other.keys is not None or self.keys is not None:
            self.keys = (self.keys or [None] * n) + (other.keys or [None] * len(other.payloads))

    def chunks(self, size: int) -> list[_Rows]:
        """These rows in chunks of ``size`` (the last one shorter), in order."""
        return [
            _Rows(
                self.payloads[start : start + size],
                None if self.headers is None else self.headers[start : start + size],
                None if self.delays is None else self.delays[start : start + size],
                None if self.keys is None else self.keys[start : start + size],
                self.origin[start : start + size],
            )
            for start in range(0, len(self.payloads), size)
        ]

    def position(self, part: int) -> Callable[[int], str]:
        """How an error names row ``i`` of these: its place in the task's partition."""
        return lambda i: f" (row {self.origin[i] + 1} of partition {part})"


def _first(mask: pa.Array) -> int:
    """Index of the first true value of a boolean array (one is known to be true)."""
    return int(pc.index(mask, True).as_py())


def _split(
    batch: pa.RecordBatch, default_queue: str | None, part: int, rows_before: int
) -> Iterator[tuple[str, _Rows]]:
    """One Arrow batch as rows per target queue, checked column by column (no per-row Python).

    Raises InvalidSetting naming the first bad row (counted across the task's
    batches) before any row of this batch is sent.
    """
    count = batch.num_rows
    if count == 0:
        return
    names = batch.schema.names

    def bad(index: int, rule: str) -> InvalidSetting:
        return InvalidSetting(f"row {rows_before + index + 1} of partition {part}: {rule}")

    payload = batch.column(names.index("payload"))
    if payload.null_count:
        raise bad(_first(pc.is_null(payload)), "column 'payload' is null")
    delays: list[float] | None = None
    if "delay_ms" in names:
        delay = pc.fill_null(batch.column(names.index("delay_ms")), 0)
        negative = pc.less(delay, 0)
        if pc.any(negative).as_py():
            index = _first(negative)
            raise bad(index, f"delay_ms {delay[index].as_py()} must be >= 0")
        if pc.any(pc.not_equal(delay, 0)).as_py():
            delays = pc.divide(pc.cast(delay, pa.float64()), 1000.0).to_pylist()
    headers: list[dict[str, str] | None] | None = None
    if "headers" in names:
        column = batch.column(names.index("headers"))
        if column.null_count < count:
            headers = [dict(h) if h else None for h in column.to_pylist()]
    keys: list[str | None] | None = None
    if "key" in names:
        key_column = batch.column(names.index("key"))
        if key_column.null_count < count:
            keys = key_column.to_pylist()
    payloads = payload.to_pylist()
    target = batch.column(names.index("queue")) if "queue" in names else None
    if target is not None and target.null_count and default_queue is None:
        raise bad(
            _first(pc.is_null(target)),
            "column 'queue' is null and the sink has no 'queue' option to fall back on",
        )
    if target is None or target.null_count == count:
        assert default_queue is not None  # check_sink_schema demands one without the column
        origin = list(range(rows_before, rows_before + count))
        yield default_queue, _Rows(payloads, headers, delays, keys, origin)
        return
    by_queue: dict[str, list[int]] = defaultdict(list)
    for index, name in enumerate(target.to_pylist()):
        key = name or default_queue
        assert key is not None  # a null without a default was refused above
        by_queue[key].append(index)
    for name, indexes in by_queue.items():
        yield (
            name,
            _Rows(
                [payloads[i] for i in indexes],
                None if headers is None else [headers[i] for i in indexes],
                None if delays is None else [delays[i] for i in indexes],
                None if keys is None else [keys[i] for i in indexes],
                [rows_before + i for i in indexes],
            ),
        )


def _log_commit(messages: list[WriterCommitMessage | None], what: str) -> None:
    totals: dict[str, int] = defaultdict(int)
    for m in messages:
        for name, n in (m.sent if isinstance(m, SinkCommit) else {}).items():
            totals[name] += n
    log.info("bdq sink %s: sent %s", what, dict(totals) or "nothing")


class BdqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("bdq")``: each micro-batch visible whole, at its commit."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        # Spark makes the writer its tasks use anew for every micro-batch: a batch's
        # tasks share this name, which an abort learns from their commit messages.
        self.run = f"run-{uuid.uuid4().hex}"

    def _writer(self, query_id: str | None) -> str:
        return writer_name(self.options, self.run, query_id)

    @settled
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        query = context.getLocalProperty("sql.streaming.queryId") if context else None
        step = int(batch) if batch is not None else None
        return write_batches(self.options, iterator, step, self._writer(query))

    @settled
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        publish(self.options, messages)
        _log_commit(messages, f"batch {batchId}")

    @settled
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.writer_id is not None:
            log.warning(
                "bdq sink: batch %d aborted; its staged messages stay invisible until the"
                " query replays the batch (same writerId and checkpoint)",
                batchId,
            )
            return
        # Not self.run: Spark made this writer for the abort, not the one the tasks used.
        writers = sorted({m.writer for m in messages if isinstance(m, SinkCommit) and m.writer})
        if not writers:
            log.warning(
                "bdq sink: batch %d aborted before any task finished; what its tasks staged"
                " stays invisible until the messages' TTL",
                batchId,
            )
        for writer in writers:
            discard(self.options, messages, writer, batchId)


class BdqBatchWriter(DataSourceArrowWriter):
    """``df.write.format("bdq")``: append only, visible whole at the job's commit."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.writer = writer_name(options, f"write-{uuid.uuid4().hex}", None)

    @settled
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_batches(self.options, iterator, None, self.writer)

    @settled
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        publish(self.options, messages)
        _log_commit(messages, "write")

    @settled
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.writer_id is not None:
            log.warning(
                "bdq sink: write aborted; its staged messages stay invisible until the same"
                " write runs again with writerId %r",
                self.options.writer_id,
            )
            return
        discard(self.options, messages, self.writer, 0)
