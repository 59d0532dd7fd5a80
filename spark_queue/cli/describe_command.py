"""``bdq queue describe``: a queue's settings, its consumers and its backlog per lane."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.cli.queue_commands import format_age
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.ops.describe import Description, Holder, describe


@click.command(name="describe")
@click.argument("name")
@connection_options
@json_option
def describe_command(settings: ConnectionSettings, name: str, as_json: bool) -> None:
    """Settings, consumers and backlog per lane of queue NAME.

    Like `kafka-consumer-groups --describe`: each lane with the consumer that
    owns it, when that owner last took or renewed it (the tables keep no
    first-taken time) and how long it has left, the messages waiting in the
    lane (visible, in flight, delayed) and the age of the oldest. Messages sent
    without a key show as lane "keyless". Buckets and slices owned by Spark
    queries follow. Reads every live bucket: it costs more with the backlog.
    """
    with QueueClient(settings=settings) as client:
        found = describe(client, name)
    if as_json:
        echo_json(_as_json(found))
        return
    console = Console()
    console.print(_settings_table(found))
    console.print(_lanes_table(found))
    if found.buckets:
        console.print(_buckets_table(found))


def _as_json(found: Description) -> dict[str, Any]:
    return {
        "name": found.name,
        "queue_id": found.queue_id,
        "settings": asdict(found.settings),
        "dead_letter_sources": found.dead_letter_sources,
        "live_buckets": found.live_buckets,
        "lanes": [
            {
                "lane": lane.lane, "backlog": lane.backlog, "visible": lane.visible,
                "in_flight": lane.in_flight, "delayed": lane.delayed,
                "oldest_age_seconds": lane.oldest_age, **_holder_json(lane.holder),
            }
            for lane in found.lanes
        ],
        "buckets": [
            {"bucket": b.bucket, "slice": b.slice, **_holder_json(b.holder)} for b in found.buckets
        ],
        "consumers": found.consumers(),
    }  # fmt: skip


def _holder_json(holder: Holder | None) -> dict[str, Any]:
    if holder is None:
        return {"owner": None, "renewed_at": None, "expires_in_seconds": None}
    return {
        "owner": holder.owner,
        "renewed_at": holder.renewed_at,
        "expires_in_seconds": holder.expires_in,
    }


def _settings_table(found: Description) -> Table:
    s = found.settings
    table = Table("setting", "value", title=f"queue {found.name!r}")
    for column in table.columns:
        column.overflow = "fold"
    rows = [
        ("visibility timeout", f"{s.visibility_timeout:g}s"), ("order hint (K)", str(s.order_hint)),
        ("message ttl", f"{s.message_ttl}s"), ("max message bytes", str(s.max_message_bytes)),
        ("max deliveries", str(s.max_deliveries or "-")),
        ("dead-letter queue", s.dead_letter_queue or "-"),
        ("dead letters from", ", ".join(found.dead_letter_sources) or "-"),
        ("queue id", found.queue_id), ("lanes", str(s.lanes)), ("bucket size", str(s.bucket_size)),
        ("seal delay", f"{s.seal_delay:g}s"), ("live buckets", str(found.live_buckets)),
    ]  # fmt: skip
    for key, value in rows:
        table.add_row(key, value)
    return table


def _lanes_table(found: Description) -> Table:
    table = Table(
        "lane", "owner", "left", "backlog", "visible", "in flight", "oldest",
        title="lanes (backlog: visible, in flight and delayed; --json for when each was renewed)",
    )  # fmt: skip
    for column in table.columns:
        column.overflow = "fold"
    for lane in found.lanes:
        owner, _, left = _holder_cells(lane.holder)
        table.add_row(
            str(lane.lane), owner, left, str(lane.backlog), str(lane.visible),
            str(lane.in_flight), format_age(lane.oldest_age),
        )  # fmt: skip
    return table


def _buckets_table(found: Description) -> Table:
    table = Table("bucket", "slice", "owner", "renewed", "left", title="buckets owned")
    for column in table.columns:
        column.overflow = "fold"
    for held in found.buckets:
        table.add_row(str(held.bucket), str(held.slice), *_holder_cells(held.holder))
    return table


def _holder_cells(holder: Holder | None) -> tuple[str, str, str]:
    if holder is None:
        return "-", "", ""
    ago = (datetime.now(UTC) - holder.renewed_at).total_seconds()
    expires = "-" if holder.expires_in is None else f"{holder.expires_in:g}s"
    return holder.owner, f"{format_age(max(0.0, ago))} ago", expires
