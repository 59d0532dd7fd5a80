"""``bdq bench spark``: what the ``format("bdq")`` connector moves, beside the raw baseline.

One run, on one SparkSession (``local[2]`` by default), measures four things:

1. **Sink rate.** ``M`` rows of ``L``-byte binary payloads, made in the
   executors and cached in Spark beforehand so that making them is not
   timed (the driver never holds them: ``M`` = 500,000 fits), written with
   ``df.write.format("bdq")`` to a fresh queue: messages per second of the
   write action. The queue must then hold ``M`` messages.
2. **Source rate.** That queue drained by ``spark.readStream.format("bdq")``
   into the ``noop`` sink under ``trigger(availableNow=True)``, with
   ``maxMessagesPerTrigger`` sized for throughput: messages per second from
   ``start()`` to the query's end, so every batch is received *and* acked
   through Spark's commits. The queue must then be empty.
3. **Pipeline rate.** ``M`` more messages in a queue A, moved by one
   ``availableNow`` query to a queue B (``payload`` and ``headers`` kept, with a
   ``writerId``, so the move is exactly-once): messages per second; B must then
   hold ``M``.
4. **End-to-end latency** at a light steady load: a query C -> D with a
   processing-time trigger runs while this process sends messages to C at a
   fixed rate, each stamped with its send time in a header. A message's latency
   is D's ``enqueued_at`` (when the query's sink wrote it out) minus that stamp.

Before any of them, an untimed **warm-up** writes a few rows to a scratch queue
and moves them with a streaming query into a second one through the streaming
sink with a ``writerId``, as the pipeline does: a session's first use of the data
source, its stream reader and its stream writer (their lookup, the Python
workers, the streaming runner) costs seconds that a long-running job pays once,
and no rate should carry. Its times are reported.

The **raw baseline** (``baseline.RawInsertBaseline``: payloads of the same size
and format as plain prepared INSERTs on the same node) is measured before and after the Spark
phases; each rate is also given as a ratio to the mean of the two, against the
connector's targets. Every queue, table and checkpoint of the run is removed at the end.

The parameters are in ``spark_bench_params``, the phases in
``spark_bench_throughput`` and ``spark_bench_latency`` (sharing
``spark_bench_run``), and what a run measured in ``spark_bench_results``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.baseline import RawInsertBaseline
from spark_queue.bench.consistency import make_payload
from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.spark_bench_latency import latency_phase
from spark_queue.bench.spark_bench_params import DEFAULT_SPARK_CONF, SparkBenchParams
from spark_queue.bench.spark_bench_results import SparkBenchResult
from spark_queue.bench.spark_bench_run import BenchRun
from spark_queue.bench.spark_bench_throughput import (
    WARMUP_BUCKET_SIZE,
    pipeline_phase,
    sink_phase,
    source_floor_phase,
    source_phase,
    warm_up,
)
from spark_queue.bench.spark_floor import FLOOR_SECONDS, measure_floor
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, InvalidSetting
from spark_queue.ops.package_bytecode import lacking_bytecode
from spark_queue.ops.pyspark_zip import inspect_zip, spark_home, zip_of
from spark_queue.spark.options import connector_options
from spark_queue.store.session import Store

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


def run_spark_bench(
    settings: ConnectionSettings,
    *,
    messages: int = 20_000,
    payload_bytes: int = 2048,
    max_per_trigger: int = 10_000,
    partitions: int = 2,
    latency_messages: int = 1500,
    latency_rate: float = 60.0,
    trigger_interval: float = 0.25,
    visibility_timeout: float = 120.0,
    bucket_size: int = 1000,
    master: str = "local[2]",
    seed: int | None = None,
    baseline: bool = True,
    baseline_concurrency: int = BASELINE_CONCURRENCY,
    spark_conf: Mapping[str, str] | None = None,
    floor_seconds: float = FLOOR_SECONDS,
    source_floor: bool = True,
    spark: SparkSession | None = None,
    progress: Progress | None = None,
) -> SparkBenchResult:
    """Run the Spark benchmark once against ``settings``' cluster and keyspace.

    See ``SparkBenchParams`` for the parameters. Without ``spark`` the run makes
    its own session on ``master`` (UI off, 2 shuffle partitions, log level
    ERROR, Python workers on this interpreter) and stops it at the end; when a
    session is already active in this process, that one is used. Either way
    ``spark_conf`` (over ``DEFAULT_SPARK_CONF``) is set on it for the run.
    ``progress`` receives a short status line now and then.

    Raises:
        InvalidSetting: A parameter breaks its rule (nothing is run).
        SparkQueueError: A query did not finish in time, or Cassandra failed.
    """
    params = SparkBenchParams(
        messages=messages,
        payload_bytes=payload_bytes,
        max_per_trigger=max_per_trigger,
        partitions=partitions,
        latency_messages=latency_messages,
        latency_rate=latency_rate,
        trigger_interval=trigger_interval,
        visibility_timeout=visibility_timeout,
        bucket_size=bucket_size,
        master=master,
        baseline=baseline,
        baseline_concurrency=baseline_concurrency,
        spark_conf=tuple({**DEFAULT_SPARK_CONF, **(spark_conf or {})}.items()),
        floor_seconds=floor_seconds,
        source_floor=source_floor,
        **({} if seed is None else {"seed": seed}),
    )
    report = progress or _quiet
    store = Store(settings)
    try:
        with contextlib.ExitStack() as stack:
            if spark is None:
                report(f"starting Spark ({params.master})")
                spark = stack.enter_context(_spark_session(params.master))
            stack.enter_context(_session_conf(spark, dict(params.spark_conf)))
            return _run(spark, store, params, report)
    finally:
        store.close()


# -- the run ---------------------------------------------------------------------------


#: The heap of the driver (and so of local mode's executors) of the bench's own session.
DRIVER_MEMORY = "2g"
#: Most payload bytes per cached partition of the payload frame.
CACHE_BLOCK_BYTES = 32 * 1024 * 1024
#: Most payload bytes cached in the heap; more are cached on disk.
MEMORY_CACHE_BYTES = 256 * 1024 * 1024


def _quiet(line: str) -> None:
    """Progress sink that drops every line."""


@contextlib.contextmanager
def _spark_session(master: str) -> Iterator[SparkSession]:
    """A session for the run; stopped at the end unless it was already active."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Python workers (the connector's read and write) must import spark_queue: run them
    # on this interpreter. The context reads the variable once, when it starts.
    previous = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    try:
        builder = SparkSession.builder
        if "driver-memory" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
            # The heap the Kafka harness gives both drivers (run_all.sh): the cached
            # payloads, and in local mode the executors' work, live in it.
            builder = builder.config("spark.driver.memory", DRIVER_MEMORY)
        session = (
            builder.master(master)
            .appName("bdq-bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")  # the run reports its own progress
            .getOrCreate()
        )
    finally:
        if previous is None:
            del os.environ["PYSPARK_PYTHON"]
        else:
            os.environ["PYSPARK_PYTHON"] = previous
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@contextlib.contextmanager
def _session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set ``conf`` on the session for the run, then put back what was there."""
    from pyspark.errors import PySparkException

    previous: dict[str, str | None] = {}  # the settings changed so far, as they were
    try:
        for key, value in conf.items():
            before = spark.conf.get(key, None)
            try:
                spark.conf.set(key, value)
            except PySparkException as e:
                raise InvalidSetting(
                    f"spark conf {key}={value!r}: Spark refused it at run time ({e}); only"
                    " settings a running session may change (spark.sql.*) can be given"
                ) from e
            previous[key] = before
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


def _run(
    spark: SparkSession, store: Store, params: SparkBenchParams, progress: Progress
) -> SparkBenchResult:
    rng = random.Random(params.seed)
    run_id = uuid.uuid4().hex[:10]
    client = QueueClient(store=store)
    queues: list[str] = []
    with contextlib.ExitStack() as stack:
        checkpoints = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bdq-bench-")))
        stack.callback(_delete_queues, client, queues, progress)
        run = BenchRun(
            spark, client, params, connector_options(store.settings), run_id, checkpoints, progress
        )
        baseline = None
        if params.baseline:
            progress("raw baseline: making payloads and creating its table")
            size = params.payload_bytes
            payloads = [make_payload(n, 0, size, rng) for n in range(params.messages)]
            baseline = stack.enter_context(
                RawInsertBaseline(
                    store,
                    f"bench_raw_{run_id}",
                    payloads,
                    partition_rows=params.bucket_size,
                    concurrency=params.baseline_concurrency,
                )
            )
            progress(f"raw baseline: {params.messages} inserts")
            baseline.measure()
        cached = _payload_frame(run)
        # The phases write as many tasks at once as --partitions says.
        rows = cached.coalesce(params.partitions)
        try:
            # Small buckets: the warm-up's stream runs several tasks at once, so every
            # Python worker the timed phases use is started (each pays ~3 s of imports).
            scratch = run.create_queue("warmup", bucket_size=WARMUP_BUCKET_SIZE)
            twin = run.create_queue("warmup-b", bucket_size=WARMUP_BUCKET_SIZE)
            scratch_out = run.create_queue("warmup-out")
            queues += [scratch.name, twin.name, scratch_out.name]
            warmup = warm_up(run, rows, (scratch, twin), scratch_out)
            sink_queue = run.create_queue("sink")
            queues.append(sink_queue.name)
            sink = sink_phase(run, rows, sink_queue)
            source = source_phase(run, sink_queue)
            source_floor = source_floor_phase(run) if params.source_floor else None
            into, out = run.create_queue("pipeline-in"), run.create_queue("pipeline-out")
            queues += [into.name, out.name]
            pipeline = pipeline_phase(run, rows, into, out)
        finally:
            cached.unpersist()
        sent, received = run.create_queue("latency-in"), run.create_queue("latency-out")
        queues += [sent.name, received.name]
        latency = latency_phase(run, sent, received)
        floor = None
        if params.floor_seconds:
            progress("floor: a no-op Python source into a no-op Python sink")
            floor = measure_floor(
                spark,
                trigger_interval=params.trigger_interval,
                checkpoint=run.checkpoint("floor"),
                rows=max(1, round(params.latency_rate * max(params.trigger_interval, 0.25))),
                payload_bytes=params.payload_bytes,
                seconds=params.floor_seconds,
            )
        if baseline is not None:
            progress(f"raw baseline again: {params.messages} inserts")
            baseline.measure()
            progress("raw baseline: dropping its table")
    rates = baseline.rates if baseline is not None else []
    return SparkBenchResult(
        params=params,
        spark_version=spark.version,
        warmup=warmup,
        sink=sink,
        source=source,
        pipeline=pipeline,
        latency=latency,
        floor=floor,
        source_floor=source_floor,
        baseline_rate=sum(rates) / len(rates) if rates else None,
        baseline_rates=list(rates),
        pyspark_zip_bytecode=_pyspark_zip_bytecode(),
        package_lacking_bytecode=len(lacking_bytecode()),
    )


def _pyspark_zip_bytecode() -> bool | None:
    """Whether the pyspark.zip this driver's Spark starts Python from holds bytecode."""
    try:
        return inspect_zip(zip_of(spark_home())).complete
    except InvalidSetting:
        return None


