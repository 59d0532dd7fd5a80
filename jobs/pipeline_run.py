"""Running the orders pipeline's query: its queues, checkpoint, writer identity and summary.

``run_pipeline`` creates the queues that are missing, starts the query of
``order_routing.route_orders`` from ``format("bdq")`` to ``format("bdq")``,
adds up each micro-batch's progress and stops it between batches;
``build_session`` makes the SparkSession of a job run with ``python``.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

import spark_queue
from jobs.order_routing import METRICS, route_orders
from jobs.settings import REPO_ROOT, JobConfig, read_spark_defaults
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting
from spark_queue.spark import register
from spark_queue.spark.options import connector_options, parse_duration

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

#: File in the checkpoint folder that keeps the sink's writer identity.
WRITER_ID_FILE = "bdq-writer-id"
#: Seconds between two looks at the query's progress.
POLL_SECONDS = 1
#: Most seconds a stop waits for the running micro-batch to finish.
STOP_GRACE = 60.0
_WRITER_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")

Echo = Callable[[str], None]


@dataclass
class PipelineSummary:
    """What one run of the pipeline did, from the query's progress.

    Attributes:
        mode: ``availableNow`` or ``continuous``.
        messages_in: Order messages read from the input queue.
        shipped: Valid orders sent to the shipments queue.
        rejected: Messages sent to the rejected queue.
        batches: Micro-batches that read at least one message.
        elapsed: Seconds from the query's start to its end.
        busy: Seconds spent running micro-batches (Spark's triggerExecution).
        queue_depths: Messages left in each queue at the end (visible + in flight + delayed).
    """

    mode: str
    messages_in: int = 0
    shipped: int = 0
    rejected: int = 0
    batches: int = 0
    elapsed: float = 0.0
    busy: float = 0.0
    queue_depths: dict[str, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Messages in per second over the whole run."""
        return self.messages_in / self.elapsed if self.elapsed > 0 else 0.0

    def render(self) -> str:
        """The summary printed at the end of a run."""
        busy_rate = self.messages_in / self.busy if self.busy > 0 else 0.0
        lines = [
            f"pipeline summary ({self.mode}, {self.batches} batch(es) with data)",
            f"  messages in   {self.messages_in:>9}",
            f"  out           {self.shipped:>9}  (shipments)",
            f"  rejected      {self.rejected:>9}",
            f"  elapsed       {self.elapsed:>9.1f} s",
            f"  rate          {self.rate:>9.1f} msgs/s  ({busy_rate:.1f} msgs/s while in batches)",
        ]
        if self.queue_depths:
            depths = ", ".join(f"{name} {n}" for name, n in self.queue_depths.items())
            lines.append(f"  queues now    {depths}")
        return "\n".join(lines)


class _ProgressTally:
    """Adds up the progress of each micro-batch once (Spark keeps only the latest 100)."""

    def __init__(self, summary: PipelineSummary, echo: Echo) -> None:
        self.summary = summary
        self.echo = echo
        self.seen: set[tuple[str, int]] = set()

    def update(self, progress: Iterable[Any]) -> None:
        for p in progress:
            key = (p.runId, p.batchId)
            if key in self.seen:
                continue
            self.seen.add(key)
            self.summary.busy += p.durationMs.get("triggerExecution", 0) / 1000
            if not p.numInputRows:
                continue
            row = p.observedMetrics.get(METRICS)
            shipped = int(row["shipped"]) if row is not None else 0
            rejected = int(row["rejected"]) if row is not None else 0
            self.summary.messages_in += p.numInputRows
            self.summary.shipped += shipped
            self.summary.rejected += rejected
            self.summary.batches += 1
            self.echo(
                f"batch {p.batchId}: {p.numInputRows} in, {shipped} out, {rejected} rejected"
                f" ({p.durationMs.get('triggerExecution', 0)} ms)"
            )


def ensure_queues(settings: ConnectionSettings, config: JobConfig) -> None:
    """Create the pipeline's queues that do not exist yet (existing ones keep their settings)."""
    with QueueClient(settings=settings) as client:
        for spec in config.queues():
            spec.open(client)


def checkpoint_location(config: JobConfig, settings: ConnectionSettings) -> str:
    """``<checkpoint_dir>/<keyspace>/<app_name>``: one checkpoint per keyspace and app."""
    base = config.pipeline.checkpoint_dir
    return str((base / settings.keyspace / config.pipeline.app_name).resolve())


def writer_identity(checkpoint: str, app_name: str) -> str:
    """The sink's ``writerId`` of the query checkpointed at ``checkpoint``.

    Made once per checkpoint and kept in it: a restart reuses it (replays add
    no duplicates), a new checkpoint gets a new one.

    Raises:
        InvalidSetting: The checkpoint is not on the local file system (pass
            ``--writer-id`` then), or the identity file was tampered with.
    """
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", checkpoint)
    if scheme and scheme[1] != "file":
        raise InvalidSetting(
            f"checkpoint {checkpoint!r}: the job keeps its writer identity in a local checkpoint"
            " folder; for a checkpoint on a distributed file system pass --writer-id, a new value"
            " for each new checkpoint"
        )
    folder = Path(checkpoint.removeprefix("file://"))
    file = folder / WRITER_ID_FILE
    if file.exists():
        identity = file.read_text(encoding="utf-8").strip()
        if not _WRITER_ID.fullmatch(identity):
            raise InvalidSetting(
                f"{file}: {identity[:80]!r} is not a writer identity (1-200 letters, digits or"
                " '_.:-'); delete the checkpoint folder to start over"
            )
        return identity
    stem = re.sub(r"[^A-Za-z0-9_.:\-]", "-", app_name)[:100]
    identity = f"{stem}.{uuid.uuid4().hex[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    partial = file.with_suffix(".tmp")
    partial.write_text(identity + "\n", encoding="utf-8")
    partial.replace(file)
    return identity


def start_query(
    spark: SparkSession,
    config: JobConfig,
    settings: ConnectionSettings,
    *,
    checkpoint: str,
    writer_id: str,
    continuous: bool = False,
    trigger_interval: str | None = None,
    max_messages_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the streaming query (the queues must exist)."""
    # Installed, the package is found by Spark itself and this does nothing; it
    # registers format("bdq") only for a package shipped as a --py-files zip.
    register(spark)
    pipeline = config.pipeline
    connection = connector_options(settings)
    orders = (
        spark.readStream.format("bdq")
        .options(**connection)
        .option("queue", config.orders.name)
        .option("visibilityTimeout", pipeline.visibility_timeout)
        .option(
            "maxMessagesPerTrigger",
            str(max_messages_per_trigger or pipeline.max_messages_per_trigger),
        )
        .load()
    )
    routed = route_orders(orders, config.shipments.name, config.rejected.name)
    writer = (
        routed.writeStream.format("bdq")
        .options(**connection)
        .option("writerId", writer_id)
        .option("checkpointLocation", checkpoint)
        .queryName(re.sub(r"\W", "_", pipeline.app_name))
    )
    if continuous:
        interval = trigger_interval or pipeline.trigger_interval
        millis = round(parse_duration("--trigger-interval", interval) * 1000)
        writer = writer.trigger(processingTime=f"{millis} milliseconds")
    else:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def run_pipeline(
    spark: SparkSession,
    config: JobConfig,
    settings: ConnectionSettings,
    *,
    continuous: bool = False,
    trigger_interval: str | None = None,
    run_for: float | None = None,
    checkpoint: str | None = None,
    writer_id: str | None = None,
    max_messages_per_trigger: int | None = None,
    echo: Echo = print,
) -> PipelineSummary:
    """Create missing queues, run the query, and sum up what it did.

    Args:
        spark: The session to run in.
        config: Queues and pipeline settings.
        settings: Where the queues live.
        continuous: Run a micro-batch every ``trigger_interval`` until Ctrl-C
            (or ``run_for``) instead of draining the queue once (``availableNow``).
        trigger_interval: Such as ``'5s'``; default from the config.
        run_for: Stop a continuous run after this many seconds.
        checkpoint: Checkpoint folder; default ``checkpoint_location()``.
        writer_id: The sink's writer identity; default kept in the checkpoint.
        max_messages_per_trigger: Most orders per micro-batch; default from the config.
        echo: Where progress lines go.

    Raises:
        SparkQueueError: A bad setting (named) or an unreachable cluster.
        StreamingQueryException: The query failed.
    """
    if run_for is not None and run_for <= 0:
        raise InvalidSetting(f"--run-for {run_for!r}: must be a positive number of seconds")
    if continuous:
        parse_duration("--trigger-interval", trigger_interval or config.pipeline.trigger_interval)
    checkpoint = checkpoint or checkpoint_location(config, settings)
    writer_id = writer_id or writer_identity(checkpoint, config.pipeline.app_name)
    if not _WRITER_ID.fullmatch(writer_id):
        raise InvalidSetting(f"--writer-id {writer_id!r}: must be 1-200 letters, digits or '_.:-'")
    ensure_queues(settings, config)

    summary = PipelineSummary("continuous" if continuous else "availableNow")
    tally = _ProgressTally(summary, echo)
    started = time.monotonic()
    query = start_query(
        spark,
        config,
        settings,
        checkpoint=checkpoint,
        writer_id=writer_id,
        continuous=continuous,
        trigger_interval=trigger_interval,
        max_messages_per_trigger=max_messages_per_trigger,
    )
    echo(
        f"pipeline: {config.orders.name} -> {config.shipments.name} / {config.rejected.name}"
        f" in keyspace {settings.keyspace} ({summary.mode}); checkpoint {checkpoint}"
    )
    deadline = None if run_for is None else started + run_for
    try:
        while not query.awaitTermination(POLL_SECONDS):
            tally.update(query.recentProgress)
            if deadline is not None and time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        echo("pipeline: interrupted")
    finally:
        _stop_between_batches(query, echo)
        tally.update(query.recentProgress)
        summary.elapsed = time.monotonic() - started
    query.awaitTermination()  # raises the query's failure, if it failed
    summary.queue_depths = queue_depths(settings, config)
    return summary


def _stop_between_batches(query: StreamingQuery, echo: Echo) -> None:
    """Stop the query when no micro-batch is running (waiting at most ``STOP_GRACE`` seconds).

    A batch cut off half-way is not lost (a restart replays it, and the sink's
    writer identity keeps the replay from sending twice), but a restart is then
    needed to finish it. Orders of the last batch are acked by the next
    micro-batch, so after a stop they stay in flight until the pipeline
    restarts from the same checkpoint (or their lease runs out).
    """
    if not query.isActive:
        return
    echo("pipeline: stopping after the running micro-batch (Ctrl-C again to stop now)")
    end = time.monotonic() + STOP_GRACE
    try:
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < end:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    query.stop()


def queue_depths(settings: ConnectionSettings, config: JobConfig) -> dict[str, int]:
    """Messages left in each of the pipeline's queues."""
    with QueueClient(settings=settings) as client:
        return {
            spec.name: client.queue(spec.name).stats(exact=True).total for spec in config.queues()
        }


def build_session(app_name: str, spark_defaults: Mapping[str, str] | None = None) -> SparkSession:
    """The SparkSession of a job.

    Under ``spark-submit`` Spark's own configuration applies. Started with
    ``python``, the session gets the values of ``conf/spark-defaults.conf``,
    workers run this interpreter (unless ``PYSPARK_PYTHON`` says otherwise),
    and a checkout's ``spark_queue`` is put on the workers' ``PYTHONPATH``.
    """
    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.appName(app_name)
        values = read_spark_defaults() if spark_defaults is None else spark_defaults
        for key, value in values.items():
            builder = builder.config(key, value)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if Path(spark_queue.__file__).resolve().is_relative_to(REPO_ROOT):
            path = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            os.environ["PYTHONPATH"] = os.pathsep.join(path)
    return builder.getOrCreate()
