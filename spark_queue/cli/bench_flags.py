"""The flags ``bdq bench queue`` and ``bdq bench spark`` share: bucket size, seed, raw baseline."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from spark_queue import defaults
from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY

R = TypeVar("R")


def run_options(func: Callable[..., R]) -> Callable[..., R]:
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
