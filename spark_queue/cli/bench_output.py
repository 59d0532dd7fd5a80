"""How the ``bdq bench`` commands show their work: a status line, a console, rate cells.

Progress lines go to a spinner on stderr, so that stdout carries only the
result table (or the JSON).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from spark_queue.bench.progress_sink import Progress


def stdout_console() -> Console:
    """Stdout console; 120 columns when it is not a terminal (a pipe or file), not 80."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=120)


@contextmanager
def progress_status() -> Iterator[Progress]:
    """A status line on stderr that the benchmark's progress lines update."""
    with Console(stderr=True).status("starting", spinner="dots") as status:
        yield lambda line: status.update(line)


def format_rate(value: float) -> str:
    """A rate cell: messages per second, whole."""
    return f"{value:,.0f} msgs/s"


def format_ratio(value: float | None) -> str:
    """A ratio cell, such as ``1.25x``; empty when there is no ratio."""
    return "" if value is None else f"{value:.2f}x"
