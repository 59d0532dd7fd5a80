"""The store's contract, asserted alike on a MemoryStore and on Cassandra.

Each test runs twice through the ``store`` fixture: on a fresh ``MemoryStore``
(the fast tier) and on a real node (marked ``cassandra``). The assertions are
the same, so the memory store may stand in for Cassandra wherever the engine's
semantics are tested (conftest.py's ``both_stores``): message rows, leases and
acks with their stale-lease refusals, id blocks, pointers, drops, the catalog,
owners, the step journal, the send log, counts, lane scans, TTL expiry, and
the shapes in which lightweight transactions and batches answer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from spark_queue import QueueNotFound, SparkQueueError
from spark_queue.config import QueueSettings
from spark_queue.store import acks, catalog, lease_changes
from spark_queue.store.buckets import Buckets, visible_sizes
from spark_queue.store.counts import BucketCounts
from spark_queue.store.ids import IdBlocks
from spark_queue.store.journal import Journal, JournalEntry
from spark_queue.store.lane_scans import busy_lanes, head_rows, lane_visible_at, scan_lane
from spark_queue.store.memory import MemoryStore
from spark_queue.store.message_values import LeaseCheck, LeaseWrite, NewMessage, now_ms
from spark_queue.store.owners import OwnerTable
from spark_queue.store.send_log import SendLog, SendState
from spark_queue.store.session import Store

HOUR = 3_600_000


@pytest.fixture(params=["memory", pytest.param("cassandra", marks=pytest.mark.cassandra)])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    # Asked for here, not as a parameter: the memory run never touches Cassandra.
    real = Store(request.getfixturevalue("keyspace"))
    try:
        yield real
    finally:
        real.close()


def new_queue(store: Store, bucket_size: int = 10) -> tuple[str, uuid.UUID, Buckets]:
    name = f"c{uuid.uuid4().hex[:12]}"
    queue_id = uuid.uuid4()
    assert catalog.register_queue(store, name, queue_id, QueueSettings(bucket_size=bucket_size))
    return name, queue_id, Buckets(store, queue_id, bucket_size)


def message(message_id: int, now: int, *, delay: int = 0, lane: int = 0) -> NewMessage:
    return NewMessage(
        message_id, b"m%d" % message_id, {"n": str(message_id)}, now, now + delay, now + HOUR, lane
    )


def lease(bucket: int, message_id: int, token: int, now: int, count: int = 1) -> LeaseWrite:
    return LeaseWrite(bucket, message_id, token, now + 60_000, count, now + HOUR)


def check(bucket: int, message_id: int, token: int, now: int) -> LeaseCheck:
    return LeaseCheck(bucket, message_id, token, now + HOUR)


def eventually(condition: Callable[[], bool], within: float) -> float:
    """Seconds until ``condition`` held (polled); fails after ``within`` seconds."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < within, "did not happen in time"
        time.sleep(0.05)
    return time.monotonic() - began


# -- the catalog, id blocks, pointers -----------------------------------------------------


def test_catalog_registers_reads_changes_and_unregisters_under_its_conditions(
    store: Store,
) -> None:
    name, queue_id, buckets = new_queue(store)
    settings = QueueSettings(bucket_size=10)
    assert catalog.read_settings(store, name) == (queue_id, settings)
    assert name in catalog.queue_names(store)
    assert buckets.pointers() == (0, 0) and buckets.tail() == 0

    # a second incarnation of the name is refused, and leaves no rows of its own
    other = uuid.uuid4()
    assert not catalog.register_queue(store, name, other, settings)
    assert Buckets(store, other, 10).pointers() == (0, 0)
    assert store.rows("SELECT next_id FROM {ks}.sequences WHERE queue_id = ?", (other,)) == []

    changed = replace(settings, visibility_timeout=9.5, max_deliveries=2, dead_letter_queue="d")
    assert catalog.write_changes(store, name, queue_id, changed, settings)
    assert not catalog.write_changes(store, name, queue_id, settings, settings)  # stale `old`
    assert not catalog.write_changes(store, name, other, settings, changed)  # other incarnation
    assert catalog.read_settings(store, name) == (queue_id, changed)

    assert not catalog.unregister_queue(store, name, other)
    assert catalog.unregister_queue(store, name, queue_id)
    assert catalog.read_settings(store, name) is None
    assert not catalog.unregister_queue(store, name, queue_id)
    catalog.remove_sequence_and_pointers(store, name, queue_id)
    with pytest.raises(QueueNotFound, match="deleted while in use"):
        IdBlocks(store, queue_id, name, 60.0, 10).take(1)


