"""Bucket-level storage of one queue incarnation: the CQL of the message life cycle.

Every message lives in bucket ``id // bucket_size``, one Cassandra partition.
Changes to many messages of one bucket go in one single-partition batch, which
Cassandra applies atomically and in isolation, so costs scale with buckets
touched, not messages. Only the operations that must not race (ack, change of
visibility, the pointers and the id sequence) are lightweight transactions.

Times are integer milliseconds since the epoch throughout.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_queue.store.session import Params, Store, translate_errors

# Rows per single-partition batch, and their payload bytes: far below
# Cassandra's mutation limit (half a commit-log segment) and kind to the heap.
BATCH_ROWS = 2000
BATCH_BYTES = 4 * 1024 * 1024
# Conditional-ack rounds on one bucket before giving up on a contended batch.
ACK_ROUNDS = 8

_COLUMNS = (
    "id, payload, headers, toUnixTimestamp(enqueued_at), toUnixTimestamp(visible_at),"
    " toUnixTimestamp(expires_at), delivery_count, lease"
)
INSERT = (
    "INSERT INTO {ks}.messages (queue_id, bucket, id, payload, headers, enqueued_at, visible_at,"
    " expires_at, delivery_count, lease, acked, payload_bytes, lane)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, false, ?, ?) USING TTL ?"
)
SCAN_VISIBLE = (
    f"SELECT {_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_VISIBLE_AFTER = (
    f"SELECT {_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id > ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_LEASED = (
    f"SELECT {_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
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
    f"SELECT {_COLUMNS}, acked FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
SCAN_CANDIDATES = (
    "SELECT id, toUnixTimestamp(expires_at), delivery_count, lease FROM {ks}.messages"
    " WHERE queue_id = ? AND bucket = ? AND acked = false AND visible_at <= ? LIMIT ?"
    " ALLOW FILTERING"
)
LEASE = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?, delivery_count = ?"
    " WHERE queue_id = ? AND bucket = ? AND id = ?"
)
LEASE_IF = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?, delivery_count = ?"
    " WHERE queue_id = ? AND bucket = ? AND id = ? IF lease = ? AND acked = false"
)
ACK = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
    " IF lease = ? AND acked = false"
)
RELEASE_PENDING = (
    "UPDATE {ks}.messages USING TTL ? SET visible_at = ? WHERE queue_id = ? AND bucket = ?"
    " AND id = ? IF lease = ? AND acked = false"
)
MARK_ACKED = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
)
CHANGE_VISIBILITY = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?"
    " WHERE queue_id = ? AND bucket = ? AND id = ? IF lease = ? AND acked = false"
)
DROP = "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
POINTERS = "SELECT head, sealed_upto FROM {ks}.pointers WHERE queue_id = ?"
SEAL = "UPDATE {ks}.pointers SET sealed_upto = ? WHERE queue_id = ? IF sealed_upto = ?"
ADVANCE_HEAD = "UPDATE {ks}.pointers SET head = ? WHERE queue_id = ? IF head = ?"
TAIL = "SELECT next_id FROM {ks}.sequences WHERE queue_id = ?"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row as read from its bucket."""

    id: int
    bucket: int
    payload: bytes
    headers: Mapping[str, str]
    enqueued_at: int
    visible_at: int
    expires_at: int
    delivery_count: int
    lease: int
    acked: bool = False


