"""The latency phase of ``bdq bench spark``: each message timed from its send to its output.

A query with a processing-time trigger moves one queue to another while this
process sends to the first at a steady light rate, stamping each message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from spark_queue.bench.consistency import percentile
from spark_queue.bench.spark_bench_results import LatencyPhase
from spark_queue.bench.spark_bench_run import (
    POLL_INTERVAL,
    Batches,
    BenchRun,
    ended,
    queue_total,
    read_stream,
)
from spark_queue.bench.spark_floor import median_ms, parts_p50_ms
from spark_queue.queue import Queue

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

#: Header that carries a latency message's send time (Unix seconds).
SENT_AT_HEADER = "bdq-bench-sent-at"
#: Seconds the latency phase waits for the last messages once the producer is done.
DRAIN_TIMEOUT = 30.0
#: Seconds the latency query may take to start before the producer gives up on it.
START_TIMEOUT = 120.0
#: Messages one receive takes when the run reads a queue back.
READ_BACK_BATCH = 1000


def latency_phase(run: BenchRun, into: Queue, out: Queue) -> LatencyPhase:
    """Time messages sent to ``into`` at a steady rate until a query delivered them to ``out``."""
    p = run.params
    run.progress("latency: starting the continuous query")
    frame = read_stream(run, into).select("payload", "headers")
    query = (
        frame.writeStream.queryName(f"bench_latency_{run.run_id}")
        .format("bdq")
        .options(**run.options)
        .option("queue", out.name)
        .option("writerId", f"bench-{run.run_id}-latency")
        .option("checkpointLocation", run.checkpoint("latency"))
        .trigger(processingTime=f"{int(p.trigger_interval * 1000)} milliseconds")
        .start()
    )
    batches = Batches()
    try:
        _wait_until_running(query)
        send_seconds = _produce(run, into, query, batches)
        _wait_for(run, out, query, batches)
    finally:
        query.stop()
    batches.update(query)
    run.progress("latency: reading the output queue back")
    latencies = _latencies_ms(out)
    return LatencyPhase(
        sent=p.latency_messages,
        arrived=len(latencies),
        send_seconds=send_seconds,
        send_rate=p.latency_messages / send_seconds,
        p50_ms=percentile(latencies, 50) if latencies else None,
        p99_ms=percentile(latencies, 99) if latencies else None,
        max_ms=max(latencies) if latencies else None,
        batches=batches.with_rows,
        trigger_p50_ms=median_ms(batches.with_rows_durations(), "triggerExecution"),
        add_batch_p50_ms=median_ms(batches.with_rows_durations(), "addBatch"),
        trigger_parts_p50_ms=parts_p50_ms(batches.with_rows_durations()),
    )


def _wait_until_running(query: StreamingQuery) -> None:
    """Wait until the query has planned its first trigger (its sources are open)."""
    deadline = time.monotonic() + START_TIMEOUT
    while query.lastProgress is None and query.status["message"] == "Initializing sources":
        if time.monotonic() > deadline or ended(query, 0.05):
            break
    if query.exception() is not None:
        query.awaitTermination()  # raises the query's error


def _produce(run: BenchRun, queue: Queue, query: StreamingQuery, batches: Batches) -> float:
    """Send the latency messages at a steady rate, each stamped; return the seconds taken."""
    p = run.params
    payload = b"\0" * p.payload_bytes
    interval = 1 / p.latency_rate
    began = time.perf_counter()
    last_report = began
    for n in range(p.latency_messages):
        wait = began + n * interval - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        queue.send(payload, headers={SENT_AT_HEADER: repr(time.time())})
        if time.perf_counter() - last_report >= POLL_INTERVAL:
            last_report = time.perf_counter()
            if not query.isActive:
                query.awaitTermination()  # raises the query's error
            batches.update(query)
            run.progress(f"latency: sent {n + 1}/{p.latency_messages} at {p.latency_rate:g}/s")
    return time.perf_counter() - began


def _wait_for(run: BenchRun, out: Queue, query: StreamingQuery, batches: Batches) -> None:
    """Wait until ``out`` holds every latency message, or for at most ``DRAIN_TIMEOUT``."""
    expected = run.params.latency_messages
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while (arrived := queue_total(out)) < expected and time.monotonic() < deadline:
        batches.update(query)
        run.progress(f"latency: {arrived}/{expected} messages through the query")
        if ended(query, POLL_INTERVAL):
            query.awaitTermination()  # ended by itself: raises its error if it failed
            return


def _latencies_ms(queue: Queue) -> list[float]:
    """Each message's enqueued_at minus its send stamp, in ms; drains the queue doing so."""
    latencies = []
    while deliveries := queue.receive(READ_BACK_BATCH):
        latencies += [
            (d.enqueued_at.timestamp() - float(d.headers[SENT_AT_HEADER])) * 1000
            for d in deliveries
            if SENT_AT_HEADER in d.headers and d.enqueued_at is not None
        ]
        queue.ack_batch([d.receipt for d in deliveries], strict=False)
    return latencies
