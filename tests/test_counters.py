"""The engine's in-process counters (spark_queue.engine.counters): no Prometheus needed."""

from __future__ import annotations

import threading

import pytest

from spark_queue.engine import counters
from spark_queue.engine.counters import CounterFamily, QueueCounters


def test_a_family_keeps_one_counter_per_keyspace_and_queue() -> None:
    family = CounterFamily("bdq_test", "For a test.")

    family.labels(keyspace="a", queue="q").inc()
    family.labels(keyspace="a", queue="q").inc(2)
    family.labels(keyspace="b", queue="q").inc(5)

    assert dict(family.samples()) == {("a", "q"): 3.0, ("b", "q"): 5.0}


def test_a_counter_never_goes_down() -> None:
    count = CounterFamily("bdq_test", "For a test.").labels(keyspace="a", queue="q")

    with pytest.raises(ValueError, match="a counter only grows"):
        count.inc(-1)
    assert count.value == 0.0


def test_threads_lose_no_increment() -> None:
    family = CounterFamily("bdq_test", "For a test.")

    def add() -> None:
        for _ in range(5000):
            family.labels(keyspace="a", queue="q").inc()

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert dict(family.samples()) == {("a", "q"): 40000.0}


def test_a_queue_handle_counts_into_the_families() -> None:
    keyspace = "test_counters_ks"
    handle = QueueCounters.of(keyspace, "orders")

    handle.sent.inc(3)
    handle.acked.inc()

    assert dict(counters.SENT.samples())[(keyspace, "orders")] == 3.0
    assert dict(counters.ACKED.samples())[(keyspace, "orders")] == 1.0
    assert QueueCounters.of(keyspace, "orders").sent is handle.sent
    assert {f.name for f in counters.FAMILIES} == {
        "bdq_sent", "bdq_received", "bdq_acked", "bdq_stale_acks", "bdq_dead_lettered",
        "bdq_redriven",
    }  # fmt: skip
