"""Acks through a plain write while the lease surely holds (``store/acks.py``).

A fast test of the pure sorting, then the contract against a real Cassandra
node with plain acks turned on (they are opt-in): which path each ack takes is
observed by counting the conditional acks (``Buckets.ack``) and the ack's reads
(own-lease acks are turned off here, so receipts take the read; see
tests/test_own_leases.py for those), and each stale case changes nothing.
"""

from __future__ import annotations

import time

import pytest

from spark_queue import ConnectionSettings, QueueClient, StaleReceipt
from spark_queue.bench.queue_bench import run_queue_bench
from spark_queue.defaults import ACK_PLAIN_MARGIN
from spark_queue.engine.lease_memory import OwnLeases
from spark_queue.queue import Queue
from spark_queue.store import acks
from spark_queue.store.acks import Held
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import LeaseCheck
from tests.helpers import count_ack_paths

MARGIN = 2000


def _check(message_id: int, lease: int = 7) -> LeaseCheck:
    return LeaseCheck(bucket=0, id=message_id, lease=lease, expires_at=10**13)


def test_plan_sorts_receipts_by_lease_acked_and_deadline() -> None:
    now = 1_000_000
    checks = [_check(i) for i in range(7)]
    held = {
        (0, 0): Held(7, False, now + MARGIN),  # exactly the margin left: plain
        (0, 1): Held(7, False, now + MARGIN - 1),  # just under it: conditional
        (0, 2): Held(7, False, now - 5000),  # past its deadline, not taken yet: conditional
        (0, 3): Held(8, False, now + 30_000),  # leased again by someone else: stale
        (0, 4): Held(7, True, now + 30_000),  # acked already: stale
        # (0, 5) is gone: stale
        (0, 6): Held(7, False, None),  # a row whose deadline cell is gone: conditional
    }

    planned = acks.plan(checks, held, now, MARGIN)

    assert [c.id for c in planned.plain] == [0]
    assert [c.id for c in planned.conditional] == [1, 2, 6]
    assert planned.stale == {(0, 3), (0, 4), (0, 5)}


def test_plan_takes_the_last_receipt_of_one_message() -> None:
    held = {(0, 1): Held(9, False, 10**12)}

    planned = acks.plan([_check(1, lease=7), _check(1, lease=9)], held, 0, MARGIN)

    assert [c.lease for c in planned.plain] == [9]
    assert planned.stale == set()


# -- against Cassandra (and a MemoryStore: ``both_stores``, conftest.py) --------------


def _count_conditional(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Turn plain acks on and own-lease acks off (so receipts take the read); count the paths."""
    monkeypatch.setattr(queue, "plain_acks", True)
    monkeypatch.setattr(queue, "ack_own_leases", False)
    return count_ack_paths(queue, monkeypatch)


@pytest.mark.both_stores
def test_plain_ack_acks_once_and_a_second_ack_is_stale(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("plain", visibility_timeout=30, bucket_size=4)
    queue.send_batch([b"a", b"b", b"c", b"d", b"e", b"f"])  # two buckets
    deliveries = queue.receive(6)
    paths = _count_conditional(queue, monkeypatch)

    assert queue.ack_batch([d.receipt for d in deliveries]) == []

    assert paths == {"conditional": 0, "read": 6}  # 30 s of lease left: no Paxos round
    assert queue.stats(exact=True).total == 0
    with pytest.raises(StaleReceipt, match="1 of 1 receipt"):
        queue.ack(deliveries[0].receipt)
    assert queue.ack_batch([d.receipt for d in deliveries], strict=False) == [
        d.receipt for d in deliveries
    ]


@pytest.mark.both_stores
def test_ack_after_the_lease_ran_out_and_another_delivery_is_stale(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("redelivered", visibility_timeout=0.3)
    queue.send(b"job")
    (first,) = queue.receive(1)
    time.sleep(0.5)
    (second,) = queue.receive(1, visibility_timeout=30)  # far from its deadline
    paths = _count_conditional(queue, monkeypatch)

    with pytest.raises(StaleReceipt):
        queue.ack(first.receipt)

    # The new delivery was not acked by the old receipt: it stays in flight, its ack works.
    assert queue.stats(exact=True).total == 1
    queue.ack(second.receipt)
    assert paths == {"conditional": 0, "read": 2}
    assert queue.stats(exact=True).total == 0


@pytest.mark.both_stores
def test_plain_acks_are_opt_in(client: QueueClient) -> None:
    queue = client.create_queue("nodes")

    # On one node a Paxos round is local and the cheaper ack; several nodes: not measured.
    assert queue.plain_acks is False


@pytest.mark.both_stores
def test_ack_near_or_past_the_deadline_goes_through_the_condition(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("near", visibility_timeout=30)
    queue.send_batch([b"near", b"past", b"far"])
    near, past, far = queue.receive(3)
    near_receipt = queue.change_visibility(near.receipt, ACK_PLAIN_MARGIN / 2)
    past_receipt = queue.change_visibility(past.receipt, 0.2)
    time.sleep(0.3)  # past's lease ran out; nobody received it again
    paths = _count_conditional(queue, monkeypatch)

    assert queue.ack_batch([near_receipt, past_receipt, far.receipt]) == []

    assert paths == {"conditional": 2, "read": 3}  # near and past; far was a plain write
    assert queue.stats(exact=True).total == 0
    assert queue.receive(3) == []


@pytest.mark.both_stores
def test_ack_with_the_receipt_before_change_visibility_is_stale(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("moved", visibility_timeout=30)
    queue.send(b"slow")
    (delivery,) = queue.receive(1)
    extended = queue.change_visibility(delivery.receipt, 60)
    paths = _count_conditional(queue, monkeypatch)

    with pytest.raises(StaleReceipt):
        queue.ack(delivery.receipt)
    assert queue.stats(exact=True).total == 1  # the stale ack changed nothing

    queue.ack(extended)
    assert paths == {"conditional": 0, "read": 2}
    assert queue.stats(exact=True).total == 0


@pytest.mark.cassandra
def test_bench_queue_plain_acks_reach_every_receiver_and_lose_nothing(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    conditional: list[int] = []
    ack = Buckets.ack

    def counted(self: Buckets, checks: list[LeaseCheck], now: int) -> set[tuple[int, int]]:
        conditional.append(len(checks))
        return ack(self, checks, now)

    monkeypatch.setattr(Buckets, "ack", counted)
    reads: list[int] = []
    read = acks.read
    monkeypatch.setattr(acks, "read", lambda b, keys: reads.append(len(keys)) or read(b, keys))
    # every receipt takes the read path, as it would with receipts from other handles
    monkeypatch.setattr(OwnLeases, "take", lambda self, checks, clock, margin: ([], list(checks)))

    result = run_queue_bench(
        keyspace, messages=300, recv_threads=2, receive_batch=20, plain_acks=True, baseline=False
    )

    assert result.params.plain_acks
    assert result.distinct == 300 and result.loss_rate == 0 and result.corrupt == 0
    assert result.stale_acks == 0
    assert conditional == []  # every lease had 30 s left: all plain
    assert sum(reads) >= 300  # ... through the read (each receipt once, stale ones again)
