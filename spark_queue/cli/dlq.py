"""``bdq dlq redrive`` and ``bdq dlq sources``: dead letters back where they came from."""

from __future__ import annotations

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from spark_queue.cli.flags import (
    CommandGroup,
    Duration,
    connection_options,
    echo_json,
    json_option,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.engine.ownership import MIN_PERIOD, check_period
from spark_queue.errors import InvalidSetting

#: Dead letters left behind that the table lists one by one.
SHOW_LEFT = 10


@click.group(cls=CommandGroup)
def dlq() -> None:
    """Dead-letter queues: their sources, and redrive (bdq peek DLQ shows why each is there)."""


@dlq.command()
@click.argument("dead_letter_queue", metavar="DLQ")
@connection_options
@json_option
def sources(settings: ConnectionSettings, dead_letter_queue: str, as_json: bool) -> None:
    """The queues that send their dead letters to DLQ (SQS's list-dead-letter-source-queues).

    Exit status 1 when DLQ does not exist; an empty list when it exists and
    no queue names it as its --dead-letter-queue.
    """
    with QueueClient(settings=settings) as client:
        client.queue(dead_letter_queue)  # QueueNotFound, naming the command that creates it
        names = client.dead_letter_sources(dead_letter_queue)
    if as_json:
        echo_json({"dead_letter_queue": dead_letter_queue, "sources": names})
        return
    if not names:
        click.echo(f"no queue sends its dead letters to {dead_letter_queue!r}", err=True)
    for name in names:
        click.echo(name)


@dlq.command()
@click.argument("dead_letter_queue", metavar="DLQ")
@click.option("--to", default=None, help="Send every message here.  [default: its source queue]")
@click.option("--max", "max_messages", type=click.IntRange(1), default=None, help="Move at most N.")
@click.option(
    "--rate", type=click.FloatRange(0, min_open=True), default=None,
    help="Most messages moved per second.  [default: no limit]",
)  # fmt: skip
@click.option(
    "--visibility-timeout", type=Duration(), default=30.0, show_default=True,
    help="How long the messages being moved stay leased (a killed run's come back after it).",
)  # fmt: skip
@connection_options
@json_option
def redrive(
    settings: ConnectionSettings,
    dead_letter_queue: str,
    to: str | None,
    max_messages: int | None,
    rate: float | None,
    visibility_timeout: float,
    as_json: bool,
) -> None:
    """Move the messages of DLQ back to the queue each came from (or --to), each at most once.

    Payload and headers go back without the dead-letter headers, with
    bdq-redrive-count. Killed midway, run it again (after --visibility-timeout,
    and at least 2 s: its lanes are owned for as long, plus a second): messages
    already sent are only acked, not sent twice.
    """
    with QueueClient(settings=settings) as client:
        queue = client.queue(dead_letter_queue)
        if to is None and not client.dead_letter_sources(dead_letter_queue):
            raise InvalidSetting(
                f"queue {dead_letter_queue!r}: is not a dead-letter queue (no queue names it as"
                " its --dead-letter-queue), so its messages have no source to go back to; give"
                " --to QUEUE to move them there, or see `bdq dlq sources`"
            )
        # A killed run's lanes free up with its leases, not after the default lane period.
        queue.lanes.period = check_period(max(MIN_PERIOD, visibility_timeout))
        total = max_messages or queue.stats().visible
        columns = (
            TextColumn("redriving"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )  # fmt: skip
        with Progress(*columns, console=Console(stderr=True), disable=as_json) as bar:
            task = bar.add_task("redrive", total=total or None)
            result = queue.redrive(
                to=to,
                max_messages=max_messages,
                rate=rate,
                visibility_timeout=visibility_timeout,
                progress=lambda moved: bar.update(task, completed=moved),
            )
    if as_json:
        echo_json(
            {
                "moved": result.moved,
                "by_target": dict(result.by_target),
                "left": dict(result.left),
                "left_messages": {str(i): why for i, why in result.left_messages.items()},
            }
        )
        return
    table = Table(
        "to queue", "moved", title=f"redrove {result.moved} message(s) from {dead_letter_queue!r}"
    )
    for name, count in sorted(result.by_target.items()):
        table.add_row(name, str(count))
    for reason, count in sorted(result.left.items()):
        table.add_row(f"[yellow]left in {dead_letter_queue}: {reason}[/]", str(count))
    Console().print(table)
    shown = sorted(result.left_messages.items())[:SHOW_LEFT]
    for message_id, why in shown:
        Console(stderr=True).print(f"left message {message_id}: {why}", markup=False)
    if len(result.left_messages) > len(shown):
        more = len(result.left_messages) - len(shown)
        Console(stderr=True).print(f"... and {more} more (--json lists them all)", markup=False)
