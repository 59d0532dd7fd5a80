"""Send-once after its release began (engine/staging.py): nothing is written or dropped again.

A publish releases a send's messages, then records DONE with a separate write.
That write can go missing (the driver dies, the commit times out), so a retry
may find a send whose messages consumers already received and acked. Such a
send must never be written again (a write into a sealed bucket is repaired
under new ids: every message would reach its consumers twice), nor discarded
(its messages would be acked under consumers that hold them: lost). And its
messages keep the expiry they were sent with, whatever the queue's TTL became
before the release.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from spark_queue import Queue, QueueClient
from spark_queue.errors import BackendUnavailable
from spark_queue.store.send_log import SendLog, SendState

both_stores = pytest.mark.both_stores


def _die_before_done(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(self: SendLog, *args: Any) -> None:
        raise BackendUnavailable("injected: the driver died after the release, before DONE")

    monkeypatch.setattr(SendLog, "mark_done_many", die)


def _received(queue: Queue, seconds: float) -> list[bytes]:
    """Receive and ack for ``seconds``: every payload delivered meanwhile."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        deliveries = queue.receive(100, wait=0.2)
        queue.ack_batch([d.receipt for d in deliveries])
        got += [d.payload for d in deliveries]
    return got


@both_stores
def test_a_retry_after_the_release_sends_nothing_again_into_a_sealed_bucket(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a send-once that released its messages and died before recording DONE
    queue = client.create_queue("released", bucket_size=10, seal_delay=0.5)
    with monkeypatch.context() as m:
        _die_before_done(m)
        with pytest.raises(BackendUnavailable):
            queue.send_batch_once("w", 4, 0, [b"a", b"b"])
    # and a consumer that received and acked them
    assert sorted(_received(queue, 1.0)) == [b"a", b"b"]
    # and their bucket sealed meanwhile (other traffic filled it; the retry comes later)
    queue.send_batch([b"filler"] * 20)
    _received(queue, 1.0)
    time.sleep(0.6)
    queue.maintain()
    sealed_upto, _ = queue.maintain()
    assert sealed_upto >= 1

    # When the send is retried
    queue.send_batch_once("w", 4, 0, [b"a", b"b"])

    # Then nothing reaches a consumer a second time
    assert _received(queue, 1.5) == []
    assert queue.stats(exact=True).total == 0


@both_stores
def test_a_discard_after_the_release_keeps_the_released_messages(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a sink's commit that released its messages and failed before DONE
    queue = client.create_queue("abort-after-release")
    staged = queue.staging.stage(("w", 7, 0, 0), queue.check_batch([b"x", b"y"]))
    with monkeypatch.context() as m:
        _die_before_done(m)
        with pytest.raises(BackendUnavailable):
            queue.staging.publish([staged])

    # When Spark aborts the write, and the abort drops what the write staged
    dropped = queue.staging.discard("w", 7)

    # Then the released messages stay in the queue: a consumer gets each once
    assert dropped == 0
    assert sorted(_received(queue, 1.0)) == [b"x", b"y"]


@both_stores
def test_a_discarded_send_is_never_released(client: QueueClient) -> None:
    # Given a send staged, then discarded by an abort
    queue = client.create_queue("discarded")
    staged = queue.staging.stage(("w", 8, 0, 0), queue.check_batch([b"x"]))
    assert queue.staging.discard("w", 8) == 1

    # When a late commit publishes it anyway
    queue.staging.publish([staged])

    # Then nothing is delivered, and the log says why
    assert _received(queue, 0.6) == []
    record = SendLog(queue.buckets.store, queue.queue_id).read("w", 8, 0, 0)
    assert record is not None and record.state is SendState.DISCARDED


@both_stores
def test_an_id_moved_after_the_release_began_is_refused(client: QueueClient) -> None:
    # Given a send whose release began
    queue = client.create_queue("moved")
    log = SendLog(queue.buckets.store, queue.queue_id)
    log.reserve("w", 1, 0, 0, [5, 6], 1_000, [b"d" * 8, b"e" * 8], 60_000)
    assert log.begin_release([(("w", 1, 0, 0), [5, 6])]) == {("w", 1, 0, 0): [5, 6]}

    # When a zombie attempt repairs a write and moves the ids
    held = log.move_ids("w", 1, 0, 0, [5, 6], [5, 9])

    # Then the released ids hold
    assert held == [5, 6]
    record = log.read("w", 1, 0, 0)
    assert record is not None and record.state is SendState.RELEASING and record.ids == [5, 6]


def test_a_release_keeps_the_ttl_the_messages_were_sent_with(client: QueueClient) -> None:
    # Given a send staged under a TTL of an hour (the real node: the memory store's
    # rows do not expire cell by cell)
    queue = client.create_queue("ttl-release", message_ttl=3600)
    staged = queue.staging.stage(("w", 1, 0, 0), queue.check_batch([b"x"]))

    # When an operator shortens the TTL before the commit releases it
    client.update_queue("ttl-release", message_ttl=2)
    queue.staging.publish([staged])
    time.sleep(3)

    # Then the message is still there, counted and received, 3 s later
    assert queue.stats(exact=True).visible == 1
    assert [d.payload for d in queue.receive(10, wait=1.0)] == [b"x"]