def test_id_blocks_are_monotonic_and_two_allocators_never_overlap(store: Store) -> None:
    name, queue_id, buckets = new_queue(store, bucket_size=64)
    first, second = (IdBlocks(store, queue_id, name, 60.0, 64) for _ in range(2))

    taken: list[list[int]] = [[], []]
    for n in (5, 40, 100, 16, 70):
        for index, blocks in enumerate((first, second)):
            taken[index] += [i for block in blocks.take(n) for i in block.ids]

    assert all(ids == sorted(ids) for ids in taken)  # each hands its ids out in order
    assert not set(taken[0]) & set(taken[1])  # and no id twice
    assert len(set(taken[0])) == len(taken[0]) == 231
    assert buckets.tail() > max(taken[0] + taken[1])


def test_pointers_move_by_compare_and_set_only(store: Store) -> None:
    _, _, buckets = new_queue(store)

    assert buckets.seal(0, 3)
    assert not buckets.seal(0, 5)  # sealed_upto is 3 by now: a stale expectation
    assert buckets.advance_head(0, 2)
    assert not buckets.advance_head(0, 1)

    assert buckets.pointers() == buckets.pointers(serial=True) == (2, 3)


# -- message rows ----------------------------------------------------------------------------


def test_messages_are_scanned_visible_unacked_and_in_id_order(store: Store) -> None:
    _, _, buckets = new_queue(store, bucket_size=10)
    now = now_ms()
    buckets.insert([message(i, now, delay=60_000 if i == 3 else 0) for i in range(14)], now)

    visible = buckets.scan_visible(0, now, 100)
    assert [m.id for m in visible] == [0, 1, 2, 4, 5, 6, 7, 8, 9]  # 3 is delayed
    assert (visible[0].payload, visible[0].headers, visible[0].bucket) == (b"m0", {"n": "0"}, 0)
    assert (visible[0].enqueued_at, visible[0].visible_at) == (now, now)
    assert (visible[0].delivery_count, visible[0].lease, visible[0].acked) == (0, 0, False)
    assert [m.id for m in buckets.scan_visible(0, now, 3, after=4)] == [5, 6, 7]
    assert [m.id for m in buckets.scan_visible_many([0, 1], now, 2)] == [0, 1, 10, 11]
    assert [c.id for c in buckets.scan_candidates(1, now, 10)] == [10, 11, 12, 13]
    assert [i for i, *_ in buckets.unacked(0)] == list(range(10))
    assert buckets.next_visible_many([0, 1, 2]) == [now, now, None]
    assert buckets.probe_visible([0, 1, 2], now) == [True, True, False]
    assert (buckets.has_unacked(1), buckets.has_unacked(2)) == (True, False)
    assert visible_sizes(buckets, 0, now, 3) == [(0, 2), (1, 2), (2, 2)]
    assert visible_sizes(buckets, 0, now, 10, ids=(2, 6)) == [(2, 2), (4, 2), (5, 2)]
    assert sorted(buckets.read_many([(0, 3), (1, 12), (1, 19)])) == [(0, 3), (1, 12)]
    assert [(m.id, acked) for m, acked in buckets.read(0, [7, 2, 2, 99])] == [
        (2, False),
        (7, False),
    ]


def test_leases_and_acks_apply_only_under_the_current_lease(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now) for i in range(4)], now)

    buckets.write_leases([lease(0, 0, 7, now), lease(0, 1, 7, now), lease(0, 2, 8, now)], now)
    assert [m.id for m in buckets.leased_under(0, 7)] == [0, 1]
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [3]  # the others are leased

    # one stale receipt among fresh ones: the rest are acked, the stale one reported
    stale = buckets.ack([check(0, 0, 7, now), check(0, 1, 9, now), check(0, 2, 8, now)], now)
    assert stale == {(0, 1)}
    assert buckets.ack([check(0, 0, 7, now)], now) == {(0, 0)}  # acked already
    assert buckets.ack([check(0, 5, 0, now)], now) == {(0, 5)}  # no such message
    assert [(m.id, a) for m, a in buckets.read(0, [0, 1, 2])] == [(0, True), (1, False), (2, True)]
    assert [i for i, *_ in buckets.unacked(0)] == [1, 3]