def _delete_queues(client: QueueClient, names: Sequence[str], progress: Progress) -> None:
    for name in names:
        try:
            client.delete_queue(name, missing_ok=True)
        except BackendUnavailable:
            progress(f"could not delete benchmark queue {name!r}; delete it by hand")


def _payload_frame(run: BenchRun) -> DataFrame:
    """The payloads as a cached one-column DataFrame, materialised before any timing.

    Made in the executors (``spark.range`` then ``mapInArrow``), never shipped
    from the driver: ``createDataFrame`` of 100,000 payloads of 2 KiB ran the
    driver's default 1 GiB heap out of memory. They follow ``make_payload``'s
    format with filler seeded per partition (the run's seed and the partition).
    """
    from pyspark import StorageLevel

    params = run.params
    run.progress(f"making and caching {params.messages} payloads in Spark")
    # Cached in blocks of at most CACHE_BLOCK_BYTES: a block is built whole in the heap,
    # and two of 250,000 payloads each (M = 500,000 in 2 partitions) ran it out of memory.
    # Past MEMORY_CACHE_BYTES on disk only: the blocks kept in the heap took the room the
    # next one was built in.
    total = params.messages * params.payload_bytes
    blocks = math.ceil(total / CACHE_BLOCK_BYTES)
    level = StorageLevel.MEMORY_AND_DISK if total <= MEMORY_CACHE_BYTES else StorageLevel.DISK_ONLY
    frame = (
        run.spark.range(0, params.messages, numPartitions=max(params.partitions, blocks))
        .mapInArrow(
            functools.partial(payload_batches, size=params.payload_bytes, seed=params.seed),
            "payload binary",
        )
        .persist(level)
    )
    frame.count()
    return frame


def payload_batches(
    batches: Iterator[pa.RecordBatch], *, size: int, seed: int
) -> Iterator[pa.RecordBatch]:
    """``make_payload`` rows for the ids of ``spark.range`` batches (runs in a Python worker)."""
    import pyarrow as pa

    rng: random.Random | None = None
    for batch in batches:
        ids = batch.column(0).to_pylist()
        if rng is None:  # one stream per partition, from its first id
            rng = random.Random(seed * 1_000_003 + (ids[0] if ids else 0))
        payloads = [make_payload(i, 0, size, rng) for i in ids]
        yield pa.RecordBatch.from_arrays([pa.array(payloads, pa.binary())], ["payload"])
