"""`bdq queue ...`, `bdq send`, `bdq receive`, `bdq peek`, `bdq ack`: the client as commands."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console, RenderableType
from rich.live import Live
from rich.table import Table

from spark_queue import defaults
from spark_queue.cli.flags import (
    CommandGroup,
    connection_options,
    echo_json,
    echo_progress,
    json_option,
)
from spark_queue.cli.keyspace_commands import replication_of, replication_options
from spark_queue.cli.message_output import print_messages
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidMessage, InvalidSetting, QueueExists
from spark_queue.message import QueueStats
from spark_queue.queue import Queue
from spark_queue.store.catalog import FIXED

_console = Console()


@click.group(cls=CommandGroup)
def queue() -> None:
    """Create, list, inspect, purge and delete queues."""


@queue.command()
@click.argument("name")
@click.option(
    "--bucket-size",
    type=int,
    show_default=str(defaults.BUCKET_SIZE),
    help="Ids per bucket (fixed).",
)
@click.option(
    "--visibility-timeout", type=float, show_default=f"{defaults.VISIBILITY_TIMEOUT:g}",
    help="Seconds a received message stays invisible.",
)  # fmt: skip
@click.option(
    "--order-hint", "-k", type=int, show_default=str(defaults.ORDER_HINT),
    help="K: pick among the oldest K visible messages (1 = best order).",
)  # fmt: skip
@click.option("--message-ttl", type=int, show_default=str(defaults.MESSAGE_TTL), help="Seconds.")
@click.option("--max-deliveries", type=int, help="Move to the DLQ after this many.")
@click.option("--dead-letter-queue", help="Queue taking messages past max.")
@click.option(
    "--max-message-bytes", type=int, show_default=str(defaults.MAX_MESSAGE_BYTES),
    help="Largest payload accepted.",
)  # fmt: skip
@click.option(
    "--seal-delay", type=float, show_default=f"{defaults.SEAL_DELAY:g}", help="Seconds (fixed)."
)
@click.option(
    "--lanes", type=int, show_default=str(defaults.LANES),
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
    "--visibility-timeout", type=float, help="Seconds a received message stays invisible."
)
@click.option("--order-hint", "-k", type=int, help="K: pick among the oldest K visible messages.")
@click.option("--message-ttl", type=int, help="Seconds; applies to messages sent from now on.")
@click.option("--max-deliveries", type=int, help="Move to the DLQ after this many deliveries.")
@click.option("--dead-letter-queue", help="Queue taking messages past --max-deliveries.")
@click.option(
    "--no-dead-letter-queue", is_flag=True,
    help="Stop moving messages to a dead-letter queue (clears both settings).",
)  # fmt: skip
@click.option("--max-message-bytes", type=int, help="Largest payload accepted.")
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
@connection_options
@json_option
def delete(settings: ConnectionSettings, name: str, missing_ok: bool, as_json: bool) -> None:
    """Delete queue NAME and its messages."""
    with QueueClient(settings=settings) as client:
        client.delete_queue(name, missing_ok=missing_ok)
    if as_json:
        echo_json({"name": name, "deleted": True})
        return
    click.echo(f"queue {name!r} deleted")


@queue.command()
@click.argument("name")
@connection_options
@json_option
def purge(settings: ConnectionSettings, name: str, as_json: bool) -> None:
    """Remove every message of queue NAME."""
    with QueueClient(settings=settings) as client:
        count = client.queue(name).purge()
    if as_json:
        echo_json({"name": name, "purged": count})
        return
    click.echo(f"purged {count} message(s) from {name!r}")


@queue.command()
@click.argument("name")
@click.option("--exact", is_flag=True, help="Scan every live bucket (costs more with the backlog).")
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C.")
@click.option(
    "--interval", type=click.FloatRange(0.1), default=1.0, show_default=True,
    help="Seconds between refreshes with --watch.",
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


# -- messages ---------------------------------------------------------------------


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("messages", nargs=-1)
@click.option("--header", "-H", "headers", multiple=True, help="key=value, repeatable.")
@click.option("--delay", type=float, default=0.0, help="Seconds before the messages show.")
@click.option("--key", default=None, help="Unit of order: a key's messages arrive in order.")
@connection_options
@json_option
def send(
    settings: ConnectionSettings,
    queue_name: str,
    messages: Sequence[str],
    headers: Sequence[str],
    delay: float,
    key: str | None,
    as_json: bool,
) -> None:
    """Send MESSAGE(s) to QUEUE; '-' reads one message per line from stdin.

    With '-' each line is sent as it arrives, through a producer that batches
    them; the ids are printed once every line is durable. A line that breaks
    a rule stops the command; the lines before it are sent.
    """
    header_map = _parse_headers(headers)
    stdin = list(messages) == ["-"]
    if not messages:
        raise InvalidSetting("messages: give at least one MESSAGE, or '-' to read lines from stdin")
    with QueueClient(settings=settings) as client:
        q = client.queue(queue_name)
        if stdin:
            ids = _send_lines(q, sys.stdin, header_map, delay, key)
        else:
            ids = []
            for start in range(0, len(messages), 1000):
                ids += q.send_batch(
                    messages[start : start + 1000], headers=header_map, delay=delay, key=key
                )
    if not ids:
        raise InvalidSetting("messages: stdin was empty; give at least one line")
    if as_json:
        echo_json({"queue": queue_name, "ids": ids})
    else:
        click.echo(f"sent {len(ids)} message(s) to {queue_name!r}: ids {_id_span(ids)}")


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "-n", "--max", "max_messages", type=click.IntRange(1, defaults.MAX_BATCH), default=1,
    show_default=True, help="Most messages.",
)  # fmt: skip
@click.option("--ack", is_flag=True, help="Ack what was received (consume it).")
@click.option(
    "--visibility-timeout", type=click.FloatRange(0, min_open=True), default=None,
    help="Seconds; default the queue's.",
)  # fmt: skip
@click.option(
    "--order-hint", "-k", type=click.IntRange(1, defaults.MAX_ORDER_HINT), default=None,
    help="K; default the queue's.",
)  # fmt: skip
@click.option(
    "--wait", type=click.FloatRange(0), default=0.0, help="Seconds to wait for a message."
)
@connection_options
@json_option
def receive(
    settings: ConnectionSettings,
    queue_name: str,
    max_messages: int,
    ack: bool,
    visibility_timeout: float | None,
    order_hint: int | None,
    wait: float,
    as_json: bool,
) -> None:
    """Receive messages from QUEUE under a lease (and ack them with --ack)."""
    with QueueClient(settings=settings) as client:
        q = client.queue(queue_name)
        deliveries = q.receive(max_messages, visibility_timeout, order_hint, wait)
        if ack and deliveries:
            q.ack_batch([d.receipt for d in deliveries])
    print_messages(deliveries, as_json, receipts=not ack)


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.option(
    "-n", "--max", "max_messages", type=click.IntRange(1, defaults.MAX_BATCH), default=10,
    show_default=True, help="Most messages.",
)  # fmt: skip
@connection_options
@json_option
def peek(settings: ConnectionSettings, queue_name: str, max_messages: int, as_json: bool) -> None:
    """Show visible messages of QUEUE without receiving them."""
    with QueueClient(settings=settings) as client:
        messages = client.queue(queue_name).peek(max_messages)
    print_messages(messages, as_json, receipts=False)


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipts", nargs=-1, required=True)
@connection_options
@json_option
def ack(
    settings: ConnectionSettings, queue_name: str, receipts: Sequence[str], as_json: bool
) -> None:
    """Ack messages of QUEUE by the RECEIPT(s) that `bdq receive` printed."""
    with QueueClient(settings=settings) as client:
        client.queue(queue_name).ack_batch(list(receipts))
    if as_json:
        echo_json({"queue": queue_name, "acked": len(receipts)})
        return
    click.echo(f"acked {len(receipts)} message(s)")


def _send_lines(
    queue: Queue, lines: Iterable[str], headers: dict[str, str], delay: float, key: str | None
) -> list[int]:
    """Send each line as a message through a producer; return the ids in line order."""
    futures: list[Future[int]] = []
    with queue.producer() as producer:
        for number, line in enumerate(lines, start=1):
            try:
                futures.append(
                    producer.send(line.rstrip("\n"), headers=headers, delay=delay, key=key)
                )
            except InvalidSetting as e:
                producer.close()  # what came before is sent, not dropped
                raise InvalidMessage(
                    f"line {number} of stdin: {e}; the {number - 1} line(s) before it were sent"
                ) from e
    return [f.result() for f in futures]


def _parse_headers(pairs: Sequence[str]) -> dict[str, str]:
    headers = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidSetting(f"header {pair!r}: must be key=value")
        headers[key] = value
    return headers


def _id_span(ids: Sequence[int]) -> str:
    return f"{ids[0]}" if len(ids) == 1 else f"{ids[0]}..{ids[-1]}"
