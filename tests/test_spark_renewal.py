"""Leases that outlive any batch: the driver renews them while the query lives, not after.

Real Spark, real Cassandra. The visibility timeouts are short (2-3 s) so that a
batch running three times as long shows what renewal changes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.spark.options import connector_options
from spark_queue.spark.renewal import LeaseRenewal, renewal_period

pytestmark = [pytest.mark.spark, pytest.mark.cassandra]

RELAY = Path(__file__).parent / "apps" / "relay.py"


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def test_renewal_period_is_a_third_of_the_timeout_and_never_zero() -> None:
    assert renewal_period(30.0) == 10.0
    assert renewal_period(0.01) > 0


def test_renewal_forgets_acked_steps_and_keeps_later_ones() -> None:
    renewed: list[tuple[str, int]] = []

    def renew(queue: str, step: int) -> tuple[int, int]:
        renewed.append((queue, step))
        return 1, 0

    renewal = LeaseRenewal(renew, period=3600, name="t")  # rounds run by hand below
    try:
        renewal.track(1, ["a"])
        renewal.track(2, ["a", "b"])
        renewal.done(1)
        renewal.renew_once()
    finally:
        renewal.stop()
    assert renewed == [("a", 2), ("b", 2)]


def test_renewal_goes_on_after_an_unexpected_error(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    second_round = threading.Event()

    def renew(queue: str, step: int) -> tuple[int, int]:
        calls.append(step)
        if len(calls) == 1:
            raise RuntimeError("not a SparkQueueError")
        second_round.set()
        return 1, 0

    renewal = LeaseRenewal(renew, period=0.01, name="t")
    try:
        with caplog.at_level(logging.ERROR, logger="spark_queue.spark.renewal"):
            renewal.track(1, ["a"])
            assert second_round.wait(10), "the thread ended at the first unexpected error"
    finally:
        renewal.stop()
    assert calls[:2] == [1, 1]
    assert any("not a SparkQueueError" in (r.exc_text or "") for r in caplog.records)


def test_a_batch_three_times_longer_than_the_lease_is_neither_redelivered_nor_lost(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    timeout = 2.0
    queue = client.create_queue("slow", bucket_size=100, visibility_timeout=timeout)
    ids = set(queue.send_batch([f"s{i}" for i in range(60)]))
    rival = client.queue("slow")
    seen: list[int] = []
    stolen: list[int] = []

    def slow_batch(batch: DataFrame, batch_id: int) -> None:
        rows = batch.select("id").collect()
        if rows and not seen:
            # Three timeouts long; meanwhile a plain consumer keeps asking.
            deadline = time.monotonic() + 3 * timeout
            while time.monotonic() < deadline:
                stolen.extend(d.id for d in rival.receive(100))
                time.sleep(0.3)
        seen.extend(r.id for r in rows)

    df = (
        spark.readStream.format("bdq")
        .options(**connector_options(keyspace))
        .option("queue", "slow")
        .load()
    )
    query = (
        df.writeStream.foreachBatch(slow_batch)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while queue.stats().total and time.monotonic() < deadline:
            time.sleep(0.5)
        # Idle longer than the lease: nothing acked comes back.
        time.sleep(2 * timeout)
    finally:
        query.stop()

    assert stolen == []
    assert sorted(seen) == sorted(ids)
    assert queue.stats().total == 0
    assert rival.receive(100) == []


@pytest.mark.slow
def test_a_driver_killed_mid_batch_lets_its_messages_come_back_after_the_timeout(
    keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    timeout = 3.0
    queue = client.create_queue("a", bucket_size=100, visibility_timeout=60)
    client.create_queue("b")
    ids = set(queue.send_batch([f"k{i}" for i in range(40)]))
    checkpoint = tmp_path / "ck"
    command = [
        sys.executable, str(RELAY), "--hosts", connector_options(keyspace)["hosts"],
        "--keyspace", keyspace.keyspace, "--source", "a", "--target", "b",
        "--checkpoint", str(checkpoint), "--max-per-trigger", "40",
        "--visibility-timeout", f"{timeout}s",
        # 40 rows on 2 cores, 1 s each: a 20 s batch, several timeouts long
        "--row-delay-ms", "1000", "--trigger-seconds", "1",
    ]  # fmt: skip
    log = tmp_path / "relay.log"
    with open(log, "w") as out:
        relay = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)
    started = time.monotonic()
    try:
        # Wait until the batch has leased all 40 and outlived its lease twice over.
        deadline = time.monotonic() + 180
        while queue.stats().in_flight < len(ids):
            assert relay.poll() is None, f"relay exited early, see {log}"
            assert time.monotonic() < deadline, f"the batch never leased, see {log}"
            time.sleep(0.2)
        print(f"leased after {time.monotonic() - started:.1f}s")
        time.sleep(2 * timeout)
        assert relay.poll() is None, f"relay exited early, see {log}"
        # Renewed while the driver lives: a plain consumer gets nothing.
        held = queue.receive(100)
    finally:
        os.killpg(relay.pid, signal.SIGKILL)
        relay.wait(timeout=60)
    assert held == []

    back: dict[int, Any] = {}
    deadline = time.monotonic() + 30 * timeout
    while len(back) < len(ids) and time.monotonic() < deadline:
        for d in queue.receive(100, wait=0.5):
            back[d.id] = d
    print(f"back after {time.monotonic() - started:.1f}s")
    assert set(back) == ids
    assert {d.delivery_count for d in back.values()} == {2}
