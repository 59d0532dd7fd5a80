"""Progress records of idempotent sends, one per (writer, step, part, chunk) and queue.

The first attempt of a send reserves its record with a lightweight
transaction: whichever attempt inserts first fixes the ids, the write time and
the messages' expiry, and every later or concurrent attempt adopts them
(``reserve``). Before a publish releases the messages it moves the record to
RELEASING, again by a lightweight transaction (``begin_release``): from then on
no attempt writes or repairs the send again (a repair would send every message
a second time under new ids) and no abort discards it (``discard``: that would
ack messages consumers hold). Both transitions are conditional on the state
they leave, so a release and a discard of one send cannot both win, and no
plain write's timestamp decides between them. DONE, written after the
release, is a plain write and a shortcut for retries only: a retry that misses
it (the write failed, or lost to the RELEASING transaction's later ballot)
releases the same ids again, which changes nothing a consumer holds.

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
from collections import defaultdict
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from spark_queue.errors import SparkQueueError
from spark_queue.store.session import Store

#: ``(writer, step, part, chunk)``: one send.
SendKey = tuple[str, int, int, int]
#: Rounds of ``begin_release`` against attempts that keep moving a send's ids.
_RELEASE_TRIES = 5

_KEY = "queue_id = ? AND writer = ? AND batch_id = ? AND part = ? AND chunk = ?"
_COLUMNS = "state, ids, toUnixTimestamp(written_at), digests, toUnixTimestamp(expires_at)"
READ = f"SELECT {_COLUMNS} FROM {{ks}}.send_log WHERE {_KEY}"
RESERVE = (
    "INSERT INTO {ks}.send_log (queue_id, writer, batch_id, part, chunk, state, ids, written_at,"
    " digests, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
)
READ_STEP = (
    f"SELECT part, chunk, {_COLUMNS} FROM {{ks}}.send_log"
    " WHERE queue_id = ? AND writer = ? AND batch_id = ?"
)
READ_PART = (
    f"SELECT chunk, {_COLUMNS} FROM {{ks}}.send_log"
    " WHERE queue_id = ? AND writer = ? AND batch_id = ? AND part = ?"
)
#: The states of a send not released yet: its attempts may still write and repair it.
_OPEN = "('stamped', 'reserved', 'written')"
SET_STATE = f"UPDATE {{ks}}.send_log SET state = ? WHERE {_KEY}"
MOVE_IDS = f"UPDATE {{ks}}.send_log SET ids = ? WHERE {_KEY} IF ids = ? AND state IN {_OPEN}"
BEGIN_RELEASE = f"UPDATE {{ks}}.send_log SET state = ? WHERE {_KEY} IF ids = ? AND state IN {_OPEN}"
DISCARD = f"UPDATE {{ks}}.send_log SET state = ? WHERE {_KEY} IF state IN {_OPEN}"


class SendState(StrEnum):
    """How far an idempotent send got."""

    STAMPED = "stamped"  # ids, write time and expiry fixed; messages may be partly written
    RELEASING = "releasing"  # every message written; a release may have begun: never write again
    DONE = "done"  # messages released: visible to consumers
    DISCARDED = "discarded"  # dropped by an abort before any release: never released
    # Recorded only by versions whose rows carried their writer's clock (up to 0.1.0):
    RESERVED = "reserved"  # ids chosen; messages may be partly written, all invisible
    WRITTEN = "written"  # every message written, still invisible


class SendRecord(NamedTuple):
    """What the log holds for one send: its state, its ids and the first attempt's time (ms).

    ``digests``: each message's digest, in id order (None in records of versions
    before digests were kept). ``expires_at``: the messages' expiry (ms), fixed
    by the first attempt from the queue's TTL then (None in records of versions
    before it was kept).
    """

    state: SendState
    ids: list[int]
    written_at: int
    digests: list[bytes] | None = None
    expires_at: int | None = None


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
    """A record from the columns ``state, ids, written_at (ms), digests, expires_at (ms)``."""
    return SendRecord(SendState(row[0]), _unpack(row[1]), row[2], _digests(row[3]), row[4])


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
        expires_at: int,
    ) -> SendRecord:
        """Record the ids, time, digests and expiry of a send unless an attempt did first.

        Returns the record that holds: this one (state STAMPED), or the first
        attempt's, whose ids, time and expiry this attempt must use instead.
        """
        key = (self.queue_id, writer, step, part, chunk)
        row = self.store.execute(
            RESERVE,
            (*key, SendState.STAMPED.value, _pack(ids), written_at, b"".join(digests), expires_at),
            what="reserving ids for a send",
        ).one()
        if row is not None and row[0]:
            return SendRecord(SendState.STAMPED, list(ids), written_at, list(digests), expires_at)
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

        Conditional on the record still holding ``old`` and on no release having
        begun: when a concurrent attempt moved them first, or a publish began
        releasing them, those ids hold and this attempt must use them.
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

    def begin_release(
        self, sends: Sequence[tuple[SendKey, Sequence[int]]]
    ) -> dict[SendKey, list[int]]:
        """Move each send to RELEASING before its release; return the ids to release, by key.

        ``sends``: each send's key and the ids its publisher staged. The
        transition is conditional on those ids and on an open state, so it
        holds against a concurrent repair (whose ids then hold and are
        returned instead) and a concurrent discard (the send is then left out:
        nothing of it may be released). A send already RELEASING or DONE (an
        earlier publish) returns its recorded ids: releasing them again changes
        nothing a consumer holds.

        The sends of one writer's step share a partition: they move in one
        conditional batch (concurrent transactions on one partition would
        contend in Paxos). A batch refused as a whole (a repeat, a repair, a
        discard) is settled one send at a time.

        Raises:
            SparkQueueError: A send has no record (older than the log's TTL).
        """
        steps: dict[tuple[str, int], list[tuple[SendKey, list[int]]]] = defaultdict(list)
        for key, ids in sends:
            steps[(key[0], key[1])].append((key, list(ids)))
        groups = list(steps.values())
        rows = [[self._release_row(key, ids) for key, ids in group] for group in groups]
        answers = self.store.execute_many(
            [
                (self.store.prepare(BEGIN_RELEASE), row[0])
                if len(row) == 1
                else (self.store.batch(BEGIN_RELEASE, row), ())
                for row in rows
            ],
            what="recording the release of sends",
        )
        held: dict[SendKey, list[int]] = {}
        for group, answer in zip(groups, answers, strict=True):
            row = answer.one()
            if row is not None and row[0]:
                held.update(group)
                continue
            for key, ids in group:
                ours = self._begin_one(key, ids)
                if ours is not None:
                    held[key] = ours
        return held

    def _release_row(self, key: SendKey, ids: Sequence[int]) -> tuple[Any, ...]:
        return (SendState.RELEASING.value, self.queue_id, *key, _pack(ids))

    def _begin_one(self, key: SendKey, ids: list[int]) -> list[int] | None:
        """``begin_release`` of one send: the ids to release, or None (discarded)."""
        for _ in range(_RELEASE_TRIES):
            row = self.store.execute(
                BEGIN_RELEASE, self._release_row(key, ids), what="recording the release of a send"
            ).one()
            if row is not None and row[0]:
                return ids
            record = self.read(*key)
            if record is None:
                raise SparkQueueError(
                    f"send of writer {key[0]!r}, step {key[1]}, part {key[2]}, chunk {key[3]}:"
                    " its record in the send log is gone (older than 14 days), so it cannot"
                    " be released; its messages stay invisible until their TTL: send them"
                    " again under a new step"
                )
            if record.state in (SendState.RELEASING, SendState.DONE):
                return record.ids
            if record.state is SendState.DISCARDED:
                return None
            ids = record.ids  # moved meanwhile by a repair: its ids hold
        raise AssertionError(f"send log: the ids of {key} keep moving")

    def discard(self, writer: str, step: int) -> list[SendRecord]:
        """Move every send of ``(writer, step)`` not yet released to DISCARDED; return those.

        A send whose release began (RELEASING, DONE) is left as it is: its
        messages may be in a consumer's hands.
        """
        dropped: list[SendRecord] = []
        rows = self.store.rows(
            READ_STEP, (self.queue_id, writer, step), what="reading the send log"
        )
        for row in rows:
            record = _record(row[2:])
            if record.state in (SendState.RELEASING, SendState.DONE, SendState.DISCARDED):
                continue
            key = (self.queue_id, writer, step, int(row[0]), int(row[1]))
            answer = self.store.execute(
                DISCARD, (SendState.DISCARDED.value, *key), what="discarding a send"
            ).one()
            if answer is not None and answer[0]:
                dropped.append(record)
        return dropped

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
