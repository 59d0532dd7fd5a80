"""The orders pipeline: ``orders`` -> validate, enrich -> ``shipments`` / ``orders-rejected``.

One Structured Streaming query, ``format("bdq")`` in and out::

    python jobs/pipeline.py                    # drain what is in 'orders' (availableNow), then stop
    python jobs/pipeline.py --continuous       # a micro-batch every --trigger-interval until Ctrl-C
    spark-submit --properties-file conf/spark-defaults.conf jobs/pipeline.py

Each order (a JSON object, see ``jobs/orders.py``) is parsed with ``from_json``
and checked with Spark SQL expressions (no Python UDF: between the bdq source
and sink, rows stay in the JVM). A valid order goes to ``shipments`` as JSON with ``item_count``,
``line_count``, ``total``, ``processed_at`` and ``source_id`` added; any other
message goes, unchanged, to ``orders-rejected`` with the broken rule in its
``reject-reason`` header. The sink's per-row ``queue`` column does the routing.

Exactly once: the source replays a batch with the messages it first leased,
and the sink gets a ``writerId`` kept in the checkpoint folder, so a batch
replayed after a crash sends nothing twice. A new checkpoint gets a new writer
identity (a reused one would make the sink skip the new query's first batches).

Run with ``python``, the job builds its own local SparkSession from
``conf/spark-defaults.conf`` and runs workers on this interpreter; under
``spark-submit``, Spark's own configuration applies.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):
    # Run as a script: make `jobs` (and a checkout's spark_queue) importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

import spark_queue
from jobs import orders as rules
from jobs.settings import (
    REPO_ROOT,
    JobConfig,
    add_connection_flags,
    connection_settings,
    load_config,
    read_spark_defaults,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.spark import register
from spark_queue.spark.options import connector_options, parse_duration

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

#: File in the checkpoint folder that keeps the sink's writer identity.
WRITER_ID_FILE = "bdq-writer-id"
#: Name of the observed metrics that count orders per batch.
METRICS = "orders"
#: Seconds between two looks at the query's progress.
POLL_SECONDS = 1
#: Most seconds a stop waits for the running micro-batch to finish.
STOP_GRACE = 60.0
_CORRUPT = "_corrupt_record"
_WRITER_ID = re.compile(r"[A-Za-z0-9_.:\-]{1,200}")

Echo = Callable[[str], None]


def order_schema() -> StructType:
    """The JSON shape ``from_json`` parses orders with (plus the corrupt-record column)."""
    item = StructType(
        [
            StructField("sku", StringType()),
            StructField("qty", IntegerType()),
            StructField("price", DoubleType()),
        ]
    )
    return StructType(
        [
            StructField("order_id", StringType()),
            StructField("customer", StringType()),
            StructField("created_at", StringType()),
            StructField("items", ArrayType(item)),
            StructField(_CORRUPT, StringType()),
        ]
    )


def _blank(column: Column) -> Column:
    return F.coalesce(F.trim(column), F.lit("")) == ""


def _outside(value: Column, low: float, high: float) -> Column:
    """True when ``value`` is null or not in ``[low, high]`` (NaN sorts above every number)."""
    return ~F.coalesce(value.between(low, high), F.lit(False))


def reject_reason(text: Column, order: Column) -> Column:
    """The first rule of ``jobs/orders.py`` the order breaks, or null for a valid order."""
    items = order["items"]
    return (
        # json_object_keys is null for invalid JSON and for JSON that is not an object.
        F.when(F.json_object_keys(text).isNull(), rules.REASON_NOT_JSON)
        .when(order[_CORRUPT].isNotNull(), rules.REASON_WRONG_TYPE)
        .when(_blank(order["order_id"]), rules.REASON_NO_ORDER_ID)
        .when(_blank(order["customer"]), rules.REASON_NO_CUSTOMER)
        .when(items.isNull() | (F.size(items) == 0), rules.REASON_NO_ITEMS)
        .when(F.exists(items, lambda i: i.isNull() | _blank(i["sku"])), rules.REASON_NO_SKU)
        .when(F.exists(items, lambda i: _outside(i["qty"], 1, rules.MAX_QTY)), rules.REASON_BAD_QTY)
        .when(
            F.exists(items, lambda i: _outside(i["price"], 0, rules.MAX_PRICE)),
            rules.REASON_BAD_PRICE,
        )
    )


def shipment_json(order: Column, source_id: Column) -> Column:
    """A valid order as the JSON of a shipment: the order plus the fields of ``ENRICHED_FIELDS``."""
    items = order["items"]
    money = "decimal(18,2)"
    total = F.aggregate(
        items,
        F.lit(0).cast(money),
        lambda acc, i: (acc + i["qty"] * i["price"].cast("decimal(12,2)")).cast(money),
    )
    return F.to_json(
        F.struct(
            order["order_id"].alias("order_id"),
            order["customer"].alias("customer"),
            order["created_at"].alias("created_at"),
            items.alias("items"),
            F.aggregate(items, F.lit(0), lambda acc, i: acc + i["qty"]).alias("item_count"),
            F.size(items).alias("line_count"),
            total.alias("total"),
            # The micro-batch's timestamp: a replayed batch produces the same payloads.
            F.current_timestamp().alias("processed_at"),
            source_id.alias("source_id"),
        )
    )


def route_orders(orders: DataFrame, shipments: str, rejected: str) -> DataFrame:
    """Order messages (the bdq source's schema) as rows for the bdq sink.

    Returns:
        Columns ``payload`` (binary), ``queue`` and ``headers``: the enriched
        order to ``shipments``, or the original payload to ``rejected`` with
        ``reject-reason``. Observed metrics named ``orders`` count ``in``,
        ``shipped`` and ``rejected`` per micro-batch.
    """
    text = F.col("payload").cast("string")
    parsed = F.from_json(
        text, order_schema(), {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    )
    checked = orders.select("id", "payload", text.alias("text"), parsed.alias("order")).select(
        "*", reject_reason(F.col("text"), F.col("order")).alias("reason")
    )
    valid = F.col("reason").isNull()
    counted = checked.observe(
        METRICS,
        F.count(F.lit(1)).alias("in"),
        F.count_if(valid).alias("shipped"),
        F.count_if(~valid).alias("rejected"),
    )
    source_id = F.col("id").cast("string")
    return counted.select(
        F.when(valid, shipment_json(F.col("order"), F.col("id")).cast("binary"))
        .otherwise(F.col("payload"))
        .alias("payload"),
        F.when(valid, F.lit(shipments)).otherwise(F.lit(rejected)).alias("queue"),
        F.when(
            valid,
            F.create_map(
                F.lit(rules.HEADER_ORDER_ID),
                F.col("order.order_id"),
                F.lit(rules.HEADER_SOURCE_ID),
                source_id,
            ),
        )
        .otherwise(
            F.create_map(
                F.lit(rules.HEADER_REASON),
                F.col("reason"),
                F.lit(rules.HEADER_SOURCE_ID),
                source_id,
            )
        )
        .alias("headers"),
    )


# -- running it --------------------------------------------------------------------------


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
            client.create_queue(
                spec.name,
                bucket_size=spec.bucket_size,
                visibility_timeout=spec.visibility_timeout,
                exist_ok=True,
            )


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


# -- command line --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The job's command line."""
    parser = argparse.ArgumentParser(
        prog="pipeline.py",
        description=(
            "Read JSON orders from the 'orders' queue, validate and enrich them, and send valid"
            " ones to 'shipments' and malformed ones to 'orders-rejected' (reason in the"
            " 'reject-reason' header). Drains the queue and stops (availableNow) unless"
            " --continuous is given."
        ),
        epilog=(
            "Queue names, leases and the checkpoint folder come from --config. Run with python,"
            " the job starts a local Spark from conf/spark-defaults.conf; under spark-submit,"
            " pass --properties-file or --master as usual."
        ),
    )
    mode = parser.add_argument_group("mode")
    mode.add_argument(
        "--continuous",
        action="store_true",
        help="keep running, one micro-batch per --trigger-interval, until Ctrl-C or --run-for",
    )
    mode.add_argument(
        "--trigger-interval",
        metavar="DURATION",
        help="micro-batch interval of --continuous, such as 5s or 500ms (default: from config)",
    )
    mode.add_argument(
        "--run-for",
        type=float,
        metavar="SECONDS",
        help="stop a --continuous run after this many seconds",
    )
    mode.add_argument(
        "--max-messages-per-trigger",
        type=int,
        metavar="N",
        help="most orders per micro-batch (default: from config)",
    )
    mode.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="checkpoint folder (default: <checkpoint_dir>/<keyspace>/<app_name> from config)",
    )
    mode.add_argument(
        "--writer-id",
        metavar="ID",
        help="the sink's writer identity (default: made once and kept in the checkpoint)",
    )
    add_connection_flags(parser)
    return parser


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline from the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.trigger_interval is not None and not args.continuous:
        parser.error("--trigger-interval applies to --continuous runs only")
    if args.run_for is not None and not args.continuous:
        parser.error("--run-for applies to --continuous runs only")
    if args.max_messages_per_trigger is not None and args.max_messages_per_trigger < 1:
        parser.error(f"--max-messages-per-trigger {args.max_messages_per_trigger}: must be >= 1")
    try:
        config = load_config(args.config)
        settings = connection_settings(args, config)
        if args.continuous:  # fail before Spark starts, not after
            parse_duration(
                "--trigger-interval", args.trigger_interval or config.pipeline.trigger_interval
            )
    except SparkQueueError as e:
        parser.error(str(e))
    spark = build_session(config.pipeline.app_name)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        summary = run_pipeline(
            spark,
            config,
            settings,
            continuous=args.continuous,
            trigger_interval=args.trigger_interval,
            run_for=args.run_for,
            checkpoint=args.checkpoint,
            writer_id=args.writer_id,
            max_messages_per_trigger=args.max_messages_per_trigger,
        )
    except SparkQueueError as e:
        print(f"pipeline.py: error: {e}", file=sys.stderr)
        return 1
    except StreamingQueryException as e:
        # Its text holds the cause (a worker's traceback too), without the JVM stack.
        print(f"pipeline.py: error: the query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(summary.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
