"""``bdq bench``: benchmarks of the queue on a live cluster (the BlueDove paper's method).

``bdq bench queue`` sends M messages with Tsend threads, then receives and acks
them with Trecv threads, and prints the paper's rates, response times and
consistency metrics beside a raw insert baseline measured in the same run.

``bdq bench spark`` measures the ``format("bdq")`` connector on a local
SparkSession: sink, source and queue -> queue rates and end-to-end latency,
beside the same raw baseline and against the connector's targets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from spark_queue import defaults
from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES
from spark_queue.bench.head_bench import run_head_bench
from spark_queue.bench.queue_bench import (
    OrderSweep,
    Progress,
    QueueBenchResult,
    run_order_sweep,
    run_queue_bench,
)
from spark_queue.bench.spark_bench import (
    CHECKPOINT_MANAGER,
    LATENCY_P50_TARGET_MS,
    LATENCY_P99_TARGET_MS,
    PIPELINE_TARGET,
    SINK_TARGET,
    SOURCE_TARGET,
    SparkBenchResult,
    StreamPhase,
    run_spark_bench,
)
from spark_queue.bench.spark_floor import FLOOR_SECONDS
from spark_queue.cli.flags import CommandGroup, connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting

R = TypeVar("R")

SWEEP_ORDER_HINTS = (1, 2, 3)


def _run_options(func: Callable[..., R]) -> Callable[..., R]:
    """Options every benchmark takes: bucket size, seed and the raw baseline."""
    for option in reversed(_RUN_OPTIONS):
        func = option(func)
    return func


_RUN_OPTIONS = (
    click.option(
        "--bucket-size",
        type=click.IntRange(1, defaults.MAX_BUCKET_SIZE),
        default=defaults.BUCKET_SIZE,
        show_default=True,
        help="Ids per bucket of the benchmark queues.",
    ),
    click.option(
        "--seed",
        type=click.IntRange(0),
        default=None,
        help="Seed of the random payloads.  [default: random]",
    ),
    click.option(
        "--baseline/--no-baseline",
        default=True,
        show_default=True,
        help="Measure the raw prepared-insert baseline in the same run.",
    ),
    click.option(
        "--baseline-concurrency",
        type=click.IntRange(1, 4096),
        default=BASELINE_CONCURRENCY,
        show_default=True,
        help="In-flight requests of the raw baseline.",
    ),
)


@click.group(cls=CommandGroup)
def bench() -> None:
    """Benchmarks against a live cluster (use a keyspace you can spare, e.g. --keyspace bench)."""


@bench.command("queue")
@click.option(
    "--messages",
    "-m",
    type=click.IntRange(1),
    default=20_000,
    show_default=True,
    help="Messages sent and received in all (M).",
)
@click.option(
    "--payload-bytes",
    type=click.IntRange(MIN_PAYLOAD_BYTES),
    default=2048,
    show_default=True,
    help="Bytes per payload (L): random, with a checksum.",
)
@click.option(
    "--queues",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Queues (Q), each with its own senders and receivers.",
)
@click.option(
    "--send-threads",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Sender threads per queue (Tsend).",
)
@click.option(
    "--recv-threads",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Receiver threads per queue (Trecv).",
)
@click.option(
    "--order-hint",
    "-k",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Order hint K: receive among the oldest K visible messages per message.",
)
@click.option(
    "--sweep-k",
    is_flag=True,
    help="Run once per K in 1, 2, 3 and print the order/duplication trade-off.",
)
@click.option(
    "--visibility-timeout",
    type=click.FloatRange(0, min_open=True),
    default=defaults.VISIBILITY_TIMEOUT,
    show_default=True,
    help="Seconds a received message stays invisible.",
)
@click.option(
    "--receive-delay",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Seconds of processing per received message, before the ack.",
)
@click.option(
    "--send-batch",
    type=click.IntRange(1, 10_000),
    default=1,
    show_default=True,
    help="Messages per send operation (more than 1: send_batch).",
)
@click.option(
    "--async-send",
    is_flag=True,
    help="Send the single messages with send_async: a producer batches them behind the scenes.",
)
@click.option(
    "--receive-batch",
    type=click.IntRange(1, 10_000),
    default=10,
    show_default=True,
    help="Most messages per receive.",
)
@click.option(
    "--recv-processes",
    is_flag=True,
    help="Run each receiver in its own process (competing consumers sharing nothing).",
)
@click.option(
    "--kill-receiver",
    is_flag=True,
    help="SIGKILL one receiver process halfway; report loss and takeover time.",
)
@click.option(
    "--plain-acks",
    is_flag=True,
    help="Ack with a read and a plain write while the lease surely holds, even on one node.",
)
@_run_options
@connection_options
@json_option
def queue(settings: ConnectionSettings, as_json: bool, sweep_k: bool, **options: Any) -> None:
    """Send M messages, then receive and ack them; print rates, latencies and consistency.

    Follows the BlueDove paper's client-level method: all senders start at
    once; once they are done, all receivers start at once. Loss, duplication
    and order are checked from the sequence number and checksum in every
    payload. Each run uses fresh queues and removes them at the end.
    """
    if sweep_k:
        options.pop("order_hint")
        with _status() as progress:
            sweep = run_order_sweep(
                settings, order_hints=SWEEP_ORDER_HINTS, progress=progress, **options
            )
        if as_json:
            echo_json(sweep.to_dict())
        else:
            _console().print(_sweep_table(sweep))
        return
    with _status() as progress:
        result = run_queue_bench(settings, progress=progress, **options)
    if as_json:
        echo_json(result.to_dict())
    else:
        _console().print(_result_table(result))


@bench.command("spark")
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
    "--spark-conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A spark.sql.* setting for the run (repeatable). The run sets"
    f" {CHECKPOINT_MANAGER} to the FileSystem-based manager unless this names it.",
)
@_run_options
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
    conf = dict(_key_value("--spark-conf", text) for text in spark_conf)
    with _status() as progress:
        result = run_spark_bench(settings, spark_conf=conf, progress=progress, **options)
    if as_json:
        echo_json(result.to_dict())
    else:
        _console().print(_spark_table(result))


@bench.command("head")
@click.option(
    "--messages",
    "-m",
    type=click.IntRange(1),
    default=1_000_000,
    show_default=True,
    help="Messages moved through the queue (sent, received, acked).",
)
@click.option(
    "--batch",
    type=click.IntRange(1, defaults.MAX_BATCH),
    default=1000,
    show_default=True,
    help="Messages per send and per receive while moving them.",
)
@click.option(
    "--bucket-size",
    type=click.IntRange(1, defaults.MAX_BUCKET_SIZE),
    default=defaults.BUCKET_SIZE,
    show_default=True,
    help="Ids per bucket of the benchmark queue.",
)
@connection_options
@json_option
def head(settings: ConnectionSettings, as_json: bool, **options: Any) -> None:
    """Cost of a receive at the head of a queue before and after moving M messages.

    CassieQ's tombstone problem, measured: Cassandra's query trace counts the
    buckets a receive scans and the live rows and tombstone cells it reads, on
    a fresh queue and again after M messages went through it; the median time
    of a receive is measured too. Uses a fresh queue, removed at the end.
    """
    with _status() as progress:
        r = run_head_bench(settings, progress=progress, **options)
    if as_json:
        echo_json(asdict(r) | {"move_rate": r.move_rate})
        return
    table = Table(
        "receive at the head", "buckets scanned", "live rows read", "tombstones read",
        "receive p50",
        title=f"bdq bench head: {r.moved:,} messages moved in {r.move_seconds:.0f} s"
        f" ({r.move_rate:,.0f} msgs/s); head now at bucket {r.head_bucket:,};"
        f" waited {r.compaction_wait:.0f} s for compactions",
    )  # fmt: skip
    for label, cost in (("fresh queue", r.before), (f"after {r.moved:,} messages", r.after)):
        table.add_row(
            label, str(cost.buckets_scanned), str(cost.live_rows), str(cost.tombstones),
            f"{cost.receive_ms:.1f} ms",
        )  # fmt: skip
    _console().print(table)


def _console() -> Console:
    """Stdout console; 120 columns when it is not a terminal (a pipe or file), not 80."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=120)


