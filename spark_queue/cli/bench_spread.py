"""``bdq bench spread``: each node's share of one queue's writes, window by window (issue 44)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click
from rich.table import Table

from spark_queue import defaults
from spark_queue.bench.spread_bench import (
    LOCAL_ADDRESS,
    LOCAL_JMX_PORT,
    LOCAL_NODES,
    WINDOW,
    SpreadParams,
    SpreadResult,
    run_spread_bench,
)
from spark_queue.cli.bench_output import format_rate, progress_status, stdout_console
from spark_queue.cli.flags import cluster_options, echo_json, json_option
from spark_queue.config import ConnectionSettings


@click.command("spread")
@click.option(
    "--rf", "replication_factor", type=int, default=1, show_default=True,
    help="Replication factor of the benchmark's own keyspace (at most the nodes counted).",
)  # fmt: skip
@click.option(
    "--lanes", type=int, default=defaults.LANES, show_default=True,
    help="Lanes of the queue.",
)  # fmt: skip
@click.option(
    "--rate", type=int, default=2000, show_default=True,
    help="Messages per second of all sender threads together; 0 for full speed.",
)  # fmt: skip
@click.option(
    "--seconds", type=float, default=20.0, show_default=True,
    help="How long the senders send.",
)  # fmt: skip
@click.option(
    "--threads", type=int, default=3, show_default=True, help="Sender threads.",
)  # fmt: skip
@click.option(
    "--batch", type=int, default=1, show_default=True,
    help="Messages per send (1: send; more: send_batch).",
)  # fmt: skip
@click.option(
    "--payload-bytes", type=int, default=2048, show_default=True,
    help="Size of each message.",
)  # fmt: skip
@click.option(
    "--bucket-size", type=int, default=defaults.BUCKET_SIZE, show_default=True,
    help="Ids per bucket of the queue.",
)  # fmt: skip
@click.option(
    "--existing", is_flag=True,
    help="Count the nodes of an existing cluster, given by --hosts (list every node),"
    f" instead of starting {LOCAL_NODES} local nodes.",
)  # fmt: skip
@click.option(
    "--address", default=LOCAL_ADDRESS, show_default=True,
    help="First loopback address of the local nodes (the others follow it).",
)  # fmt: skip
@click.option(
    "--jmx-port", type=int, default=LOCAL_JMX_PORT, show_default=True,
    help="First JMX port of the local nodes (the others follow it).",
)  # fmt: skip
@click.option(
    "--home", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder of the local nodes.  [default: a fresh temporary folder, removed after]",
)  # fmt: skip
@click.option(
    "--windows", "show_windows", is_flag=True,
    help="Print every window's shares too (--json always has them).",
)  # fmt: skip
@cluster_options
@json_option
def spread(
    settings: ConnectionSettings,
    existing: bool,
    show_windows: bool,
    as_json: bool,
    **options: object,
) -> None:
    """How one queue's writes spread over the nodes of a cluster, per 0.25 s window.

    Starts three local Cassandra nodes (from --address, JMX from --jmx-port; or,
    with --existing, counts the nodes given by --hosts), makes a keyspace of its
    own at --rf with one queue of --lanes lanes, and sends messages at --rate
    for --seconds. Every 0.25 s it asks each node alone for its count of local
    writes to the messages table (system_views.local_write_latency), and
    reports each node's share of each window's writes, the median over windows
    of the busiest node's share, and the effective number of busy nodes
    (1 / the sum of the squared shares: 1 when one node takes all, 3 when three
    take equal shares), median and 10th-90th percentiles. The keyspace is
    dropped and the local nodes stopped at the end, and on Ctrl-C.
    """
    params = SpreadParams(
        hosts=settings.hosts if existing else (),
        **options,  # type: ignore[arg-type]
    )
    with progress_status() as progress:
        result = run_spread_bench(settings, params, progress=progress)
    if as_json:
        echo_json(_json(result))
        return
    console = stdout_console()
    console.print(_summary(result))
    if show_windows:
        console.print(_windows(result))


def _json(r: SpreadResult) -> dict[str, object]:
    return {
        "params": asdict(r.params),
        "nodes": list(r.nodes),
        "sent": r.sent,
        "send_seconds": r.send_seconds,
        "rate": r.rate,
        "window_seconds": WINDOW,
        "figures": asdict(r.figures),
        "windows": [
            {"start": w.start, "writes": list(w.writes), "shares": list(w.shares)}
            for w in r.window_list
        ],
    }


def _summary(r: SpreadResult) -> Table:
    p, f = r.params, r.figures
    asked = "full speed" if p.rate == 0 else format_rate(p.rate)
    table = Table(
        "node", "share of all writes",
        title=f"bdq bench spread: one queue of {p.lanes} lanes at RF {p.replication_factor},"
        f" {asked} asked, {format_rate(r.rate)} achieved ({r.sent:,} messages of"
        f" {p.payload_bytes:,} B in {r.send_seconds:.1f} s, {p.threads} threads, batch"
        f" {p.batch})\nbusiest node's share p50 {f.busiest_share_p50:.2f}; effective busy"
        f" nodes p50 {f.effective_p50:.2f} of {len(r.nodes)} (p10 {f.effective_p10:.2f},"
        f" p90 {f.effective_p90:.2f}); {f.windows} windows of {WINDOW} s with writes,"
        f" {f.idle_windows} without",
        title_justify="left",
    )  # fmt: skip
    for node, share in zip(r.nodes, f.node_shares, strict=True):
        table.add_row(node, f"{share:.2f}")
    return table


def _windows(r: SpreadResult) -> Table:
    table = Table(
        "from", *r.nodes, "writes", "busiest", "effective nodes",
        title="each window's shares of local writes to the messages table", title_justify="left",
    )  # fmt: skip
    for w in r.window_list:
        busy = w.total > 0
        table.add_row(
            f"{w.start:.2f} s", *(f"{s:.2f}" for s in w.shares), f"{w.total:,}",
            f"{w.busiest_share:.2f}" if busy else "",
            f"{w.effective_nodes:.2f}" if busy else "",
        )  # fmt: skip
    return table
