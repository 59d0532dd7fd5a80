"""The throughput phases of ``bdq bench spark``: warm-up, sink, source and pipeline.

The warm-up is untimed; the sink times one ``df.write``; the source and the
pipeline each time one ``availableNow`` query that drains its input queue, and
the source floor one that drains a Python source with no queue behind it
(``source_floor.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from spark_queue.bench.source_floor import SOURCE_FLOOR_FORMAT, source_floor_format
from spark_queue.bench.spark_bench_results import StreamPhase, WarmUp, WritePhase
from spark_queue.bench.spark_bench_run import (
    POLL_INTERVAL,
    Batches,
    BenchRun,
    ended,
    queue_total,
    read_stream,
)
from spark_queue.errors import SparkQueueError
from spark_queue.queue import Queue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

#: Seconds a throughput query may run before the run is abandoned.
PHASE_TIMEOUT = 900.0
#: Messages of the untimed warm-up (a write and a drain) that comes before the timed phases.
WARMUP_ROWS = 200
#: Bucket size of the warm-up's input queue: several buckets, so several tasks at once.
WARMUP_BUCKET_SIZE = 25


# -- sink ------------------------------------------------------------------------------


def _write(run: BenchRun, rows: DataFrame, queue: Queue) -> float:
    """Write ``rows`` to ``queue`` with ``df.write``; return the seconds the action took."""
    writer = rows.write.format("bdq").options(**run.options).option("queue", queue.name)
    began = time.perf_counter()
    writer.mode("append").save()
    return time.perf_counter() - began


def warm_up(run: BenchRun, rows: DataFrame, inputs: tuple[Queue, Queue], out: Queue) -> WarmUp:
    """Use the batch sink, the source and the streaming sink once, untimed, on a few messages.

    The drain goes through the streaming sink with a writer id, like the pipeline
    phase: a warm-up into the noop sink left the pipeline paying the streaming
    writer's first use (about 2 s). It reads two queues, because the source groups
    one queue's buckets into partitions of thousands of messages and never two
    queues' buckets: two tasks at once, so both Python workers start here.
    """
    run.progress(f"warm-up: writing and moving {2 * WARMUP_ROWS} messages")
    few = rows.limit(WARMUP_ROWS).repartition(run.params.partitions)
    write = sum(_write(run, few, queue) for queue in inputs)
    expected = 2 * min(WARMUP_ROWS, run.params.messages)
    names = ",".join(queue.name for queue in inputs)
    frame = read_stream(run, inputs[0], names=names).select("payload", "headers")
    drain = _drain(run, "warmup", frame, inputs[0], expected=expected, output=out)
    return WarmUp(write_seconds=write, drain_seconds=drain.seconds)


def sink_phase(run: BenchRun, rows: DataFrame, queue: Queue) -> WritePhase:
    """Time writing ``rows`` to ``queue`` with ``df.write``, then count what it holds."""
    m = run.params.messages
    run.progress(f"sink: writing {m} rows with df.write.format('bdq')")
    seconds = _write(run, rows, queue)
    run.progress("sink: counting the queue")
    return WritePhase(seconds=seconds, rate=m / seconds, stored=queue_total(queue))


# -- source and pipeline -------------------------------------------------------------


def _await(
    query: StreamingQuery, batches: Batches, timeout: float, report: Callable[[], None]
) -> None:
    """Wait for ``query`` to end by itself, tallying its batches; stop it after ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        while not ended(query, POLL_INTERVAL):
            batches.update(query)
            report()
            if time.monotonic() > deadline:
                raise SparkQueueError(
                    f"query {query.name or query.id}: still running after {timeout:g} s;"
                    " is Cassandra overloaded? Run with fewer --messages"
                )
    finally:
        if query.isActive:
            query.stop()
    batches.update(query)


def _drain(
    run: BenchRun,
    name: str,
    frame: DataFrame,
    queue: Queue | None,
    *,
    expected: int,
    output: Queue | None = None,
) -> StreamPhase:
    """Run ``frame`` until ``queue`` is drained, into ``output`` or the noop sink; time it.

    Without ``queue`` (the source floor), what is left is what the query did not read
    of the ``expected`` rows.
    """
    batches = Batches()
    writer = frame.writeStream.queryName(f"bench_{name}_{run.run_id}").option(
        "checkpointLocation", run.checkpoint(name)
    )
    if output is None:
        writer = writer.format("noop")
    else:
        writer = (
            writer.format("bdq")
            .options(**run.options)
            .option("queue", output.name)
            .option("writerId", f"bench-{run.run_id}-{name}")
        )
    began = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    _await(
        query,
        batches,
        PHASE_TIMEOUT,
        lambda: run.progress(f"{name}: {batches.total_rows}/{expected} messages"),
    )
    seconds = time.perf_counter() - began
    if queue is not None:
        run.progress(f"{name}: counting the queues")
    durations = batches.summed_durations()
    return StreamPhase(
        seconds=seconds,
        rate=batches.total_rows / seconds,
        batch_seconds=durations.get("triggerExecution", 0) / 1000,
        rows=batches.total_rows,
        batches=batches.with_rows,
        empty_batches=len(batches.rows) - batches.with_rows,
        duration_ms=durations,
        left=queue_total(queue) if queue is not None else max(expected - batches.total_rows, 0),
    )


def source_phase(run: BenchRun, queue: Queue) -> StreamPhase:
    """Time draining ``queue`` into the noop sink with one ``availableNow`` query."""
    run.progress("source: draining the queue into the noop sink")
    frame = read_stream(run, queue, maxMessagesPerTrigger=str(run.params.max_per_trigger))
    return _drain(run, "source", frame, queue, expected=run.params.messages)


def source_floor_phase(run: BenchRun) -> StreamPhase:
    """Time draining M rows of a Python source with no queue behind it (``source_floor.py``)."""
    params = run.params
    run.progress(f"source floor: draining {params.messages} rows of a Python source, no queue")
    run.spark.dataSource.register(source_floor_format())
    frame = (
        run.spark.readStream.format(SOURCE_FLOOR_FORMAT)
        .option("rows", str(params.messages))
        .option("perTrigger", str(params.max_per_trigger))
        .option("payloadBytes", str(params.payload_bytes))
        .load()
    )
    return _drain(run, "source_floor", frame, None, expected=params.messages)


def pipeline_phase(run: BenchRun, rows: DataFrame, into: Queue, out: Queue) -> StreamPhase:
    """Fill ``into`` with ``rows``, then time moving it to ``out`` with a ``writerId``."""
    m = run.params.messages
    run.progress(f"pipeline: filling its input queue with {m} messages")
    _write(run, rows, into)
    run.progress("pipeline: moving the queue to another one")
    frame = read_stream(run, into, maxMessagesPerTrigger=str(run.params.max_per_trigger))
    phase = _drain(
        run, "pipeline", frame.select("payload", "headers"), into, expected=m, output=out
    )
    return replace(phase, delivered=queue_total(out))
