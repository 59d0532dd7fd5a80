"""``bdq bench queue``: the BlueDove paper's client-level benchmark, as a command and its tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from spark_queue import defaults
from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES
from spark_queue.bench.queue_bench import run_order_sweep, run_queue_bench
from spark_queue.bench.queue_bench_results import OrderSweep, QueueBenchResult
from spark_queue.cli.bench_flags import run_options
from spark_queue.cli.bench_output import format_rate, format_ratio, progress_status, stdout_console
from spark_queue.cli.bench_receivers import given, parse_receivers, run_sweep
from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting

SWEEP_ORDER_HINTS = (1, 2, 3)


@click.command("queue")
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
    "--work-ms",
    type=click.FloatRange(0, 60_000),
    default=None,
    help="Milliseconds of simulated work per delivered message (a sleep before its ack)."
    "  [default: 20 with --sweep-receivers, else 0]",
)
@click.option(
    "--receive-delay",
    type=click.FloatRange(0),
    default=0.0,
    hidden=True,  # the same as --work-ms, in seconds; kept for older scripts
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
@click.option(
    "--sweep-receivers",
    metavar="N,N,...",
    callback=parse_receivers,
    help="Run once per receiver count (e.g. 1,4,16,32; N = 1 always runs first, the"
    " reference): throughput against N x one worker's rate, shares, and where it saturates."
    " Threads, or processes with --recv-processes; one sender thread, no raw baseline.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.1, 3600),
    default=5.0,
    show_default=True,
    help="With --sweep-receivers: about how long a point that scales receives; its M is"
    " max(200, N x one worker's rate x seconds) unless --messages is given.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="With --sweep-receivers: write a PNG of throughput and ideal against N"
    " (needs matplotlib: the 'dev' extra).",
)
@click.option(
    "--cassandra-pid",
    type=click.IntRange(1),
    default=None,
    help="With --sweep-receivers: pid of the Cassandra node, for its CPU time."
    "  [default: the local node's, from <BDQ_HOME>/node1/cassandra.pid]",
)
@run_options
@connection_options
@json_option
def queue(
    settings: ConnectionSettings,
    as_json: bool,
    sweep_k: bool,
    sweep_receivers: tuple[int, ...] | None,
    work_ms: float | None,
    seconds: float,
    plot: Path | None,
    cassandra_pid: int | None,
    **options: Any,
) -> None:
    """Send M messages, then receive and ack them; print rates, latencies and consistency.

    Follows the BlueDove paper's client-level method: all senders start at
    once; once they are done, all receivers start at once. Loss, duplication
    and order are checked from the sequence number and checksum in every
    payload. Each run uses fresh queues and removes them at the end.

    With --sweep-receivers, one such run per receiver count on keyless
    messages from one sender thread, each receiver working --work-ms per
    message (issue 22): does throughput grow with the receivers?
    """
    if work_ms is not None:
        if given("receive_delay"):
            raise InvalidSetting(
                "--receive-delay: the same as --work-ms, in seconds; give only --work-ms"
            )
        options["receive_delay"] = work_ms / 1000
    if sweep_receivers is not None:
        if sweep_k:
            raise InvalidSetting(
                "--sweep-k: one sweep at a time; drop --sweep-k or --sweep-receivers"
            )
        run_sweep(
            settings,
            as_json=as_json,
            receivers=sweep_receivers,
            work_ms=work_ms,
            seconds=seconds,
            plot=plot,
            cassandra_pid=cassandra_pid,
            options=options,
        )
        return
    for name, value in (("plot", plot), ("cassandra_pid", cassandra_pid)):
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise InvalidSetting(f"{flag}: only with --sweep-receivers (e.g. 1,4,16,32); add it")
    if sweep_k:
        options.pop("order_hint")
        with progress_status() as progress:
            sweep = run_order_sweep(
                settings, order_hints=SWEEP_ORDER_HINTS, progress=progress, **options
            )
        if as_json:
            echo_json(sweep.to_dict())
        else:
            stdout_console().print(_sweep_table(sweep))
        return
    with progress_status() as progress:
        result = run_queue_bench(settings, progress=progress, **options)
    if as_json:
        echo_json(result.to_dict())
    else:
        stdout_console().print(_result_table(result))


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
        f" visibility {p.visibility_timeout:g}s, work {p.receive_delay * 1000:g} ms/msg,"
        f" seed {p.seed}"
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
    table.add_row("send rate", format_rate(r.send_rate), format_ratio(r.send_ratio))
    table.add_row("receive+ack rate", format_rate(r.receive_rate), format_ratio(r.receive_ratio))
    if r.baseline_rate is not None:
        table.add_row("raw baseline (mean)", format_rate(r.baseline_rate), format_ratio(1.0))
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
        title += f"; raw baseline {format_rate(sweep.baseline_rate)}"
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
            format_rate(row.receive_rate),
            format_ratio(row.receive_rate / sweep.baseline_rate if sweep.baseline_rate else None),
            _percent(row.loss_rate) + (" (stalled)" if run.stalled else ""),
        )
    return table
