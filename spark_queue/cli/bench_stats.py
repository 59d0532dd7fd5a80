"""``bdq bench stats``: the cost of one count of a queue against its number of live buckets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from spark_queue.bench.stats_bench import DEFAULT_SIZES, run_stats_bench
from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes):
        raise InvalidSetting(f"--buckets {text!r}: must be a comma list of positive whole numbers")
    return sizes


@click.command("stats")
@click.option(
    "--buckets", "sizes", default=",".join(map(str, DEFAULT_SIZES)), show_default=True,
    help="Comma list of live-bucket counts to measure.",
)  # fmt: skip
@click.option(
    "--bucket-size", type=click.IntRange(1, 100_000), default=100, show_default=True,
    help="Ids per bucket (every bucket is filled).",
)  # fmt: skip
@click.option("--samples", type=click.IntRange(1), default=30, show_default=True,
              help="Cheap counts timed per size.")  # fmt: skip
@connection_options
@json_option
def stats(
    settings: ConnectionSettings, sizes: str, bucket_size: int, samples: int, as_json: bool
) -> None:
    """Cost of counting a queue (bdq queue stats, the source's backlog) at N live buckets.

    Times the first cheap count of a fresh queue, the exact count (a scan of
    every live bucket: the baseline), and the steady cheap count (median and
    p90 of SAMPLES calls). Each size uses a fresh queue, removed at the end.
    """
    with Console(stderr=True).status("starting", spinner="dots") as status:
        results = run_stats_bench(
            settings,
            sizes=_sizes(sizes),
            bucket_size=bucket_size,
            samples=samples,
            progress=lambda line: status.update(line),
        )
    if as_json:
        echo_json([asdict(r) | {"speedup": r.speedup} for r in results])
        return
    console = Console(soft_wrap=True)
    console = console if console.is_terminal else Console(soft_wrap=True, width=140)
    console.print(_table(results, bucket_size))


def _table(results: Sequence[Any], bucket_size: int) -> Table:
    table = Table(
        "live buckets", "messages", "exact (baseline)", "first cheap", "cheap p50 / p90",
        "exact / cheap", "scanned per call", "visible exact / cheap",
        title=f"bdq bench stats: one count of a queue of full buckets of {bucket_size} messages",
        title_justify="left",
    )  # fmt: skip
    for r in results:
        table.add_row(
            f"{r.buckets:,}", f"{r.messages:,}", f"{r.exact_ms:.1f} ms",
            f"{r.first_cheap_ms:.1f} ms", f"{r.cheap_p50_ms:.1f} / {r.cheap_p90_ms:.1f} ms",
            f"{r.speedup:.1f}x", str(r.buckets_scanned_per_call),
            f"{r.visible_exact:,} / {r.visible_cheap:,}",
        )  # fmt: skip
    return table
