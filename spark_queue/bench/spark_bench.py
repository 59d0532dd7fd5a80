"""``bdq bench spark``: what the ``format("bdq")`` connector moves, beside the raw baseline.

One run, on one SparkSession (``local[2]`` by default), measures four things:

1. **Sink rate.** ``M`` rows of ``L``-byte binary payloads, cached in Spark
   beforehand so that making them is not timed, written with
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

The **raw baseline** (``baseline.RawInsertBaseline``: the same payloads as plain
prepared INSERTs on the same node) is measured before and after the Spark
phases; each rate is also given as a ratio to the mean of the two, against the
targets below. Every queue, table and checkpoint of the run is removed at the end.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.baseline import RawInsertBaseline
from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES, make_payload, percentile
from spark_queue.bench.queue_bench import Progress
from spark_queue.bench.spark_floor import FLOOR_SECONDS, FloorPhase, measure_floor, median_ms
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_int, check_seconds
from spark_queue.errors import BackendUnavailable, InvalidSetting, SparkQueueError
from spark_queue.queue import Queue
from spark_queue.spark.options import connector_options
from spark_queue.store.session import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

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

#: Header that carries a latency message's send time (Unix seconds).
SENT_AT_HEADER = "bdq-bench-sent-at"
#: Seconds a throughput query may run before the run is abandoned.
PHASE_TIMEOUT = 900.0
#: Seconds the latency phase waits for the last messages once the producer is done.
DRAIN_TIMEOUT = 30.0
#: Seconds the latency query may take to start before the producer gives up on it.
START_TIMEOUT = 120.0
#: Seconds between two looks at a running query (progress lines, batch tally).
POLL_INTERVAL = 0.5
#: Messages one receive takes when the run reads a queue back.
READ_BACK_BATCH = 1000
#: Messages of the untimed warm-up (a write and a drain) that comes before the timed phases.
WARMUP_ROWS = 200
#: Bucket size of the warm-up's input queue: several buckets, so several tasks at once.
WARMUP_BUCKET_SIZE = 25
#: Spark's setting that picks how checkpoint logs are written.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
#: Writes a checkpoint file with ``FileSystem.rename``: atomic on local disks and HDFS.
FILESYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
#: Session settings of every run, which ``spark_conf`` adds to or overrides. Each
#: micro-batch writes two checkpoint files (offsets before it, commits after), and
#: Spark's default FileContext-based manager took 80-190 ms per file on this project's
#: 2-core machine against 17-55 ms for the FileSystem-based one, most of a
#: low-latency trigger and none of it the queue's work. The run's checkpoints are
#: on local disk, where that manager is safe; README, "Latency".
DEFAULT_SPARK_CONF = {CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINTS}


@dataclass(frozen=True, kw_only=True)
class SparkBenchParams:
    """One run's parameters.

    Attributes:
        messages: Messages of the sink, source and pipeline phases [M].
        payload_bytes: Size of each payload [L].
        max_per_trigger: ``maxMessagesPerTrigger`` of the source and pipeline queries.
        partitions: Partitions of the sink phase's DataFrame (tasks that write at once).
        latency_messages: Messages sent during the latency phase.
        latency_rate: Messages per second sent during the latency phase.
        trigger_interval: Processing-time trigger of the latency query, in seconds
            (0: a batch starts as soon as the last one ended and a message is visible;
            an idle source answers Spark's polls from memory for 0.1 s).
        visibility_timeout: Lease of a micro-batch's messages, in seconds.
        bucket_size: Ids per bucket of the run's queues.
        master: Spark master of the session the run creates.
        seed: Seed of the random payloads (chosen at random when not given).
        baseline: Measure the raw insert baseline too.
        baseline_concurrency: In-flight requests of the raw baseline.
        spark_conf: SQL settings set on the session for the run (and restored after),
            ``DEFAULT_SPARK_CONF`` unless overridden.
        floor_seconds: Seconds the floor (a no-op Python stream, ``spark_floor``) is
            timed after the latency phase; 0 skips it.
    """

    messages: int = 20_000
    payload_bytes: int = 2048
    max_per_trigger: int = 10_000
    partitions: int = 2
    latency_messages: int = 1500
    latency_rate: float = 60.0
    trigger_interval: float = 0.25
    visibility_timeout: float = 120.0
    bucket_size: int = 1000
    master: str = "local[2]"
    seed: int = field(default_factory=lambda: random.randrange(2**32))
    baseline: bool = True
    baseline_concurrency: int = BASELINE_CONCURRENCY
    spark_conf: tuple[tuple[str, str], ...] = tuple(DEFAULT_SPARK_CONF.items())
    floor_seconds: float = FLOOR_SECONDS

    def __post_init__(self) -> None:
        check_int("messages", self.messages, 1, 10_000_000)
        check_int("payload_bytes", self.payload_bytes, MIN_PAYLOAD_BYTES, 16 * 1024 * 1024)
        check_int("max_per_trigger", self.max_per_trigger, 1, 10_000_000)
        check_int("partitions", self.partitions, 1, 10_000)
        check_int("latency_messages", self.latency_messages, 1, 1_000_000)
        check_seconds("latency_rate", self.latency_rate)
        check_seconds("trigger_interval", self.trigger_interval, allow_zero=True)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("floor_seconds", self.floor_seconds, allow_zero=True)
        check_int("bucket_size", self.bucket_size, 1, 100_000)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("baseline_concurrency", self.baseline_concurrency, 1, 4096)
        if not self.master.strip():
            raise InvalidSetting("master '': name a Spark master, such as 'local[2]'")
        for key, value in self.spark_conf:
            if not (isinstance(key, str) and key.startswith("spark.") and isinstance(value, str)):
                raise InvalidSetting(
                    f"spark conf {key!r}={value!r}: must be a 'spark.' key with a string value"
                )

    @property
    def latency_seconds(self) -> float:
        """How long the latency phase's producer sends."""
        return self.latency_messages / self.latency_rate


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
        baseline_rate: Raw prepared inserts per second (mean of the measures before
            and after the Spark phases), or None when not measured.
        baseline_rates: Each measure of the raw baseline, in the order taken.
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
        session = (
            SparkSession.builder.master(master)
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


@dataclass(frozen=True)
class _Run:
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


def _run(
    spark: SparkSession, store: Store, params: SparkBenchParams, progress: Progress
) -> SparkBenchResult:
    progress("making payloads")
    rng = random.Random(params.seed)
    payloads = [make_payload(seq, 0, params.payload_bytes, rng) for seq in range(params.messages)]
    run_id = uuid.uuid4().hex[:10]
    client = QueueClient(store=store)
    queues: list[str] = []
    with contextlib.ExitStack() as stack:
        checkpoints = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bdq-bench-")))
        stack.callback(_delete_queues, client, queues, progress)
        run = _Run(
            spark, client, params, connector_options(store.settings), run_id, checkpoints, progress
        )
        baseline = None
        if params.baseline:
            progress("raw baseline: creating its table")
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
        rows = _payload_frame(run, payloads)
        try:
            # Small buckets: the warm-up's stream runs several tasks at once, so every
            # Python worker the timed phases use is started (each pays ~3 s of imports).
            scratch = run.create_queue("warmup", bucket_size=WARMUP_BUCKET_SIZE)
            twin = run.create_queue("warmup-b", bucket_size=WARMUP_BUCKET_SIZE)
            scratch_out = run.create_queue("warmup-out")
            queues += [scratch.name, twin.name, scratch_out.name]
            warmup = _warm_up(run, rows, (scratch, twin), scratch_out)
            sink_queue = run.create_queue("sink")
            queues.append(sink_queue.name)
            sink = _sink_phase(run, rows, sink_queue)
            source = _source_phase(run, sink_queue)
            into, out = run.create_queue("pipeline-in"), run.create_queue("pipeline-out")
            queues += [into.name, out.name]
            pipeline = _pipeline_phase(run, rows, into, out)
        finally:
            rows.unpersist()
        sent, received = run.create_queue("latency-in"), run.create_queue("latency-out")
        queues += [sent.name, received.name]
        latency = _latency_phase(run, sent, received)
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
        baseline_rate=sum(rates) / len(rates) if rates else None,
        baseline_rates=list(rates),
    )


def _delete_queues(client: QueueClient, names: Sequence[str], progress: Progress) -> None:
    for name in names:
        try:
            client.delete_queue(name, missing_ok=True)
        except BackendUnavailable:
            progress(f"could not delete benchmark queue {name!r}; delete it by hand")


def _payload_frame(run: _Run, payloads: Sequence[bytes]) -> DataFrame:
    """The payloads as a cached one-column DataFrame, materialised before any timing."""
    run.progress(f"caching {len(payloads)} payloads in Spark")
    frame = (
        run.spark.createDataFrame([(p,) for p in payloads], "payload binary")
        .repartition(run.params.partitions)
        .cache()
    )
    frame.count()
    return frame


def _total(queue: Queue) -> int:
    return queue.stats(exact=True).total  # a benchmark checks counts: scan every bucket


# -- sink ------------------------------------------------------------------------------


def _write(run: _Run, rows: DataFrame, queue: Queue) -> float:
    """Write ``rows`` to ``queue`` with ``df.write``; return the seconds the action took."""
    writer = rows.write.format("bdq").options(**run.options).option("queue", queue.name)
    began = time.perf_counter()
    writer.mode("append").save()
    return time.perf_counter() - began


def _warm_up(run: _Run, rows: DataFrame, inputs: tuple[Queue, Queue], out: Queue) -> WarmUp:
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
    frame = _read_stream(run, inputs[0], names=names).select("payload", "headers")
    drain = _drain(run, "warmup", frame, inputs[0], expected=expected, output=out)
    return WarmUp(write_seconds=write, drain_seconds=drain.seconds)


def _sink_phase(run: _Run, rows: DataFrame, queue: Queue) -> WritePhase:
    m = run.params.messages
    run.progress(f"sink: writing {m} rows with df.write.format('bdq')")
    seconds = _write(run, rows, queue)
    run.progress("sink: counting the queue")
    return WritePhase(seconds=seconds, rate=m / seconds, stored=_total(queue))


# -- source and pipeline -------------------------------------------------------------


class _Batches:
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


def _ended(query: StreamingQuery, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``query`` to end; whether it has (raises its error if any)."""
    # pyspark takes fractions of a second (it waits int(timeout * 1000) ms) but types an int.
    return bool(query.awaitTermination(seconds))  # type: ignore[arg-type]


def _await(
    query: StreamingQuery, batches: _Batches, timeout: float, report: Callable[[], None]
) -> None:
    """Wait for ``query`` to end by itself, tallying its batches; stop it after ``timeout``."""
    deadline = time.monotonic() + timeout
    try:
        while not _ended(query, POLL_INTERVAL):
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
    run: _Run,
    name: str,
    frame: DataFrame,
    queue: Queue,
    *,
    expected: int,
    output: Queue | None = None,
) -> StreamPhase:
    """Run ``frame`` until ``queue`` is drained, into ``output`` or the noop sink; time it."""
    batches = _Batches()
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
        left=_total(queue),
    )


def _read_stream(run: _Run, queue: Queue, names: str | None = None, **extra: str) -> DataFrame:
    """A ``bdq`` stream of ``queue`` (or of the comma list ``names``)."""
    return (
        run.spark.readStream.format("bdq")
        .options(**run.options)
        .option("queue", names or queue.name)
        .option("visibilityTimeout", f"{run.params.visibility_timeout:g}s")
        .options(**extra)
        .load()
    )


def _source_phase(run: _Run, queue: Queue) -> StreamPhase:
    run.progress("source: draining the queue into the noop sink")
    frame = _read_stream(run, queue, maxMessagesPerTrigger=str(run.params.max_per_trigger))
    return _drain(run, "source", frame, queue, expected=run.params.messages)


def _pipeline_phase(run: _Run, rows: DataFrame, into: Queue, out: Queue) -> StreamPhase:
    m = run.params.messages
    run.progress(f"pipeline: filling its input queue with {m} messages")
    _write(run, rows, into)
    run.progress("pipeline: moving the queue to another one")
    frame = _read_stream(run, into, maxMessagesPerTrigger=str(run.params.max_per_trigger))
    phase = _drain(
        run, "pipeline", frame.select("payload", "headers"), into, expected=m, output=out
    )
    return replace(phase, delivered=_total(out))


# -- latency ---------------------------------------------------------------------------


def _latency_phase(run: _Run, into: Queue, out: Queue) -> LatencyPhase:
    p = run.params
    run.progress("latency: starting the continuous query")
    frame = _read_stream(run, into).select("payload", "headers")
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
    batches = _Batches()
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
    )


def _wait_until_running(query: StreamingQuery) -> None:
    """Wait until the query has planned its first trigger (its sources are open)."""
    deadline = time.monotonic() + START_TIMEOUT
    while query.lastProgress is None and query.status["message"] == "Initializing sources":
        if time.monotonic() > deadline or _ended(query, 0.05):
            break
    if query.exception() is not None:
        query.awaitTermination()  # raises the query's error


def _produce(run: _Run, queue: Queue, query: StreamingQuery, batches: _Batches) -> float:
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


def _wait_for(run: _Run, out: Queue, query: StreamingQuery, batches: _Batches) -> None:
    """Wait until ``out`` holds every latency message, or for at most ``DRAIN_TIMEOUT``."""
    expected = run.params.latency_messages
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while (arrived := _total(out)) < expected and time.monotonic() < deadline:
        batches.update(query)
        run.progress(f"latency: {arrived}/{expected} messages through the query")
        if _ended(query, POLL_INTERVAL):
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
