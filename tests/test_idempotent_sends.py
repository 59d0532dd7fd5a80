"""Idempotent sends (store/retries.py): a write repeated after a lost answer lands once.

A send whose write landed but whose answer was lost (a timeout, a dropped
connection) is repeated by the sender with the same ids and write timestamp,
as Kafka's idempotent producer repeats a batch: one message, never two, and
never one a consumer already acked coming back. The faults are injected at the
store boundary; the tests run on a MemoryStore and on the real node.
"""

from __future__ import annotations

from typing import Any

import pytest
from cassandra import InvalidRequest, OperationTimedOut

from spark_queue import QueueClient, SparkQueueError
from spark_queue.errors import BackendUnavailable
from spark_queue.store.message_writes import MessageWrites
from spark_queue.store.retries import transient

both_stores = pytest.mark.both_stores


def lost_answer(error: BaseException) -> BackendUnavailable:
    """The error the store raises when a write's answer did not come back."""
    failure = BackendUnavailable("injected: sending messages: Cassandra did not answer in time")
    failure.__cause__ = error
    return failure


def test_only_transient_failures_are_repeated() -> None:
    assert transient(lost_answer(OperationTimedOut("no answer")))
    assert transient(OperationTimedOut("no answer"))
    assert not transient(lost_answer(InvalidRequest("bad")))  # refused: repeating cannot help
    assert not transient(SparkQueueError("anything else"))


@both_stores
def test_a_send_whose_answer_was_lost_is_written_once(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("lost-answer", visibility_timeout=30)
    insert = MessageWrites.insert
    calls: list[int] = []

    def landed_then_lost(self: MessageWrites, *args: Any, **kwargs: Any) -> None:
        insert(self, *args, **kwargs)
        calls.append(1)
        if len(calls) <= 2:  # the first two answers are lost; the write landed each time
            raise lost_answer(OperationTimedOut("injected"))

    monkeypatch.setattr(MessageWrites, "insert", landed_then_lost)
    ids = queue.send_batch([b"a", b"b"])

    assert len(calls) == 3
    got = queue.receive(10)
    assert sorted(d.id for d in got) == sorted(ids)
    assert queue.stats(exact=True).total == 2  # not 6


@both_stores
def test_a_repeat_does_not_bring_back_a_message_acked_meanwhile(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a write that landed and was received and acked before its answer came back
    queue = client.create_queue("acked-meanwhile", visibility_timeout=30)
    consumer = client.queue("acked-meanwhile")
    insert = MessageWrites.insert
    acked: list[int] = []

    def landed_consumed_then_lost(self: MessageWrites, *args: Any, **kwargs: Any) -> None:
        insert(self, *args, **kwargs)
        if not acked:
            (delivery,) = consumer.receive(1)
            consumer.ack(delivery.receipt)
            acked.append(delivery.id)
            raise lost_answer(OperationTimedOut("injected"))

    monkeypatch.setattr(MessageWrites, "insert", landed_consumed_then_lost)

    # When the sender repeats the write
    (mid,) = queue.send_batch([b"once"])

    # Then the repeat (same write time) left the ack standing: nothing to receive again
    assert acked == [mid]
    assert queue.receive(10, wait=0.5) == []
    assert queue.stats(exact=True).total == 0


@both_stores
def test_a_refused_write_is_raised_at_once(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("refused", visibility_timeout=30)
    calls: list[int] = []

    def refused(self: MessageWrites, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        raise lost_answer(InvalidRequest("injected: refused"))

    monkeypatch.setattr(MessageWrites, "insert", refused)
    with pytest.raises(BackendUnavailable, match="injected"):
        queue.send(b"x")
    assert calls == [1]


@both_stores
def test_send_async_repeats_a_write_whose_answer_was_lost(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = client.create_queue("async-lost", visibility_timeout=30)
    store = queue.buckets.store
    execute_async = store.execute_async
    lost: list[int] = []

    def landed_then_lost(statement: Any, params: Any = (), *, what: str) -> Any:
        future = execute_async(statement, params, what=what)
        if not lost and what.startswith("sending"):
            future.result()  # it landed ...
            lost.append(1)
            raise OperationTimedOut("injected")  # ... and its answer was lost
        return future

    monkeypatch.setattr(store, "execute_async", landed_then_lost)
    futures = [queue.send_async(f"m{i}".encode()) for i in range(5)]
    queue.flush()

    assert lost == [1]
    ids = [f.result() for f in futures]
    got = queue.receive(10)
    assert sorted(d.id for d in got) == sorted(ids)
    assert queue.stats(exact=True).total == 5
