"""The values a message row is read into and written from, and the clock of its times.

Every stored time is an integer number of milliseconds since the epoch
(``now_ms``); a row's Cassandra TTL is the whole seconds left until its
``expires_at`` (``ttl_left``). ``MESSAGE_COLUMNS`` is the select list of a whole
message row and ``stored_message`` reads such a row, for every scan of messages
(``buckets.py``, ``lane_scans.py``); ``insert_cql`` is the INSERT that writes one
(``message_writes.py``).
"""

from __future__ import annotations

import functools
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

#: The columns of a whole message, in the order ``stored_message`` reads them.
#: ``key`` rides with the payload: the scans that avoid payloads (``Candidate``,
#: sizes, lanes) avoid it too.
MESSAGE_COLUMNS = (
    "id, payload, headers, toUnixTimestamp(enqueued_at), toUnixTimestamp(visible_at),"
    " toUnixTimestamp(expires_at), delivery_count, lease, key, lane"
)
#: Where ``acked`` sits in a row that selects it after ``MESSAGE_COLUMNS``.
_ACKED = 10


class Col:
    """Where each of ``MESSAGE_COLUMNS`` sits in a row, for code that reads rows as read."""

    ID, PAYLOAD, HEADERS, ENQUEUED_AT, VISIBLE_AT, EXPIRES_AT, DELIVERY_COUNT, LEASE, KEY, LANE = (
        range(10)
    )


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message row as read from its bucket.

    ``key`` is None for a keyless message (and for rows written before keys
    were kept); ``lane`` is 0 for rows written before lanes were.
    """

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
    key: str | None = None
    lane: int = 0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A visible message as a receive first sees it: no payload yet."""

    id: int
    bucket: int
    expires_at: int
    delivery_count: int
    lease: int


# Rows per single-partition batch, and their messages' bytes (payload, headers, key):
# far below Cassandra's mutation limit (half a commit-log segment) and kind to the
# heap. A message over BATCH_BYTES goes alone; what one message may weigh is bounded by
# the cluster's limits (store/write_limits.py).
BATCH_ROWS = 2000
BATCH_BYTES = 4 * 1024 * 1024


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
    key: str | None = None