def test_take_change_visibility_renew_and_release_refuse_stale_leases(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now) for i in range(4)], now)

    # take_leases: only where the scan's lease is still the one written
    missed = buckets.take_leases(
        [lease(0, 0, 5, now), lease(0, 1, 5, now)], {(0, 0): 0, (0, 1): 4}, now
    )
    assert missed == {(0, 1)}
    # take (one LWT each): the first of two takers wins
    taken = buckets.take([check(0, 1, 0, now), check(0, 2, 0, now)], 6, now + 60_000, now)
    assert [(c.id, c.lease) for c in taken] == [(1, 6), (2, 6)]
    assert buckets.take([check(0, 1, 0, now)], 9, now + 60_000, now) == []
    # change_visibility: the current lease moves, an old one does not
    assert buckets.change_visibility(check(0, 1, 6, now), 11, now, now)
    assert not buckets.change_visibility(check(0, 1, 6, now), 12, now, now)
    # ... and only while it holds: lease 11 ran out at ``now`` (SQS's MessageNotInflight)
    assert not buckets.change_visibility(check(0, 1, 11, now), 13, now + 60_000, now + 1)
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [1, 3]
    # renew keeps the lease, moves visible_at; misses are ids under other leases or acked
    buckets.ack([check(0, 2, 6, now)], now)
    assert buckets.renew_leases([check(0, 0, 5, now), check(0, 2, 6, now)], now + 1, now) == {2}
    assert buckets.renew_leases([check(0, 1, 6, now)], now + 1, now) == {1}


def test_shared_leases_step_acks_purge_and_drop(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now) for i in range(6)], now)

    buckets.write_leases_shared([lease(0, i, 3, now) for i in range(4)], now)
    assert buckets.leases_of([(0, 0), (0, 3), (0, 5)]) == {
        (0, 0): (3, False),
        (0, 3): (3, False),
        (0, 5): (0, False),
    }
    buckets.write_leases([lease(0, 2, 4, now)], now)  # redelivered elsewhere
    stale = buckets.ack_leased([check(0, i, 3, now) for i in range(4)], now)
    assert stale == {(0, 2)}
    assert [i for i, *_ in buckets.unacked(0)] == [2, 4, 5]

    buckets.mark_acked([(0, 4, now + HOUR)], now)
    assert [i for i, *_ in buckets.unacked(0)] == [2, 5]
    buckets.drop([0])
    assert buckets.read(0, list(range(6))) == [] and not buckets.has_unacked(0)


def test_plain_acks_read_leases_and_write_without_a_condition(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now) for i in range(3)], now)
    buckets.write_leases([lease(0, 0, 7, now), lease(0, 1, 7, now)], now)

    held = acks.read(buckets, [(0, 0), (0, 2), (0, 9)])
    assert held == {(0, 0): acks.Held(7, False, now + 60_000), (0, 2): acks.Held(0, False, now)}
    stale = acks.ack(buckets, [check(0, 0, 7, now), check(0, 1, 8, now)], plain=True)
    assert stale == {(0, 1)}
    acks.write_plain(buckets, [check(0, 1, 7, now)], now)  # an own lease: no read at all
    assert [i for i, *_ in buckets.unacked(0)] == [2]


def test_lane_scans_filter_one_lane_in_id_order(store: Store) -> None:
    _, _, buckets = new_queue(store, bucket_size=20)
    now = now_ms()
    buckets.insert([message(i, now, lane=i % 3, delay=60_000 * (i == 4)) for i in range(9)], now)

    assert [m.id for m in scan_lane(buckets, 0, 1, 3, now, 10)] == [1, 7]  # 4 is delayed
    assert [m.id for m in scan_lane(buckets, 0, 2, 3, now, 1, after=2)] == [5]
    assert [m.id for m in scan_lane(buckets, 0, 0, 1, now, 2)] == [0, 1]  # one lane: no filter
    assert busy_lanes(buckets, 0, now) == [0, 1, 2]
    assert sorted(lane_visible_at(buckets, 0, 1)) == [now, now, now + 60_000]


