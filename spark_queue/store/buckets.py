"""Bucket-level reads of one queue incarnation: message scans, its pointers, seals and drops.

Every message lives in bucket ``id // bucket_size``, one Cassandra partition;
each scan here reads one partition (``ALLOW FILTERING`` filters inside it).
``Buckets`` adds these reads and the queue's pointers (``head``,
``sealed_upto``) and id sequence to the writes of its message rows
(``MessageWrites``, ``message_writes.py``) and the checked changes of their
leases (``LeaseChanges``, ``lease_changes.py``); moving a pointer is a
lightweight transaction. Times are integer milliseconds since the epoch throughout.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from spark_queue.store.driver_errors import translate_errors
from spark_queue.store.lease_changes import LeaseChanges
from spark_queue.store.message_values import (
    MESSAGE_COLUMNS,
    Candidate,
    StoredMessage,
    stored_message,
)
from spark_queue.store.session import Store

SCAN_VISIBLE = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_VISIBLE_AFTER = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id > ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_LEASED = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND lease = ? AND acked = false ALLOW FILTERING"
)
SCAN_UNACKED = (
    "SELECT id, toUnixTimestamp(visible_at), delivery_count, toUnixTimestamp(expires_at)"
    " FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND acked = false ALLOW FILTERING"
)
NEXT_VISIBLE = (
    "SELECT toUnixTimestamp(min(visible_at)) FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false ALLOW FILTERING"
)
ANY_UNACKED = (
    "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND acked = false"
    " LIMIT 1 ALLOW FILTERING"
)
READ_IDS = (
    f"SELECT {MESSAGE_COLUMNS}, acked FROM {{ks}}.messages"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
SCAN_CANDIDATES = (
    "SELECT id, toUnixTimestamp(expires_at), delivery_count, lease FROM {ks}.messages"
    " WHERE queue_id = ? AND bucket = ? AND acked = false AND visible_at <= ? LIMIT ?"
    " ALLOW FILTERING"
)
DROP = "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
POINTERS = "SELECT head, sealed_upto FROM {ks}.pointers WHERE queue_id = ?"
SEAL = "UPDATE {ks}.pointers SET sealed_upto = ? WHERE queue_id = ? IF sealed_upto = ?"
ADVANCE_HEAD = "UPDATE {ks}.pointers SET head = ? WHERE queue_id = ? IF head = ?"
TAIL = "SELECT next_id FROM {ks}.sequences WHERE queue_id = ?"
SCAN_SIZES = (
    "SELECT id, payload_bytes FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_SIZES_IN = (
    "SELECT id, payload_bytes FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id >= ? AND id < ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)


class Buckets(LeaseChanges):
    """The buckets, pointers and sequence of one queue incarnation.

    Args:
        store: The Cassandra session.
        queue_id: The incarnation (changes when a queue is deleted and re-created).
        bucket_size: Ids per bucket.
    """

    def __init__(self, store: Store, queue_id: uuid.UUID, bucket_size: int) -> None:
        super().__init__(store, queue_id, bucket_size)
        self._traces: list[tuple[int, Any]] | None = None

    @contextlib.contextmanager
    def traced_scans(self) -> Iterator[list[tuple[int, Any]]]:
        """Have Cassandra trace each bucket scan made inside the block (for benchmarks).

        Yields a list that fills with ``(bucket, query trace)`` per scan. Meant
        for one thread measuring one receive: scans are slower while traced.
        """
        traces: list[tuple[int, Any]] = []
        self._traces = traces
        try:
            yield traces
        finally:
            self._traces = None

    # -- reads ---------------------------------------------------------------------

    def scan_visible(
        self, bucket: int, now: int, limit: int, after: int | None = None
    ) -> list[StoredMessage]:
        """Up to ``limit`` unacked messages of ``bucket`` visible at ``now``, oldest id first.

        ``after`` skips ids up to and including it (the next page of a peek).
        """
        if after is None:
            rows = self._scan(SCAN_VISIBLE, (self.queue_id, bucket, now, limit), bucket)
        else:
            rows = self._scan(
                SCAN_VISIBLE_AFTER, (self.queue_id, bucket, after, now, limit), bucket
            )
        return [m for row in rows if (m := stored_message(row, bucket)) is not None]

    def leased_under(self, bucket: int, lease: int) -> list[StoredMessage]:
        """The unacked messages of ``bucket`` whose current lease is ``lease``, payloads too."""
        rows = self._scan(SCAN_LEASED, (self.queue_id, bucket, lease), bucket)
        return [m for row in rows if (m := stored_message(row, bucket)) is not None]

    def scan_rows(self, cql: str, params: Sequence[Any], bucket: int) -> list[tuple[Any, ...]]:
        """Run another module's scan of one bucket (``store/lane_scans.py``), traced alike."""
        return self._scan(cql, params, bucket)

    def _scan(self, cql: str, params: Sequence[Any], bucket: int) -> list[tuple[Any, ...]]:
        """Run a scan of one bucket, traced by Cassandra inside ``traced_scans``."""
        traces = self._traces
        if traces is None:
            return self.store.rows(cql, params, what="receiving messages")
        with translate_errors("receiving messages (traced)"):
            result = self.store.session.execute(self.store.prepare(cql), params, trace=True)
            rows = list(result)
            traces.append((bucket, result.get_query_trace(10.0)))
        return rows

    def unacked(self, bucket: int) -> list[tuple[int, int, int, int]]:
        """``(id, visible_at, delivery_count, expires_at)`` of each unacked message."""
        return [
            (row[0], row[1], row[2] or 0, row[3])
            for row in self.store.rows(
                SCAN_UNACKED, (self.queue_id, bucket), what="scanning a bucket"
            )
            if row[1] is not None and row[3] is not None
        ]

    def next_visible_many(self, buckets: Sequence[int]) -> list[int | None]:
        """When the first unacked message of each bucket becomes visible (ms), read at once.

        An aggregate Cassandra computes inside each partition: one row back
        per bucket however many messages are in flight there. None for a
        bucket without unacked messages.
        """
        results = self.store.execute_many(
            [(NEXT_VISIBLE, (self.queue_id, b)) for b in buckets], what="scanning buckets"
        )
        return [next((row[0] for row in result), None) for result in results]

    def probe_visible(self, buckets: Sequence[int], now: int) -> list[bool]:
        """Whether each of ``buckets`` holds a visible message: one scan each, all at once."""
        if self.tracing:
            return [bool(self.scan_candidates(b, now, 1)) for b in buckets]
        results = self.store.execute_many(
            [(SCAN_CANDIDATES, (self.queue_id, b, now, 1)) for b in buckets],
            what="receiving messages",
        )
        return [any(row[1] is not None for row in result) for result in results]

    def has_unacked(self, bucket: int) -> bool:
        return bool(self.store.rows(ANY_UNACKED, (self.queue_id, bucket), what="checking a bucket"))

    def has_unacked_many(self, buckets: Sequence[int]) -> list[bool]:
        """``has_unacked`` for several buckets, read at once."""
        results = self.store.execute_many(
            [(ANY_UNACKED, (self.queue_id, b)) for b in buckets], what="checking buckets"
        )
        return [any(True for _ in result) for result in results]

    def scan_candidates(self, bucket: int, now: int, limit: int) -> list[Candidate]:
        """Like ``scan_visible`` without payloads: a receive reads those only for what it keeps."""
        rows = self._scan(SCAN_CANDIDATES, (self.queue_id, bucket, now, limit), bucket)
        return [
            Candidate(row[0], bucket, row[1], row[2] or 0, row[3] or 0)
            for row in rows
            if row[1] is not None
        ]

    def read_many(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], StoredMessage]:
        """Messages by ``(bucket, id)``, one query per bucket, concurrently."""
        by_bucket: dict[int, list[int]] = defaultdict(list)
        for bucket, message_id in keys:
            by_bucket[bucket].append(message_id)
        results = self.store.execute_many(
            [(READ_IDS, (self.queue_id, b, ids)) for b, ids in by_bucket.items()],
            what="reading messages",
        )
        return {
            (bucket, m.id): m
            for bucket, result in zip(by_bucket, results, strict=True)
            for row in result
            if (m := stored_message(row, bucket)) is not None
        }

    def read(self, bucket: int, ids: Sequence[int]) -> list[tuple[StoredMessage, bool]]:
        """The given messages of one bucket with their acked flag."""
        rows = self.store.rows(
            READ_IDS, (self.queue_id, bucket, list(ids)), what="reading messages"
        )
        return [(m, m.acked) for row in rows if (m := stored_message(row, bucket)) is not None]

    def scan_visible_many(
        self, buckets: Sequence[int], now: int, limit: int
    ) -> list[StoredMessage]:
        """``scan_visible`` of several buckets at once (concurrently), in bucket then id order.

        Up to ``limit`` messages of each bucket: a task reading several buckets
        waits for one round trip instead of one per bucket.
        """
        return [
            m
            for bucket, row in self.scan_visible_rows_many(buckets, now, limit)
            if (m := stored_message(row, bucket)) is not None
        ]

    def scan_visible_rows_many(
        self, buckets: Sequence[int], now: int, limit: int
    ) -> list[tuple[int, Sequence[Any]]]:
        """``scan_visible_many`` as ``(bucket, row of MESSAGE_COLUMNS)``, rows as read.

        For a caller that turns rows into columns without a message object
        each; a row of an expired message (``stored_message`` gives None) is
        left in.
        """
        results = self.store.execute_many(
            [(SCAN_VISIBLE, (self.queue_id, b, now, limit)) for b in buckets],
            what="receiving messages",
        )
        return [
            (bucket, row) for bucket, result in zip(buckets, results, strict=True) for row in result
        ]

    # -- pointers ------------------------------------------------------------------

    def pointers(self, *, serial: bool = False) -> tuple[int, int]:
        """``(head, sealed_upto)``; ``serial`` sees every completed pointer move."""
        row = self.store.execute(
            POINTERS, (self.queue_id,), serial=serial, what="reading queue pointers"
        ).one()
        return (row[0] or 0, row[1] or 0) if row else (0, 0)

    def tail(self) -> int:
        """The sequence's next id: every id below it has been handed out."""
        row = self.store.execute(TAIL, (self.queue_id,), what="reading the id sequence").one()
        return (row[0] or 0) if row else 0

    def seal(self, expected: int, upto: int) -> bool:
        """Seal buckets below ``upto`` if ``sealed_upto`` is still ``expected``."""
        row = self.store.execute(
            SEAL, (upto, self.queue_id, expected), what="sealing buckets"
        ).one()
        return bool(row and row[0])

    def advance_head(self, expected: int, head: int) -> bool:
        row = self.store.execute(
            ADVANCE_HEAD, (head, self.queue_id, expected), what="advancing the queue head"
        ).one()
        return bool(row and row[0])

    def drop(self, buckets: Iterable[int]) -> None:
        """Delete whole bucket partitions: one partition tombstone each."""
        self.store.execute_many(
            [(DROP, (self.queue_id, b)) for b in buckets], what="dropping buckets"
        )

    @property
    def tracing(self) -> bool:
        """True inside ``traced_scans``: scans go one at a time, each traced."""
        return self._traces is not None


def visible_sizes(
    buckets: Buckets, bucket: int, now: int, limit: int, ids: tuple[int, int] | None = None
) -> list[tuple[int, int]]:
    """``(id, payload bytes)`` of up to ``limit`` visible messages of a bucket, oldest first.

    Reads the size column written at send time, not payloads; a message sent
    before that column existed has its payload read instead (only those).
    ``ids`` narrows the scan to the slice ``first <= id < end``.
    """
    params: tuple[Any, ...]
    if ids is None:
        cql, params = SCAN_SIZES, (buckets.queue_id, bucket, now, limit)
    else:
        cql, params = SCAN_SIZES_IN, (buckets.queue_id, bucket, ids[0], ids[1], now, limit)
    rows = buckets.store.rows(cql, params, what="reading message sizes")
    unknown = [row[0] for row in rows if row[1] is None]
    read = {m.id: len(m.payload) for m, _ in buckets.read(bucket, unknown)} if unknown else {}
    return [(row[0], read.get(row[0], 0) if row[1] is None else row[1]) for row in rows]
