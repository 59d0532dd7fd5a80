"""How ``bdq peek`` and ``bdq receive`` show messages: a table, or JSON.

A receipt is what ``bdq ack`` needs whole, so the text output never puts it in a
table cell, where a narrow terminal would cut or fold it: each is printed in full
on a line of its own, under the table and in the table's order.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from spark_queue.cli.flags import echo_json
from spark_queue.engine.dead_letters import (
    HEADER_DELIVERIES,
    HEADER_ORIGINAL_ID,
    HEADER_REJECT_REASON,
    HEADER_SOURCE,
)
from spark_queue.engine.redrive import DEAD_LETTER_HEADERS
from spark_queue.message import Delivery, Message

_console = Console()


def dead_letter_reason(headers: Mapping[str, str]) -> str:
    """Why a message is in a dead-letter queue, from the headers the move added."""
    source = headers.get(HEADER_SOURCE)
    if source is None:
        return "-"
    if HEADER_REJECT_REASON in headers:
        return (
            f"rejected from {source!r}: {headers[HEADER_REJECT_REASON]}"
            f" (was message {headers.get(HEADER_ORIGINAL_ID, '?')})"
        )
    return (
        f"delivered {headers.get(HEADER_DELIVERIES, '?')} times from {source!r} without an ack"
        f" (was message {headers.get(HEADER_ORIGINAL_ID, '?')})"
    )


def payload_text(payload: bytes) -> tuple[str, str]:
    """The payload as UTF-8 text when it is, else base64; and which of the two."""
    try:
        return payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(payload).decode("ascii"), "base64"


def print_messages(messages: Sequence[Message], as_json: bool, *, receipts: bool) -> None:
    """Print ``messages`` as a table (receipts below it, whole) or as a JSON list.

    The table has a ``key`` column only when a message has a key ("-" for one
    without); JSON always has ``key`` (null: none) and ``lane`` (-1: keyless,
    in no lane of a queue of several).

    Args:
        messages: What a peek or a receive returned.
        as_json: Print a JSON list of objects instead of a table.
        receipts: Print the receipts of deliveries (not after ``--ack``).
    """
    if as_json:
        echo_json([_json_row(m, receipts=receipts) for m in messages])
        return
    if not messages:
        click.echo("no visible message", err=True)
        return
    dead = any(HEADER_SOURCE in m.headers for m in messages)  # a dead-letter queue: say why
    keyed = any(m.key is not None for m in messages)  # no column of blanks for keyless queues
    table = Table("id", "deliveries", *(["key"] if keyed else []), "payload", "headers")
    if dead:
        table.add_column("dead letter because")
    for column in table.columns:
        column.overflow = "fold"  # never an ellipsis: what is shown is shown whole
    for m in messages:
        body, _ = payload_text(m.payload)
        shown = {k: v for k, v in m.headers.items() if not dead or k not in DEAD_LETTER_HEADERS}
        cells = [
            str(m.id),
            str(m.delivery_count),
            *([m.key or "-"] if keyed else []),
            body,
            " ".join(f"{k}={v}" for k, v in shown.items()),
        ]
        if dead:
            cells.append(dead_letter_reason(m.headers))
        table.add_row(*cells)
    _console.print(table)
    held = [m.receipt for m in messages if isinstance(m, Delivery)] if receipts else []
    if held:
        # click.echo, not rich: a line of its own that no terminal width cuts or folds
        click.echo("receipts, in the table's order (bdq ack QUEUE RECEIPT...):")
        for receipt in held:
            click.echo(receipt)


def _json_row(m: Message, *, receipts: bool) -> dict[str, Any]:
    body, encoding = payload_text(m.payload)
    row: dict[str, Any] = {
        "id": m.id, "bucket": m.bucket, "payload": body, "encoding": encoding,
        "headers": dict(m.headers), "enqueued_at": m.enqueued_at,
        "delivery_count": m.delivery_count, "key": m.key, "lane": m.lane,
    }  # fmt: skip
    if receipts and isinstance(m, Delivery):
        row["receipt"] = m.receipt
        row["visible_at"] = m.visible_at
    if HEADER_SOURCE in m.headers:
        row["dead_letter_reason"] = dead_letter_reason(m.headers)
    return row