def test_a_message_row_binds_headers_and_key_only_when_it_has_them(store: Store) -> None:
    _, _, buckets = new_queue(store, bucket_size=20)
    now = now_ms()
    bare = NewMessage(0, b"p", {}, now, now, now + HOUR)
    full = NewMessage(1, b"q", {"h": "v"}, now, now, now + HOUR, lane=2, key="k")
    for m, named in ((bare, set()), (full, {"headers", "key"})):
        cql, params = buckets._insert_row(m, now, None)
        # no null bound: Cassandra would store one as a tombstone in the row
        assert {c for c in ("headers", "key") if f" {c}," in cql} == named
        assert cql.count("?") == len(params) and None not in params
    buckets.insert([bare, full], now)
    got = {m.id: (m.headers, m.key, m.lane) for m in buckets.scan_visible(0, now, 10)}
    assert got == {0: ({}, None, 0), 1: ({"h": "v"}, "k", 2)}


def test_head_rows_give_the_visible_lanes_and_when_the_next_message_is_due(store: Store) -> None:
    _, _, buckets = new_queue(store, bucket_size=20)
    now = now_ms()
    buckets.insert([message(i, now, lane=i % 3, delay=60_000 * (i == 4)) for i in range(6)], now)
    buckets.write_leases([lease(0, 1, 7, now), lease(0, 2, 7, now)], now)  # due at now + 60 s
    acks.write_plain(buckets, [check(0, 5, 0, now)], now)  # acked: not counted at all

    assert head_rows(buckets, 0, now) == ([(0, 0), (3, 0)], now + 60_000)
    buckets.write_leases([lease(0, 0, 7, now), lease(0, 3, 7, now + 1000)], now)
    assert head_rows(buckets, 0, now) == ([], now + 60_000)  # in flight or delayed
    assert head_rows(buckets, 1, now) == ([], None)  # no message at all


# -- owners, journal, send log, counts ---------------------------------------------------------


def test_owners_take_free_keys_extend_and_delete_only_their_own(store: Store) -> None:
    owners = OwnerTable(store, uuid.uuid4(), "lane_ownership")

    assert owners.insert_free("a", [(0, 1), (0, 2)], 60) == {(0, 1), (0, 2)}
    assert owners.insert_free("b", [(0, 2), (0, 3), (1, 0)], 60) == {(0, 3), (1, 0)}
    assert owners.extend("a", [(0, 1), (0, 3)], 60) == {(0, 1)}
    assert owners.delete_own("b", [(0, 1), (0, 3)]) == {(0, 3)}
    assert owners.live_owners([1, 0]) == {(0, 1): "a", (0, 2): "a", (1, 0): "b"}


def test_owner_rows_expire_with_their_ttl(store: Store) -> None:
    owners = OwnerTable(store, uuid.uuid4(), "ownership")
    assert owners.insert_free("a", [(0, 0)], 1) == {(0, 0)}
    assert owners.insert_free("b", [(0, 0)], 60) == set()

    waited = eventually(lambda: not owners.live_owners([0]), within=3.0)

    assert waited <= 2.0  # a TTL of 1 s lasts at most its whole second, plus polling
    assert owners.extend("a", [(0, 0)], 60) == set()  # gone: nothing to renew
    assert owners.insert_free("b", [(0, 0)], 60) == {(0, 0)}


def test_the_first_journal_record_of_a_part_wins_and_forget_drops_the_step(store: Store) -> None:
    journal = Journal(store, uuid.uuid4())
    entries = [JournalEntry(0, i, 7, 10**12, 1) for i in range(3)]

    assert journal.recorded("q", 1, 0) is None
    assert journal.record("q", 1, 0, entries) is None  # this record is the part's
    assert journal.record("q", 1, 0, entries[:1]) == entries  # a second attempt gets the first's
    assert journal.record("q", 1, 1, []) is None
    assert journal.record("q", 1, 2, entries[2:]) is None
    assert journal.recorded("q", 1, 0) == entries and journal.recorded("q", 1, 1) == []
    assert journal.step_entries("q", 1) == entries + entries[2:]

    journal.forget("q", 1)
    assert journal.step_entries("q", 1) == [] and journal.recorded("q", 1, 0) is None


