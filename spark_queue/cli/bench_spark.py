"""``bdq bench spark``: the connector benchmark as a command, and its table against the targets."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES
from spark_queue.bench.spark_bench_params import CHECKPOINT_MANAGER
from spark_queue.bench.spark_bench_results import (
    LATENCY_P50_TARGET_MS,
    LATENCY_P99_TARGET_MS,
    PIPELINE_TARGET,
    SINK_TARGET,
    SOURCE_TARGET,
    SparkBenchResult,
    StreamPhase,
)
from spark_queue.bench.spark_floor import FLOOR_SECONDS
from spark_queue.cli.bench_flags import run_options
from spark_queue.cli.bench_output import format_rate, format_ratio, progress_status, stdout_console
from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, MissingExtra


@click.command("spark")
@click.option(
    "--messages",
    "-m",
    type=click.IntRange(1),
    default=20_000,
    show_default=True,
    help="Messages of the sink, source and pipeline phases (M).",
)
@click.option(
    "--payload-bytes",
    type=click.IntRange(MIN_PAYLOAD_BYTES),
    default=2048,
    show_default=True,
    help="Bytes per payload (L): random, with a checksum.",
)
@click.option(
    "--max-per-trigger",
    type=click.IntRange(1),
    default=10_000,
    show_default=True,
    help="maxMessagesPerTrigger of the source and pipeline queries.",
)
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Partitions of the DataFrame the sink phase writes.",
)
@click.option(
    "--latency-messages",
    type=click.IntRange(1),
    default=1500,
    show_default=True,
    help="Messages sent during the latency phase.",
)
@click.option(
    "--latency-rate",
    type=click.FloatRange(0, min_open=True),
    default=60.0,
    show_default=True,
    help="Messages per second sent during the latency phase.",
)
@click.option(
    "--trigger-interval",
    type=click.FloatRange(0),
    default=0.25,
    show_default=True,
    help="Seconds between triggers of the latency query (0: each batch starts as soon as"
    " the last one ended and a message is visible).",
)
@click.option(
    "--visibility-timeout",
    type=click.FloatRange(0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds a micro-batch's messages stay leased.",
)
@click.option(
    "--master",
    default="local[2]",
    show_default=True,
    help="Spark master of the session the benchmark starts.",
)
@click.option(
    "--floor-seconds",
    type=click.FloatRange(0),
    default=FLOOR_SECONDS,
    show_default=True,
    help="Seconds a no-op Python source -> no-op Python sink stream is timed on the latency"
    " trigger: Spark's own cost per micro-batch, the latency's floor (0: skip).",
)
@click.option(
    "--source-floor/--no-source-floor",
    default=True,
    show_default=True,
    help="Also drain M rows of a Python source with no queue behind it, as the source phase"
    " drains its queue: the rate Spark itself allows the source phase.",
)
@click.option(
    "--spark-conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A spark.sql.* setting for the run (repeatable). The run sets"
    f" {CHECKPOINT_MANAGER} to the FileSystem-based manager unless this names it.",
)
@run_options
@connection_options
@json_option
def spark(
    settings: ConnectionSettings, as_json: bool, spark_conf: tuple[str, ...], **options: Any
) -> None:
    """Measure the Spark connector: sink, source, queue -> queue rates and latency.

    Starts a local SparkSession (Python workers on this interpreter), then in
    one run: writes M rows with df.write.format("bdq"); drains that queue with
    readStream.format("bdq") into the noop sink (availableNow); moves M more
    messages from one queue to another; and sends a light steady load through
    a continuous query to time each message from send to output. The raw
    insert baseline is measured before and after. Each run uses fresh queues
    and removes them at the end.
    """
    try:  # pyspark is the 'spark' extra: imported here so that bdq works without it
        from spark_queue.bench.spark_bench import run_spark_bench
    except MissingExtra as e:
        raise MissingExtra("bdq bench spark", e.extra, e.name) from e
    conf = dict(_key_value("--spark-conf", text) for text in spark_conf)
    with progress_status() as progress:
        result = run_spark_bench(settings, spark_conf=conf, progress=progress, **options)
    if as_json:
        echo_json(result.to_dict())
    else:
        stdout_console().print(_spark_table(result))


def _met(met: bool | None) -> str:
    if met is None:
        return "n/a"
    return "[green]yes[/green]" if met else "[red]no[/red]"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} ms"


def _stream_rows(table: Table, name: str, phase: StreamPhase, baseline: float | None) -> None:
    """Detail rows of a throughput query: rate within triggers, batches, what was left."""
    within = phase.batch_rate
    table.add_row(
        f"  {name}: within triggers",
        "n/a" if within is None else format_rate(within),
        format_ratio(within / baseline if within and baseline else None),
    )
    table.add_row(
        f"  {name}: batches",
        f"{phase.batches} (+{phase.empty_batches} empty) in {phase.seconds:.1f} s",
    )
    table.add_row(f"  {name}: left in its input queue", str(phase.left))


def _key_value(option: str, text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair; InvalidSetting naming the text otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InvalidSetting(f"{option} {text!r}: must be KEY=VALUE, such as spark.sql.x=1")
    return key.strip(), value


def _spark_title(r: SparkBenchResult) -> str:
    p = r.params
    return (
        f"bdq bench spark: Spark {r.spark_version} {p.master}, M={p.messages} L={p.payload_bytes},"
        f" maxMessagesPerTrigger {p.max_per_trigger}, {p.partitions} sink partitions,"
        f" latency {p.latency_messages} msgs at {p.latency_rate:g}/s with a"
        f" {p.trigger_interval:g}s trigger, bucket size {p.bucket_size}, seed {p.seed}"
        + "".join(f"; {key}={value}" for key, value in p.spark_conf)
        + (
            f"; raw baseline: prepared INSERTs, {p.baseline_concurrency} in flight"
            if p.baseline
            else ""
        )
        + _ZIP_STATES[r.pyspark_zip_bytecode]
        + (
            f"; {r.package_lacking_bytecode} spark-queue modules without bytecode"
            " (`make bytecode`: each Python process compiles them)"
            if r.package_lacking_bytecode
            else ""
        )
    )


_ZIP_STATES = {
    True: "; pyspark.zip with bytecode",
    False: "; pyspark.zip without bytecode (`bdq spark compile-zip` starts queries sooner)",
    None: "",
}


def _spark_table(r: SparkBenchResult) -> Table:
    """The run as one table: metric, value, ratio to the raw baseline, target, met."""
    table = Table(title=_spark_title(r), title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("ratio to baseline", justify="right")
    table.add_column("target", justify="right")
    table.add_column("met?", justify="center")
    table.add_row(
        "sink rate (df.write)",
        format_rate(r.sink.rate),
        format_ratio(r.sink_ratio),
        f">= {SINK_TARGET:.2f}x",
        _met(r.sink_met),
    )
    table.add_row(
        "source rate (receive + ack)",
        format_rate(r.source.rate),
        format_ratio(r.source_ratio),
        f">= {SOURCE_TARGET:.2f}x",
        _met(r.source_met),
    )
    table.add_row(
        "pipeline rate (queue -> queue)",
        format_rate(r.pipeline.rate),
        format_ratio(r.pipeline_ratio),
        f">= {PIPELINE_TARGET:.2f}x",
        _met(r.pipeline_met),
    )
    table.add_row(
        "latency p50",
        _ms(r.latency.p50_ms),
        "",
        f"<= {LATENCY_P50_TARGET_MS:,.0f} ms",
        _met(r.latency_met),
    )
    table.add_row(
        "latency p99",
        _ms(r.latency.p99_ms),
        "",
        f"<= {LATENCY_P99_TARGET_MS:,.0f} ms",
        _met(r.latency_p99_met),
    )
    if r.baseline_rate is not None:
        table.add_row("raw baseline (mean)", format_rate(r.baseline_rate), format_ratio(1.0))
        table.add_row("  before / after", " / ".join(f"{rate:,.0f}" for rate in r.baseline_rates))
    m = r.params.messages
    table.add_row(
        "warm-up (untimed): write / drain",
        f"{r.warmup.write_seconds:.1f} s / {r.warmup.drain_seconds:.1f} s",
    )
    table.add_row("  sink: stored", f"{r.sink.stored}/{m} in {r.sink.seconds:.1f} s")
    _stream_rows(table, "source", r.source, r.baseline_rate)
    if r.source_floor is not None:
        table.add_row(
            "  source floor (Python source, no queue): rate, source / floor",
            f"{format_rate(r.source_floor.rate)}, {format_ratio(r.source_floor_ratio)}",
        )
    _stream_rows(table, "pipeline", r.pipeline, r.baseline_rate)
    table.add_row("  pipeline: delivered", f"{r.pipeline.delivered}/{m}")
    table.add_row(
        "  latency: arrived",
        f"{r.latency.arrived}/{r.latency.sent}, sent at {r.latency.send_rate:.1f} msgs/s",
    )
    table.add_row("  latency: batches, max", f"{r.latency.batches}, max {_ms(r.latency.max_ms)}")
    table.add_row(
        "  latency: trigger / addBatch p50",
        f"{_ms(r.latency.trigger_p50_ms)} / {_ms(r.latency.add_batch_p50_ms)}",
    )
    if r.floor is not None:
        table.add_row(
            "  floor, no-op Python stream: trigger / addBatch p50",
            f"{_ms(r.floor.trigger_p50_ms)} / {_ms(r.floor.add_batch_p50_ms)}",
        )
    return table