def header_bytes(headers: Mapping[str, str]) -> int:
    """The bytes of header names and values as UTF-8 (as Cassandra stores them)."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in headers.items())


def message_bytes(m: NewMessage) -> int:
    """What ``m`` weighs in a write, and against ``max_message_bytes``: payload, headers, key."""
    size = len(m.payload)
    if m.headers:
        size += header_bytes(m.headers)
    if m.key is not None:
        size += len(m.key.encode())
    return size


def write_chunks(messages: Sequence[NewMessage], bucket_size: int) -> list[list[NewMessage]]:
    """``messages`` as ``MessageWrites.insert`` writes them: one single-partition batch each.

    By bucket, in chunks of at most ``BATCH_ROWS`` rows and ``BATCH_BYTES``
    bytes (``message_bytes``); a larger message goes alone. Cassandra applies
    each write atomically; a send of several is made all or nothing by its
    caller (``engine/sending.py``).
    """
    by_bucket: dict[int, list[list[NewMessage]]] = {}
    sizes: dict[int, int] = {}
    for m in messages:
        bucket = m.id // bucket_size
        size = len(m.payload) if not m.headers and m.key is None else message_bytes(m)
        chunks = by_bucket.get(bucket)
        if chunks is None:
            by_bucket[bucket] = [[m]]
        elif len(chunks[-1]) >= BATCH_ROWS or sizes[bucket] + size > BATCH_BYTES:
            chunks.append([m])
        else:
            chunks[-1].append(m)
            size += sizes[bucket]
        sizes[bucket] = size
    return [chunk for chunks in by_bucket.values() for chunk in chunks]


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


def live_row(row: Sequence[Any]) -> bool:
    """Whether a row of ``MESSAGE_COLUMNS`` holds a message.

    An expired message's cells can outlive its payload briefly.
    """
    return (
        row[Col.PAYLOAD] is not None
        and row[Col.VISIBLE_AT] is not None
        and row[Col.EXPIRES_AT] is not None
    )


def stored_message(row: Sequence[Any], bucket: int) -> StoredMessage | None:
    """A row of ``MESSAGE_COLUMNS`` (and optionally ``acked``) as a message, or None.

    None for a row of an expired message (``live_row``).
    """
    if not live_row(row):
        return None
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
        acked=bool(row[_ACKED]) if len(row) > _ACKED else False,
        key=row[8],
        lane=row[9] or 0,
    )


#: The columns a message INSERT may bind, in order; ``headers`` and ``key`` only
#: when the message has them (``insert_cql``).
INSERT_COLUMNS = (
    "queue_id",
    "bucket",
    "id",
    "payload",
    "headers",
    "enqueued_at",
    "visible_at",
    "expires_at",
    "payload_bytes",
    "lane",
    "key",
)


@functools.cache
def insert_cql(*, headers: bool, keyed: bool, timed: bool) -> str:
    """The INSERT of a message with or without headers and key, at a chosen timestamp or not.

    A message without headers leaves the column out rather than bind a null, and
    a keyless one leaves ``key`` out: a null would be written as a tombstone in
    every such row (for the ``headers`` map, a collection deletion), which each
    later read of the row must process. No message's id is written twice with
    other contents (ids are reserved once), so an absent column hides nothing.
    ``timed``: at a write timestamp the caller chose (a send-once's, ``engine/sending.py``).
    """
    columns = [c for c in INSERT_COLUMNS if (c != "headers" or headers) and (c != "key" or keyed)]
    using = "USING TTL ? AND TIMESTAMP ?" if timed else "USING TTL ?"
    return (
        f"INSERT INTO {{ks}}.messages ({', '.join(columns)}, delivery_count, lease, acked)"
        f" VALUES ({', '.join('?' for _ in columns)}, 0, 0, false) {using}"
    )


class Targeted(Protocol):
    """A write to one message: its place and its expiry."""

    @property
    def bucket(self) -> int: ...

    @property
    def id(self) -> int: ...

    @property
    def expires_at(self) -> int: ...


W = TypeVar("W", bound=Targeted)


def by_shared_values(
    writes: Sequence[W], now: int, shared: Callable[[W], tuple[int, ...]], limit: int
) -> list[tuple[tuple[int, ...], list[int]]]:
    """``writes`` grouped by bucket, ``shared`` values and TTL, at most ``limit`` ids each.

    Each group is ``((bucket, *shared, ttl), ids)``: one ``UPDATE ... WHERE id IN``.
    """
    return group_ids(
        (((w.bucket, *shared(w), ttl_left(w.expires_at, now)), w.id) for w in writes), limit
    )


def by_bucket_and_ttl(
    targets: Iterable[tuple[int, int, int]], now: int, shared: tuple[int, ...], limit: int
) -> list[tuple[tuple[int, ...], list[int]]]:
    """``(bucket, id, expires_at)`` as ``((bucket, *shared, ttl), ids)`` groups, ``limit`` at most.

    ``by_shared_values`` for values every target shares, with no object per target
    (a Spark step's lease writes and its ack).
    """
    return group_ids(
        (((bucket, *shared, ttl_left(expires_at, now)), i) for bucket, i, expires_at in targets),
        limit,
    )


def group_ids(
    keyed: Iterable[tuple[tuple[int, ...], int]], limit: int
) -> list[tuple[tuple[int, ...], list[int]]]:
    """``(key, id)`` pairs as ``(key, ids)`` groups, first seen first, ``limit`` ids at most."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for key, message_id in keyed:
        groups[key].append(message_id)
    return [
        (values, ids[i : i + limit])
        for values, ids in groups.items()
        for i in range(0, len(ids), limit)
    ]
