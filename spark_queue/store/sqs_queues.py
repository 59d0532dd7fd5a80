"""The ``sqs_queues`` table: the SQS attributes of a queue that are no queue setting.

One row per queue incarnation (``queue_id``), written by ``bdq serve`` when it
creates a queue or changes those attributes, read when it sends, receives or
answers GetQueueAttributes. Its timestamps are in milliseconds since the epoch.

``write_row`` writes every column but ``tags``; tags change one map cell per tag
(``tags = tags + ?``, ``tags = tags - ?``), so two requests tagging a queue at
once both keep their tags whatever their clocks, and no attribute change
rewrites them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from spark_queue.store.session import Store

WRITE = (
    "INSERT INTO {ks}.sqs_queues"
    " (queue_id, delay_seconds, receive_wait_seconds, created_at, modified_at, content_dedup,"
    " redrive_allow) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
READ = (
    "SELECT delay_seconds, receive_wait_seconds, created_at, modified_at, content_dedup, tags,"
    " redrive_allow FROM {ks}.sqs_queues WHERE queue_id = ?"
)
ADD_TAGS = "UPDATE {ks}.sqs_queues SET tags = tags + ? WHERE queue_id = ?"
REMOVE_TAGS = "UPDATE {ks}.sqs_queues SET tags = tags - ? WHERE queue_id = ?"
DELETE = "DELETE FROM {ks}.sqs_queues WHERE queue_id = ?"


@dataclass(frozen=True, slots=True)
class SqsQueueRow:
    """A queue's row; the timestamps are None for a queue made outside the service."""

    delay_seconds: int = 0
    receive_wait_seconds: int = 0
    created_at: datetime | None = None
    modified_at: datetime | None = None
    content_dedup: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    redrive_allow: str | None = None


def write_row(store: Store, queue_id: uuid.UUID, row: SqsQueueRow) -> None:
    """Write a queue's whole row (the service changes every column at once)."""
    store.execute(
        WRITE,
        (
            queue_id,
            row.delay_seconds,
            row.receive_wait_seconds,
            row.created_at,
            row.modified_at,
            row.content_dedup,
            row.redrive_allow,
        ),
        what="writing a queue's SQS attributes",
    )


def read_row(store: Store, queue_id: uuid.UUID) -> SqsQueueRow:
    """A queue's row, or the defaults when it has none."""
    found = store.execute(READ, (queue_id,), what="reading a queue's SQS attributes").one()
    if found is None:
        return SqsQueueRow()
    return SqsQueueRow(
        found[0] or 0,
        found[1] or 0,
        found[2],
        found[3],
        bool(found[4]),
        dict(found[5] or {}),
        found[6],
    )


def add_tags(store: Store, queue_id: uuid.UUID, tags: Mapping[str, str]) -> None:
    """Set tags (one map cell each: other tags, set at once elsewhere, stay)."""
    store.execute(ADD_TAGS, (dict(tags), queue_id), what="tagging a queue")


def remove_tags(store: Store, queue_id: uuid.UUID, keys: Iterable[str]) -> None:
    """Remove tags by key (a key not set is no error)."""
    store.execute(REMOVE_TAGS, (set(keys), queue_id), what="untagging a queue")


def delete_row(store: Store, queue_id: uuid.UUID) -> None:
    """Remove a deleted queue's row."""
    store.execute(DELETE, (queue_id,), what="deleting a queue's SQS attributes")
