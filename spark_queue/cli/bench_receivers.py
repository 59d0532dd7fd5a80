"""``bdq bench queue --sweep-receivers``: the receiver sweep's flags, run, table and plot.

``bench_queue`` hands a sweep here: which of its flags a sweep takes (one
sender thread unless ``--send-threads`` says otherwise; ``--recv-threads``,
``--queues``, ``--kill-receiver`` and ``--sweep-k`` do not go with it), then
prints one row per N, or the JSON, and writes the plot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from spark_queue.bench.receiver_sweep import DEFAULT_WORK_MS, run_receiver_sweep
from spark_queue.bench.sweep_figures import SATURATION_RATIO, ReceiverSweep, SweepPoint
from spark_queue.bench.sweep_plot import require_matplotlib, write_sweep_plot
from spark_queue.cli.bench_output import format_rate, format_ratio, progress_status, stdout_console
from spark_queue.cli.flags import echo_json
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting

#: Flags of a single run that a sweep sets itself or cannot honour, and why.
_NOT_WITH_A_SWEEP = {
    "recv_threads": "the sweep sets the receivers of each point",
    "queues": "the sweep runs one queue per point",
    "kill_receiver": "the sweep measures throughput, not a takeover",
    "receive_delay": "give the work as --work-ms",
}


def parse_receivers(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    """``--sweep-receivers 1,4,16,32`` as a tuple of whole numbers."""
    if value is None:
        return None
    try:
        counts = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: must be receiver counts separated by commas, such as 1,4,16,32"
        ) from None
    if not counts or any(n < 1 for n in counts):
        raise click.BadParameter(f"{value!r}: every receiver count must be 1 or more")
    return counts


def given(name: str) -> bool:
    """Whether the option ``name`` was given on the command line (or its env), not defaulted."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT)


def run_sweep(
    settings: ConnectionSettings,
    *,
    as_json: bool,
    receivers: tuple[int, ...],
    work_ms: float | None,
    seconds: float,
    plot: Path | None,
    cassandra_pid: int | None,
    options: dict[str, Any],
) -> None:
    """Run the sweep with ``bench queue``'s other ``options``; print it and draw it."""
    for name, why in _NOT_WITH_A_SWEEP.items():
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise InvalidSetting(f"{flag}: not with --sweep-receivers ({why}); leave it out")
    if plot is not None:
        require_matplotlib()  # before minutes of sweep, not after
    with progress_status() as progress:
        sweep = run_receiver_sweep(
            settings,
            receivers=receivers,
            work_ms=DEFAULT_WORK_MS if work_ms is None else work_ms,
            seconds=seconds,
            messages=options["messages"] if given("messages") else None,
            recv_processes=options["recv_processes"],
            payload_bytes=options["payload_bytes"],
            send_threads=options["send_threads"] if given("send_threads") else 1,
            send_batch=options["send_batch"],
            async_send=options["async_send"],
            receive_batch=options["receive_batch"],
            order_hint=options["order_hint"],
            visibility_timeout=options["visibility_timeout"],
            bucket_size=options["bucket_size"],
            plain_acks=options["plain_acks"],
            seed=options["seed"],
            cassandra_pid=cassandra_pid,
            progress=progress,
        )
    if plot is not None:
        write_sweep_plot(sweep, plot, _title(sweep, short=True))
    if as_json:
        echo_json({**sweep.to_dict(), "plot": None if plot is None else str(plot)})
        return
    console = stdout_console()
    console.print(sweep_table(sweep))
    if plot is not None:
        console.print(f"plot: {plot}")


def _title(sweep: ReceiverSweep, *, short: bool = False) -> str:
    s = sweep.settings
    kind = "processes" if sweep.processes else "threads"
    head = (
        f"receivers as {kind}, work {sweep.work_ms:g} ms/msg, one worker"
        f" {format_rate(sweep.one_worker_rate)} (N = 1)"
    )
    if short:
        return f"bdq bench queue --sweep-receivers\n{head}"
    return (
        f"bdq bench queue --sweep-receivers: {head}; {s['send_threads']} sender thread(s),"
        f" L={s['payload_bytes']}, receive batch {s['receive_batch']}, K={s['order_hint']},"
        f" seed {s['seed']}"
    )


def _cores(point: SweepPoint, cpu: float | None) -> str:
    used = point.cores_used(cpu)
    return "-" if used is None else f"{used:.2f}"


def _shares(point: SweepPoint) -> str:
    even = 100 / point.receivers
    idle = f", {point.idle_receivers} idle" if point.idle_receivers else ""
    low, high = point.share_min * 100, point.share_max * 100
    return f"{low:.3g}-{high:.3g} ({even:.3g}{idle})"


_LEGEND = (
    "\nshare %: each receiver's part of the deliveries, smallest-largest (an even split);"
    " p50 ms: receive/ack; CPU ms: client CPU per delivery;"
    " cores: client/Cassandra/machine, CPU over the phase; load: 1-minute load average"
)


def _latency(point: SweepPoint) -> str:
    cells = (point.receive_p50_ms, point.ack_p50_ms)
    return "/".join("-" if v is None else f"{v:.0f}" for v in cells)


def sweep_table(sweep: ReceiverSweep) -> Table:
    """One row per N; the caption says where it saturates and why.

    Shares are each receiver's part of the deliveries (smallest and largest, and
    an even split); cores are CPU seconds over the phase's wall time, for the
    client (with its receiver processes), Cassandra (the whole node, whoever
    uses it) and the whole machine.
    """
    # No borders and short headers: thirteen columns fit the 120 of a pipe uncut.
    table = Table(
        title=_title(sweep),
        title_justify="left",
        caption=sweep.why + _LEGEND,
        box=None,
        pad_edge=False,
        header_style="bold underline",
    )
    table.caption_justify = "left"
    for name in (
        "N",
        "M",
        "time s",
        "msgs/s",
        "ideal",
        "ratio",
        "dup.",
        "lost",
        "share %",
        "p50 ms",
        "CPU ms",
        "cores",
        "load",
    ):
        table.add_column(name, justify="right", no_wrap=True)
    for p in sweep.points:
        ratio = sweep.ratio(p)
        cell = format_ratio(ratio)
        per_message = p.cpu_ms_per_message
        table.add_row(
            str(p.receivers),
            f"{p.messages:,}",
            f"{p.seconds:.1f}",
            f"{p.throughput:,.0f}",
            f"{sweep.ideal(p):,.0f}",
            f"[red]{cell}[/red]" if ratio < SATURATION_RATIO else cell,
            str(p.duplicates),
            f"[red]{p.lost}[/red]" if p.lost else "0",
            _shares(p),
            _latency(p),
            "-" if per_message is None else f"{per_message:.2f}",
            "/".join(_cores(p, c) for c in (p.client_cpu, p.cassandra_cpu, p.machine_cpu)),
            "-" if p.load is None else f"{p.load:.1f}",
        )
    return table
