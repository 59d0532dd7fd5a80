"""A Spark task's receive as columns: the same leases and rows as the per-message path.

``BucketReceiver.lease_columns`` turns the scanned rows of first deliveries into
columns without a message object each, and hands every other case to
``lease``. Two queues of one store get the same history; one receives through
``lease_columns``, the other through ``lease``, under the same lease token; the
messages handed out and every lease cell left behind must agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_queue import QueueClient
from spark_queue.engine.deliveries import LeasedColumns
from spark_queue.queue import Queue
from spark_queue.store.journal import JournalEntry, pack, unpack
from spark_queue.store.memory import MemoryStore
from spark_queue.store.message_values import LeaseWrite, now_ms

BUCKET_SIZE = 5
TOKEN = 4242
TIMEOUT_MS = 60_000

#: What a message has been through before the receive under test.
FRESH, REDELIVERED, IN_FLIGHT, ACKED = "fresh", "redelivered", "in flight", "acked"


def _with_history(client: QueueClient, name: str, history: Sequence[str]) -> Queue:
    """A queue whose message i was sent and then went through ``history[i]``."""
    queue = client.create_queue(name, bucket_size=BUCKET_SIZE)
    for i, _ in enumerate(history):
        headers = {"n": str(i)} if i % 3 == 0 else None
        queue.send(b"payload %d" % i, headers=headers, key=f"k{i % 2}" if i % 4 == 0 else None)
    now = now_ms()
    expires = now + 3_600_000
    for i, state in enumerate(history):
        bucket = i // BUCKET_SIZE
        if state == REDELIVERED:  # leased once, and the lease ran out
            queue.buckets.write_leases([LeaseWrite(bucket, i, 7, now - 1, 1, expires)], now)
        elif state == IN_FLIGHT:
            queue.buckets.write_leases([LeaseWrite(bucket, i, 7, now + 60_000, 1, expires)], now)
        elif state == ACKED:
            queue.buckets.mark_acked([(bucket, i, expires)], now)
    return queue


def _cells(queue: Queue, count: int) -> list[tuple[Any, ...]]:
    """Each message's lease, count, acked flag and whether it is visible now."""
    now = now_ms()
    stored = queue.buckets.read_many([(i // BUCKET_SIZE, i) for i in range(count)])
    return [
        (m.id, m.lease, m.delivery_count, m.acked, m.visible_at <= now)
        for m in sorted(stored.values(), key=lambda m: m.id)
    ]


def _as_rows(queue: Queue, leased: LeasedColumns) -> list[tuple[Any, ...]]:
    """The columns as rows; the times must be the stored ones (the two queues' sends ran
    at different moments, so their times are compared to their own rows)."""
    stored = queue.buckets.read_many(list(zip(leased.buckets, leased.ids, strict=True)))
    for i, (bucket, message_id) in enumerate(zip(leased.buckets, leased.ids, strict=True)):
        m = stored[(bucket, message_id)]
        assert (leased.enqueued_at[i], leased.expires_at[i]) == (m.enqueued_at, m.expires_at)
    return list(
        zip(
            leased.ids,
            leased.buckets,
            [bytes(p) for p in leased.payloads],
            [dict(h) if h else None for h in leased.headers],
            leased.delivery_counts,
            leased.keys,
            leased.leases,
            strict=True,
        )
    )


def _check_alike(client: QueueClient, history: Sequence[str], count: int, hint: int = 1) -> None:
    run = uuid.uuid4().hex[:8]
    columns = _with_history(client, f"by-columns-{run}", history)
    objects = _with_history(client, f"by-objects-{run}", history)
    buckets = list(range(-(-len(history) // BUCKET_SIZE)))
    # With K > 1 a receive picks at random among the oldest: the same draws on both sides
    for queue in (columns, objects):
        queue._receiving.named._claims.rng.seed(run)

    got = columns._receiving.named.lease_columns(buckets, count, TIMEOUT_MS, hint, token=TOKEN)
    want = LeasedColumns.of(
        objects._receiving.named.lease(buckets, count, TIMEOUT_MS, hint, token=TOKEN)
    )

    assert _as_rows(columns, got) == _as_rows(objects, want)
    assert len(unpack(got.journal())) == len(unpack(want.journal())) == len(got)
    assert _cells(columns, len(history)) == _cells(objects, len(history))


@pytest.mark.both_stores
def test_first_deliveries_and_mixed_buckets_lease_alike(client: QueueClient) -> None:
    first_only = [FRESH] * 7
    _check_alike(client, first_only, 10)  # the column path itself
    mixed = [FRESH, REDELIVERED, IN_FLIGHT, ACKED, FRESH, FRESH, REDELIVERED, FRESH]
    _check_alike(client, mixed, 10)  # a redelivery: through ``lease``
    _check_alike(client, [FRESH] * 9, 4)  # more than asked for: through ``lease``
    _check_alike(client, [FRESH] * 5, 4, hint=2)  # one more than asked for, among 8 oldest


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(st.sampled_from([FRESH, REDELIVERED, IN_FLIGHT, ACKED]), max_size=14),
    count=st.integers(min_value=1, max_value=16),
    hint=st.integers(min_value=1, max_value=3),
)
def test_any_history_leases_alike(history: list[str], count: int, hint: int) -> None:
    with QueueClient(store=MemoryStore()) as client:
        _check_alike(client, history, count, hint)


def test_the_columns_journal_is_the_entries_journal() -> None:
    columns = LeasedColumns(
        ids=[3, 9],
        buckets=[0, 1],
        payloads=[b"a", b"b"],
        headers=[None, {"h": "v"}],
        enqueued_at=[1, 2],
        delivery_counts=[1, 2],
        keys=[None, "k"],
        leases=[5, 5],
        expires_at=[100, 200],
    )
    entries = [JournalEntry(0, 3, 5, 100, 1), JournalEntry(1, 9, 5, 200, 2)]
    assert columns.journal() == pack(entries)
