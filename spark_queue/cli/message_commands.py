"""`bdq send`, `receive`, `peek`, `ack`, `change-visibility`, `reject`: messages as commands."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import Future

import click

from spark_queue import defaults
from spark_queue.cli.flags import Duration, connection_options, echo_json, json_option
from spark_queue.cli.message_output import print_messages
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidMessage, InvalidSetting
from spark_queue.queue import Queue

#: Read from standard input where a MESSAGE is expected.
STDIN = "-"


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("messages", nargs=-1)
@click.option("--header", "-H", "headers", multiple=True, help="key=value, repeatable.")
@click.option(
    "--delay", type=Duration(allow_zero=True), default=0.0, show_default=True,
    help="How long the messages stay invisible: 30, '500ms', '2m'.",
)  # fmt: skip
@click.option(
    "--key", default=None,
    help="Unit of order: messages of one key keep their order (one lane).",
)  # fmt: skip
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
    """Send MESSAGE(s) to QUEUE; a MESSAGE of '-' reads one message per line from stdin.

    With '-' each line is sent as it arrives, through a producer that batches
    them; the ids are printed once every line is durable. A line that breaks
    a rule stops the command; the lines before it are sent. '-' stands alone:
    it cannot go with other MESSAGEs.
    """
    header_map = _parse_headers(headers)
    stdin = STDIN in messages
    if not messages:
        raise click.UsageError("give at least one MESSAGE, or '-' to read lines from stdin")
    if stdin and len(messages) > 1:
        raise click.UsageError(
            f"MESSAGE '-' reads stdin and stands alone; it was given with {len(messages) - 1}"
            " other MESSAGE(s): send those in a command of their own"
        )
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
    "--release", is_flag=True,
    help="Make what was received visible again at once (a look that counts as a delivery).",
)  # fmt: skip
@click.option(
    "--visibility-timeout", type=Duration(), default=None,
    help="How long the messages stay leased.  [default: the queue's]",
)  # fmt: skip
@click.option(
    "--order-hint", type=click.IntRange(1, defaults.MAX_ORDER_HINT), default=None,
    help="K: pick among the oldest K visible messages.  [default: the queue's]",
)  # fmt: skip
@click.option(
    "--wait", type=Duration(allow_zero=True), default=0.0, show_default=True,
    help="How long to wait for a message.",
)  # fmt: skip
@connection_options
@json_option
def receive(
    settings: ConnectionSettings,
    queue_name: str,
    max_messages: int,
    ack: bool,
    release: bool,
    visibility_timeout: float | None,
    order_hint: int | None,
    wait: float,
    as_json: bool,
) -> None:
    """Receive messages from QUEUE under a lease (and ack them with --ack).

    Each receipt is printed whole, for `bdq ack` or `bdq change-visibility`.
    With --release the messages are visible again as soon as they are shown
    (their delivery count went up; SQS's ChangeMessageVisibility to 0).
    """
    if ack and release:
        raise click.UsageError("--ack and --release: give one of them, not both")
    with QueueClient(settings=settings) as client:
        q = client.queue(queue_name)
        deliveries = q.receive(max_messages, visibility_timeout, order_hint, wait)
        if ack and deliveries:
            q.ack_batch([d.receipt for d in deliveries])
        for delivery in deliveries if release else []:
            q.change_visibility(delivery.receipt, 0)
    print_messages(deliveries, as_json, receipts=not (ack or release))


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


@click.command(name="change-visibility")
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipt")
@click.argument("seconds", metavar="DURATION", type=Duration(allow_zero=True))
@connection_options
@json_option
def change_visibility(
    settings: ConnectionSettings, queue_name: str, receipt: str, seconds: float, as_json: bool
) -> None:
    """Keep a received message of QUEUE invisible for DURATION from now (0: visible now).

    RECEIPT is one `bdq receive` printed; it is stale afterwards, and the new
    receipt is printed (on its own line, or as "receipt" with --json). Refused
    once the lease ran out: receive the message again.
    """
    with QueueClient(settings=settings) as client:
        new = client.queue(queue_name).change_visibility(receipt, seconds)
    if as_json:
        echo_json({"queue": queue_name, "visible_in_seconds": seconds, "receipt": new})
        return
    click.echo(f"visible again in {seconds:g} s; the new receipt:", err=True)
    click.echo(new)


@click.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipt")
@click.option(
    "--reason", default=None, help="Why (kept in the header bdq-reject-reason, 1000 chars at most)."
)
@connection_options
@json_option
def reject(
    settings: ConnectionSettings, queue_name: str, receipt: str, reason: str | None, as_json: bool
) -> None:
    """Move a received message of QUEUE to its dead-letter queue now.

    RECEIPT is one `bdq receive` printed; its lease must still hold. The
    message leaves QUEUE and reaches the dead-letter queue once, with the
    dead-letter headers and --reason (a share group's REJECT; SQS sends a
    message there only after maxReceiveCount receives).
    """
    with QueueClient(settings=settings) as client:
        queue = client.queue(queue_name)
        moved = queue.reject(receipt, reason)
        target = queue.settings.dead_letter_queue
    if as_json:
        echo_json({"queue": queue_name, "dead_letter_queue": target, "id": moved})
        return
    click.echo(f"rejected: now message {moved} of dead-letter queue {target!r}")


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