def test_send_log_keeps_the_first_reservation_and_moves_ids_only_from_the_recorded_ones(
    store: Store,
) -> None:
    log = SendLog(store, uuid.uuid4())
    assert log.read("w", 3, 0, 0) is None

    ab, c = [b"digest-a", b"digest-b"], [b"digest-c"]
    first = (SendState.STAMPED, [5, 6], 1_000, ab, 61_000)
    assert log.reserve("w", 3, 0, 0, [5, 6], 1_000, ab, 61_000) == first
    # a later (or concurrent) attempt gets the first one's ids, time, digests and expiry
    assert log.reserve("w", 3, 0, 0, [8, 9], 2_000, ab[::-1], 2_000) == first
    assert log.reserve("w", 3, 0, 1, [7], 1_500, c, 9_000) == (
        SendState.STAMPED,
        [7],
        1_500,
        c,
        9_000,
    )

    assert log.move_ids("w", 3, 0, 0, [5, 6], [5, 10]) == [5, 10]
    assert log.move_ids("w", 3, 0, 0, [5, 6], [5, 11]) == [5, 10]  # moved already: theirs hold
    # a release of the old ids gets the moved ones; then no id moves any more
    assert log.begin_release([(("w", 3, 0, 0), [5, 6])]) == {("w", 3, 0, 0): [5, 10]}
    assert log.move_ids("w", 3, 0, 0, [5, 10], [5, 12]) == [5, 10]
    log.mark_done("w", 3, 0, 0)

    assert log.read("w", 3, 0, 0) == (SendState.DONE, [5, 10], 1_000, ab, 61_000)
    assert log.read("w", 3, 0, 1) == (SendState.STAMPED, [7], 1_500, c, 9_000)
    assert log.read("w", 4, 0, 0) is None
    # the records of one part, by chunk: what a retry lays its rows out by
    assert log.records_of_part("w", 3, 0) == {
        0: (SendState.DONE, [5, 10], 1_000, ab, 61_000),
        1: (SendState.STAMPED, [7], 1_500, c, 9_000),
    }
    assert log.records_of_part("w", 3, 1) == {}
    # a discard takes what no release began, once; a release then leaves it out
    assert log.discard("w", 3) == [(SendState.STAMPED, [7], 1_500, c, 9_000)]
    assert log.discard("w", 3) == []
    assert log.begin_release([(("w", 3, 0, 1), [7])]) == {}
    assert log.read("w", 3, 0, 1) == (SendState.DISCARDED, [7], 1_500, c, 9_000)


