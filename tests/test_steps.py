"""Replayable receives and idempotent sends: what the Spark connector stands on (both stores)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from spark_queue import QueueClient, SparkQueueError
from spark_queue.errors import BackendUnavailable
from spark_queue.queue import Queue
from spark_queue.store.buckets import Buckets
from spark_queue.store.journal import Journal
from spark_queue.store.send_log import SendLog

# Each test runs on a MemoryStore and on Cassandra (conftest.py's ``client``).
pytestmark = pytest.mark.both_stores


def payloads_of(queue: Queue) -> list[bytes]:
    """Everything visible, received and acked."""
    seen = []
    while deliveries := queue.receive(100):
        seen += [d.payload for d in deliveries]
        queue.ack_batch([d.receipt for d in deliveries])
    return seen


def test_a_replayed_step_returns_the_same_deliveries(client: QueueClient) -> None:
    queue = client.create_queue("steps", bucket_size=5)
    queue.send_batch([str(i).encode() for i in range(12)])

    first = queue.steps.receive("query-1", 7, 0, 4, buckets=[0, 1])
    replay = queue.steps.receive("query-1", 7, 0, 4, buckets=[0, 1])
    other_part = queue.steps.receive("query-1", 7, 1, 4, buckets=[2])

    assert [d.payload for d in first] == [b"0", b"1", b"2", b"3"]
    assert [(d.id, d.receipt, d.delivery_count) for d in replay] == [
        (d.id, d.receipt, d.delivery_count) for d in first
    ]
    assert [d.payload for d in other_part] == [b"10", b"11"]
    assert queue.stats().in_flight == 6  # the replay leased nothing more


def test_acking_a_step_acks_every_part_once(client: QueueClient) -> None:
    queue = client.create_queue("ack-steps", bucket_size=5)
    queue.send_batch([str(i).encode() for i in range(10)])
    queue.steps.receive("q", 1, 0, 5, buckets=[0])
    queue.steps.receive("q", 1, 1, 5, buckets=[1])

    assert queue.steps.ack("q", 1) == (10, 0)
    assert queue.steps.ack("q", 1) == (0, 0)  # idempotent: a restarted query commits again
    assert queue.stats().total == 0
    # a step never recorded before is received afresh
    assert queue.steps.receive("q", 1, 0, 5) == []


def test_ack_step_counts_messages_redelivered_elsewhere_as_stale(client: QueueClient) -> None:
    queue = client.create_queue("stale-steps", visibility_timeout=0.2)
    queue.send(b"slow")
    queue.steps.receive("q", 1, 0, 1)
    time.sleep(0.3)
    (other,) = queue.receive(1)  # the lease ran out; another consumer got it

    assert queue.steps.ack("q", 1) == (0, 1)
    queue.ack(other.receipt)


def test_a_leased_step_replays_the_same_leases_and_acks_what_it_still_holds(
    client: QueueClient,
) -> None:
    queue = client.create_queue("leased-steps", bucket_size=4, visibility_timeout=0.5)
    queue.send_batch([str(i).encode() for i in range(8)])

    # (a first attempt skips the journal's read, and still records what it leased)
    first = queue.steps.receive_leased("q", 1, 0, 3, buckets=[0], first_attempt=True)
    replay = queue.steps.receive_leased("q", 1, 0, 3, buckets=[0])
    queue.steps.receive_leased("q", 1, 1, 4, buckets=[1], visibility_timeout=60)

    assert first.payloads == [b"0", b"1", b"2"]
    assert list(zip(replay.ids, replay.leases, replay.delivery_counts, strict=True)) == list(
        zip(first.ids, first.leases, first.delivery_counts, strict=True)
    )
    time.sleep(0.6)  # part 0's leases ran out (no driver renews them here)
    taken = queue.receive(1, buckets=[0])  # another consumer took the oldest of them
    assert [d.payload for d in taken] == [b"0"]

    # the other consumer's delivery is not acked by the step, the rest are
    assert queue.steps.ack("q", 1) == (6, 1)
    assert queue.stats(exact=True).total == 2  # message 0 (held elsewhere) and 3 (never read)
    queue.ack(taken[0].receipt)
    assert payloads_of(queue) == [b"3"]


def test_send_once_twice_sends_once(client: QueueClient) -> None:
    queue = client.create_queue("once")

    ids = queue.send_batch_once("writer", 3, 0, [b"a", b"b"], headers={"h": "1"})
    again = queue.send_batch_once("writer", 3, 0, [b"a", b"b"], headers={"h": "1"})
    other_part = queue.send_batch_once("writer", 3, 1, [b"c"])

    assert again == ids
    assert other_part != ids
    assert sorted(payloads_of(queue)) == [b"a", b"b", b"c"]


def test_send_once_crashing_mid_write_is_finished_by_the_retry(client: QueueClient) -> None:
    queue = client.create_queue("once-crash", bucket_size=4)
    original = queue.buckets.insert
    calls = 0

    def half_then_crash(messages: Any, now: int, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            original(messages[: len(messages) // 2], now, **kwargs)
            raise BackendUnavailable("injected: connection lost mid-write")
        original(messages, now, **kwargs)

    queue.buckets.insert = half_then_crash  # type: ignore[method-assign]
    batch = [str(i).encode() for i in range(10)]
    with pytest.raises(BackendUnavailable):
        queue.send_batch_once("w", 1, 0, batch)
    # the half that was written is invisible: no consumer can take it yet
    assert queue.peek(20) == []

    ids = queue.send_batch_once("w", 1, 0, batch)

    assert sorted(payloads_of(queue), key=int) == batch
    assert len(set(ids)) == 10


def test_send_once_crashing_before_release_is_released_by_the_retry(client: QueueClient) -> None:
    queue = client.create_queue("once-release")
    original = queue.staging.publish

    def crash(*args: Any, **kwargs: Any) -> None:
        raise BackendUnavailable("injected: driver died before releasing")

    queue.staging.publish = crash  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable):
        queue.send_batch_once("w", 9, 2, [b"x", b"y"])
    assert queue.peek(10) == []
    queue.staging.publish = original  # type: ignore[method-assign]

    queue.send_batch_once("w", 9, 2, [b"x", b"y"])

    assert payloads_of(queue) == [b"x", b"y"]


def test_send_once_repeat_with_other_rows_is_refused(client: QueueClient) -> None:
    queue = client.create_queue("once-mismatch")
    queue.send_batch_once("w", 1, 0, [b"x", b"y"])

    with pytest.raises(SparkQueueError, match="3 messages now, 2 when first sent"):
        queue.send_batch_once("w", 1, 0, [b"x", b"y", b"z"])


def test_send_once_retried_after_release_keeps_deliveries_already_held(
    client: QueueClient,
) -> None:
    # Given a send-once that released its messages, then died before recording DONE
    queue = client.create_queue("once-held")
    original = SendLog.mark_done_many

    def crash_on_done(self: SendLog, *args: Any) -> None:
        raise BackendUnavailable("injected: driver died before recording DONE")

    SendLog.mark_done_many = crash_on_done  # type: ignore[method-assign, assignment]
    try:
        with pytest.raises(BackendUnavailable):
            queue.send_batch_once("w", 4, 0, [b"held", b"free"])
    finally:
        SendLog.mark_done_many = original  # type: ignore[method-assign]
    # and a consumer took one of them meanwhile
    (held,) = queue.receive(1)

    # When the send is retried
    queue.send_batch_once("w", 4, 0, [b"held", b"free"])

    # Then the consumer still holds its delivery: its ack works, nothing is delivered twice
    queue.ack(held.receipt)
    assert payloads_of(queue) == [b"free"]
    assert queue.stats().total == 0


def test_slices_of_a_bucket_receive_only_their_ids_replay_alike_and_ack_with_the_step(
    client: QueueClient,
) -> None:
    queue = client.create_queue("sliced", bucket_size=10)
    ids = queue.send_batch([str(i).encode() for i in range(10)])

    low = queue.steps.receive_slice("q", 3, 0, 10, bucket=0, ids=(0, 4))
    high = queue.steps.receive_slice("q", 3, 1, 10, bucket=0, ids=(4, 10))
    again = queue.steps.receive_slice("q", 3, 0, 10, bucket=0, ids=(0, 4))

    assert [d.id for d in low] == ids[:4] and [d.id for d in high] == ids[4:]
    assert [(d.id, d.receipt) for d in again] == [(d.id, d.receipt) for d in low]
    assert queue.steps.ack("q", 3) == (10, 0)
    assert queue.stats().total == 0
    with pytest.raises(SparkQueueError, match=r"id slice \[8, 12\]: must be a non-empty range"):
        queue.steps.receive_slice("q", 4, 0, 10, bucket=0, ids=(8, 12))


class Crash(Exception):
    """Stands for a process killed at that point."""


def test_a_part_that_died_between_its_lease_and_its_journal_takes_its_messages_back(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a step part whose first attempt leased 4 messages, then died before recording them
    queue = client.create_queue("reclaim", bucket_size=10, visibility_timeout=600)
    ids = queue.send_batch([str(i).encode() for i in range(10)])

    def killed(*_: Any, **__: Any) -> None:
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(Journal, "record", killed)
        with pytest.raises(Crash):
            queue.steps.receive("q", 5, 0, 4, buckets=[0])
        with pytest.raises(Crash):
            queue.steps.receive_slice("q", 5, 1, 3, bucket=0, ids=(6, 10))
    assert queue.stats().in_flight == 7  # hidden for the 600 s of their leases

    # When the parts are tried again (a restarted query replays the step)
    retry = queue.steps.receive("q", 5, 0, 4, buckets=[0], reclaim=True)
    retry_slice = queue.steps.receive_slice("q", 5, 1, 3, bucket=0, ids=(6, 10), reclaim=True)

    # Then they take back exactly what their first attempts leased, counted as one delivery
    assert [d.id for d in retry] == ids[:4]
    assert [d.id for d in retry_slice] == ids[6:9]
    assert {d.delivery_count for d in retry + retry_slice} == {1}
    # and the step's ack covers them: only the three never leased are left
    assert queue.steps.ack("q", 5) == (7, 0)
    assert queue.stats().total == 3


@pytest.mark.parametrize("leased", [True, False], ids=["named buckets", "receipts"])
def test_two_attempts_of_one_part_hand_out_what_the_first_recorded(
    client: QueueClient, leased: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie or a re-attempted stage's task runs the same part at the same time.

    Both find no record (a first attempt does not even look, and two that run
    at once both look before either records), so both lease: the second finds
    the first's messages invisible and takes others. Only the first record may
    count, or the commit acks what the second leased while Spark used the
    first's output: those messages would be lost.
    """
    queue = client.create_queue(f"two-attempts-{int(leased)}", bucket_size=10)
    queue.send_batch([str(i).encode() for i in range(10)])
    if not leased:  # (a first attempt of the named-bucket path does not look at all)
        looks = [None, None]  # each attempt's look before it leases finds nothing
        recorded = Journal.recorded

        def racing(journal: Journal, *key: Any) -> Any:
            return looks.pop() if looks else recorded(journal, *key)

        monkeypatch.setattr(Journal, "recorded", racing)

    def attempt() -> list[int]:
        if leased:
            got = queue.steps.receive_leased("q", 3, 0, 5, buckets=[0], first_attempt=True)
            return got.ids
        return [d.id for d in queue.steps.receive("q", 3, 0, 5, buckets=[0])]

    first, second = attempt(), attempt()

    assert second == first  # the second attempt replays the first record, not its own
    assert queue.steps.ack("q", 3) == (5, 0)
    # what the second attempt leased came back at once, not a visibility timeout later
    rest = queue.receive(10, visibility_timeout=60)
    assert sorted(d.id for d in rest) == sorted(set(range(10)) - set(first))


