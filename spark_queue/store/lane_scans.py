"""The CQL of lanes in a bucket: a lane's or a share's visible messages, and which are busy.

All filter inside one bucket partition (``ALLOW FILTERING`` reads that
partition only, as the other scans of ``buckets.py`` do). A queue of one lane
reads without the lane filter: its rows may predate the ``lane`` column
(``QueueSettings.lanes``). Keyless messages of a queue of several lanes carry
the lane ``KEYLESS`` and are read by shares (``engine/shares.py``): an id range
of a bucket, filtered on that lane; a look for free shares reads their ids
alone, an id range and a page at a time.
"""

from __future__ import annotations

from typing import Any

from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import MESSAGE_COLUMNS, StoredMessage, stored_message

SCAN_LANE = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND lane = ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
SCAN_LANE_AFTER = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id > ?"
    " AND lane = ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
LANE_UNACKED = (
    "SELECT toUnixTimestamp(visible_at) FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND lane = ? AND acked = false ALLOW FILTERING"
)
BUSY_LANES = (
    "SELECT id, lane FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    " AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)
HEAD_ROWS = (
    "SELECT id, lane, toUnixTimestamp(visible_at) FROM {ks}.messages WHERE queue_id = ?"
    " AND bucket = ? AND acked = false LIMIT ? ALLOW FILTERING"
)
SCAN_RANGE = (
    f"SELECT {MESSAGE_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ?"
    " AND id >= ? AND id < ? AND lane = ? AND acked = false AND visible_at <= ? LIMIT ?"
    " ALLOW FILTERING"
)

VISIBLE_IDS = (
    "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
    " AND lane = ? AND acked = false AND visible_at <= ? LIMIT ? ALLOW FILTERING"
)


def scan_lane(
    buckets: Buckets,
    bucket: int,
    lane: int,
    lanes: int,
    now: int,
    limit: int,
    after: int | None = None,
) -> list[StoredMessage]:
    """Up to ``limit`` unacked messages of ``lane`` in ``bucket`` visible at ``now``, by id.

    ``after`` skips ids up to and including it: the partition is read from
    there, not from its first row.
    """
    if lanes == 1:
        return buckets.scan_visible(bucket, now, limit, after)
    params: tuple[Any, ...]
    if after is None:
        cql, params = SCAN_LANE, (buckets.queue_id, bucket, lane, now, limit)
    else:
        cql, params = SCAN_LANE_AFTER, (buckets.queue_id, bucket, after, lane, now, limit)
    rows = buckets.scan_rows(cql, params, bucket)
    return [m for row in rows if (m := stored_message(row, bucket)) is not None]


def scan_range(
    buckets: Buckets, bucket: int, ids: tuple[int, int], lane: int, now: int, limit: int
) -> list[StoredMessage]:
    """Up to ``limit`` unacked messages of ``lane`` with ids in ``ids``, visible at ``now``."""
    params = (buckets.queue_id, bucket, ids[0], ids[1], lane, now, limit)
    rows = buckets.scan_rows(SCAN_RANGE, params, bucket)
    return [m for row in rows if (m := stored_message(row, bucket)) is not None]


def visible_lanes(buckets: Buckets, bucket: int, now: int) -> list[tuple[int, int]]:
    """``(id, lane)`` of each message visible in ``bucket`` at ``now``, in id order.

    No payloads read; a row without a lane counts as lane 0.
    """
    rows = buckets.store.rows(
        BUSY_LANES, (buckets.queue_id, bucket, now, buckets.bucket_size), what="looking for lanes"
    )
    return [(row[0], row[1] or 0) for row in rows]


def head_rows(buckets: Buckets, bucket: int, now: int) -> tuple[list[tuple[int, int]], int | None]:
    """What a look for lanes needs of ``bucket``, in one read of its unacked rows (no payloads).

    Returns ``(id, lane)`` of each message visible at ``now``, in id order
    (``visible_lanes``), and when the first of the others becomes visible (ms;
    None: no unacked message), which ``Buckets.next_visible_many`` would read
    with a second scan of the bucket when none is visible.
    """
    rows = buckets.store.rows(
        HEAD_ROWS, (buckets.queue_id, bucket, buckets.bucket_size), what="looking for lanes"
    )
    visible = [(row[0], row[1] or 0) for row in rows if row[2] is not None and row[2] <= now]
    later = [row[2] for row in rows if row[2] is not None and row[2] > now]
    return visible, min(later, default=None)


def visible_ids(
    buckets: Buckets, bucket: int, ids: tuple[int, int], lane: int, now: int, limit: int
) -> list[int]:
    """Ids of up to ``limit`` messages of ``lane`` visible at ``now``, with ids in ``ids``.

    No payloads read: what a look for free shares needs (``engine/head_look.py``).
    """
    rows = buckets.store.rows(
        VISIBLE_IDS,
        (buckets.queue_id, bucket, ids[0], ids[1], lane, now, limit),
        what="looking for keyless messages",
    )
    return [row[0] for row in rows]


def busy_lanes(buckets: Buckets, bucket: int, now: int) -> list[int]:
    """The lanes with a visible message in ``bucket``, the lane of the oldest one first."""
    return list(dict.fromkeys(lane for _, lane in visible_lanes(buckets, bucket, now)))


def lane_visible_at(buckets: Buckets, bucket: int, lane: int) -> list[int]:
    """When each unacked message of ``lane`` in ``bucket`` becomes visible (ms; no payloads)."""
    rows = buckets.store.rows(
        LANE_UNACKED, (buckets.queue_id, bucket, lane), what="looking at a lane"
    )
    return [row[0] for row in rows if row[0] is not None]
