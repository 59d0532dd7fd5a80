"""Acks of a handle's own leases (``own_leases.py``) and a lane's read-ahead (``receiving.py``).

Pure bookkeeping first, then against a real Cassandra node: which path an ack
takes is observed by counting the conditional acks (``Buckets.ack``) and the
ack's reads (``acks.read``); which receives scanned, by counting ``scan_lane``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from spark_queue import QueueClient, StaleReceipt
from spark_queue.defaults import ACK_PLAIN_MARGIN, MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES_LIMIT
from spark_queue.engine import receiving as receiving_module
from spark_queue.engine.lease_memory import MAX_OWN, PRUNE_EVERY, OwnLeases
from spark_queue.store.message_values import LeaseCheck
from tests.helpers import count_ack_paths

if TYPE_CHECKING:
    from tests.conftest import Backend


def _check(message_id: int, lease: int = 7) -> LeaseCheck:
    return LeaseCheck(bucket=0, id=message_id, lease=lease, expires_at=10**13)


def test_take_splits_own_leases_with_the_margin_left_from_the_rest() -> None:
    own = OwnLeases()
    own.record([(0, 1, 7), (0, 2, 7), (0, 3, 7)], deadline=100.0)
    own.record([(0, 4, 7)], deadline=9.0)

    mine, rest = own.take(
        [_check(1), _check(2, lease=8), _check(4), _check(5)], clock=8.0, margin=2.0
    )

    assert [c.id for c in mine] == [1]  # its lease, 92 s left
    # 2: not the lease written here; 4: 1 s left; 5: never leased here
    assert [c.id for c in rest] == [2, 4, 5]
    assert len(own) == 3  # 1 went to its ack; 2, 3 and 4 are still held


def test_take_needs_the_whole_margin_and_forgets_what_it_hands_out() -> None:
    own = OwnLeases()
    own.record([(0, 1, 7), (0, 2, 7)], deadline=10.0)

    near, _ = own.take([_check(1)], clock=8.0 + 1e-6, margin=2.0)  # just under 2 s left
    mine, _ = own.take([_check(2)], clock=8.0, margin=2.0)  # exactly 2 s left
    again, rest = own.take([_check(2)], clock=8.0, margin=2.0)

    assert near == []
    assert [c.id for c in mine] == [2]
    assert again == [] and [c.id for c in rest] == [2]  # a second ack goes the checked way


def test_take_considers_the_last_receipt_of_one_message() -> None:
    own = OwnLeases()
    own.record([(0, 1, 9)], deadline=100.0)

    mine, rest = own.take([_check(1, lease=7), _check(1, lease=9)], clock=0.0, margin=2.0)

    assert [c.lease for c in mine] == [9] and rest == []


def test_forget_clear_prune_and_bound() -> None:
    own = OwnLeases()
    own.record([(0, 1, 7), (0, 2, 7)], deadline=100.0)
    own.forget([(0, 1)])
    assert own.take([_check(1)], clock=0.0, margin=2.0)[0] == []
    own.clear()
    assert len(own) == 0

    own.record([(0, 3, 7)], deadline=1.0)
    own.take([], clock=PRUNE_EVERY + 5.0, margin=2.0)  # past its deadline: pruned
    assert len(own) == 0

    own.record(((1, i, 7) for i in range(MAX_OWN + 5)), deadline=100.0)
    assert len(own) == MAX_OWN
    assert own.take([LeaseCheck(1, 0, 7, 10**13)], clock=0.0, margin=2.0)[0] == []  # oldest gone


def test_read_ahead_is_bounded_by_receives_and_by_bytes() -> None:
    # default message size: three more receives' worth (receives of 10)
    assert receiving_module.scan_limit(10, MAX_MESSAGE_BYTES) == 40
    # larger receives read ahead no more than 8 MiB of the largest messages allowed
    assert receiving_module.scan_limit(1000, MAX_MESSAGE_BYTES) == 1000 + 32
    # a queue of 16 MiB messages reads nothing ahead
    assert receiving_module.scan_limit(10, MAX_MESSAGE_BYTES_LIMIT) == 10


# -- against Cassandra (and a MemoryStore: ``both_stores``, conftest.py) --------------


@pytest.mark.both_stores
def test_ack_of_an_own_lease_is_a_plain_write_and_a_second_ack_is_stale(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("own", visibility_timeout=30, bucket_size=4)
    queue.send_batch([b"a", b"b", b"c", b"d", b"e", b"f"])  # two buckets
    deliveries = queue.receive(6)
    paths = count_ack_paths(queue, monkeypatch)

    assert queue.ack_batch([d.receipt for d in deliveries]) == []

    assert paths == {"conditional": 0, "read": 0}  # no Paxos round, no read
    assert queue.stats(exact=True).total == 0
    with pytest.raises(StaleReceipt, match="1 of 1 receipt"):
        queue.ack(deliveries[0].receipt)  # forgotten once acked: checked, and stale
    assert paths["conditional"] == 1


@pytest.mark.both_stores
def test_receipts_the_handle_cannot_vouch_for_take_the_checked_path(
    client: QueueClient, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("vouch", visibility_timeout=30)
    queue.send_batch([b"moved", b"elsewhere", b"near"])
    moved, elsewhere, near = queue.receive(3)
    extended = queue.change_visibility(moved.receipt, 60)  # a new lease, not remembered
    near_receipt = queue.change_visibility(near.receipt, ACK_PLAIN_MARGIN / 2)
    paths = count_ack_paths(queue, monkeypatch)

    with pytest.raises(StaleReceipt):
        queue.ack(moved.receipt)  # the receipt before change_visibility: stale, as always
    queue.ack_batch([extended, near_receipt])
    with backend.client() as other:  # another handle never leased it
        other_queue = other.queue("vouch")
        other_paths = count_ack_paths(other_queue, monkeypatch)
        other_queue.ack(elsewhere.receipt)

    assert paths["conditional"] == 3 and other_paths["conditional"] == 1
    assert queue.stats(exact=True).total == 0


@pytest.mark.both_stores
def test_an_own_lease_near_its_deadline_or_with_the_path_off_is_checked(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("deadline", visibility_timeout=ACK_PLAIN_MARGIN + 0.5)
    queue.send_batch([b"late", b"off"])
    late, off = queue.receive(2)
    time.sleep(0.6)  # under the margin now, still its lease
    paths = count_ack_paths(queue, monkeypatch)

    queue.ack(late.receipt)
    queue.ack_own_leases = False
    queue.ack(off.receipt)

    assert paths["conditional"] == 2
    assert queue.stats(exact=True).total == 0


@pytest.mark.both_stores
def test_a_lane_scan_reads_ahead_for_the_next_receives_in_order(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("ahead", lanes=1, bucket_size=1000)
    queue.send_batch([str(i).encode() for i in range(45)])
    scans: list[int] = []
    scan = receiving_module.scan_lane

    def counted(*args: object, **kwargs: object) -> object:
        scans.append(1)
        return scan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(receiving_module, "scan_lane", counted)
    # rows read ahead last a second (and the lane's floor as long): time enough
    # for four receives, but not on a stalled machine; the count is what is tested here
    monkeypatch.setattr(receiving_module, "PREFETCH_HOLD_MS", 30_000)
    monkeypatch.setattr(receiving_module, "IDLE_RECHECK", 30.0)

    got = []
    for _ in range(4):
        got.append(queue.receive(10))
        queue.ack_batch([d.receipt for d in got[-1]])

    assert [int(d.payload) for batch in got for d in batch] == list(range(40))
    assert len(scans) == 1  # one scan read 40 rows: the next three receives needed none
    assert [int(d.payload) for d in queue.receive(10)] == list(range(40, 45))
    assert len(scans) == 2


@pytest.mark.both_stores
def test_threads_sharing_one_handle_never_deliver_a_message_twice(
    client: QueueClient,
) -> None:
    # Read-ahead rows go from thread to thread; acked ones must not come back.
    queue = client.create_queue("siblings", lanes=1, bucket_size=100, visibility_timeout=60)
    ids = set(queue.send_batch([b"x"] * 400))
    deliveries: Counter[int] = Counter()
    lock = threading.Lock()

    def consume() -> None:
        while got := queue.receive(7, wait=0.5):
            queue.ack_batch([d.receipt for d in got])
            with lock:
                deliveries.update(d.id for d in got)

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    assert set(deliveries) == ids
    assert max(deliveries.values()) == 1