@contextmanager
def _status() -> Iterator[Progress]:
    """A status line on stderr that the benchmark's progress lines update."""
    with Console(stderr=True).status("starting", spinner="dots") as status:
        yield lambda line: status.update(line)


def _rate(value: float) -> str:
    return f"{value:,.0f} msgs/s"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _percent(value: float) -> str:
    return f"{value * 100:.2f} %"


def _times(p50: float | None, p99: float | None) -> str:
    if p50 is None or p99 is None:
        return "n/a"
    return f"{p50:.1f} / {p99:.1f} ms"


def _title(result: QueueBenchResult) -> str:
    p = result.params
    return (
        f"bdq bench queue: M={p.messages} L={p.payload_bytes} Q={p.queues}"
        f" Tsend={p.send_threads} Trecv={p.recv_threads} K={p.order_hint}"
        f" send {'async (producer)' if p.async_send else f'batch {p.send_batch}'},"
        f" receive batch {p.receive_batch},"
        f" visibility {p.visibility_timeout:g}s, receive delay {p.receive_delay:g}s, seed {p.seed}"
        + (", plain acks" if p.plain_acks else "")
        + (
            f"; raw baseline: prepared INSERTs, {p.baseline_concurrency} in flight"
            if p.baseline
            else ""
        )
    )


