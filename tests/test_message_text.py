"""Text a message cannot carry: payloads, headers and keys that do not encode as UTF-8.

Cassandra stores text as UTF-8, so a lone surrogate ("\\ud800", which Python
strings may hold) would fail the write itself. The checks before any write
must refuse it with InvalidMessage, naming the value, and write nothing; in
``send_async`` the bad message must not fail other callers' messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from spark_queue import ConnectionSettings, InvalidMessage, QueueClient
from spark_queue.queue import Queue

pytestmark = pytest.mark.cassandra

LONE = "\ud800"


@pytest.fixture
def queue(keyspace: ConnectionSettings) -> Iterator[Queue]:
    with QueueClient(settings=keyspace) as client:
        yield client.create_queue("text")


@pytest.mark.parametrize(
    ("send", "named"),
    [
        (lambda q: q.send(b"x", headers={"source": LONE}), "header 'source'"),
        (lambda q: q.send(b"x", headers={LONE: "web"}), "header '\\ud800'"),
        (lambda q: q.send(f"order {LONE}"), "payload 'order \\ud800'"),
        (lambda q: q.send(b"x", key=f"customer-{LONE}"), "key 'customer-\\ud800'"),
    ],
    ids=["header value", "header key", "payload", "key"],
)
def test_text_that_is_not_utf8_is_refused_by_name_and_nothing_is_written(
    queue: Queue, send: object, named: str
) -> None:
    with pytest.raises(InvalidMessage, match=re.escape(named) + ".*must encode as UTF-8"):
        send(queue)  # type: ignore[operator]
    assert queue.stats(exact=True).total == 0


def test_a_batch_with_one_such_header_writes_none_of_its_messages(queue: Queue) -> None:
    headers = [{"n": "1"}, {"n": LONE}, {"n": "3"}]

    with pytest.raises(InvalidMessage, match=r"message 2 of 3"):
        queue.send_batch([b"1", b"2", b"3"], headers=headers)
    assert queue.stats(exact=True).total == 0


def test_send_async_refuses_it_at_the_call_and_sends_the_others(queue: Queue) -> None:
    before = queue.send_async(b"before")
    with pytest.raises(InvalidMessage, match="header 'source'"):
        queue.send_async(b"bad", headers={"source": LONE})
    after = queue.send_async(b"after")
    queue.flush()

    assert before.result() != after.result()
    assert sorted(d.payload for d in queue.receive(10)) == [b"after", b"before"]
