"""Cheap counts (engine/counting.py): the planning rules alone, then against a real node."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.cli import main
from spark_queue.engine.counting import plan_scans, summarize
from spark_queue.store.counts import NEVER, BucketCount, count_rows

if TYPE_CHECKING:
    from tests.conftest import Backend

NOW = 1_000_000


def count(bucket: int, counted_at: int, next_change: int = NEVER, visible: int = 1) -> BucketCount:
    return BucketCount(bucket, visible, 0, 0, None, next_change, counted_at)


# -- pure logic ------------------------------------------------------------------------


def test_count_rows_classifies_and_finds_the_oldest_visible_and_the_next_change() -> None:
    rows = [
        (500, 900, 0),  # visible, never delivered
        (400, 990, 2),  # visible again: its lease ran out
        (300, 2_000, 1),  # in flight until 2000
        (600, 1_500, 0),  # delayed until 1500
        (100, None, 0),  # an expired row's leftover cell: not counted
    ]
    c = count_rows(7, rows, now=1_000)
    assert (c.visible, c.in_flight, c.delayed) == (2, 1, 1)
    assert c.oldest_visible == 400
    assert c.next_change == 1_500
    assert c.counted_at == 1_000


def test_small_queues_are_scanned_whole() -> None:
    assert plan_scans([3, 4, 5], {}, NOW, budget=4) == [3, 4, 5]


def test_plan_takes_head_and_tail_then_uncounted_then_due_then_the_longest_counted() -> None:
    live = list(range(10, 20))
    stored = {b: count(b, counted_at=NOW - 100 * b) for b in live}  # higher bucket: older count
    del stored[15]  # never counted
    stored[12] = count(12, counted_at=NOW - 1, next_change=NOW - 5)  # a lease came due
    plan = plan_scans(live, stored, NOW, budget=5)
    assert plan == [10, 19, 15, 12, 18]


def test_summary_estimates_uncounted_buckets_and_reports_age() -> None:
    counts = {
        0: BucketCount(0, 5, 2, 1, NOW - 30_000, NEVER, NOW - 4_000),
        2: BucketCount(2, 1, 0, 0, NOW - 10_000, NEVER, NOW),
    }
    s = summarize([0, 1, 2], counts, {1: 100}, NOW)
    assert (s.visible, s.in_flight, s.delayed, s.buckets) == (5 + 100 + 1, 2, 1, 3)
    assert s.estimated_buckets == 1
    assert s.oldest_age == pytest.approx(30.0)
    assert s.counts_age == pytest.approx(4.0)


# -- against Cassandra (and a MemoryStore: ``both_stores``, conftest.py) --------------


@pytest.mark.both_stores
def test_a_count_scans_a_bounded_number_of_buckets_and_converges(client: QueueClient) -> None:
    # Given a backlog over 40 buckets, far more than a count may scan
    queue = client.create_queue("backlog", bucket_size=10)
    queue.send_batch([b"m%d" % i for i in range(400)])
    counter = queue._counter
    counter.budget = 8
    scans: list[int] = []
    scan = counter.counts.scan

    def counted_scan(buckets: list[int], now: int) -> list[BucketCount]:
        scans.append(len(buckets))
        return scan(buckets, now)

    counter.counts.scan = counted_scan  # type: ignore[method-assign]

    # When it is counted repeatedly
    first = queue.stats()
    for _ in range(5):  # 8 buckets first, then head, tail and 6 more a call
        queue.stats()
    settled = queue.stats()

    # Then no call scanned more than the budget, the first estimated what it had
    # not counted yet, and after enough calls every bucket was counted for real
    assert max(scans) == 8
    assert first.estimated_buckets == 40 - 8 and first.visible == 400
    assert settled.estimated_buckets == 0
    assert (settled.visible, settled.in_flight, settled.delayed) == (400, 0, 0)

    # And a receive at the head shows at once: the head bucket is always rescanned
    deliveries = queue.receive(10)
    after = queue.stats()
    assert (after.visible, after.in_flight) == (390, 10)
    queue.ack_batch([d.receipt for d in deliveries])
    assert queue.stats().total == 390


@pytest.mark.both_stores
def test_counts_are_shared_between_processes_through_the_table(
    backend: Backend, client: QueueClient
) -> None:
    queue = client.create_queue("shared", bucket_size=10)
    queue.send_batch([b"x"] * 300, delay=[0.0] * 290 + [60.0] * 10)
    assert queue.stats(exact=True).delayed == 10  # an exact count stores every bucket's count

    with backend.client() as other:  # another client: its own session and handle
        theirs = other.queue("shared")
        theirs._counter.budget = 4
        s = theirs.stats()
    assert s.estimated_buckets == 0
    assert (s.visible, s.delayed) == (290, 10)


@pytest.mark.both_stores
def test_oldest_age_is_the_age_of_the_oldest_visible_message(client: QueueClient) -> None:
    queue = client.create_queue("aging")
    assert queue.stats().oldest_age is None
    queue.send(b"old")
    time.sleep(1.2)
    queue.send(b"new")
    age = queue.stats().oldest_age
    assert age is not None and 1.2 <= age < 10
    deliveries = queue.receive(1)  # the old one is in flight now: the new one is the oldest
    assert deliveries[0].payload == b"old"
    age = queue.stats().oldest_age
    assert age is not None and age < 1.2


@pytest.mark.cassandra
def test_bdq_queue_stats_prints_the_fields(keyspace: ConnectionSettings) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("cli")
        queue.send_batch([b"a", b"b", b"c"])
        queue.send(b"later", delay=60)
        queue.receive(1)
    connection = ["--hosts", ",".join(map(str, keyspace.hosts)), "--keyspace", keyspace.keyspace]
    result = CliRunner().invoke(main, ["queue", "stats", "cli", "--json", *connection])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)
    assert (counts["visible"], counts["in_flight"], counts["delayed"]) == (2, 1, 1)
    assert counts["oldest_age_seconds"] is not None

    result = CliRunner().invoke(main, ["queue", "stats", "cli", *connection])
    assert result.exit_code == 0
    assert "in flight" in result.stdout and "oldest" in result.stdout


@pytest.mark.cassandra
def test_bdq_bench_stats_measures_each_size(keyspace: ConnectionSettings) -> None:
    connection = ["--hosts", ",".join(map(str, keyspace.hosts)), "--keyspace", keyspace.keyspace]
    args = ["bench", "stats", "--buckets", "2,20", "--bucket-size", "5", "--samples", "3", "--json"]
    result = CliRunner().invoke(main, [*args, *connection])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["buckets"], r["messages"]) for r in rows] == [(2, 10), (20, 100)]
    assert [r["buckets_scanned_per_call"] for r in rows] == [2, 16]
    assert all(r["visible_exact"] == r["visible_cheap"] == r["messages"] for r in rows)
    assert all(r["exact_ms"] > 0 and r["cheap_p50_ms"] > 0 for r in rows)
