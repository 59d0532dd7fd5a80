"""Lanes (engine/lanes.py): a key's messages in one lane, each lane owned by one consumer.

The pure logic (lane of a key, keyless messages, the fair-share choice) runs
without Cassandra; the rest on the shared node (the ``both_stores`` ones on a
MemoryStore too), with short lane periods so that takeovers happen within seconds.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from spark_queue import (
    ConnectionSettings,
    InvalidMessage,
    InvalidSetting,
    KeyspaceNotFound,
    QueueClient,
)
from spark_queue.cli import main
from spark_queue.defaults import LANE_PERIOD, LANE_PERIOD_MIN
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.head_look import HeadLook
from spark_queue.engine.lanes import KEYLESS, free_lanes, lane_for, lane_of, lane_period
from spark_queue.engine.ownership import ttl_of
from spark_queue.errors import BackendUnavailable
from spark_queue.message import Delivery, Message
from spark_queue.queue import Queue
from spark_queue.store.message_values import LeaseWrite, now_ms
from spark_queue.store.owners import OwnerTable
from spark_queue.store.session import Store

if TYPE_CHECKING:
    from tests.conftest import Backend

cassandra = pytest.mark.cassandra
both_stores = pytest.mark.both_stores

# -- pure logic --------------------------------------------------------------------------


@given(st.floats(min_value=0.1, max_value=86_400.0))
def test_lane_rows_expire_no_later_than_a_lease_written_at_the_same_renewal(
    timeout: float,
) -> None:
    period = lane_period(timeout)
    assert LANE_PERIOD_MIN <= period <= LANE_PERIOD
    if timeout >= LANE_PERIOD_MIN + 1:  # below, the renewals' floor wins
        assert ttl_of(period) <= timeout
    if timeout >= LANE_PERIOD + 1:
        assert period == LANE_PERIOD  # long timeouts keep the usual period


def test_the_lane_period_fits_the_usual_timeouts() -> None:
    assert [lane_period(t) for t in (1.0, 4.0, 6.5, 10.0, 30.0)] == [3.0, 3.0, 5.0, 9.0, 10.0]


def test_lane_of_a_key_is_its_crc32_modulo_the_lanes() -> None:
    # crc32(b"a") = 0xE8B7BE43: lane 3 of 8, lane 67 of 1000 (any process, any run)
    assert lane_of("a", 8) == 0xE8B7BE43 % 8 == 3
    assert lane_of("a", 1000) == 0xE8B7BE43 % 1000
    assert lane_of("a", 1) == 0
    assert {lane_of(str(i), 8) for i in range(1000)} == set(range(8))


def test_a_key_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidMessage, match="key 7: must be a str"):
        lane_of(7, 8)  # type: ignore[arg-type]


@both_stores
def test_a_single_send_takes_one_key_and_refuses_a_list_writing_nothing(
    client: QueueClient,
) -> None:
    queue = client.create_queue("one-key")
    with pytest.raises(InvalidMessage, match=r"key \['a'\]: must be a str"):
        queue.send("x", key=["a"])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match=r"key \['a'\]: must be a str"):
        queue.send_async("x", key=["a"])  # type: ignore[arg-type]
    queue.flush()
    assert queue.stats(exact=True).total == 0


def test_a_keyless_message_takes_no_lane_but_in_a_queue_of_one_lane() -> None:
    assert lane_for(None, 8) == KEYLESS  # received through shares (engine/shares.py)
    assert lane_for(None, 1) == 0  # one lane: the whole queue is one unit of order
    assert lane_for("a", 8) == lane_of("a", 8)


def test_fair_share_offers_the_busy_lanes_nobody_owns_oldest_first() -> None:
    assert free_lanes([1, 2, 3], {1: "a", 2: "b"}) == [3]
    assert free_lanes([1, 2], {1: "a", 2: "b"}) == []  # all owned: wait
    assert free_lanes([], {}) == []  # nothing to receive
    # Busy lanes come in the order of their oldest visible message; that order is kept.
    assert free_lanes([6, 4, 6, 5], {4: "a"}) == [6, 5]


@both_stores
def test_lanes_setting_is_bounded(client: QueueClient) -> None:
    with pytest.raises(InvalidSetting, match="lanes 0: must be a whole number from 1 to 1024"):
        client.create_queue("no-lanes", lanes=0)
    client.create_queue("fixed-lanes", lanes=4)
    with pytest.raises(InvalidSetting, match="lanes 2: cannot change after a queue is created"):
        client.update_queue("fixed-lanes", lanes=2)


# -- on Cassandra (and a MemoryStore: ``both_stores``, conftest.py) -------------------------


def stored_lanes(client: QueueClient, name: str) -> dict[int, int | None]:
    """``id -> lane`` as stored in the messages table."""
    queue = client.queue(name)
    rows = queue.buckets.store.rows(
        "SELECT id, lane FROM {ks}.messages WHERE queue_id = ? AND bucket = 0",
        (queue.queue_id,),
    )
    return {row[0]: row[1] for row in rows}


@both_stores
def test_a_keys_messages_share_its_lane_and_arrive_in_order(client: QueueClient) -> None:
    # Given messages of two keys, interleaved, and keyless ones from this thread
    queue = client.create_queue("keyed", lanes=8)
    keys = ["alpha", "beta"] * 10
    ids = [queue.send(f"{k}-{n}", key=k) for n, k in enumerate(keys)]
    ids += queue.send_batch([b"x", b"y"])

    # Then each is stored in its key's lane (keyless: in none, for any consumer)
    lanes = stored_lanes(client, "keyed")
    assert [lanes[i] for i in ids[:20]] == [lane_of(k, 8) for k in keys]
    assert lanes[ids[20]] == lanes[ids[21]] == KEYLESS

    # And one consumer receives each key's messages in the order they were sent
    got = [d for batch in iter(lambda: queue.receive(3, wait=2.0), []) for d in batch]
    queue.ack_batch([d.receipt for d in got])
    by_key: dict[str, list[int]] = defaultdict(list)
    for d in got:
        by_key[d.payload.decode().split("-")[0]].append(d.id)
    assert sorted(d.id for d in got) == sorted(ids)
    assert all(seq == sorted(seq) for seq in by_key.values())


def keys_and_lanes(messages: Sequence[Message]) -> dict[str, tuple[str | None, int | None]]:
    """``payload -> (key, lane)`` of each message."""
    return {m.payload.decode(): (m.key, m.lane) for m in messages}


def receive_all(queue: Queue, count: int, timeout: float = 0.2) -> list[Delivery]:
    """Receive (without acking) until ``count`` deliveries came, lane after lane."""
    got: list[Delivery] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += queue.receive(count, visibility_timeout=timeout, wait=0.5)
    return got


@both_stores
def test_a_message_keeps_its_key_when_received_peeked_dead_lettered_and_redriven(
    client: QueueClient,
) -> None:
    # Given a queue of 4 lanes whose messages go to a 2-lane dead-letter queue after a delivery
    dead = client.create_queue("keys-dead", lanes=2)
    queue = client.create_queue("keys", lanes=4, max_deliveries=1, dead_letter_queue="keys-dead")
    # When messages are sent with a key each, alone, in a batch and through the producer
    queue.send("one", key="a")
    queue.send_batch(["two", "three", "four"], key=["b", None, "a"])
    queue.send_async("five", key="c")
    queue.flush()
    sent = {"one": "a", "two": "b", "three": None, "four": "a", "five": "c"}

    # Then a peek shows each one's key and the lane it is stored in (keyless: KEYLESS)
    assert keys_and_lanes(queue.peek(10)) == {p: (k, lane_for(k, 4)) for p, k in sent.items()}
    assert lane_for(None, 4) == KEYLESS
    # And so does a receive
    assert keys_and_lanes(receive_all(queue, 5)) == {
        p: (k, lane_for(k, 4)) for p, k in sent.items()
    }

    # When their leases end past max_deliveries: each moves to the dead-letter queue
    time.sleep(0.3)
    deadline = time.monotonic() + 20
    while dead.stats(exact=True).visible < 5 and time.monotonic() < deadline:
        queue.receive(10, wait=0.2)
    # Then there each keeps its key, in that queue's lane of the key
    assert keys_and_lanes(dead.peek(10)) == {p: (k, lane_for(k, 2)) for p, k in sent.items()}

    # When they are redriven back: the same keys and lanes as first sent
    assert dead.redrive().moved == 5
    assert keys_and_lanes(queue.peek(10)) == {p: (k, lane_for(k, 4)) for p, k in sent.items()}
    # And a rejected message keeps its key too
    first = receive_all(queue, 1, timeout=60)[0]
    queue.reject(first.receipt, "bad")
    rejected = keys_and_lanes(dead.peek(10))
    assert rejected == {first.payload.decode(): (first.key, lane_for(first.key, 2))}
    assert first.key == sent[first.payload.decode()]


@cassandra
def test_a_keyspace_made_before_keys_were_stored_gets_the_column_on_upgrade(
    fresh_keyspace: ConnectionSettings,
) -> None:
    # Given a keyspace of a version that stored no keys, with a keyed message in it
    with QueueClient(settings=fresh_keyspace) as client:
        client.create_queue("old", lanes=4).send("before", key="a")
    store = Store(fresh_keyspace)
    try:
        store.execute_ddl(f"ALTER TABLE {fresh_keyspace.keyspace}.messages DROP key")
    finally:
        store.close()
    # Then a client only looks: it names the missing column and the command that adds it
    with pytest.raises(KeyspaceNotFound, match=r"no column messages\.key"):
        QueueClient(settings=fresh_keyspace)
    # When the keyspace is upgraded explicitly
    report = QueueClient.create_keyspace(1, exist_ok=True, settings=fresh_keyspace)
    assert report.columns_added == ("messages.key",)
    # Then the older message shows no key but its lane, and a new one its key
    with QueueClient(settings=fresh_keyspace) as client:
        queue = client.queue("old")
        queue.send("after", key="a")
        assert keys_and_lanes(queue.peek(10)) == {
            "before": (None, lane_of("a", 4)),
            "after": ("a", lane_of("a", 4)),
        }


@both_stores
@pytest.mark.parametrize("consumers", [2, 3])
def test_competing_consumers_own_different_lanes_and_keep_each_keys_order(
    backend: Backend, client: QueueClient, consumers: int
) -> None:
    # Given 300 messages of three keys in three different lanes
    name = f"share-{consumers}"
    queue = client.create_queue(name, lanes=8, visibility_timeout=60)
    keys = ["0", "1", "2"]
    assert len({lane_of(k, 8) for k in keys}) == 3
    ids = queue.send_batch(
        [f"{i}".encode() for i in range(300)], key=[keys[i % 3] for i in range(300)]
    )
    arrivals: list[tuple[int, str]] = []
    acked: Counter[int] = Counter()
    owned: list[list[int]] = []
    lock = threading.Lock()
    start = threading.Barrier(consumers)

    def consume() -> None:
        with backend.client() as own:
            handle = own.queue(name)
            start.wait()
            idle_since = time.monotonic()
            most: list[int] = []
            while time.monotonic() - idle_since < 3.0:
                got = handle.receive(10)
                if len(handle.lanes.owned()) > len(most):
                    most = handle.lanes.owned()
                if not got:
                    time.sleep(0.05)
                    continue
                idle_since = time.monotonic()
                time.sleep(0.05)  # the work: each lane takes a consumer at least half a second
                stale = set(handle.ack_batch([d.receipt for d in got], strict=False))
                with lock:
                    arrivals.extend((d.id, keys[int(d.payload) % 3]) for d in got)
                    acked.update(d.id for d in got if d.receipt not in stale)
            with lock:
                owned.append(most)

    threads = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)

    # Then nothing was lost, each message acked once, duplicates bounded
    assert set(acked) == set(ids) and max(acked.values()) == 1
    assert len(arrivals) - len(set(arrivals)) <= len(ids) // 100
    # And each key's messages arrived in order, across consumers
    for key in keys:
        seq = [i for i, k in arrivals if k == key]
        assert seq == sorted(seq), f"key {key!r} out of order"
    # And the consumers shared the lanes (which ones got lanes is a race: a
    # consumer that drained its lane takes a free one before a slower one looks)
    assert len(owned) == consumers and sum(1 for lanes in owned if lanes) >= 2, owned


@both_stores
def test_closing_a_client_gives_its_lanes_to_the_next_consumer_at_once(
    backend: Backend, client: QueueClient
) -> None:
    queue = client.create_queue("handover", lanes=4, visibility_timeout=0.5)
    ids = queue.send_batch([b"a", b"b", b"c"], key="k")
    with backend.client() as first:
        (one,) = first.queue("handover").receive(1)
        first.queue("handover").ack(one.receipt)
    # the first client closed: its lane is free now, not after its period
    began = time.monotonic()
    rest = queue.receive(10, wait=5.0)
    assert [d.id for d in rest] == ids[1:]
    assert time.monotonic() - began < 5.0  # not after a lane period (10 s): at its first look


@both_stores
def test_a_lane_take_that_applied_but_timed_out_is_taken_up_at_the_next_look(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a take of the only busy lane that applied, but whose answer was lost
    queue = client.create_queue("ambiguous", lanes=4, visibility_timeout=60)
    ids = queue.send_batch([str(i).encode() for i in range(5)], key="k")
    insert_free = OwnerTable.insert_free
    lost: list[bool] = []

    def applied_then_timed_out(self: OwnerTable, *args: Any, **kwargs: Any) -> set[Any]:
        won = insert_free(self, *args, **kwargs)
        if not lost:
            lost.append(True)
            raise BackendUnavailable("injected: the take timed out after it applied")
        return won

    monkeypatch.setattr(OwnerTable, "insert_free", applied_then_timed_out)
    with pytest.raises(BackendUnavailable):
        queue.receive(5)
    assert lost and queue.lanes.owned() == []

    # When it receives again
    began = time.monotonic()
    got = queue.receive(5, wait=5.0)

    # Then it owns its lane and reads it now, not once the row expired (about 11 s)
    assert [d.id for d in got] == ids
    assert queue.lanes.owned() == [lane_of("k", 4)]
    assert time.monotonic() - began < 5.0


@both_stores
def test_a_consumer_that_stops_renewing_loses_its_lanes_after_the_period(
    backend: Backend, client: QueueClient
) -> None:
    # Given a consumer owning a lane for 2 s periods, that stops (no close, no renewal)
    period = 2.0
    queue = client.create_queue("takeover", lanes=4, visibility_timeout=60)
    ids = queue.send_batch([str(i).encode() for i in range(20)], key="k")
    gone = backend.client()
    stopped = gone.queue("takeover")
    stopped.lanes.period = period
    first = stopped.receive(5)
    stopped.ack_batch([d.receipt for d in first])
    stopped_at = time.monotonic()
    assert stopped.lanes.owned() == [lane_of("k", 4)]

    # When another consumer keeps receiving
    got = []
    while len(got) < 15 and time.monotonic() - stopped_at < 30:
        batch = queue.receive(10)
        if not batch:
            time.sleep(0.1)
            continue
        got.extend(batch)
        queue.ack_batch([d.receipt for d in batch])
    waited = time.monotonic() - stopped_at

    # Then it takes the lane over once the row expired, nothing lost, order kept
    assert [d.id for d in got] == ids[5:]
    assert waited >= period - 0.5  # not before the period
    assert waited <= ttl_of(period) + 5.0  # the bound, plus slack for this busy machine
    gone.close()


@cassandra
def test_cli_creates_a_queue_of_lanes_and_sends_by_key(
    keyspace: ConnectionSettings, client: QueueClient
) -> None:
    where = ["--hosts", ",".join(str(h) for h in keyspace.hosts), "--keyspace", keyspace.keyspace]
    runner = CliRunner()
    created = runner.invoke(main, ["queue", "create", "cli-lanes", "--lanes", "4", *where])
    assert created.exit_code == 0, created.output
    sent = runner.invoke(main, ["send", "cli-lanes", "a", "b", "--key", "user-9", *where])
    assert sent.exit_code == 0, sent.output

    assert client.queue("cli-lanes").settings.lanes == 4
    assert set(stored_lanes(client, "cli-lanes").values()) == {lane_of("user-9", 4)}


@both_stores
def test_a_look_reads_a_bucket_in_flight_once_and_passes_over_it_until_its_leases_end(
    client: QueueClient,
) -> None:
    # Given a first bucket whose messages another consumer holds, and a second one visible
    queue = client.create_queue("look-in-flight", lanes=4, bucket_size=5, visibility_timeout=30)
    queue.send_batch([b"%d" % i for i in range(10)], key=[f"k{i}" for i in range(10)])
    held = queue.buckets.scan_candidates(0, now_ms(), 5)
    assert [m.id for m in held] == [0, 1, 2, 3, 4]
    until = now_ms() + 30_000
    queue.buckets.write_leases(
        [LeaseWrite(0, m.id, 9, until, 1, m.expires_at) for m in held], now_ms()
    )
    reads: list[int] = []  # the bucket of each statement on the queue's messages
    store = queue.buckets.store
    execute, execute_many = store.execute, store.execute_many

    def note(cql: Any, params: Any) -> None:
        if "messages" in str(getattr(cql, "query_string", cql)) and len(params) > 1:
            reads.append(params[1])

    def counting(cql: str, params: Any = (), **kw: Any) -> Any:
        note(cql, params)
        return execute(cql, params, **kw)

    def counting_many(statements: Any, **kw: Any) -> Any:
        for cql, params in statements:
            note(cql, params)
        return execute_many(statements, **kw)

    # When a look walks the head buckets for lanes
    bounds = Bounds(queue.buckets)
    bounds.refresh()
    now = now_ms()
    look = HeadLook(queue.buckets, bounds, now)
    store.execute, store.execute_many = counting, counting_many  # type: ignore[method-assign]
    try:
        busy = look.busy_lanes(set())
    finally:
        del store.execute, store.execute_many

    # Then the bucket in flight was read once, with the second, and is skipped from now on
    assert busy and set(busy) <= {lane_for(f"k{i}", 4) for i in range(5, 10)}
    assert reads == [0, 1]
    assert bounds.skipped(0, now + 500) and not bounds.skipped(0, now + 1500)  # IDLE_RECHECK