def test_the_newest_write_timestamp_wins_whatever_the_order_of_arrival(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    stamp = now * 1000
    buckets.insert([message(1, now, delay=HOUR - 1)], now, timestamp=stamp)
    buckets.release_shared({stamp + 1: [lease(0, 1, 0, now - 60_000)]}, now)
    buckets.insert([message(1, now, delay=HOUR - 1)], now, timestamp=stamp)  # arrives last, older

    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [1]
    # a write with the driver's clock (now, after ``stamp``) beats both
    buckets.write_leases([lease(0, 1, 7, now)], now)
    assert buckets.scan_visible(0, now, 10) == []
    # an ack at a later timestamp beats a later-arriving older insert
    buckets.mark_acked([(0, 1, now + HOUR)], now, timestamp=stamp + 2)
    buckets.insert([message(1, now)], now, timestamp=stamp)
    assert buckets.leases_of([(0, 1)]) == {(0, 1): (7, True)}
    # a deleted partition shadows older writes that arrive after the deletion
    buckets.drop([0])
    buckets.insert([message(2, now)], now, timestamp=stamp)
    assert buckets.scan_visible(0, now, 10) == []


def test_one_release_writes_each_group_at_its_own_timestamp(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    stamp = now * 1000
    buckets.insert([message(i, now, delay=HOUR - 1) for i in (1, 2)], now, timestamp=stamp)
    # message 2 invisible again, written later than message 1's release will be
    buckets.insert([message(2, now, delay=HOUR - 1)], now, timestamp=stamp + 5)
    release = {i: LeaseWrite(0, i, 0, now - 1, 0, now + HOUR) for i in (1, 2)}

    buckets.release_shared({stamp + 1: [release[1], release[2]]}, now)
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [1]  # 2's release is older
    # now message 1 invisible again, later than its release and earlier than 2's next one
    buckets.insert([message(1, now, delay=HOUR - 1)], now, timestamp=stamp + 3)
    buckets.release_shared({stamp + 1: [release[1]], stamp + 6: [release[2]]}, now)
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [2]


def test_a_release_moves_only_visible_at_and_loses_to_a_later_lease(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    stamp = now * 1000
    buckets.insert([message(i, now, delay=HOUR - 1) for i in (1, 2, 3)], now, timestamp=stamp)
    assert buckets.scan_visible(0, now, 10) == []
    release = [LeaseWrite(0, i, 9, now - 1, 9, now + HOUR) for i in (1, 2)]
    buckets.release_shared({stamp + 1: release}, now)

    visible = buckets.scan_visible(0, now, 10)
    assert [m.id for m in visible] == [1, 2]
    # lease and count stay the insert's: a release writes no lease
    assert [(m.lease, m.delivery_count, m.visible_at) for m in visible] == [(0, 0, now - 1)] * 2
    # a consumer's lease (at the driver's clock) holds against a release repeated after it
    buckets.write_leases([lease(0, 1, 7, now)], now)
    buckets.release_shared({stamp + 1: release}, now)
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [2]
    assert buckets.leases_of([(0, 1)]) == {(0, 1): (7, False)}


def test_a_lightweight_transaction_is_stamped_by_the_store_not_by_the_writer(
    store: Store,
) -> None:
    # Given a message whose row a writer stamped an hour ahead of the store's clock
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(1, now, delay=HOUR - 1)], now, timestamp=(now + HOUR) * 1000)

    # When a lightweight transaction makes it visible: it applies
    assert buckets.renew_leases([check(0, 1, 0, now)], now, now) == set()

    # Then its cell loses to the older write's later timestamp (Paxos ballot time)
    assert buckets.scan_visible(0, now, 10) == []


def test_a_lease_change_shadowed_by_a_write_stamped_ahead_is_redone_until_it_wins(
    store: Store,
) -> None:
    # Given rows whose cells a writer stamped 0.3 s ahead of the store's clock
    _, _, buckets = new_queue(store)
    now = now_ms()
    ahead = (now + 300) * 1000
    buckets.insert([message(i, now, delay=HOUR - 1) for i in (1, 2, 3)], now, timestamp=ahead)

    # When each is changed by a lightweight transaction right away
    changed = buckets.change_visibility(check(0, 1, 0, now), 11, now + 60_000, now)
    taken = buckets.take([check(0, 2, 0, now)], 12, now + 60_000, now)
    late = buckets.release_leases([check(0, 3, 0, now)], now)

    # Then each change holds: redone after the store's clock passed the shadowing write's
    assert changed
    assert [(c.id, c.lease) for c in taken] == [(2, 12)]
    assert late == []
    assert buckets.leases_of([(0, i) for i in (1, 2, 3)]) == {
        (0, 1): (11, False),
        (0, 2): (12, False),
        (0, 3): (0, False),
    }
    assert [m.id for m in buckets.scan_visible(0, now_ms(), 10)] == [3]


def test_a_shadowed_change_whose_lease_runs_out_while_it_waits_is_refused(store: Store) -> None:
    # Given a lease stamped 0.5 s ahead of the store's clock, that ends in 0.1 s
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(1, now, delay=100)], now, timestamp=(now + 500) * 1000)

    # When its holder extends it right away: the change is shadowed, and redone
    # only while the lease holds (as a holder that paused past its lease would)
    changed = buckets.change_visibility(check(0, 1, 0, now), 11, now + 60_000, now)

    # Then it is refused, and the message is visible to others once the lease ended
    assert not changed
    assert buckets.leases_of([(0, 1)]) == {(0, 1): (0, False)}
    assert [m.id for m in buckets.scan_visible(0, now + 100, 10)] == [1]


