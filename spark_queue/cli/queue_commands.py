"""`bdq queue ...`: create, update, list, describe, purge and delete queues, and their counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from spark_queue import defaults
from spark_queue.cli.flags import (
    CommandGroup,
    Duration,
    confirm,
    connection_options,
    echo_json,
    echo_progress,
    json_option,
    yes_option,
)
from spark_queue.cli.keyspace_commands import replication_of, replication_options
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, QueueExists
from spark_queue.message import QueueStats
from spark_queue.store.catalog import FIXED

_console = Console()


@click.group(cls=CommandGroup)
def queue() -> None:
    """Create, list, inspect, purge and delete queues."""


@queue.command()
@click.argument("name")
@click.option(
    "--bucket-size", type=click.IntRange(1, defaults.MAX_BUCKET_SIZE),
    show_default=str(defaults.BUCKET_SIZE), help="Ids per bucket, one Cassandra partition (fixed).",
)  # fmt: skip
@click.option(
    "--visibility-timeout", type=Duration(), show_default=f"{defaults.VISIBILITY_TIMEOUT:g}s",
    help="How long a received message stays invisible: 30, '90s', '5m'.",
)  # fmt: skip
@click.option(
    "--order-hint", type=click.IntRange(1, defaults.MAX_ORDER_HINT),
    show_default=str(defaults.ORDER_HINT),
    help="K: pick among the oldest K visible messages (1 = best order).",
)  # fmt: skip
@click.option(
    "--message-ttl", type=Duration(whole=True), show_default=f"{defaults.MESSAGE_TTL}s",
    help="How long an unacked message lives, in whole seconds: 3600, '12h', '7d'.",
)  # fmt: skip
@click.option(
    "--max-deliveries", type=click.IntRange(1, 1_000_000),
    help="Move a message to --dead-letter-queue after this many deliveries.",
)  # fmt: skip
@click.option("--dead-letter-queue", help="Queue taking messages past --max-deliveries.")
@click.option(
    "--max-message-bytes", type=click.IntRange(1, defaults.MAX_MESSAGE_BYTES_LIMIT),
    show_default=str(defaults.MAX_MESSAGE_BYTES),
    help="Largest payload a send accepts, in bytes; a larger one is refused by name.",
)  # fmt: skip
@click.option(
    "--seal-delay", type=Duration(), show_default=f"{defaults.SEAL_DELAY:g}s",
    help="How long a full bucket waits for late writes before it is sealed (fixed).",
)  # fmt: skip
@click.option(
    "--lanes", type=click.IntRange(1, defaults.MAX_LANES), show_default=str(defaults.LANES),
    help="Units of order: up to this many consumers receive side by side (fixed).",
)  # fmt: skip
@click.option(
    "--exist-ok", is_flag=True,
    help="Succeed if the queue exists already with the values of the flags given here (flags"
    " left out are not compared); refused, naming each, when they differ.",
)  # fmt: skip
@click.option(
    "--create-keyspace", is_flag=True,
    help="Create the keyspace (and its tables) first if missing, with the replication of"
    " --dc or --simple; without it a missing keyspace is an error.",
)  # fmt: skip
@replication_options
@connection_options
@json_option
def create(
    settings: ConnectionSettings,
    name: str,
    exist_ok: bool,
    create_keyspace: bool,
    dcs: dict[str, int],
    simple: int | None,
    as_json: bool,
    **queue_settings: Any,
) -> None:
    """Create queue NAME.

    With --exist-ok an existing queue is accepted when every setting flag given
    equals its value (like SQS's CreateQueue); one that differs is refused by
    name, with its current and requested values, and nothing is changed.
    """
    replication = replication_of(dcs, simple)
    if replication is not None and not create_keyspace:
        raise click.UsageError("--dc and --simple: only with --create-keyspace")
    if create_keyspace:
        if replication is None:
            raise click.UsageError(
                "--create-keyspace: give the keyspace's replication, --dc DC=N per data center"
                " or --simple N for a local node"
            )
        report = QueueClient.create_keyspace(replication, exist_ok=True, settings=settings)
        if report.created or report.tables_created or report.columns_added:
            echo_progress(report.summary())
    with QueueClient(settings=settings) as client:
        try:
            q = client.create_queue(name, exist_ok=exist_ok, **queue_settings)
        except QueueExists as e:
            raise QueueExists(
                _exists_message(name, e.differences), differences=e.differences
            ) from e
    if as_json:
        echo_json({"name": q.name, "queue_id": q.queue_id, **asdict(q.settings)})
        return
    click.echo(f"queue {q.name!r} ready (id {q.queue_id})")


def _exists_message(name: str, differences: Mapping[str, tuple[object, object]]) -> str:
    """Why ``bdq queue create`` refused an existing queue, in the words of its flags."""
    if not differences:
        return f"queue {name!r}: already exists; pass --exist-ok to accept it, or delete it first"
    flags = {key: "--" + key.replace("_", "-") for key in differences}
    listed = ", ".join(
        f"{flags[k]} {now!r} (requested {new!r})" for k, (now, new) in differences.items()
    )
    fixed = [flags[k] for k in differences if k in FIXED]
    how = "change them with 'bdq queue update', or leave the flags out"
    if fixed:
        how = f"{', '.join(fixed)}: fixed at creation, delete the queue to change; " + how
    return f"queue {name!r}: exists with other settings: {listed}; nothing changed ({how})"


@queue.command()
@click.argument("name")
@click.option(
    "--visibility-timeout", type=Duration(),
    help="How long a received message stays invisible: 30, '90s', '5m'.",
)  # fmt: skip
@click.option(
    "--order-hint", type=click.IntRange(1, defaults.MAX_ORDER_HINT),
    help="K: pick among the oldest K visible messages.",
)  # fmt: skip
@click.option(
    "--message-ttl", type=Duration(whole=True),
    help="How long an unacked message lives (whole seconds); for messages sent from now on.",
)  # fmt: skip
@click.option(
    "--max-deliveries", type=click.IntRange(1, 1_000_000),
    help="Move to the DLQ after this many deliveries.",
)  # fmt: skip
@click.option("--dead-letter-queue", help="Queue taking messages past --max-deliveries.")
@click.option(
    "--no-dead-letter-queue", is_flag=True,
    help="Stop moving messages to a dead-letter queue (clears both settings).",
)  # fmt: skip
@click.option(
    "--max-message-bytes", type=click.IntRange(1, defaults.MAX_MESSAGE_BYTES_LIMIT),
    help="Largest payload a send accepts, in bytes; applies to the next send.",
)  # fmt: skip
@click.option("--bucket-size", type=int, hidden=True)  # refused by name: fixed at creation
@click.option("--seal-delay", type=float, hidden=True)  # likewise
@click.option("--lanes", type=int, hidden=True)  # likewise
@connection_options
@json_option
def update(
    settings: ConnectionSettings,
    name: str,
    no_dead_letter_queue: bool,
    as_json: bool,
    **given: Any,
) -> None:
    """Change settings of queue NAME; every handle picks them up within 2 s."""
    changes = {key: value for key, value in given.items() if value is not None}
    if no_dead_letter_queue:
        if "max_deliveries" in changes or "dead_letter_queue" in changes:
            raise InvalidSetting(
                "--no-dead-letter-queue: cannot go with --max-deliveries or --dead-letter-queue"
            )
        changes.update(max_deliveries=None, dead_letter_queue=None)
    with QueueClient(settings=settings) as client:
        new = client.update_queue(name, **changes)
    if as_json:
        echo_json({"name": name, **asdict(new)})
        return
    click.echo(f"queue {name!r} updated: " + ", ".join(f"{k}={v}" for k, v in changes.items()))


@queue.command(name="list")
@connection_options
@json_option
def list_(settings: ConnectionSettings, as_json: bool) -> None:
    """List the queues of the keyspace with their settings."""
    with QueueClient(settings=settings) as client:
        queues = [client.queue(name) for name in client.list_queues()]
    rows = [{"name": q.name, **asdict(q.settings)} for q in queues]
    if as_json:
        echo_json(rows)
        return
    table = Table("queue", "bucket size", "visibility", "K", "ttl", "max deliveries", "DLQ")
    for column in table.columns:
        column.overflow = "fold"  # a name is shown whole, over several lines if need be
    for row in rows:
        table.add_row(
            row["name"],
            str(row["bucket_size"]),
            f"{row['visibility_timeout']:g}s",
            str(row["order_hint"]),
            f"{row['message_ttl']}s",
            str(row["max_deliveries"] or "-"),
            row["dead_letter_queue"] or "-",
        )
    _console.print(table)


@queue.command()
@click.argument("name")
@click.option("--missing-ok", is_flag=True, help="Succeed if there is no such queue.")
@yes_option
@connection_options
@json_option
def delete(
    settings: ConnectionSettings, name: str, missing_ok: bool, yes: bool, as_json: bool
) -> None:
    """Delete queue NAME and its messages, after asking (unless --yes)."""
    with QueueClient(settings=settings) as client:
        if not yes and name in client.list_queues():
            total = client.queue(name).stats().total
            confirm(
                f"Delete queue {name!r} and its {total} message(s)?",
                f"queue {name!r}: not deleted; answer y, or pass --yes where nobody can answer",
            )
        client.delete_queue(name, missing_ok=missing_ok)
    if as_json:
        echo_json({"name": name, "deleted": True})
        return
    click.echo(f"queue {name!r} deleted")


@queue.command()
@click.argument("name")
@yes_option
@connection_options
@json_option
def purge(settings: ConnectionSettings, name: str, yes: bool, as_json: bool) -> None:
    """Remove every message of queue NAME, after asking (unless --yes)."""
    with QueueClient(settings=settings) as client:
        q = client.queue(name)
        if not yes:
            confirm(
                f"Remove all {q.stats().total} message(s) of queue {name!r}?",
                f"queue {name!r}: not purged; answer y, or pass --yes where nobody can answer",
            )
        count = q.purge()
    if as_json:
        echo_json({"name": name, "purged": count})
        return
    click.echo(f"purged {count} message(s) from {name!r}")


@queue.command()
@click.argument("name")
@click.option("--exact", is_flag=True, help="Scan every live bucket (costs more with the backlog).")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--interval", type=Duration(minimum=0.1), default=1.0, show_default=True,
    help="Time between refreshes with --watch: 1, '500ms', '5s'.",
)  # fmt: skip
@connection_options
@json_option
def stats(
    settings: ConnectionSettings,
    name: str,
    exact: bool,
    watch: bool,
    interval: float,
    as_json: bool,
) -> None:
    """Approximate counts of queue NAME: visible, in flight, delayed, age of the oldest message."""
    with QueueClient(settings=settings) as client:
        q = client.queue(name)
        if watch:
            watch_table(lambda: stats_table(name, q.stats(exact=exact)), interval)
            return
        s = q.stats(exact=exact)
    if as_json:
        echo_json({"queue": name, **stats_fields(s)})
        return
    _console.print(stats_table(name, s))


def stats_fields(s: QueueStats) -> dict[str, Any]:
    """The counts of ``s`` by name, as ``--json`` prints them."""
    return {
        "visible": s.visible, "in_flight": s.in_flight, "delayed": s.delayed, "total": s.total,
        "oldest_age_seconds": s.oldest_age, "buckets": s.buckets,
        "estimated_buckets": s.estimated_buckets, "counts_age_seconds": s.counts_age,
    }  # fmt: skip


def stats_table(name: str, s: QueueStats) -> Table:
    """One row of counts, the way ``bdq queue stats`` shows them."""
    table = Table("queue", "visible", "in flight", "delayed", "total", "oldest", "buckets")
    buckets = str(s.buckets) + (
        f" ({s.estimated_buckets} estimated)" if s.estimated_buckets else ""
    )
    table.add_row(
        name, str(s.visible), str(s.in_flight), str(s.delayed), str(s.total),
        format_age(s.oldest_age), buckets,
    )  # fmt: skip
    table.caption = f"counts at most {s.counts_age:.1f} s old"
    return table


def format_age(seconds: float | None) -> str:
    """``'-'``, ``'42.0s'``, ``'3m05s'`` or ``'2h03m'``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def watch_table(render: Callable[[], RenderableType], interval: float) -> None:
    """Show ``render()`` in place, refreshed every ``interval`` s, until Ctrl-C."""
    with Live(render(), console=_console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(render(), refresh=True)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a watch ends: no traceback, exit 0
