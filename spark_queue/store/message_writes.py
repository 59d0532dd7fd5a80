"""Writes of a queue's message rows: sends, leases and acks, batched per bucket.

Every message lives in bucket ``id // bucket_size``, one Cassandra partition.
Changes to many messages of one bucket go in one single-partition batch, which
Cassandra applies atomically and in isolation, so costs scale with buckets
touched, not messages. Only the changes that must not race (an ack, a change of
visibility, a lease taken from a scan) are lightweight transactions, conditional
on the message's lease and ``acked``.

``MessageWrites`` is the base of ``LeaseChanges`` (``lease_changes.py``: the
changes of one lease under a receipt, redone while a plain write with a later
timestamp shadows them) and so of ``Buckets`` (``buckets.py``), which adds the
scans and the queue's pointers. Times are integer milliseconds since the epoch.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spark_queue.store.message_values import (
    BATCH_ROWS,
    LeaseCheck,
    LeaseWrite,
    NewMessage,
    by_bucket_and_ttl,
    by_shared_values,
    insert_cql,
    ttl_left,
    write_chunks,
)
from spark_queue.store.session import Params, Store

#: One row's write: its statement and its values.
Row = tuple[str, Params]

# Conditional-ack rounds on one bucket before giving up on a contended batch.
ACK_ROUNDS = 8

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
RENEW = (
    "UPDATE {ks}.messages USING TTL ? SET visible_at = ? WHERE queue_id = ? AND bucket = ?"
    " AND id = ? IF lease = ? AND acked = false"
)
MARK_ACKED = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
)
MARK_ACKED_AT = MARK_ACKED.replace("USING TTL ?", "USING TTL ? AND TIMESTAMP ?")
LEASES_IN = (
    "SELECT id, lease, acked FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id >= ? AND id <= ?"
)
LEASE_IN = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?, delivery_count = ?"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
# A send-once's release: only `visible_at` moves; the staged rows' lease and count
# (0, written with them) stand.
RELEASE_IN_AT = (
    "UPDATE {ks}.messages USING TTL ? AND TIMESTAMP ? SET visible_at = ?"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
ACK_IN = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)


class MessageWrites:
    """The message-row writes of one queue incarnation.

    Args:
        store: The Cassandra session.
        queue_id: The incarnation (changes when a queue is deleted and re-created).
        bucket_size: Ids per bucket.
    """

    def __init__(self, store: Store, queue_id: uuid.UUID, bucket_size: int) -> None:
        self.store = store
        self.queue_id = queue_id
        self.bucket_size = bucket_size

    def bucket_of(self, message_id: int) -> int:
        return message_id // self.bucket_size

    # -- writes ----------------------------------------------------------------

    def insert(
        self,
        messages: Sequence[NewMessage],
        now: int,
        *,
        timestamp: int | None = None,
        chunks: Sequence[Sequence[NewMessage]] | None = None,
    ) -> None:
        """Write messages, one single-partition batch per chunk (``write_chunks``), concurrently.

        ``timestamp`` (microseconds) replaces the driver's write timestamp.
        ``chunks``: ``write_chunks`` of the messages, when the caller has them already.
        """
        statements = [
            self._statement_of([self._insert_row(m, now, timestamp) for m in chunk])
            for chunk in (write_chunks(messages, self.bucket_size) if chunks is None else chunks)
        ]
        self.store.execute_many(statements, what="sending messages")

    def insert_statement(
        self, messages: Sequence[NewMessage], now: int, timestamp: int
    ) -> tuple[Any, Params]:
        """One single-partition write of ``messages`` at ``timestamp`` (µs), for its caller to run.

        The messages must all be of one bucket, at most ``BATCH_ROWS`` of them
        and about ``BATCH_BYTES`` of messages (the producer's asynchronous path,
        which repeats it as it is after a transient failure: ``store/retries.py``).
        """
        return self._statement_of([self._insert_row(m, now, timestamp) for m in messages])

    def _insert_row(self, m: NewMessage, now: int, timestamp: int | None) -> Row:
        """The INSERT of ``m`` and its values (``headers`` and ``key`` only when it has them)."""
        headers = (dict(m.headers),) if m.headers else ()
        key = () if m.key is None else (m.key,)
        at = () if timestamp is None else (timestamp,)
        params = (
            self.queue_id,
            self.bucket_of(m.id),
            m.id,
            m.payload,
            *headers,
            m.enqueued_at,
            m.visible_at,
            m.expires_at,
            len(m.payload),
            m.lane,
            *key,
            ttl_left(m.expires_at, now),
            *at,
        )
        cql = insert_cql(headers=bool(headers), keyed=bool(key), timed=bool(at))
        return cql, params

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

    def mark_acked(
        self, rows: Iterable[tuple[int, int, int]], now: int, *, timestamp: int | None = None
    ) -> None:
        """Mark ``(bucket, id, expires_at)`` rows acked without a condition (purge).

        ``timestamp`` (microseconds) replaces the driver's write timestamp.
        """
        by_bucket: dict[int, list[Sequence[Any]]] = defaultdict(list)
        for bucket, message_id, expires_at in rows:
            ttl = ttl_left(expires_at, now)
            by_bucket[bucket].append(
                (ttl, self.queue_id, bucket, message_id)
                if timestamp is None
                else (ttl, timestamp, self.queue_id, bucket, message_id)
            )
        cql = MARK_ACKED if timestamp is None else MARK_ACKED_AT
        self._write_batches(cql, by_bucket, what="purging messages")

    def _write_batches(
        self, cql: str, by_bucket: Mapping[int, list[Sequence[Any]]], *, what: str
    ) -> None:
        self._write_rows(
            {b: [(cql, row) for row in rows] for b, rows in by_bucket.items()}, what=what
        )

    def _write_rows(self, by_bucket: Mapping[int, list[Row]], *, what: str) -> None:
        """Write each bucket's rows (statement and values) in single-partition batches.

        Rows without a payload (leases, acks): chunks of ``BATCH_ROWS``.
        """
        batches = [
            self._statement_of(rows[start : start + BATCH_ROWS])
            for rows in by_bucket.values()
            for start in range(0, len(rows), BATCH_ROWS)
        ]
        self.store.execute_many(batches, what=what)

    def _statement(self, cql: str, rows: list[Sequence[Any]]) -> tuple[Any, Params]:
        if len(rows) == 1:
            return self.store.prepare(cql), rows[0]
        return self.store.batch(cql, rows), ()

    def _statement_of(self, rows: list[Row]) -> tuple[Any, Params]:
        """Like ``_statement``, for rows that may differ in their statement."""
        if len(rows) == 1:
            return self.store.prepare(rows[0][0]), rows[0][1]
        return self.store.batch_of(rows), ()

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
            RENEW,
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
        messages of one receive in a bucket) go in one ``UPDATE ... WHERE id
        IN``: Cassandra applies it as one mutation of the partition, and the
        client binds one statement instead of a batch row per message (the
        binding, in Python, cost more than the write).
        """
        shared = by_shared_values(
            leases, now, lambda w: (w.lease, w.visible_at, w.delivery_count), BATCH_ROWS
        )
        self.write_lease_groups(shared)

    def write_lease_groups(self, groups: Iterable[tuple[tuple[int, ...], Sequence[int]]]) -> None:
        """One ``UPDATE ... WHERE id IN`` per ``((bucket, lease, visible_at, count, ttl), ids)``."""
        statements = [
            (LEASE_IN, (ttl, lease, visible_at, count, self.queue_id, bucket, ids))
            for (bucket, lease, visible_at, count, ttl), ids in groups
        ]
        self.store.execute_many(statements, what="leasing received messages")

    def release_shared(self, releases: Mapping[int, Sequence[LeaseWrite]], now: int) -> None:
        """Make staged rows visible at each release's ``visible_at``; keys are write timestamps.

        A send-once's publish (``engine/staging.py``): the rows were written
        invisible with lease and delivery count 0, which no consumer can have
        changed while they were invisible, so only ``visible_at`` is written,
        one ``UPDATE ... WHERE id IN`` per bucket, delay and TTL: a cell per
        message where a whole lease wrote three. Every timestamp's statements
        go at once (a publish releases several sends, each at its own stamp):
        the timestamps, not the order of arrival, decide which write wins.
        """
        statements = [
            (RELEASE_IN_AT, (ttl, timestamp, visible_at, self.queue_id, bucket, ids))
            for timestamp, writes in releases.items()
            for (bucket, visible_at, ttl), ids in by_shared_values(
                writes, now, lambda w: (w.visible_at,), BATCH_ROWS
            )
        ]
        self.store.execute_many(statements, what="publishing staged messages")

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
        stale = {(c.bucket, c.id) for c in checks if held.get((c.bucket, c.id)) != (c.lease, False)}
        kept = [(c.bucket, c.id, c.expires_at) for c in checks if (c.bucket, c.id) not in stale]
        self.ack_held(kept, now)
        return stale

    def ack_held(self, targets: Iterable[tuple[int, int, int]], now: int) -> None:
        """Mark ``(bucket, id, expires_at)`` acked, no lease read: ``UPDATE ... WHERE id IN``.

        One per bucket and TTL, for messages the caller processed under leases it knows still
        hold (a step its driver renewed, acked well within its visibility timeout): marking
        a processed message acked never loses it, whoever holds it now."""
        groups = by_bucket_and_ttl(targets, now, (), BATCH_ROWS)
        self.store.execute_many(
            [(ACK_IN, (ttl, self.queue_id, bucket, ids)) for (bucket, ttl), ids in groups],
            what="acking messages",
        )
