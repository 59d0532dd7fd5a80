"""The send-once state machine and batch checks: pure logic, no Cassandra."""

from __future__ import annotations

import pytest

from spark_queue.engine.staging import write_timestamp
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
