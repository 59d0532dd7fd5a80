"""A step acked while its leases surely hold, and buckets its ack drained (both stores).

The Spark driver acks a committed step well within its visibility timeout:
then it writes the acks without reading each lease back first
(``QueueSteps.ack(held=True)``), and the buckets the ack left empty are not
probed again by the planner until their drain mark's recheck.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_queue import QueueClient
from spark_queue.engine.lifecycle import Maintenance
from spark_queue.spark.step_tracking import leases_surely_held
from spark_queue.store.buckets import Buckets

pytestmark = pytest.mark.both_stores


def _no_lease_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Buckets, keys: Any) -> Any:
        raise AssertionError(f"leases read back for {len(keys)} message(s)")

    monkeypatch.setattr(Buckets, "leases_of", refuse)


def _buckets_read_by(monkeypatch: pytest.MonkeyPatch, method: str) -> list[int]:
    """The buckets every later call of ``Buckets.<method>`` is asked about, in order."""
    read: list[int] = []
    original = getattr(Buckets, method)

    def recording(self: Buckets, buckets: Any, *args: Any) -> Any:
        read.extend(buckets)
        return original(self, buckets, *args)

    monkeypatch.setattr(Buckets, method, recording)
    return read


def test_a_held_step_is_acked_without_reading_its_leases(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("held-acks", bucket_size=5)
    queue.send_batch([str(i).encode() for i in range(12)])
    queue.steps.receive_leased("q", 1, 0, 5, buckets=[0], first_attempt=True)
    queue.steps.receive_leased("q", 1, 1, 10, buckets=[1, 2], first_attempt=True)

    _no_lease_reads(monkeypatch)
    assert queue.steps.ack("q", 1, held=True) == (12, 0)
    assert queue.steps.ack("q", 1, held=True) == (0, 0)  # forgotten: idempotent
    assert queue.stats(exact=True).total == 0


def test_a_held_ack_of_a_lease_lost_anyway_acks_the_processed_message(
    client: QueueClient,
) -> None:
    # The driver's clock said the lease held; another consumer's said it ran out.
    queue = client.create_queue("held-lost", visibility_timeout=0.2)
    queue.send(b"slow")
    queue.steps.receive("q", 1, 0, 1)
    time.sleep(0.3)
    (other,) = queue.receive(1)

    # Acked all the same: the step processed it, so nothing is lost (without
    # ``held`` the step reads the lease, counts it stale and leaves it to the
    # other consumer: tests/test_steps.py).
    assert queue.steps.ack("q", 1, held=True) == (1, 0)
    assert queue.stats(exact=True).total == 0
    assert other.payload == b"slow"


def test_a_bucket_a_step_ack_drained_is_not_probed_again(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle notes end at once here: only the drain mark keeps bucket 0 out.
    monkeypatch.setattr("spark_queue.engine.bounds.IDLE_RECHECK", 0.0)
    queue = client.create_queue("drained-skip", bucket_size=5, seal_delay=60)
    queue.send_batch([str(i).encode() for i in range(12)])
    queue.steps.receive_leased("q", 1, 0, 5, buckets=[0], first_attempt=True)
    queue.steps.ack("q", 1, held=True)

    probed = _buckets_read_by(monkeypatch, "probe_visible")
    assert queue.visible_buckets(10) == [1, 2]
    assert 0 not in probed and {1, 2} <= set(probed)


def test_leases_surely_hold_for_half_a_timeout_after_planning() -> None:
    now = time.monotonic()
    assert leases_surely_held((now, 30.0))
    assert not leases_surely_held((now - 16.0, 30.0))  # past half the timeout: read them
    assert not leases_surely_held(None)  # planned before a restart: unknown


def test_buckets_a_step_in_flight_leased_are_skipped_without_reading_their_leases(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle notes last 30 s here, so however slow the machine, the second look
    # below comes within them.
    monkeypatch.setattr("spark_queue.engine.bounds.IDLE_RECHECK", 30.0)
    queue = client.create_queue("in-flight-skip", bucket_size=5, visibility_timeout=60)
    queue.send_batch([str(i).encode() for i in range(12)])
    queue.steps.receive_leased("q", 1, 0, 10, buckets=[0, 1], first_attempt=True)

    read = _buckets_read_by(monkeypatch, "next_visible_many")
    assert queue.visible_buckets(10, leased_here={0}) == [2]
    # bucket 1 (not named) has its first lease's end read; bucket 0 is skipped unread
    assert read == [1]
    assert queue.visible_buckets(10, leased_here={0}) == [2]
    assert read == [1]  # both are skipped now


def test_buckets_a_step_in_flight_holds_are_not_probed_while_others_have_enough(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a step in flight that leased all of bucket 0, and buckets 1-3 full
    queue = client.create_queue("held-last", bucket_size=5, visibility_timeout=60)
    queue.send_batch([str(i).encode() for i in range(20)])
    queue.steps.receive_leased("q", 1, 0, 5, buckets=[0], first_attempt=True)

    # When the planner asks for two buckets
    probed = _buckets_read_by(monkeypatch, "probe_visible")
    # Then it gets the two oldest others, and bucket 0's partition is not read
    assert queue.visible_buckets(2, leased_here={0}) == [1, 2]
    assert 0 not in probed


def test_a_held_bucket_with_messages_left_is_planned_when_the_others_are_short(
    client: QueueClient,
) -> None:
    # Given a step in flight that leased 3 of bucket 0's 5 messages, and one more bucket
    queue = client.create_queue("held-left", bucket_size=5, visibility_timeout=60)
    queue.send_batch([str(i).encode() for i in range(10)])
    queue.steps.receive_leased("q", 1, 0, 3, buckets=[0], first_attempt=True)

    # Then asking for more buckets than the others hold finds bucket 0 too, oldest first
    assert queue.visible_buckets(4, leased_here={0}) == [0, 1]


def test_the_planner_s_probe_does_not_wait_for_a_maintenance_pass(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a maintenance pass that blocks until released
    queue = client.create_queue("busy-maintenance", bucket_size=5)
    queue.send_batch([b"a", b"b"])
    release = threading.Event()
    ran_on: list[str] = []
    original = Maintenance._pass

    def slow_pass(self: Maintenance) -> tuple[int, int]:
        ran_on.append(threading.current_thread().name)
        assert release.wait(30), "the test never released the pass"
        return original(self)

    monkeypatch.setattr(Maintenance, "_pass", slow_pass)
    try:
        # When the planner probes
        assert queue.visible_buckets(4) == [0]
        # Then it answered while the pass, on a thread of its own, still waited
        assert not release.is_set()
        deadline = time.monotonic() + 10
        while not ran_on and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran_on and ran_on[0] != threading.current_thread().name
    finally:
        release.set()


def test_a_background_maintenance_pass_that_fails_is_logged_not_raised(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a pass that fails as a closed client's session does
    queue = client.create_queue("failing-maintenance", bucket_size=5)
    queue.send_batch([b"a"])
    failed = threading.Event()

    def failing_pass(self: Maintenance) -> tuple[int, int]:
        failed.set()
        raise RuntimeError("cannot schedule new futures after shutdown")

    monkeypatch.setattr(Maintenance, "_pass", failing_pass)
    # When the planner probes, the pass fails on its own thread
    assert queue.visible_buckets(4) == [0]
    assert failed.wait(10)
    # Then the failure is logged with the queue's name (pytest fails a test whose
    # thread raised), and the probe still answers
    deadline = time.monotonic() + 10
    while "background maintenance pass failed" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "'failing-maintenance': background maintenance pass failed" in caplog.text
    assert queue.visible_buckets(4) == [0]
