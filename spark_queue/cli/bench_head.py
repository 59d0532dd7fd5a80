"""``bdq bench head``: what a receive at the head of a queue costs, before and after traffic."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click
from rich.table import Table

from spark_queue import defaults
from spark_queue.bench.head_bench import run_head_bench
from spark_queue.cli.bench_output import progress_status, stdout_console
from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings


@click.command("head")
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
    with progress_status() as progress:
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
    stdout_console().print(table)