@dataclass(frozen=True, slots=True)
class Candidate:
    """A visible message as a receive first sees it: no payload yet."""

    id: int
    bucket: int
    expires_at: int
    delivery_count: int
    lease: int


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message about to be written."""

    id: int
    payload: bytes
    headers: Mapping[str, str]
    enqueued_at: int
    visible_at: int
    expires_at: int
    lane: int = 0


@dataclass(frozen=True, slots=True)
class LeaseWrite:
    """A lease to write on one message (a delivery)."""

    bucket: int
    id: int
    lease: int
    visible_at: int
    delivery_count: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class LeaseCheck:
    """A conditional change keyed by the lease a receipt names."""

    bucket: int
    id: int
    lease: int
    expires_at: int


def now_ms() -> int:
    """Wall time in integer milliseconds, the unit of every stored time."""
    return int(time.time() * 1000)


def ttl_left(expires_at: int, now: int) -> int:
    """Whole seconds until ``expires_at`` (at least 1 so CQL accepts it)."""
    return max(1, math.ceil((expires_at - now) / 1000))


def _stored(row: Sequence[Any], bucket: int) -> StoredMessage | None:
    if row[1] is None or row[4] is None or row[5] is None:
        return None  # cells of an expired message can outlive its payload briefly
    return StoredMessage(
        id=row[0],
        bucket=bucket,
        payload=bytes(row[1]),
        headers=dict(row[2] or {}),
        enqueued_at=row[3] or 0,
        visible_at=row[4],
        expires_at=row[5],
        delivery_count=row[6] or 0,
        lease=row[7] or 0,
        acked=bool(row[8]) if len(row) > 8 else False,
    )


class Buckets:
    """The buckets, pointers and sequence of one queue incarnation.

    Args:
        store: The Cassandra session.
        queue_id: The incarnation (changes when a queue is deleted and re-created).
        bucket_size: Ids per bucket.
    """

    def __init__(self, store: Store, queue_id: uuid.UUID, bucket_size: int) -> None:
        self.store = store
        self.queue_id = queue_id
        self.bucket_size = bucket_size
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

    def bucket_of(self, message_id: int) -> int:
        return message_id // self.bucket_size

    # -- writes ----------------------------------------------------------------

    def insert(self, messages: Sequence[NewMessage], now: int) -> None:
        """Write messages, one single-partition batch per bucket (chunked), concurrently."""
        by_bucket: dict[int, list[Sequence[Any]]] = defaultdict(list)
        for m in messages:
            by_bucket[self.bucket_of(m.id)].append(self._insert_row(m, now))
        self._write_batches(INSERT, by_bucket, payload_index=3, what="sending messages")

    def insert_statement(self, messages: Sequence[NewMessage], now: int) -> tuple[Any, Params]:
        """One single-partition write of ``messages``, for a caller that runs it itself.

        The messages must all be of one bucket, at most ``BATCH_ROWS`` of them
        and about ``BATCH_BYTES`` of payload (the producer's asynchronous path).
        """
        return self._statement(INSERT, [self._insert_row(m, now) for m in messages])

    def _insert_row(self, m: NewMessage, now: int) -> Params:
        return (
            self.queue_id,
            self.bucket_of(m.id),
            m.id,
            m.payload,
            dict(m.headers) or None,
            m.enqueued_at,
            m.visible_at,
            m.expires_at,
            len(m.payload),
            m.lane,
            ttl_left(m.expires_at, now),
        )

    def write_leases(self, leases: Sequence[LeaseWrite], now: int) -> None:
        """Write delivery leases; last writer wins (Cassandra's timestamps pick one)."""
        by_bucket: dict[int, list[Sequence[Any]]] = defaultdict(list)
        for w in leases:
            by_bucket[w.bucket].append(
                (
                    ttl_left(w.expires_at, now),
                    w.lease,
                    w.visible_at,
                    w.delivery_count,
                    self.queue_id,
                    w.bucket,
                    w.id,
                )
            )
        self._write_batches(LEASE, by_bucket, what="leasing received messages")

    def take_leases(
        self, leases: Sequence[LeaseWrite], seen: Mapping[tuple[int, int], int], now: int
    ) -> set[tuple[int, int]]:
        """Write leases only where the lease is still the one a scan saw; return the others.

        A compare-and-set per message, in one conditional batch per bucket: of
        consumers racing for a message exactly one gets it, and the others
        learn so from the answer (no read-back, no duplicate delivery).
        """
        return self._where_lease(
            LEASE_IF,
            {
                (w.bucket, w.id): (
                    ttl_left(w.expires_at, now),
                    w.lease,
                    w.visible_at,
                    w.delivery_count,
                    self.queue_id,
                    w.bucket,
                    w.id,
                    seen[(w.bucket, w.id)],
                )
                for w in leases
            },
            what="leasing received messages",
        )

    def mark_acked(self, rows: Iterable[tuple[int, int, int]], now: int) -> None:
        """Mark ``(bucket, id, expires_at)`` rows acked without a condition (purge)."""
        by_bucket: dict[int, list[Sequence[Any]]] = defaultdict(list)
        for bucket, message_id, expires_at in rows:
            by_bucket[bucket].append((ttl_left(expires_at, now), self.queue_id, bucket, message_id))
        self._write_batches(MARK_ACKED, by_bucket, what="purging messages")

    def _write_batches(
        self,
        cql: str,
        by_bucket: Mapping[int, list[Sequence[Any]]],
        *,
        what: str,
        payload_index: int | None = None,
    ) -> None:
        batches = []
        for rows in by_bucket.values():
            chunk: list[Sequence[Any]] = []
            size = 0
            for row in rows:
                row_bytes = len(row[payload_index]) if payload_index is not None else 64
                if chunk and (len(chunk) >= BATCH_ROWS or size + row_bytes > BATCH_BYTES):
                    batches.append(self._statement(cql, chunk))
                    chunk, size = [], 0
                chunk.append(row)
                size += row_bytes
            if chunk:
                batches.append(self._statement(cql, chunk))
        self.store.execute_many(batches, what=what)

    def _statement(self, cql: str, rows: list[Sequence[Any]]) -> tuple[Any, Params]:
        if len(rows) == 1:
            return self.store.prepare(cql), rows[0]
        return self.store.batch(cql, rows), ()

    # -- conditional changes -------------------------------------------------------

    def ack(self, checks: Sequence[LeaseCheck], now: int) -> set[tuple[int, int]]:
        """Ack each message whose current lease is the given one; return stale ``(bucket, id)``."""
        return self._where_lease(
            ACK,
            {
                (c.bucket, c.id): (
                    ttl_left(c.expires_at, now),
                    self.queue_id,
                    c.bucket,
                    c.id,
                    c.lease,
                )
                for c in checks
            },
            what="acking messages",
        )

    def release_pending(self, writes: Sequence[LeaseWrite], now: int) -> set[tuple[int, int]]:
        """Make messages visible at ``visible_at`` if still never delivered; return the others.

        A send-once retried after its release must not touch a message a
        consumer holds by now (lease set) or has acked already.
        """
        return self._where_lease(
            RELEASE_PENDING,
            {
                (w.bucket, w.id): (
                    ttl_left(w.expires_at, now),
                    w.visible_at,
                    self.queue_id,
                    w.bucket,
                    w.id,
                    0,
                )
                for w in writes
            },
            what="releasing messages",
        )

    def _where_lease(
        self, cql: str, params: Mapping[tuple[int, int], Sequence[Any]], *, what: str
    ) -> set[tuple[int, int]]:
        """Apply ``cql`` (conditional on ``lease`` and ``acked``) row by row; return the misses.

        One conditional batch per bucket: Cassandra applies it only if every
        condition holds, and otherwise returns each row's current lease, so
        the misses are dropped and the rest tried again.
        """
        pending: dict[int, dict[int, Sequence[Any]]] = defaultdict(dict)
        for (bucket, message_id), row_params in params.items():
            pending[bucket][message_id] = row_params
        missed: set[tuple[int, int]] = set()
        for _ in range(ACK_ROUNDS):
            if not pending:
                return missed
            buckets = list(pending)
            statements = [self._statement(cql, list(pending[b].values())) for b in buckets]
            results = self.store.execute_many(statements, what=what)
            for bucket, result in zip(buckets, results, strict=True):
                rows = list(result)
                if rows and rows[0][0]:
                    del pending[bucket]
                    continue
                if len(pending[bucket]) == 1:
                    # A lone conditional update answers without its key columns.
                    missed.update((bucket, i) for i in pending.pop(bucket))
                    continue
                current = {row[3]: (row[4], row[5]) for row in rows if len(row) > 5}
                for message_id, row_params in list(pending[bucket].items()):
                    lease, acked = current.get(message_id, (None, None))
                    if lease != row_params[-1] or acked is not False:
                        missed.add((bucket, message_id))
                        del pending[bucket][message_id]
                if not pending[bucket]:
                    del pending[bucket]
        # Still pending after every round: another process keeps changing the
        # bucket. Report them missed rather than claim a change that did not happen.
        missed.update((b, i) for b, ids in pending.items() for i in ids)
        return missed

    def change_visibility(
        self, check: LeaseCheck, new_lease: int, visible_at: int, now: int
    ) -> bool:
        """Move a leased message's visibility, if ``check.lease`` is still its lease."""
        row = self.store.execute(
            CHANGE_VISIBILITY,
            (
                ttl_left(check.expires_at, now),
                new_lease,
                visible_at,
                self.queue_id,
                check.bucket,
                check.id,
                check.lease,
            ),
            what="changing a message's visibility",
        ).one()
        return bool(row and row[0])

    def take(
        self, checks: Sequence[LeaseCheck], new_lease: int, visible_at: int, now: int
    ) -> list[LeaseCheck]:
        """Lease each unacked message whose lease is still ``check.lease``; return those taken.

        One lightweight transaction per message, run concurrently: for the
        rare moves that must not race (dead letters), where two consumers
        would otherwise both act on the same message.
        """
        results = self.store.execute_many(
            [
                (
                    CHANGE_VISIBILITY,
                    (
                        ttl_left(c.expires_at, now),
                        new_lease,
                        visible_at,
                        self.queue_id,
                        c.bucket,
                        c.id,
                        c.lease,
                    ),
                )
                for c in checks
            ],
            what="taking messages",
        )
        taken = []
        for c, result in zip(checks, results, strict=True):
            row = result.one()
            if row and row[0]:
                taken.append(LeaseCheck(c.bucket, c.id, new_lease, c.expires_at))
        return taken

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
        return [m for row in rows if (m := _stored(row, bucket)) is not None]

    def leased_under(self, bucket: int, lease: int) -> list[StoredMessage]:
        """The unacked messages of ``bucket`` whose current lease is ``lease``, payloads too."""
        rows = self._scan(SCAN_LEASED, (self.queue_id, bucket, lease), bucket)
        return [m for row in rows if (m := _stored(row, bucket)) is not None]

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
            if (m := _stored(row, bucket)) is not None
        }

    def read(self, bucket: int, ids: Sequence[int]) -> list[tuple[StoredMessage, bool]]:
        """The given messages of one bucket with their acked flag."""
        rows = self.store.rows(
            READ_IDS, (self.queue_id, bucket, list(ids)), what="reading messages"
        )
        return [(m, m.acked) for row in rows if (m := _stored(row, bucket)) is not None]

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

    # -- lease renewal (the Spark source's driver) ------------------------------------

    def renew_leases(self, checks: Sequence[LeaseCheck], visible_at: int, now: int) -> set[int]:
        """Move each message's ``visible_at`` if ``check.lease`` is still its lease; return misses.

        One conditional batch per bucket (``IF lease = <recorded> AND acked =
        false`` per row), so a renewal costs a write per bucket, not per
        message, and never revives a lease that ran out and went to another
        consumer meanwhile (or a message acked already). The lease token is
        kept, so the receipts handed out stay valid. Returns the ids missed.
        """
        missed = self._where_lease(
            RELEASE_PENDING,  # the same conditional move of visible_at
            {
                (c.bucket, c.id): (
                    ttl_left(c.expires_at, now),
                    visible_at,
                    self.queue_id,
                    c.bucket,
                    c.id,
                    c.lease,
                )
                for c in checks
            },
            what="renewing leases",
        )
        return {message_id for _, message_id in missed}

    # -- shared-value leases (a named receive, a release) ---------------------------------

    def leases_of(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, bool]]:
        """``(bucket, id) -> (lease, acked)`` for ``keys``: one slice per bucket, concurrently."""
        spans: dict[int, tuple[int, int]] = {}
        for bucket, message_id in keys:
            low, high = spans.get(bucket, (message_id, message_id))
            spans[bucket] = (min(low, message_id), max(high, message_id))
        results = self.store.execute_many(
            [(LEASES_IN, (self.queue_id, b, low, high)) for b, (low, high) in spans.items()],
            what="checking leases",
        )
        wanted = set(keys)
        return {
            (bucket, row[0]): (row[1] or 0, bool(row[2]))
            for bucket, result in zip(spans, results, strict=True)
            for row in result
            if (bucket, row[0]) in wanted
        }

    def write_leases_shared(self, leases: Sequence[LeaseWrite], now: int) -> None:
        """Like ``write_leases``, one statement per bucket and shared values instead of a row each.

        Leases that agree on everything but the id (one lease token for the
        messages of one receive in a bucket, or the 0 of a release) go in one
        ``UPDATE ... WHERE id IN``: Cassandra applies it as one mutation of the
        partition, and the client binds one statement instead of a batch row
        per message (the binding, in Python, cost more than the write).
        """
        groups: dict[tuple[int, int, int, int, int], list[int]] = defaultdict(list)
        for w in leases:
            ttl = ttl_left(w.expires_at, now)
            groups[(w.bucket, w.lease, w.visible_at, w.delivery_count, ttl)].append(w.id)
        statements = [
            (
                LEASE_IN,
                (ttl, lease, visible_at, count, self.queue_id, bucket, ids[i : i + BATCH_ROWS]),
            )
            for (bucket, lease, visible_at, count, ttl), ids in groups.items()
            for i in range(0, len(ids), BATCH_ROWS)
        ]
        self.store.execute_many(statements, what="leasing received messages")

    # -- step acks (the Spark source's commit) -------------------------------------------

    def ack_leased(self, checks: Sequence[LeaseCheck], now: int) -> set[tuple[int, int]]:
        """Ack the messages still under the given leases, without Paxos; return the stale ones.

        For leases a committed Spark step holds (renewed by its driver while
        the step was open): one read of the leases per bucket, then one plain
        ``UPDATE ... SET acked = true WHERE id IN`` per bucket and TTL for the
        messages whose lease is still the recorded one and not acked. The others
        are stale: their lease ran out and another consumer received them (a
        duplicate), or they were acked already. Marking a processed message acked
        never loses it, so a plain write suffices where ``ack`` pays a Paxos round
        per bucket; the only race (a lease running out between the read and the
        write) acks a message this step did process and counts it as not stale.
        """
        held = self.leases_of([(c.bucket, c.id) for c in checks])
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        stale: set[tuple[int, int]] = set()
        for c in checks:
            if held.get((c.bucket, c.id)) == (c.lease, False):
                groups[(c.bucket, ttl_left(c.expires_at, now))].append(c.id)
            else:
                stale.add((c.bucket, c.id))
        self.store.execute_many(
            [
                (ACK_IN, (ttl, self.queue_id, bucket, ids[i : i + BATCH_ROWS]))
                for (bucket, ttl), ids in groups.items()
                for i in range(0, len(ids), BATCH_ROWS)
            ],
            what="acking messages",
        )
        return stale

    def scan_visible_many(
        self, buckets: Sequence[int], now: int, limit: int
    ) -> list[StoredMessage]:
        """``scan_visible`` of several buckets at once (concurrently), in bucket then id order.

        Up to ``limit`` messages of each bucket: a task reading several buckets
        waits for one round trip instead of one per bucket.
        """
        results = self.store.execute_many(
            [(SCAN_VISIBLE, (self.queue_id, b, now, limit)) for b in buckets],
            what="receiving messages",
        )
        return [
            m
            for bucket, result in zip(buckets, results, strict=True)
            for row in result
            if (m := _stored(row, bucket)) is not None
        ]

    @property
    def tracing(self) -> bool:
        """True inside ``traced_scans``: scans go one at a time, each traced."""
        return self._traces is not None


LEASES_IN = (
    "SELECT id, lease, acked FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id >= ? AND id <= ?"
)


LEASE_IN = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?, delivery_count = ?"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)


ACK_IN = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)

SCAN_SIZES = (
    "SELECT id, payload_bytes FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_SIZES_IN = (
    "SELECT id, payload_bytes FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id >= ? AND id < ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)


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


#: The columns of a whole message, and the reading of such a row, for other
#: scans of messages (``store/lane_scans.py``).
MESSAGE_COLUMNS = _COLUMNS
stored_message = _stored
