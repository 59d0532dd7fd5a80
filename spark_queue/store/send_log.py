"""Progress records of idempotent sends, one per (writer, step, part, chunk) and queue.

The first attempt of a send reserves its record with a lightweight
transaction: whichever attempt inserts first fixes the ids and the write
time, and every later or concurrent attempt adopts them (``reserve``). The
state that follows (DONE) is a plain write, a shortcut for retries only: a
retry that misses it does the same writes again, which change nothing.

The ``batch_id`` column holds the step (a Spark micro-batch id); its name predates
the one-word vocabulary and stays so existing tables keep working.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import NamedTuple

from spark_queue.store.session import Store

_KEY = "queue_id = ? AND writer = ? AND batch_id = ? AND part = ? AND chunk = ?"
READ = f"SELECT state, ids, toUnixTimestamp(written_at) FROM {{ks}}.send_log WHERE {_KEY}"
RESERVE = (
    "INSERT INTO {ks}.send_log (queue_id, writer, batch_id, part, chunk, state, ids, written_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
)
READ_STEP = (
    "SELECT state, ids, toUnixTimestamp(written_at) FROM {ks}.send_log"
    " WHERE queue_id = ? AND writer = ? AND batch_id = ?"
)
SET_STATE = f"UPDATE {{ks}}.send_log SET state = ? WHERE {_KEY}"
MOVE_IDS = f"UPDATE {{ks}}.send_log SET ids = ? WHERE {_KEY} IF ids = ?"


class SendState(StrEnum):
    """How far an idempotent send got."""

    STAMPED = "stamped"  # ids and write time fixed; messages may be partly written or released
    DONE = "done"  # messages released: visible to consumers
    # Recorded only by versions whose rows carried their writer's clock (up to 0.1.0):
    RESERVED = "reserved"  # ids chosen; messages may be partly written, all invisible
    WRITTEN = "written"  # every message written, still invisible


class SendRecord(NamedTuple):
    """What the log holds for one send: its state, its ids and the first attempt's time (ms)."""

    state: SendState
    ids: list[int]
    written_at: int


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

    def read(self, writer: str, step: int, part: int, chunk: int) -> SendRecord | None:
        """The record of an earlier attempt, or None."""
        row = self.store.execute(
            READ,
            (self.queue_id, writer, step, part, chunk),
            serial=True,
            what="reading the send log",
        ).one()
        if row is None:
            return None
        return SendRecord(SendState(row[0]), _unpack(row[1]), row[2])

    def reserve(
        self, writer: str, step: int, part: int, chunk: int, ids: Sequence[int], written_at: int
    ) -> SendRecord:
        """Record ``ids`` and ``written_at`` for a send unless an attempt of it recorded first.

        Returns the record that holds: this one (state STAMPED), or the first
        attempt's, whose ids and time this attempt must use instead.
        """
        key = (self.queue_id, writer, step, part, chunk)
        row = self.store.execute(
            RESERVE,
            (*key, SendState.STAMPED.value, _pack(ids), written_at),
            what="reserving ids for a send",
        ).one()
        if row is not None and row[0]:
            return SendRecord(SendState.STAMPED, list(ids), written_at)
        # Paxos finished the first insert before refusing this one: a serial read sees it.
        record = self.read(writer, step, part, chunk)
        if record is None:
            raise AssertionError(f"send log of {key}: insert refused, yet no record")
        return record

    def move_ids(
        self,
        writer: str,
        step: int,
        part: int,
        chunk: int,
        old: Sequence[int],
        new: Sequence[int],
    ) -> list[int]:
        """Record ``new`` ids in place of ``old`` (a repaired write); return the ids that hold.

        Conditional on the record still holding ``old``: when a concurrent
        attempt moved them first, its ids hold and this attempt must use them.
        """
        row = self.store.execute(
            MOVE_IDS,
            (_pack(new), self.queue_id, writer, step, part, chunk, _pack(old)),
            what="recording repaired ids of a send",
        ).one()
        if row is not None and row[0]:
            return list(new)
        record = self.read(writer, step, part, chunk)
        return list(old) if record is None else record.ids

    def records_of(self, writer: str, step: int) -> list[SendRecord]:
        """The records of every part and chunk of one writer's step."""
        rows = self.store.rows(
            READ_STEP, (self.queue_id, writer, step), what="reading the send log"
        )
        return [SendRecord(SendState(state), _unpack(ids), at) for state, ids, at in rows]

    def mark_done(self, writer: str, step: int, part: int, chunk: int) -> None:
        """Record that the send's messages were released (a retry then does nothing)."""
        self.mark_done_many([(writer, step, part, chunk)])

    def mark_done_many(self, keys: Sequence[tuple[str, int, int, int]]) -> None:
        """``mark_done`` for many sends, concurrently."""
        self.store.execute_many(
            [(SET_STATE, (SendState.DONE.value, self.queue_id, *key)) for key in keys],
            what="recording send progress",
        )
