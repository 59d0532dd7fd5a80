"""Progress records of idempotent sends, one per (writer, step, part, chunk) and queue.

The first attempt of a send reserves its record with a lightweight
transaction: whichever attempt inserts first fixes the ids and the write
time, and every later or concurrent attempt adopts them (``reserve``). The
state that follows (DONE) is a plain write, a shortcut for retries only: a
retry that misses it does the same writes again, which change nothing.

Each record also keeps a digest of every message of its send, in order
(``digests``), so that an attempt whose rows come in another order (Spark
reads a shuffle's output in any order) lays them out as the first one did
(``engine/send_order.py``).

The ``batch_id`` column holds the step (a Spark micro-batch id); its name predates
the one-word vocabulary and stays so existing tables keep working.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from spark_queue.store.session import Store

_KEY = "queue_id = ? AND writer = ? AND batch_id = ? AND part = ? AND chunk = ?"
_COLUMNS = "state, ids, toUnixTimestamp(written_at), digests"
READ = f"SELECT {_COLUMNS} FROM {{ks}}.send_log WHERE {_KEY}"
RESERVE = (
    "INSERT INTO {ks}.send_log (queue_id, writer, batch_id, part, chunk, state, ids, written_at,"
    " digests) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
)
READ_STEP = (
    f"SELECT {_COLUMNS} FROM {{ks}}.send_log WHERE queue_id = ? AND writer = ? AND batch_id = ?"
)
READ_PART = (
    f"SELECT chunk, {_COLUMNS} FROM {{ks}}.send_log"
    " WHERE queue_id = ? AND writer = ? AND batch_id = ? AND part = ?"
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
    """What the log holds for one send: its state, its ids and the first attempt's time (ms).

    ``digests``: each message's digest, in id order (None in records of versions
    before digests were kept).
    """

    state: SendState
    ids: list[int]
    written_at: int
    digests: list[bytes] | None = None


#: Bytes of one message's digest (``engine/send_order.py``).
DIGEST_BYTES = 8


def _pack(ids: Sequence[int]) -> bytes:
    return struct.pack(f">{len(ids)}q", *ids)


def _unpack(data: bytes | None) -> list[int]:
    data = data or b""
    return list(struct.unpack(f">{len(data) // 8}q", data))


def _digests(data: bytes | None) -> list[bytes] | None:
    if data is None:
        return None
    return [data[i : i + DIGEST_BYTES] for i in range(0, len(data), DIGEST_BYTES)]


def _record(row: Sequence[Any]) -> SendRecord:
    """A record from the columns ``state, ids, written_at (ms), digests``."""
    return SendRecord(SendState(row[0]), _unpack(row[1]), row[2], _digests(row[3]))


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
        return _record(row)

    def reserve(
        self,
        writer: str,
        step: int,
        part: int,
        chunk: int,
        ids: Sequence[int],
        written_at: int,
        digests: Sequence[bytes],
    ) -> SendRecord:
        """Record ``ids``, ``written_at`` and ``digests`` unless an attempt of it recorded first.

        Returns the record that holds: this one (state STAMPED), or the first
        attempt's, whose ids and time this attempt must use instead.
        """
        key = (self.queue_id, writer, step, part, chunk)
        row = self.store.execute(
            RESERVE,
            (*key, SendState.STAMPED.value, _pack(ids), written_at, b"".join(digests)),
            what="reserving ids for a send",
        ).one()
        if row is not None and row[0]:
            return SendRecord(SendState.STAMPED, list(ids), written_at, list(digests))
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
        return [_record(row) for row in rows]

    def records_of_part(self, writer: str, step: int, part: int) -> dict[int, SendRecord]:
        """The record of each chunk an attempt of one part of a step reserved, by chunk."""
        rows = self.store.rows(
            READ_PART, (self.queue_id, writer, step, part), what="reading the send log"
        )
        return {int(row[0]): _record(row[1:]) for row in rows}

    def mark_done(self, writer: str, step: int, part: int, chunk: int) -> None:
        """Record that the send's messages were released (a retry then does nothing)."""
        self.mark_done_many([(writer, step, part, chunk)])

    def mark_done_many(self, keys: Sequence[tuple[str, int, int, int]]) -> None:
        """``mark_done`` for many sends, concurrently."""
        self.store.execute_many(
            [(SET_STATE, (SendState.DONE.value, self.queue_id, *key)) for key in keys],
            what="recording send progress",
        )