def test_a_lease_change_shadowed_for_longer_than_the_patience_is_reported_not_made(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given rows stamped an hour ahead, and a patience of a tenth of a second
    monkeypatch.setattr(lease_changes, "LWT_SHADOW_PATIENCE", 0.1)
    _, _, buckets = new_queue(store)
    now = now_ms()
    ahead = (now + HOUR) * 1000
    buckets.insert([message(i, now, delay=HOUR - 1) for i in (1, 2, 3)], now, timestamp=ahead)

    # When the checked changes run, then they say they made nothing, and change nothing
    with pytest.raises(SparkQueueError, match="ahead of Cassandra's clock"):
        buckets.change_visibility(check(0, 1, 0, now), 11, now + 60_000, now)
    assert buckets.take([check(0, 2, 0, now)], 12, now + 60_000, now) == []
    assert buckets.release_leases([check(0, 3, 0, now)], now) == [(0, 3)]
    assert buckets.leases_of([(0, i) for i in (1, 2, 3)]) == dict.fromkeys(
        [(0, 1), (0, 2), (0, 3)], (0, False)
    )
    assert buckets.scan_visible(0, now, 10) == []


def test_bucket_counts_are_scanned_written_and_read_by_range(store: Store) -> None:
    _, queue_id, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now, delay=60_000 * (i == 2)) for i in range(14)], now)
    buckets.write_leases([lease(0, 0, 5, now)], now)
    counts = BucketCounts(store, queue_id)

    scanned = counts.scan([0, 1, 2], now)
    assert [(c.visible, c.in_flight, c.delayed) for c in scanned] == [
        (8, 1, 1),
        (4, 0, 0),
        (0,) * 3,
    ]
    assert scanned[0].next_change == now + 60_000 and scanned[0].oldest_visible == now
    counts.write(scanned)
    counts.write(scanned[1:2])  # one row alone: a plain insert, no batch

    assert counts.read(1, 5) == {1: scanned[1], 2: scanned[2]}


# -- TTL of messages, answers of the statements themselves ---------------------------------------


def test_a_message_row_expires_with_its_ttl(store: Store) -> None:
    _, _, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([replace(message(0, now), expires_at=now + 1000), message(1, now)], now)
    assert [m.id for m in buckets.scan_visible(0, now, 10)] == [0, 1]

    waited = eventually(lambda: [m.id for m in buckets.scan_visible(0, now, 10)] == [1], 3.0)

    assert waited <= 2.0
    assert [m.id for m, _ in buckets.read(0, [0, 1])] == [1]


def test_a_held_ack_keeps_each_message_s_own_ttl(store: Store) -> None:
    _, queue_id, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([replace(message(0, now), expires_at=now + 1000), message(1, now)], now)

    buckets.ack_held([(0, 0, now + 1000), (0, 1, now + HOUR)], now)

    assert [acked for _, acked in buckets.read(0, [0, 1])] == [True, True]
    # message 0's row, its ack too, expires when the message does; message 1's stays
    ids = "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = 0"
    waited = eventually(lambda: [r[0] for r in store.rows(ids, (queue_id,))] == [1], 3.0)
    assert waited <= 2.0


UPDATE_IF = (
    "UPDATE {ks}.messages SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
    " IF lease = ? AND acked = false"
)


