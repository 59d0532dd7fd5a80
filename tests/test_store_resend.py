"""Requests the driver refused before sending them are sent again (``Store._resending``).

The driver refuses a request with ``ConnectionBusy`` while its connection's
socket buffer is full, that is while the node reads requests more slowly than
they come; with one node, the request then fails with ``NoHostAvailable``.
Such a request never reached Cassandra, so the store offers it again, for up
to the request timeout, and runs every other statement once. The refusals are
injected into the driver's ``Connection.send_msg``, the one place it makes
them, and the statements run against the real node.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cassandra.cluster import NoHostAvailable
from cassandra.connection import Connection, ConnectionBusy
from cassandra.pool import NoConnectionsAvailable
from cassandra.protocol import BatchMessage, ExecuteMessage

from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, SparkQueueError
from spark_queue.store.driver_errors import never_sent, no_host_message
from spark_queue.store.session import Store

INSERT = "INSERT INTO {ks}.sequences (queue_id, next_id) VALUES (?, ?)"
CLAIM = "UPDATE {ks}.sequences SET next_id = ? WHERE queue_id = ? IF next_id = ?"
READ = "SELECT next_id FROM {ks}.sequences WHERE queue_id = ?"


def test_only_requests_refused_on_every_host_before_sending_count_as_never_sent() -> None:
    busy = ConnectionBusy("Connection 127.0.0.1:9042 is overloaded")
    assert never_sent(NoHostAvailable("none", {"127.0.0.1:9042": busy}))
    assert never_sent(NoHostAvailable("none", {"a": busy, "b": NoConnectionsAvailable()}))
    # A host that was down or failed the request may have been sent it, or is no overload.
    assert not never_sent(NoHostAvailable("none", {"a": busy, "b": OSError("refused")}))
    assert not never_sent(NoHostAvailable("none", {}))
    assert not never_sent(busy)
    assert not never_sent(SparkQueueError("anything else"))


def test_an_overloaded_connection_is_named_as_such_not_as_a_missing_node() -> None:
    error = NoHostAvailable("none", {"127.0.0.1:9042": ConnectionBusy("overloaded")})
    text = no_host_message(error)
    assert "overloaded" in text and "127.0.0.1:9042" in text
    assert "bdq cassandra start" not in text


class Refusals:
    """Refuses the requests that carry a marked value, as a full socket buffer would."""

    def __init__(self) -> None:
        self.times: dict[bytes, int] = {}  # marked value -> refusals left (-1: always)
        self.sent: dict[bytes, int] = {}  # marked value -> requests that went out

    def refuse(self, value: uuid.UUID, times: int = 1) -> None:
        self.times[value.bytes] = times

    def sent_with(self, value: uuid.UUID) -> int:
        return self.sent.get(value.bytes, 0)

    def check(self, message: Any) -> None:
        for marked in self._marked(message):
            left = self.times.get(marked, 0)
            if left:
                self.times[marked] = left - 1 if left > 0 else left
                raise ConnectionBusy("Connection 127.0.0.1:9042 is overloaded (injected)")
        for marked in self._marked(message):
            self.sent[marked] = self.sent.get(marked, 0) + 1

    def _marked(self, message: Any) -> list[bytes]:
        if isinstance(message, ExecuteMessage):
            values = list(message.query_params or ())
        elif isinstance(message, BatchMessage):
            values = [v for _, _, params in message.queries for v in params]
        else:
            return []
        return [v for v in values if v in self.times or v in self.sent]


@pytest.fixture
def refusals(monkeypatch: pytest.MonkeyPatch) -> Refusals:
    injected = Refusals()
    send_msg = Connection.send_msg

    def refusing_send_msg(self: Connection, msg: Any, *args: Any, **kwargs: Any) -> Any:
        injected.check(msg)
        return send_msg(self, msg, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_msg", refusing_send_msg)
    return injected


@pytest.fixture
def store(keyspace: ConnectionSettings) -> Iterator[Store]:
    # A short request timeout bounds the test of a connection that stays overloaded.
    real = Store(dataclasses.replace(keyspace, request_timeout=2.0))
    for cql in (INSERT, CLAIM, READ):
        real.prepare(cql)  # prepared before refusals start: only executions are refused
    try:
        yield real
    finally:
        real.close()


def mark(refusals: Refusals, *values: uuid.UUID) -> None:
    """Count the requests that carry ``values`` from now on."""
    for value in values:
        refusals.sent[value.bytes] = 0


def test_statements_refused_unsent_are_sent_again_and_each_applies_once(
    store: Store, refusals: Refusals
) -> None:
    rows = [uuid.uuid4() for _ in range(6)]
    store.execute_many([(INSERT, (row, 0)) for row in rows], what="seeding")
    mark(refusals, *rows)
    for row in rows[::2]:
        refusals.refuse(row, times=2)
    # Conditional updates: one that reached the node twice would answer "not applied".
    results = store.execute_many([(CLAIM, (1, row, 0)) for row in rows], what="claiming")

    assert [result.one()[0] for result in results] == [True] * len(rows)
    assert [refusals.sent_with(row) for row in rows] == [1] * len(rows)
    assert [store.rows(READ, (row,))[0][0] for row in rows] == [1] * len(rows)


def test_a_refused_batch_and_a_refused_single_statement_are_sent_again(
    store: Store, refusals: Refusals
) -> None:
    first, second, single = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    mark(refusals, first, second, single)
    refusals.refuse(first, times=3)
    refusals.refuse(single, times=2)
    batch = store.batch(INSERT, [(first, 7), (second, 8)])
    store.execute_many([(batch, ())], what="writing a batch")
    store.execute(INSERT, (single, 9), what="writing one row")

    assert [refusals.sent_with(v) for v in (first, second, single)] == [1, 1, 1]
    found = [store.rows(READ, (v,))[0][0] for v in (first, second, single)]
    assert found == [7, 8, 9]


def test_a_connection_that_stays_overloaded_fails_with_that_reason_and_writes_nothing(
    store: Store, refusals: Refusals
) -> None:
    stuck, other = uuid.uuid4(), uuid.uuid4()
    mark(refusals, stuck, other)
    refusals.refuse(stuck, times=-1)
    with pytest.raises(BackendUnavailable, match="overloaded") as raised:
        store.execute_many([(INSERT, (stuck, 1)), (INSERT, (other, 2))], what="writing rows")

    assert "writing rows" in str(raised.value)
    assert "bdq cassandra start" not in str(raised.value)
    assert [refusals.sent_with(stuck), refusals.sent_with(other)] == [0, 1]
    refusals.times.clear()
    assert store.rows(READ, (stuck,)) == []
    assert store.rows(READ, (other,)) == [(2,)]  # the statement beside it ran, once


def test_an_error_from_the_node_is_raised_at_once_not_repeated(
    store: Store, refusals: Refusals
) -> None:
    row = uuid.uuid4()
    mark(refusals, row)
    expiring = "INSERT INTO {ks}.sequences (queue_id, next_id) VALUES (?, ?) USING TTL ?"
    with pytest.raises(SparkQueueError, match="rejected"):
        # The node refuses a negative TTL when it executes the statement, every time.
        store.execute_many([(INSERT, (row, 1)), (expiring, (row, 2, -1))], what="writing rows")
    assert refusals.sent_with(row) == 2  # the insert, and the refused one once