def test_a_parts_first_deliveries_are_not_read_back(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given buckets the step part has to itself, holding messages never delivered
    queue = client.create_queue("first-deliveries", bucket_size=5)
    ids = queue.send_batch([str(i).encode() for i in range(8)])
    read_back: list[Any] = []
    leases_of = Buckets.leases_of

    def recording(self: Buckets, keys: Any) -> Any:
        read_back.extend(keys)
        return leases_of(self, keys)

    monkeypatch.setattr(Buckets, "leases_of", recording)

    # When the part leases them
    leased = queue.steps.receive_leased("q", 1, 0, 8, buckets=[0, 1], first_attempt=True)

    # Then every one is handed out, and no lease was read back: nobody holds a
    # receipt of a first delivery, so nothing can ack it between scan and lease
    assert leased.ids == ids
    assert read_back == []


def test_a_redelivery_acked_by_its_late_consumer_during_the_lease_is_not_handed_out(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message whose first lease ran out while its consumer still worked on it
    queue = client.create_queue("late-ack", bucket_size=10, visibility_timeout=0.2)
    first, second = queue.send_batch([b"slow", b"fresh"])
    (late,) = queue.receive(1)
    assert late.id == first
    time.sleep(0.3)
    write = Buckets.write_leases_shared

    def acked_first(self: Buckets, *args: Any, **kwargs: Any) -> Any:
        # the late consumer's ack lands between the part's scan and its lease write
        queue.ack(late.receipt)
        return write(self, *args, **kwargs)

    monkeypatch.setattr(Buckets, "write_leases_shared", acked_first)

    # When a step part leases the bucket
    leased = queue.steps.receive_leased("q", 1, 0, 10, buckets=[0], first_attempt=True)

    # Then the acked message is read back and left out; the first delivery is handed out
    assert leased.ids == [second]
