"""FIFO queues through ``bdq serve`` (boto3 against the real node), and their deduplication.

The deduplication window and a send cut short by a crash are tested on the
queue itself (``send_deduplicated``), where the clock and the crash can be set.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.engine import staging
from spark_queue.service import fifo
from spark_queue.service.fifo import DEDUP_WINDOW_MS, send_deduplicated
from tests.service_server import Server, running_server


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings) -> Iterator[Server]:
    with running_server(_module_keyspace) as running:
        yield running


@pytest.fixture
def sqs(server: Server) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=server.acme.access_key_id,
        aws_secret_access_key=server.acme.secret_access_key,
        config=Config(retries={"max_attempts": 1}),
    )


def _code(caught: pytest.ExceptionInfo[ClientError]) -> str:
    return str(caught.value.response["Error"]["Code"])


def _total(server: Server, name: str) -> int:
    with QueueClient(settings=server.settings) as client:
        return client.queue(name).stats(exact=True).total


def _fifo(sqs: Any, name: str, **attributes: str) -> str:
    return str(
        sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"]
    )


@pytest.mark.cassandra
def test_a_group_is_received_in_send_order(server: Server, sqs: Any) -> None:
    # Given two groups' messages sent interleaved
    url = _fifo(sqs, "order.fifo")
    for i in range(6):
        group = "a" if i % 2 == 0 else "b"
        answer = sqs.send_message(
            QueueUrl=url, MessageBody=f"{group}{i}", MessageGroupId=group,
            MessageDeduplicationId=f"d{i}",
        )  # fmt: skip
        assert answer["SequenceNumber"].isdigit()
    # When they are all received
    got: list[dict[str, Any]] = []
    while len(got) < 6:
        answer = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5, AttributeNames=["All"]
        )
        assert answer.get("Messages"), f"only {len(got)} of 6 received"
        got += answer["Messages"]
    # Then each group's come in send order, with their system attributes
    for group, bodies in (("a", ["a0", "a2", "a4"]), ("b", ["b1", "b3", "b5"])):
        mine = [m for m in got if m["Attributes"]["MessageGroupId"] == group]
        assert [m["Body"] for m in mine] == bodies
        sequence = [int(m["Attributes"]["SequenceNumber"]) for m in mine]
        assert sequence == sorted(sequence)
    assert {m["Attributes"]["MessageDeduplicationId"] for m in got} == {f"d{i}" for i in range(6)}


@pytest.mark.cassandra
def test_a_repeated_deduplication_id_is_sent_once(server: Server, sqs: Any) -> None:
    url = _fifo(sqs, "dedup.fifo")
    first = sqs.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="x"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="x"
    )
    other_body = sqs.send_message(
        QueueUrl=url, MessageBody="two", MessageGroupId="g", MessageDeduplicationId="x"
    )
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "r", "MessageBody": "one", "MessageGroupId": "g", "MessageDeduplicationId": "x"},
            {"Id": "n", "MessageBody": "new", "MessageGroupId": "g", "MessageDeduplicationId": "y"},
        ],
    )

    assert again["MessageId"] == other_body["MessageId"] == first["MessageId"]
    assert not batch.get("Failed")
    ids = {e["Id"]: e["MessageId"] for e in batch["Successful"]}
    assert ids["r"] == first["MessageId"] and ids["n"] != first["MessageId"]
    assert _total(server, "acme.dedup.fifo") == 2


@pytest.mark.cassandra
def test_content_based_deduplication_digests_the_body(server: Server, sqs: Any) -> None:
    url = _fifo(sqs, "content.fifo", ContentBasedDeduplication="true")
    first = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    again = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    other = sqs.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g")

    assert again["MessageId"] == first["MessageId"] != other["MessageId"]
    assert _total(server, "acme.content.fifo") == 2
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "true"
    assert attributes["DeduplicationScope"] == "queue"


@pytest.mark.cassandra
def test_fifo_validation_errors_write_nothing(server: Server, sqs: Any) -> None:
    # Names and FifoQueue must agree; refused queues are not made
    for name, attributes in (
        ("named.fifo", {}),
        ("named.fifo", {"FifoQueue": "false"}),
        ("plain", {"FifoQueue": "true"}),
        ("scoped.fifo", {"FifoQueue": "true", "DeduplicationScope": "messageGroup"}),
        ("plain2", {"ContentBasedDeduplication": "true"}),
    ):
        with pytest.raises(ClientError) as caught:
            sqs.create_queue(QueueName=name, Attributes=attributes)
        assert _code(caught) in ("InvalidParameterValue", "InvalidAttributeName",
                                 "InvalidAttributeValue"), name  # fmt: skip
        with pytest.raises(ClientError):
            sqs.get_queue_url(QueueName=name)
    url = _fifo(sqs, "checks.fifo")
    standard = sqs.create_queue(QueueName="checks-standard")["QueueUrl"]
    refused: list[tuple[str, dict[str, Any], str]] = [
        (url, {"MessageDeduplicationId": "d"}, "MissingParameter"),
        (url, {"MessageGroupId": "g"}, "InvalidParameterValue"),  # no dedup id, no content dedup
        (url, {"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5},
         "InvalidParameterValue"),
        (url, {"MessageGroupId": "g", "MessageDeduplicationId": "x" * 129},
         "InvalidParameterValue"),
        (standard, {"MessageDeduplicationId": "d"}, "InvalidParameterValue"),
        (standard, {"MessageGroupId": "g"}, "InvalidParameterValue"),
    ]  # fmt: skip
    for target, extra, code in refused:
        with pytest.raises(ClientError) as caught:
            sqs.send_message(QueueUrl=target, MessageBody="m", **extra)
        assert _code(caught) == code, extra
    with pytest.raises(ClientError) as caught:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "true"})
    assert _code(caught) == "InvalidAttributeName"
    assert _total(server, "acme.checks.fifo") == 0
    assert _total(server, "acme.checks-standard") == 0


# -- the window and crashes, on the queue ---------------------------------------------


@pytest.mark.cassandra
def test_a_repeat_after_the_window_is_a_new_message(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue(f"acct.w{uuid.uuid4().hex[:8]}.fifo", order_hint=1)
        # One clock for the service and the send log (the first attempt's time), set in
        # the past so that what is sent is visible: 1 s before a window ends.
        now = fifo.time.time_ns() // 1_000_000
        start = (now // DEDUP_WINDOW_MS - 1) * DEDUP_WINDOW_MS - 1_000
        clock = [start]
        monkeypatch.setattr(fifo.time, "time_ns", lambda: clock[0] * 1_000_000)
        monkeypatch.setattr(staging, "now_ms", lambda: clock[0])

        first = send_deduplicated(queue, b"m", {}, 0, "g", "d")
        clock[0] = start + 2_000  # the next window, 2 s after the first send
        within = send_deduplicated(queue, b"m", {}, 0, "g", "d")
        clock[0] = start + DEDUP_WINDOW_MS + 1  # 5 minutes after the first send
        after = send_deduplicated(queue, b"m", {}, 0, "g", "d")
        clock[0] = start + DEDUP_WINDOW_MS + 1_000  # a repeat of that one
        again = send_deduplicated(queue, b"m", {}, 0, "g", "d")

        assert within == first
        assert after != first and again == after
        assert [m.id for m in queue.peek(10)] == [first, after]


@pytest.mark.cassandra
def test_a_send_cut_short_after_its_record_is_finished_by_the_retry(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue(f"acct.c{uuid.uuid4().hex[:8]}.fifo", order_hint=1)
        # Given a send that recorded and wrote its message, then died before the release
        window = fifo.time.time_ns() // 1_000_000 // DEDUP_WINDOW_MS
        outgoing = queue.check_batch([b"m"], [{}], key="g")
        staged = queue.staging.stage(("sqs-dedup:d", window, 0, 0), outgoing)
        assert queue.peek(10) == []
        # When the client sends again
        sent = send_deduplicated(queue, b"m", {}, 0, "g", "d")
        # Then the first attempt's message is released, once
        assert sent == staged.ids[0]
        assert [(m.id, m.payload, m.key) for m in queue.peek(10)] == [(sent, b"m", "g")]
