"""The send-once state machine and batch checks: pure logic, no Cassandra."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spark_queue.client import QueueClient
from spark_queue.engine.staging import write_timestamp
from spark_queue.errors import SparkQueueError
from spark_queue.store.memory import MemoryStore
from spark_queue.store.message_values import now_ms
from spark_queue.store.send_log import SendRecord, SendState


def test_every_attempt_of_a_send_writes_at_the_first_attempts_time() -> None:
    record = SendRecord(SendState.STAMPED, [1, 2], 1_700_000_000_123)

    assert write_timestamp(record) == 1_700_000_000_123_000
    assert write_timestamp(record._replace(ids=[3, 4])) == write_timestamp(record)


@pytest.mark.parametrize("state", [SendState.RESERVED, SendState.WRITTEN])
def test_a_record_of_an_earlier_version_is_finished_at_this_hosts_clock(state: SendState) -> None:
    # Its rows carry the clock of the host that wrote them, not the recorded time.
    before = now_ms() * 1000
    stamp = write_timestamp(SendRecord(state, [1], 1_000))
    assert before <= stamp <= now_ms() * 1000


@settings(max_examples=300, deadline=None)
@given(
    # Mostly the short path's case (bytes near the limit, no headers, key or delay)
    payload=st.binary(min_size=30, max_size=34)
    | st.binary(max_size=40)
    | st.text(max_size=10)
    | st.just(bytearray(b"ab")),
    headers=st.none() | st.none() | st.dictionaries(st.text(max_size=3), st.text(max_size=3)),
    delay=st.sampled_from([0.0, 0.0, -0.0, 0, 1.5, -1.0, float("nan"), float("inf"), True, False]),
    key=st.none() | st.none() | st.text(max_size=3),
    lanes=st.sampled_from([1, 8]),
)
@example(payload=b"x" * 33, headers=None, delay=0.0, key=None, lanes=8)
def test_checking_one_message_is_checking_a_batch_of_one(
    payload: object, headers: dict[str, str] | None, delay: float, key: str | None, lanes: int
) -> None:
    # Given a queue whose messages are at most 32 bytes (check_one has a short
    # path for bytes without headers, key or delay)
    with QueueClient(store=MemoryStore()) as client:
        queue = client.create_queue("checks", lanes=lanes, max_message_bytes=32)
        sender = queue._sending

        def outcome(check: Callable[[], object]) -> object:
            try:
                return check()
            except SparkQueueError as e:
                return (type(e), str(e))

        # Then one message checked alone is the batch check's message, or its error
        alone = outcome(lambda: sender.check_one(payload, headers, delay, key))  # type: ignore[arg-type]
        batch = outcome(lambda: sender.check_batch([payload], headers, delay, key)[0])  # type: ignore[list-item]
        assert alone == batch
