"""Read-only CQL behind ``bdq queue describe``: owner rows with their age, and messages by lane.

Nothing here writes. The owner tables say who owns a key and, through
``WRITETIME`` and ``TTL``, when its row was last written (a take or a renewal)
and how long it has left; no table records when an owner first took a key.
The message scan reads the small columns of every unacked row of a bucket, so
``describe`` costs a scan of every live bucket, as ``stats(exact=True)`` does.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from spark_queue.store.session import Store

LANE_OWNERS = (
    "SELECT slice, owner, WRITETIME(owner), TTL(owner) FROM {ks}.lane_ownership"
    " WHERE queue_id = ? AND bucket = 0"
)  # every lane of a queue sits in partition (queue_id, 0): see schema.cql
BUCKET_OWNERS = (
    "SELECT slice, owner, WRITETIME(owner), TTL(owner) FROM {ks}.ownership"
    " WHERE queue_id = ? AND bucket = ?"
)
UNACKED_BY_LANE = (
    "SELECT lane, delivery_count, toUnixTimestamp(enqueued_at), toUnixTimestamp(visible_at),"
    " toUnixTimestamp(expires_at) FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false ALLOW FILTERING"
)


@dataclass(frozen=True, slots=True)
class OwnerRow:
    """One live row of an owner table.

    Attributes:
        bucket: The bucket (0 for a lane).
        slice: The slice of the bucket, or the lane.
        owner: Who holds it.
        written_us: When the row was last written (take or renewal), microseconds since the epoch.
        ttl: Seconds the row has left, None without a TTL.
    """

    bucket: int
    slice: int
    owner: str
    written_us: int
    ttl: int | None


@dataclass(frozen=True, slots=True)
class UnackedRow:
    """The small columns of one unacked message.

    Attributes:
        lane: Its lane as stored (None on rows older than lanes; negative: keyless).
        delivery_count: Times received.
        enqueued_ms: When it was sent, ms since the epoch.
        visible_ms: When it is (or was) visible, ms since the epoch.
        expires_ms: When it expires, ms since the epoch.
    """

    lane: int | None
    delivery_count: int
    enqueued_ms: int
    visible_ms: int
    expires_ms: int


def lane_owners(store: Store, queue_id: uuid.UUID) -> list[OwnerRow]:
    """Every live row of the queue's ``lane_ownership`` (``slice`` is the lane)."""
    rows = store.rows(LANE_OWNERS, (queue_id,), what="reading the owners of lanes")
    return [OwnerRow(0, lane, owner, written, ttl) for lane, owner, written, ttl in rows if owner]


def bucket_owners(store: Store, queue_id: uuid.UUID, buckets: Sequence[int]) -> list[OwnerRow]:
    """Every live row of ``ownership`` for ``buckets`` (one query per bucket, run together)."""
    wanted = sorted(set(buckets))
    results = store.execute_many(
        [(BUCKET_OWNERS, (queue_id, b)) for b in wanted], what="reading the owners of buckets"
    )
    return [
        OwnerRow(bucket, piece, owner, written, ttl)
        for bucket, result in zip(wanted, results, strict=True)
        for piece, owner, written, ttl in result
        if owner
    ]


def unacked_rows(store: Store, queue_id: uuid.UUID, buckets: Sequence[int]) -> list[UnackedRow]:
    """The small columns of every unacked message in ``buckets`` (rows missing a time skipped)."""
    results = store.execute_many(
        [(UNACKED_BY_LANE, (queue_id, b)) for b in buckets], what="scanning buckets by lane"
    )
    return [
        UnackedRow(lane, count or 0, enqueued, visible, expires)
        for result in results
        for lane, count, enqueued, visible, expires in result
        if enqueued is not None and visible is not None and expires is not None
    ]