def test_conditional_statements_answer_in_cassandras_shapes(store: Store) -> None:
    _, queue_id, buckets = new_queue(store)
    now = now_ms()
    buckets.insert([message(i, now) for i in range(3)], now)

    def answer(cql: str, params: Any) -> list[tuple[Any, ...]]:
        return store.rows(cql, params)

    assert answer(UPDATE_IF, (queue_id, 0, 1, 5)) == [(False, 0, False)]  # its columns, IF order
    assert answer(UPDATE_IF, (queue_id, 0, 9, 5)) == [(False,)]  # no row: [applied] alone
    assert answer(UPDATE_IF, (queue_id, 0, 2, 0)) == [(True,)]
    sequence = "INSERT INTO {ks}.sequences (queue_id, next_id) VALUES (?, 0) IF NOT EXISTS"
    assert answer(sequence, (queue_id,)) == [(False, queue_id, 0)]  # the whole row
    batch = store.batch(UPDATE_IF, [(queue_id, 0, i, 0) for i in (1, 0, 9, 2)])
    (result,) = store.execute_many([(batch, ())], what="a batch")
    assert list(
        result
    ) == [  # a batch adds the key; rows in clustering order, missing ones left out
        (False, queue_id, 0, 0, 0, False),
        (False, queue_id, 0, 1, 0, False),
        (False, queue_id, 0, 2, 0, True),
    ]
    take = (
        "INSERT INTO {ks}.ownership (queue_id, bucket, slice, owner) VALUES (?, ?, ?, ?)"
        " IF NOT EXISTS USING TTL ?"
    )
    first = store.batch(take, [(queue_id, 0, 0, "a", 60), (queue_id, 0, 1, "a", 60)])
    again = store.batch(take, [(queue_id, 0, 1, "b", 60), (queue_id, 0, 2, "b", 60)])
    assert [list(r) for r in store.execute_many([(first, ())], what="a batch")] == [[(True,)]]
    (refused,) = store.execute_many([(again, ())], what="a batch")
    assert list(refused) == [(False, queue_id, 0, 1, "a")]  # IF NOT EXISTS: the whole row
    owners = "SELECT slice, owner FROM {ks}.ownership WHERE queue_id = ? AND bucket = 0"
    assert answer(owners, (queue_id,)) == [(0, "a"), (1, "a")]  # nothing of the refused batch


def test_requests_cassandra_refuses_are_refused(store: Store) -> None:
    _, queue_id, _ = new_queue(store)
    scan = "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"

    with pytest.raises(SparkQueueError, match="LIMIT must be strictly positive"):
        store.rows(scan + " LIMIT ?", (queue_id, 0, 0))
    with pytest.raises(SparkQueueError, match="ALLOW FILTERING"):
        store.rows(scan + " AND acked = false", (queue_id, 0))
    with pytest.raises(SparkQueueError, match="TTL must be greater or equal to 0"):
        store.execute(
            "INSERT INTO {ks}.sequences (queue_id, next_id) VALUES (?, 1) USING TTL ?",
            (queue_id, -1),
        )
    split = store.batch(UPDATE_IF, [(queue_id, 0, 0, 0), (queue_id, 1, 10, 0)])
    with pytest.raises(SparkQueueError, match="cannot span multiple partitions"):
        store.execute_many([(split, ())], what="a batch")


def test_execute_async_hands_its_answer_to_the_callback(store: Store) -> None:
    _, queue_id, _ = new_queue(store)
    got: list[Any] = []

    future = store.execute_async(
        "SELECT next_id FROM {ks}.sequences WHERE queue_id = ?", (queue_id,), what="a read"
    )
    future.add_callbacks(got.append, got.append)

    assert list(future.result()) == [(0,)]
    eventually(lambda: got == [[(0,)]], within=10.0)


def test_the_memory_store_names_a_statement_it_does_not_know() -> None:
    store = MemoryStore()
    with pytest.raises(SparkQueueError, match=r"does not support 'TRUNCATE bdq.messages'"):
        store.execute("TRUNCATE {ks}.messages")
    with pytest.raises(SparkQueueError, match=r"function 'writetime'"):
        store.rows("SELECT writetime(payload) FROM {ks}.messages")
    with pytest.raises(SparkQueueError, match="unconfigured table nothing"):
        store.rows("SELECT a FROM {ks}.nothing")


def test_a_memory_store_seen_from_a_host_ahead_stamps_only_plain_writes_ahead() -> None:
    # Given a message leased by a host whose clock is an hour ahead (plain writes)
    store = MemoryStore()
    _, queue_id, buckets = new_queue(store)
    ahead = Buckets(store.with_clock_offset(3600), queue_id, 10)
    now = now_ms()
    buckets.insert([message(1, now)], now)
    ahead.write_leases([lease(0, 1, 7, now)], now)

    # When that host makes it visible with a lightweight transaction
    assert ahead.renew_leases([check(0, 1, 7, now)], now, now) == set()

    # Then the transaction carried the store's time, as a Paxos ballot does, and lost
    assert buckets.scan_visible(0, now, 10) == []
