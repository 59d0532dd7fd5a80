"""The queue engine on Cassandra (and a MemoryStore): the semantics of DESIGN.md section 3."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from datetime import UTC
from typing import TYPE_CHECKING, Any

import pytest

from spark_queue import (
    InvalidMessage,
    InvalidSetting,
    MessageTooLarge,
    QueueClient,
    QueueExists,
    QueueNotFound,
    SparkQueueError,
    StaleReceipt,
)
from spark_queue.config import QueueSettings
from spark_queue.engine import receiving
from spark_queue.engine.dead_letters import HEADER_DELIVERIES, HEADER_ORIGINAL_ID, HEADER_SOURCE
from spark_queue.queue import Queue
from spark_queue.store.catalog import register_queue
from spark_queue.store.message_values import now_ms
from tests.helpers import drain

if TYPE_CHECKING:
    from tests.conftest import Backend

# Every test runs on Cassandra (a ``cassandra`` test); those marked ``both_stores``
# run on a MemoryStore as well (conftest.py's ``client`` and ``backend``).
both_stores = pytest.mark.both_stores


# -- send, receive, ack ------------------------------------------------------------


@both_stores
def test_round_trip_keeps_payload_headers_and_order(client: QueueClient) -> None:
    queue = client.create_queue("orders", bucket_size=7)
    ids = [queue.send(f"order-{i}", headers={"n": str(i)}) for i in range(20)]

    deliveries = queue.receive(max_messages=20)

    assert [d.id for d in deliveries] == ids
    assert [d.payload for d in deliveries] == [f"order-{i}".encode() for i in range(20)]
    assert [d.headers for d in deliveries] == [{"n": str(i)} for i in range(20)]
    assert {d.delivery_count for d in deliveries} == {1}
    assert all(d.enqueued_at is not None and d.enqueued_at.tzinfo == UTC for d in deliveries)
    assert [d.bucket for d in deliveries] == [i // 7 for i in ids]
    queue.ack_batch([d.receipt for d in deliveries])
    assert queue.receive(10) == []
    assert queue.stats().total == 0


@both_stores
def test_single_consumer_with_order_hint_one_receives_in_send_order(client: QueueClient) -> None:
    queue = client.create_queue("ordered", bucket_size=10, order_hint=1)
    queue.send_batch([str(i) for i in range(95)])

    received = [int(p) for p in drain(queue, batch=8)]

    assert received == list(range(95))


@both_stores
def test_larger_order_hint_still_delivers_everything_once(client: QueueClient) -> None:
    queue = client.create_queue("loose", bucket_size=10, order_hint=5)
    queue.send_batch([str(i) for i in range(60)])

    received = [int(p) for p in drain(queue, batch=4)]

    assert sorted(received) == list(range(60))
    assert received != list(range(60))  # K=5 picks at random among the oldest 20


@both_stores
def test_send_batch_is_all_or_nothing_on_bad_input(client: QueueClient) -> None:
    queue = client.create_queue("strict", max_message_bytes=10)

    with pytest.raises(
        MessageTooLarge, match=r"11 bytes \(message 3 of 3\).*max_message_bytes of 10"
    ):
        queue.send_batch([b"ok", b"fine", b"x" * 11])
    with pytest.raises(
        InvalidMessage, match=r"payload 42 \(message 2 of 2\): must be bytes or str"
    ):
        queue.send_batch([b"ok", 42])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage, match="keys and values must be str"):
        queue.send_batch([b"a", b"b"], headers=[{"k": "v"}, {"k": 1}])  # type: ignore[dict-item]
    with pytest.raises(InvalidSetting, match="delay -1"):
        queue.send(b"a", delay=-1)

    assert queue.peek(10) == []
    assert queue.buckets.tail() == 0  # not even an id was reserved


# -- visibility timeout, receipts ----------------------------------------------------------


@both_stores
def test_unacked_message_reappears_after_visibility_timeout(client: QueueClient) -> None:
    queue = client.create_queue("vt", visibility_timeout=0.5)
    queue.send(b"job")

    first = queue.receive(1)
    assert queue.receive(1) == []  # invisible while leased
    time.sleep(0.7)
    second = queue.receive(1)

    assert [d.payload for d in second] == [b"job"]
    assert second[0].delivery_count == 2
    assert second[0].receipt != first[0].receipt
    with pytest.raises(StaleReceipt):
        queue.ack(first[0].receipt)
    queue.ack(second[0].receipt)
    assert queue.stats().total == 0


@both_stores
def test_stale_receipts_change_nothing_and_valid_ones_are_acked(client: QueueClient) -> None:
    queue = client.create_queue("acks", bucket_size=3)
    queue.send_batch([b"a", b"b", b"c", b"d"])
    deliveries = queue.receive(4)
    queue.ack(deliveries[0].receipt)

    stale = queue.ack_batch([d.receipt for d in deliveries], strict=False)

    assert stale == [deliveries[0].receipt]
    assert queue.stats().total == 0
    with pytest.raises(StaleReceipt, match="1 of 1 receipt"):
        queue.ack(deliveries[1].receipt)
    with pytest.raises(InvalidSetting, match="not a spark-queue receipt"):
        queue.ack("garbage")


@both_stores
def test_change_visibility_extends_and_releases(client: QueueClient) -> None:
    queue = client.create_queue("cv", visibility_timeout=0.5)
    queue.send(b"slow")
    (delivery,) = queue.receive(1)

    extended = queue.change_visibility(delivery.receipt, 60)
    time.sleep(0.7)
    assert queue.receive(1) == []  # the original 0.5 s lease would have ended
    with pytest.raises(StaleReceipt):
        queue.change_visibility(delivery.receipt, 0)

    queue.change_visibility(extended, 0)
    (again,) = queue.receive(1)
    assert again.payload == b"slow"
    with pytest.raises(StaleReceipt):
        queue.ack(extended)
    queue.ack(again.receipt)


@both_stores
def test_competing_consumers_each_message_acked_exactly_once(client: QueueClient) -> None:
    # Given 300 messages and 4 consumers that all start at the same instant with K=1
    queue = client.create_queue("race", bucket_size=50, order_hint=1, visibility_timeout=60)
    ids = set(queue.send_batch([str(i).encode() for i in range(300)]))
    start = threading.Barrier(4)
    acked: Counter[int] = Counter()
    stale_count = Counter[str]()
    lock = threading.Lock()

    def consume() -> None:
        start.wait()
        while deliveries := queue.receive(10):
            for d in deliveries:
                try:
                    queue.ack(d.receipt)
                except StaleReceipt:
                    with lock:
                        stale_count["stale"] += 1
                else:
                    with lock:
                        acked[d.id] += 1

    # When they race for the same oldest messages
    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    # Then every message was acked by exactly one of them; duplicates only cost stale acks
    assert set(acked) == ids
    assert max(acked.values()) == 1
    assert queue.stats().total == 0


@both_stores
def test_peek_does_not_lease(client: QueueClient) -> None:
    queue = client.create_queue("peek")
    queue.send_batch([b"1", b"2", b"3"])

    peeked = queue.peek(2)
    received = queue.receive(3)

    assert [m.payload for m in peeked] == [b"1", b"2"]
    assert [d.payload for d in received] == [b"1", b"2", b"3"]
    assert {d.delivery_count for d in received} == {1}


# -- delay, TTL, dead letters ----------------------------------------------------------------


@both_stores
def test_delayed_message_is_invisible_until_its_delay_passes(client: QueueClient) -> None:
    queue = client.create_queue("delay")
    queue.send(b"later", delay=1.0)
    queue.send(b"now")

    assert [d.payload for d in queue.receive(10)] == [b"now"]
    stats = queue.stats()
    assert (stats.delayed, stats.in_flight, stats.visible) == (1, 1, 0)
    time.sleep(1.1)
    assert [d.payload for d in queue.receive(10)] == [b"later"]


def test_expired_messages_are_not_delivered(client: QueueClient) -> None:
    queue = client.create_queue("ttl", message_ttl=1)
    queue.send(b"short-lived")
    time.sleep(2.1)

    assert queue.receive(10) == []
    assert queue.stats().total == 0


@both_stores
def test_message_past_max_deliveries_moves_to_dead_letter_queue(client: QueueClient) -> None:
    dead_letters = client.create_queue("orders-dlq")
    queue = client.create_queue(
        "poison", visibility_timeout=0.3, max_deliveries=2, dead_letter_queue="orders-dlq"
    )
    message_id = queue.send(b"bad", headers={"origin": "test"})

    for expected_count in (1, 2):
        (delivery,) = queue.receive(1)
        assert delivery.delivery_count == expected_count
        time.sleep(0.4)  # never acked: the lease runs out
    assert queue.receive(1) == []

    (moved,) = dead_letters.receive(1)
    assert moved.payload == b"bad"
    assert moved.headers == {
        "origin": "test",
        HEADER_SOURCE: "poison",
        HEADER_DELIVERIES: "2",
        HEADER_ORIGINAL_ID: str(message_id),
    }
    assert queue.stats().total == 0


@both_stores
def test_max_deliveries_without_dead_letter_queue_is_rejected(client: QueueClient) -> None:
    with pytest.raises(InvalidSetting, match="max_deliveries 3: needs dead_letter_queue"):
        client.create_queue("nodlq", max_deliveries=3)
    with pytest.raises(QueueNotFound, match="'missing'"):
        client.create_queue("dlq-missing", max_deliveries=3, dead_letter_queue="missing")
    assert client.list_queues() == []


# -- queue life cycle --------------------------------------------------------------------------


@both_stores
def test_create_open_list_delete(client: QueueClient) -> None:
    client.create_queue("b")
    client.create_queue("a", bucket_size=5, visibility_timeout=2.5)

    assert client.list_queues() == ["a", "b"]
    assert client.queue("a").settings.bucket_size == 5
    with pytest.raises(QueueExists, match="'a': already exists"):
        client.create_queue("a")
    assert client.create_queue("a", exist_ok=True).settings.visibility_timeout == 2.5
    client.delete_queue("a")
    with pytest.raises(QueueNotFound, match="'a': does not exist"):
        client.queue("a")
    client.delete_queue("a", missing_ok=True)
    assert client.list_queues() == ["b"]


@both_stores
def test_create_exist_ok_compares_the_settings_given(client: QueueClient) -> None:
    # Given a queue with a 99 s visibility timeout and 8 lanes
    client.create_queue("q", visibility_timeout=99.0, lanes=8)
    # When it is created again, exist_ok, with other values of both
    with pytest.raises(QueueExists) as refused:
        client.create_queue("q", visibility_timeout=10.0, lanes=2, exist_ok=True)
    # Then each difference is named with its current and requested value
    assert refused.value.differences == {"visibility_timeout": (99.0, 10.0), "lanes": (8, 2)}
    assert "visibility_timeout 99.0 (requested 10.0), lanes 8 (requested 2)" in str(refused.value)
    assert "lanes is fixed at creation" in str(refused.value)
    # And settings not given are not compared, equal ones accepted
    assert client.create_queue("q", exist_ok=True).settings.lanes == 8
    assert client.create_queue("q", visibility_timeout=99, exist_ok=True).settings.lanes == 8


@both_stores
def test_recreated_queue_never_shows_old_messages(client: QueueClient) -> None:
    old = client.create_queue("reborn", bucket_size=4)
    old.send_batch([b"old"] * 10)
    old.receive(3)  # some in flight too

    client.delete_queue("reborn")
    new = client.create_queue("reborn", bucket_size=4)
    new.send(b"new")

    assert [m.payload for m in new.peek(20)] == [b"new"]
    assert new.stats().total == 1
    with pytest.raises(QueueNotFound, match="deleted"):
        old.send(b"into the void")


@both_stores
def test_purge_removes_everything_present(client: QueueClient) -> None:
    queue = client.create_queue("purge", bucket_size=5)
    queue.send_batch([b"x"] * 12)
    queue.send(b"delayed", delay=30)
    queue.receive(2)

    assert queue.purge() == 13
    assert queue.stats().total == 0
    queue.send(b"after")
    assert drain(queue) == [b"after"]


@both_stores
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bucket_size": 0}, "bucket_size 0: must be a whole number from 1"),
        ({"visibility_timeout": -5}, "visibility_timeout -5: must be a positive number"),
        ({"order_hint": 0}, "order_hint 0: must be a whole number from 1"),
        ({"message_ttl": 0}, "message_ttl 0"),
        ({"max_message_bytes": 0}, "max_message_bytes 0"),
        ({"seal_delay": 0}, "seal_delay 0"),
    ],
)
def test_invalid_queue_settings_are_rejected_and_nothing_is_created(
    client: QueueClient, settings: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidSetting, match=message):
        client.create_queue("bad", **settings)  # type: ignore[arg-type]
    assert client.list_queues() == []


@both_stores
def test_invalid_names_and_receive_arguments(client: QueueClient) -> None:
    with pytest.raises(InvalidSetting, match="queue name 'no spaces'"):
        client.create_queue("no spaces")
    queue = client.create_queue("args")
    with pytest.raises(InvalidSetting, match="max_messages 0"):
        queue.receive(0)
    with pytest.raises(InvalidSetting, match="visibility_timeout -1"):
        queue.receive(1, visibility_timeout=-1)
    with pytest.raises(InvalidSetting, match="order_hint 0"):
        queue.receive(1, order_hint=0)


# -- review defects (issue 7, section 3) -------------------------------------------------------


@both_stores
@pytest.mark.parametrize("buckets", [None, [0]], ids=["shared", "named-buckets"])
def test_message_acked_between_scan_and_lease_is_not_handed_out_again(
    client: QueueClient, buckets: list[int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message whose first lease ran out, still held (unacked) by its first consumer
    queue = client.create_queue("acked-race", visibility_timeout=0.2)
    queue.send(b"once")
    (first,) = queue.receive(1)
    time.sleep(0.3)
    scans: dict[str, Any] = {"scan_visible": queue.buckets.scan_visible}
    scans["scan_candidates"] = queue.buckets.scan_candidates
    acked = threading.Event()

    def then_ack_first(name: str) -> Any:
        def scan(*args: Any) -> Any:
            found = scans[name](*args)
            if not acked.is_set():
                # the first consumer acks after the second scanned, before its lease lands
                queue.ack(first.receipt)
                acked.set()
            return found

        return scan

    for name in scans:  # whichever scan the receive uses
        setattr(queue.buckets, name, then_ack_first(name))
    scans["scan_lane"] = receiving.scan_lane  # a plain consumer's scan of its lane
    monkeypatch.setattr(receiving, "scan_lane", then_ack_first("scan_lane"))
    scans["scan_range"] = receiving.scan_range  # ... or of its shares (keyless messages)
    monkeypatch.setattr(receiving, "scan_range", then_ack_first("scan_range"))

    # When a second receive scans, then leases the (now acked) message
    again = queue.receive(1, buckets=buckets)

    # Then it is not handed out: its ack could only fail
    assert acked.is_set()
    assert again == []


@both_stores
def test_acked_message_is_not_moved_to_dead_letters(client: QueueClient) -> None:
    dead_letters = client.create_queue("acked-dlq")
    queue = client.create_queue(
        "acked-poison", visibility_timeout=0.2, max_deliveries=1, dead_letter_queue="acked-dlq"
    )
    queue.send(b"done-late")
    (first,) = queue.receive(1)
    time.sleep(0.3)  # the lease ran out: the next receive finds it past max_deliveries
    move = queue._dead_letters.move

    def ack_then_move(*args: Any) -> int:
        queue.ack(first.receipt)  # the slow consumer finished after all
        return move(*args)

    queue._dead_letters.move = ack_then_move  # type: ignore[method-assign]

    assert queue.receive(1) == []

    assert dead_letters.peek(10) == []
    assert queue.stats().total == 0


@both_stores
def test_two_consumers_racing_move_a_message_to_dead_letters_once(
    backend: Backend, client: QueueClient
) -> None:
    dead_letters = client.create_queue("race-dlq")
    client.create_queue(
        "race-poison", visibility_timeout=0.2, max_deliveries=1, dead_letter_queue="race-dlq"
    )
    first_handle = client.queue("race-poison")
    first_handle.send(b"poison")
    first_handle.receive(1)
    time.sleep(0.3)
    # Only a lane's owner receives from it, so two consumers both decide to move
    # one message only when the lane changes owner between a scan and the move:
    # both then move what they scanned, at the same moment.
    with backend.client() as other:
        handles = [first_handle, other.queue("race-poison")]
        now = now_ms()
        scanned = first_handle.buckets.scan_candidates(0, now, 10)
        assert len(scanned) == 1
        meet = threading.Barrier(2, timeout=60)

        def meet_then_move(handle: Queue) -> None:
            meet.wait()
            handle._dead_letters.move(scanned, now)

        threads = [threading.Thread(target=meet_then_move, args=(h,)) for h in handles]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)

    assert [m.payload for m in dead_letters.peek(10)] == [b"poison"]
    assert first_handle.stats().total == 0


# -- what one write may hold --------------------------------------------------------------


@both_stores
def test_header_and_key_bytes_count_against_max_message_bytes(client: QueueClient) -> None:
    # Given a queue of 10-byte messages
    queue = client.create_queue("headed", max_message_bytes=10)

    # When payload, header names and values, and key add up to 10 bytes, as UTF-8
    queue.send(b"1234", headers={"ab": "cd\u00e9"})  # 4 + 2 + 4 ("\u00e9" is 2 bytes)
    queue.send(b"123456789", key="k")  # 9 + 1
    # Then they are sent, and one byte more is refused, naming each part and the limit
    with pytest.raises(
        MessageTooLarge,
        match=r"message of 11 bytes \(payload 4, headers 7\) \(message 2 of 2\): over queue"
        r" 'headed''s max_message_bytes of 10",
    ):
        queue.send_batch([b"ok", b"1234"], headers=[None, {"ab": "cde\u00e9"}])
    with pytest.raises(MessageTooLarge, match=r"message of 11 bytes \(payload 9, key 2\)"):
        queue.send(b"123456789", key="kk")
    assert [d.payload for d in queue.peek(10)] == [b"1234", b"123456789"]


@both_stores
def test_a_batch_refused_by_cassandra_in_one_bucket_writes_none_of_its_messages(
    client: QueueClient,
) -> None:
    # Given a queue of 2-message buckets whose max_message_bytes (16 MiB) is over what the
    # cluster takes in one write: a queue made before that was checked, or a cluster whose
    # limits shrank since (the memory store refuses as Cassandra's defaults do)
    register_queue(
        client._store,
        "half",
        uuid.uuid4(),
        QueueSettings(bucket_size=2, max_message_bytes=16 * 1024 * 1024),
    )
    queue = client.queue("half")

    # When a batch's last message, alone in bucket 1, passes the queue's check and Cassandra
    # refuses its write
    with pytest.raises(SparkQueueError):
        queue.send_batch([b"small-1", b"small-2", b"x" * (16 * 1024 * 1024)])

    # Then none of its messages is visible, and those that landed in bucket 0 are acked,
    # so they never show and the bucket can go
    assert queue.peek(10) == []
    assert queue.receive(10) == []
    assert all(acked for _, acked in queue.buckets.read(0, [0, 1]))
    # And the next batch over several buckets lands whole
    payloads = [b"a", b"b", b"c"]
    ids = queue.send_batch(payloads)
    assert [(d.id, d.payload) for d in queue.peek(10)] == list(zip(ids, payloads, strict=True))


@both_stores
def test_max_message_bytes_is_bounded_by_what_the_cluster_takes_in_one_write(
    client: QueueClient,
) -> None:
    # Given a cluster (or memory store) with Cassandra's default limits: 16 MiB a mutation
    # When a queue asks for 16 MiB messages, which with their row would be over that
    # Then it is refused, naming the value, the rule and the largest value this cluster takes
    with pytest.raises(
        InvalidSetting, match=r"max_message_bytes 16777216: .* at most (\d+)"
    ) as refused:
        client.create_queue("big", max_message_bytes=16 * 1024 * 1024)
    assert client.list_queues() == []
    largest = int(re.search(r"at most (\d+)", str(refused.value)).group(1))  # type: ignore[union-attr]
    assert largest < 16 * 1024 * 1024

    # And a queue of the largest takes a message of that size, headers counted
    queue = client.create_queue("big", max_message_bytes=largest)
    queue.send(b"x" * (largest - 6), headers={"abc": "def"})
    assert [len(d.payload) for d in queue.peek(1)] == [largest - 6]
    # And an update past it is refused too, changing nothing
    with pytest.raises(InvalidSetting, match=rf"max_message_bytes {largest + 1}: "):
        client.update_queue("big", max_message_bytes=largest + 1)
    assert client.queue("big").settings.max_message_bytes == largest
