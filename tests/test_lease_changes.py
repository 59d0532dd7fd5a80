"""A receipt's changes hold whatever the consumer's clock (store/lease_changes.py, issue 45 F).

A receive leases with plain writes stamped by the consumer's clock; a
``change_visibility`` or a ``reject`` is a lightweight transaction, stamped by
the node's Paxos ballot. These tests run a host whose write timestamps (the
driver's timestamp generator, a public attribute of its ``Cluster``) are
(and a send's, which it stamps itself) are shifted ahead of the node's clock,
and behind it, send and receive with it, and change its leases right after
receiving them. Before the fix, a clock 0.3 s ahead made the extension report
success and change nothing: the old receipt still acked, and another
consumer received the message while its holder believed it held it. Each runs
on both stores.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from spark_queue import QueueClient, StaleReceipt
from spark_queue.engine import sending
from tests.conftest import Backend
from tests.helpers import client_with_clock_offset

pytestmark = pytest.mark.both_stores

SKEWS = [pytest.param(0.3, id="ahead"), pytest.param(-0.3, id="behind")]


@contextmanager
def host_skewed(
    backend: Backend, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> Iterator[QueueClient]:
    """A client whose write timestamps run ``seconds`` ahead of the store's clock.

    Its driver's, and the timestamp a send chooses itself (while the block runs).
    """
    real_now_us = sending.now_us
    monkeypatch.setattr(sending, "now_us", lambda: real_now_us() + int(seconds * 1_000_000))
    try:
        with client_with_clock_offset(backend, seconds) as client:
            yield client
    finally:
        monkeypatch.setattr(sending, "now_us", real_now_us)


@pytest.mark.parametrize("skew", SKEWS)
def test_an_extension_right_after_a_receive_holds_whatever_the_consumers_clock(
    backend: Backend, client: QueueClient, skew: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two messages sent and received by a host whose clock is off, under a 1 s lease
    queue = client.create_queue("extend", visibility_timeout=1, lanes=1)
    with host_skewed(backend, skew, monkeypatch) as holder:
        holder.queue("extend").send_batch([b"extend-me", b"old-receipt"])
        first, second = holder.queue("extend").receive(2)

        # When the holder extends both leases to 10 minutes right away
        extended = holder.queue("extend").change_visibility(first.receipt, 600)
        holder.queue("extend").change_visibility(second.receipt, 600)

        # Then the old receipts name no delivery any more
        with pytest.raises(StaleReceipt):
            holder.queue("extend").ack(second.receipt)
    # and once the first lease would have ended (the holder gone, its lanes free),
    # another consumer gets only a message sent since, not the extended ones
    queue.send(b"control")
    time.sleep(1.5)
    with backend.client() as other:
        got = other.queue("extend").receive(10, wait=1)
        assert [d.payload for d in got] == [b"control"]
        other.queue("extend").ack(extended)  # the new receipt still names the delivery


@pytest.mark.parametrize("skew", SKEWS)
def test_a_release_right_after_a_receive_shows_the_message_at_once(
    backend: Backend, client: QueueClient, skew: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message sent and received under a 10-minute lease by a host whose clock is off
    queue = client.create_queue("release", visibility_timeout=600, lanes=1)
    with host_skewed(backend, skew, monkeypatch) as holder:
        message_id = holder.queue("release").send(b"give-back")
        (delivery,) = holder.queue("release").receive(1)

        # When it gives the message back right away (as redrive's run does when it ends)
        holder.queue("release").change_visibility(delivery.receipt, 0)

    # Then the message is visible now, not when the 10 minutes end
    assert [d.id for d in queue.peek(10)] == [message_id]


@pytest.mark.parametrize("skew", SKEWS)
def test_a_reject_right_after_a_receive_moves_the_message_whatever_the_consumers_clock(
    backend: Backend, client: QueueClient, skew: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message sent and received by a host whose clock is off, from a queue
    # with a dead-letter queue
    client.create_queue("rejected", lanes=1)
    queue = client.create_queue("work", lanes=1, dead_letter_queue="rejected", max_deliveries=5)
    with host_skewed(backend, skew, monkeypatch) as holder:
        holder.queue("work").send(b"poison")
        (delivery,) = holder.queue("work").receive(1)

        # When it rejects the message right away
        moved = holder.queue("work").reject(delivery.receipt, "bad")

    # Then the message is in the dead-letter queue, and acked where it was
    dead = client.queue("rejected").receive(10)
    assert [(d.id, d.payload) for d in dead] == [(moved, b"poison")]
    counts = queue.stats(exact=True)
    assert (counts.visible, counts.in_flight) == (0, 0)


@pytest.mark.parametrize("skew", SKEWS)
def test_a_losing_attempt_on_a_skewed_host_frees_what_it_leased_at_once(
    backend: Backend, client: QueueClient, skew: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a step part whose first attempt recorded its five messages
    queue = client.create_queue("attempts", bucket_size=10)
    queue.send_batch([str(i).encode() for i in range(10)])
    first = queue.steps.receive_leased("q", 3, 0, 5, buckets=[0], first_attempt=True).ids
    with host_skewed(backend, skew, monkeypatch) as zombie:
        # When a second attempt on a host whose clock is off leases five others, and
        # loses the record
        second = zombie.queue("attempts").steps.receive_leased(
            "q", 3, 0, 5, buckets=[0], first_attempt=True
        )

    # Then it hands out the first's messages, and what it leased is visible at once
    assert second.ids == first
    rest = queue.receive(10, visibility_timeout=60)
    assert sorted(d.id for d in rest) == sorted(set(range(10)) - set(first))
