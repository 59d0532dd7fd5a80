"""Send-once where a real cluster differs from one host: skewed clocks, attempts at once.

The first attempt of a send fixes its ids and its write time in a lightweight
transaction, and every attempt writes at that time (engine/staging.py). These
tests fail on a send-once whose writes carry each writer's own clock, or whose
attempts each reserve ids of their own. Each runs on both stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from spark_queue import QueueClient
from spark_queue.engine import sending, staging
from spark_queue.errors import BackendUnavailable, StaleReceipt
from spark_queue.queue import Queue
from tests.conftest import Backend
from tests.helpers import client_with_clock_offset

pytestmark = pytest.mark.both_stores


@contextmanager
def host_ahead(
    backend: Backend, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> Iterator[QueueClient]:
    """A client on a host whose clock is ``seconds`` ahead: wall clock and write timestamps."""
    real_now_ms = sending.now_ms
    for module in (sending, staging):
        monkeypatch.setattr(module, "now_ms", lambda: real_now_ms() + int(seconds * 1000))
    with client_with_clock_offset(backend, seconds) as client:
        yield client
    for module in (sending, staging):
        monkeypatch.setattr(module, "now_ms", real_now_ms)


def received_within(queue: Queue, wanted: int, seconds: float) -> list[bytes]:
    """Payloads received and acked (an ack refused as stale leaves the message to come back)."""
    acked: list[bytes] = []
    deadline = time.monotonic() + seconds
    while len(acked) < wanted and time.monotonic() < deadline:
        for delivery in queue.receive(10, visibility_timeout=0.5):
            try:
                queue.ack(delivery.receipt)
            except StaleReceipt:
                continue  # the lease lost to a write from a clock ahead: it comes back
            acked.append(delivery.payload)
        time.sleep(0.05)
    return acked


def test_a_retry_on_a_slower_clock_still_releases_what_a_fast_attempt_wrote(
    backend: Backend, client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given attempt 0 on a host 2 s ahead, which wrote its messages invisible and died
    queue = client.create_queue("skew")
    with host_ahead(backend, 2.0, monkeypatch) as fast:
        fast_queue = fast.queue("skew")

        def die(*args: Any, **kwargs: Any) -> None:
            raise BackendUnavailable("injected: the executor was lost before its release")

        monkeypatch.setattr(fast_queue.staging, "publish", die)
        with pytest.raises(BackendUnavailable):
            fast_queue.send_batch_once("w", 5, 0, [b"a", b"b", b"c"])

    # When the retry runs on a host with a correct clock, and reports success
    queue.send_batch_once("w", 5, 0, [b"a", b"b", b"c"])

    # Then every message can be received (duplicates are allowed while the skew lasts; loss is not)
    assert sorted(set(received_within(queue, 3, 10.0))) == [b"a", b"b", b"c"]


def test_attempts_running_at_once_send_each_message_once(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two attempts of one task (a speculative copy) that both start before either records
    queue = client.create_queue("at-once")
    started = threading.Barrier(2, timeout=10)
    reserve = sending.Sender.reserve

    def reserve_together(self: sending.Sender, count: int) -> list[tuple[int, float]]:
        started.wait()
        return reserve(self, count)

    monkeypatch.setattr(sending.Sender, "reserve", reserve_together)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            results.append(queue.send_batch_once("w", 8, 1, [b"x", b"y"]))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    monkeypatch.setattr(sending.Sender, "reserve", reserve)

    # Then both report the same ids, and each message is there once
    assert not errors
    assert len(results) == 2 and results[0] == results[1]
    assert sorted(received_within(queue, 2, 5.0)) == [b"x", b"y"]
    assert queue.receive(10) == []
    assert queue.stats(exact=True).total == 0


def test_a_zombie_write_arriving_after_the_release_hides_nothing(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a send whose invisible rows are written again after the release (a zombie attempt)
    queue = client.create_queue("zombie")
    insert = queue.buckets.insert
    rows: list[Any] = []

    def keep(messages: Any, now: int, **kwargs: Any) -> None:
        rows.append((messages, now, kwargs))
        insert(messages, now, **kwargs)

    monkeypatch.setattr(queue.buckets, "insert", keep)
    queue.send_batch_once("w", 2, 0, [b"late"])
    messages, now, kwargs = rows[0]
    insert(messages, now, **kwargs)  # the zombie's copy of the invisible rows lands last

    # Then the message stays visible and is received once
    assert received_within(queue, 1, 5.0) == [b"late"]
    assert queue.receive(10) == []