def _result_table(r: QueueBenchResult) -> Table:
    """The run as one table: metric, value, ratio to the raw baseline."""
    table = Table(title=_title(r), title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("ratio to baseline", justify="right")
    table.add_row("send rate", _rate(r.send_rate), _ratio(r.send_ratio))
    table.add_row("receive+ack rate", _rate(r.receive_rate), _ratio(r.receive_ratio))
    if r.baseline_rate is not None:
        table.add_row("raw baseline (mean)", _rate(r.baseline_rate), _ratio(1.0))
        table.add_row(
            "  before / after", " / ".join(f"{rate:,.0f}" for rate in r.baseline_rates), ""
        )
    table.add_row("send p50 / p99", _times(r.send_p50_ms, r.send_p99_ms), "")
    table.add_row("receive p50 / p99", _times(r.receive_p50_ms, r.receive_p99_ms), "")
    table.add_row("ack p50 / p99", _times(r.ack_p50_ms, r.ack_p99_ms), "")
    table.add_row("duplication rate", _percent(r.duplication_rate), "")
    table.add_row("loss rate", _percent(r.loss_rate), "")
    table.add_row("out-of-order rate", _percent(r.out_of_order_rate), "")
    table.add_row("avg displacement", f"{r.average_displacement:.3f}", "")
    table.add_row("deliveries", str(r.deliveries), "")
    table.add_row("distinct intact", str(r.distinct), "")
    table.add_row("corrupt", str(r.corrupt), "")
    table.add_row("stale acks", str(r.stale_acks), "")
    if r.killed_held is not None:
        table.add_row("killed receiver held", str(r.killed_held), "")
        if r.takeover_seconds is not None:
            took = f"{r.takeover_seconds:.1f} s"
        else:
            took = "nothing held" if r.killed_held == 0 else "never (lost)"
        table.add_row("takeover after kill", took, "")
    table.add_row("send phase", f"{r.send_seconds:.1f} s", "")
    table.add_row("receive phase", f"{r.receive_seconds:.1f} s", "")
    if r.errors:
        table.add_row("backend errors (retried)", str(r.errors), "")
    if r.stalled:
        table.add_row(
            "[red]stalled[/red]",
            f"[red]gave up after {r.params.stall_timeout:g} s without a new message[/red]",
            "",
        )
    return table


def _sweep_table(sweep: OrderSweep) -> Table:
    """The order/duplication trade-off: one row per K."""
    first = sweep.runs[0]
    p = first.params
    title = (
        f"bdq bench queue --sweep-k: M={p.messages} L={p.payload_bytes} Q={p.queues}"
        f" Tsend={p.send_threads} Trecv={p.recv_threads} receive batch {p.receive_batch}"
    )
    if sweep.baseline_rate is not None:
        title += f"; raw baseline {_rate(sweep.baseline_rate)}"
    table = Table(title=title, title_justify="left")
    for name in (
        "K",
        "duplication",
        "out-of-order",
        "avg displacement",
        "receive+ack",
        "ratio to baseline",
        "loss",
    ):
        table.add_column(name, justify="right")
    for row, run in zip(sweep.rows, sweep.runs, strict=True):
        table.add_row(
            str(row.order_hint),
            _percent(row.duplication_rate),
            _percent(row.out_of_order_rate),
            f"{row.average_displacement:.3f}",
            _rate(row.receive_rate),
            _ratio(row.receive_rate / sweep.baseline_rate if sweep.baseline_rate else None),
            _percent(row.loss_rate) + (" (stalled)" if run.stalled else ""),
        )
    return table


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
        "n/a" if within is None else _rate(within),
        _ratio(within / baseline if within and baseline else None),
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
    )


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
        _rate(r.sink.rate),
        _ratio(r.sink_ratio),
        f">= {SINK_TARGET:.2f}x",
        _met(r.sink_met),
    )
    table.add_row(
        "source rate (receive + ack)",
        _rate(r.source.rate),
        _ratio(r.source_ratio),
        f">= {SOURCE_TARGET:.2f}x",
        _met(r.source_met),
    )
    table.add_row(
        "pipeline rate (queue -> queue)",
        _rate(r.pipeline.rate),
        _ratio(r.pipeline_ratio),
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
        table.add_row("raw baseline (mean)", _rate(r.baseline_rate), _ratio(1.0))
        table.add_row("  before / after", " / ".join(f"{rate:,.0f}" for rate in r.baseline_rates))
    m = r.params.messages
    table.add_row(
        "warm-up (untimed): write / drain",
        f"{r.warmup.write_seconds:.1f} s / {r.warmup.drain_seconds:.1f} s",
    )
    table.add_row("  sink: stored", f"{r.sink.stored}/{m} in {r.sink.seconds:.1f} s")
    _stream_rows(table, "source", r.source, r.baseline_rate)
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
