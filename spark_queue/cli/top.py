"""``bdq top``: a live view of every queue of a keyspace, refreshed every second.

Counts come from the cheap path (``spark_queue.engine.counting``). Rates are derived
from two looks a refresh apart, since a viewer cannot see other processes'
counters: ``sent/s`` is how fast the queue's id sequence moves (ids handed out
to senders), ``consumed/s`` how fast messages leave (sent minus the growth of
the backlog: acked, dead-lettered or expired). Per-process counters of sends,
receives and acks are what ``spark_queue.engine.counters`` keeps; nothing here
needs the ``metrics`` extra.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from spark_queue.cli.flags import Duration, connection_options
from spark_queue.cli.queue_commands import format_age
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.message import QueueStats
from spark_queue.ops.patterns import matches


@dataclass(frozen=True)
class Look:
    """One look at a queue: its counts, how far its sequence got, and when."""

    stats: QueueStats
    tail: int
    at: float


def rates(before: Look | None, now: Look) -> tuple[float | None, float | None]:
    """``(sent/s, consumed/s)`` between two looks at a queue, None for the first."""
    if before is None or now.at <= before.at:
        return None, None
    seconds = now.at - before.at
    sent = max(0, now.tail - before.tail)
    consumed = max(0, sent - (now.stats.total - before.stats.total))
    return sent / seconds, consumed / seconds


class Top:
    """The state of a ``bdq top`` session: the last look at each queue."""

    def __init__(self, client: QueueClient, patterns: Sequence[str]) -> None:
        self.client = client
        self.patterns = list(patterns)
        self.looks: dict[str, Look] = {}

    def look(self) -> list[tuple[str, Look | None, Look | None]]:
        """Look at every matching queue; return ``(name, previous, current)`` for each."""
        seen = []
        for name in self.client.list_queues():
            if not matches(name, self.patterns):
                continue
            try:
                queue = self.client.queue(name)
                stats = queue.stats()
                current: Look | None = Look(stats, queue.tail, time.monotonic())
            except SparkQueueError:  # deleted between the list and the count
                current = None
            seen.append((name, self.looks.get(name), current))
            if current is not None:
                self.looks[name] = current
        return seen

    def table(self) -> Table:
        """Look again and render one frame."""
        table = Table(
            "queue", "visible", "in flight", "delayed", "oldest", "sent/s", "consumed/s",
            "buckets",
            title=f"bdq top: keyspace {self.client.settings.keyspace!r},"
            f" {datetime.now().strftime('%H:%M:%S')} (Ctrl-C quits)",
            title_justify="left",
        )  # fmt: skip
        for column in table.columns:
            column.overflow = "fold"  # at 80 columns names and headers wrap, never an ellipsis
        for column in table.columns[1:]:
            column.justify = "right"
        for name, before, now in self.look():
            if now is None:
                table.add_row(name, "gone", "", "", "", "", "", "")
                continue
            sent, consumed = rates(before, now)
            s = now.stats
            table.add_row(
                name, f"{s.visible:,}", f"{s.in_flight:,}", f"{s.delayed:,}",
                format_age(s.oldest_age), _rate(sent), _rate(consumed),
                f"{s.buckets:,}" + ("~" if s.estimated_buckets else ""),
            )  # fmt: skip
        return table


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


@click.command()
@click.option(
    "--queue", "patterns", multiple=True, metavar="PATTERN",
    help="Only queues whose name matches this glob (orders-*); repeatable.  [default: all]",
)  # fmt: skip
@click.option(
    "--interval", type=Duration(minimum=0.1), default=1.0, show_default=True,
    help="Time between refreshes: 1, '500ms', '5s'.",
)  # fmt: skip
@click.option("--once", is_flag=True, help="Print one frame (rates over one interval) and exit.")
@connection_options
def top(settings: ConnectionSettings, patterns: Sequence[str], interval: float, once: bool) -> None:
    """A live view of the queues: depth, in flight, delayed, oldest age, send and consume rates.

    Exit status 1 when no queue matches --queue (or the keyspace has none).
    """
    console = Console()
    with QueueClient(settings=settings) as client:
        view = Top(client, patterns)
        if not view.look():
            keyspace = settings.keyspace
            if patterns:
                given = " ".join(f"--queue {p!r}" for p in patterns)
                raise InvalidSetting(
                    f"{given}: no queue of keyspace {keyspace!r} matches; `bdq queue list`"
                    " shows them"
                )
            raise InvalidSetting(
                f"keyspace {keyspace!r}: has no queue to show; create one with `bdq queue create`"
            )
        if once:
            time.sleep(interval)
            console.print(view.table())
            return
        try:
            with Live(view.table(), console=console, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(view.table(), refresh=True)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how top ends: no traceback, exit 0
