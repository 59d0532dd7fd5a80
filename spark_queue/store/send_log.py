"""Progress records of idempotent sends, one per (writer, step, part, chunk) and queue.

The ``batch_id`` column holds the step (a Spark micro-batch id); its name predates
the one-word vocabulary and stays so existing tables keep working.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from enum import StrEnum

from spark_queue.store.session import Store

READ = (
    "SELECT state, ids, toUnixTimestamp(written_at) FROM {ks}.send_log"
    " WHERE queue_id = ? AND writer = ? AND batch_id = ? AND part = ? AND chunk = ?"
)
WRITE = (
    "INSERT INTO {ks}.send_log (queue_id, writer, batch_id, part, chunk, state, ids, written_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class SendState(StrEnum):
    """How far an idempotent send got. Each state is recorded before the next step starts."""

    RESERVED = "reserved"  # ids chosen; messages may be partly written, all invisible
    WRITTEN = "written"  # every message written, still invisible
    DONE = "done"  # messages released: visible to consumers


def _pack(ids: Sequence[int]) -> bytes:
    return struct.pack(f">{len(ids)}q", *ids)


def _unpack(data: bytes | None) -> list[int]:
    data = data or b""
    return list(struct.unpack(f">{len(data) // 8}q", data))


class SendLog:
    """The send log of one queue incarnation."""

    def __init__(self, store: Store, queue_id: uuid.UUID) -> None:
        self.store = store
        self.queue_id = queue_id

    def read(
        self, writer: str, step: int, part: int, chunk: int
    ) -> tuple[SendState, list[int], int] | None:
        """``(state, ids, written_at)`` of an earlier attempt, or None."""
        row = self.store.execute(
            READ, (self.queue_id, writer, step, part, chunk), what="reading the send log"
        ).one()
        if row is None:
            return None
        return SendState(row[0]), _unpack(row[1]), row[2]

    def write(
        self,
        writer: str,
        step: int,
        part: int,
        chunk: int,
        state: SendState,
        ids: Sequence[int],
        written_at: int,
    ) -> None:
        self.store.execute(
            WRITE,
            (self.queue_id, writer, step, part, chunk, state.value, _pack(ids), written_at),
            what="recording send progress",
        )
