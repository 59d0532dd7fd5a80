"""Dead letters through ``bdq serve`` (boto3 against the real node): policies and move tasks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from spark_queue.config import ConnectionSettings
from tests.service_server import Server, running_server

pytestmark = pytest.mark.cassandra


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


def _arn(sqs: Any, url: str) -> str:
    answer = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(answer["Attributes"]["QueueArn"])


def _policy(arn: str, count: int = 1) -> str:
    return json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count})


def _dead_letter(sqs: Any, source: str, body: str) -> None:
    """Send ``body`` and receive it until the receive that moves it (maxReceiveCount 1)."""
    sqs.send_message(QueueUrl=source, MessageBody=body)
    first = sqs.receive_message(QueueUrl=source, VisibilityTimeout=0, WaitTimeSeconds=5)
    assert [m["Body"] for m in first["Messages"]] == [body]
    assert "Messages" not in sqs.receive_message(QueueUrl=source, WaitTimeSeconds=1)


def test_a_redrive_policy_moves_a_message_after_max_receive_count(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    policy = _policy(_arn(sqs, dlq))
    source = sqs.create_queue(QueueName="orders", Attributes={"RedrivePolicy": policy})["QueueUrl"]

    _dead_letter(sqs, source, "poison")

    got = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in got] == ["poison"]
    attributes = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["RedrivePolicy"])
    assert json.loads(attributes["Attributes"]["RedrivePolicy"]) == json.loads(policy)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [source]
    sqs.set_queue_attributes(QueueUrl=source, Attributes={"RedrivePolicy": ""})
    assert "Attributes" not in sqs.get_queue_attributes(
        QueueUrl=source, AttributeNames=["RedrivePolicy"]
    )
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == []


def test_bad_redrive_policies_are_refused(sqs: Any) -> None:
    closed = sqs.create_queue(
        QueueName="closed-dlq",
        Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
    )["QueueUrl"]
    source = sqs.create_queue(QueueName="picky")["QueueUrl"]
    chosen = sqs.create_queue(
        QueueName="chosen-dlq",
        Attributes={
            "RedriveAllowPolicy": json.dumps(
                {"redrivePermission": "byQueue", "sourceQueueArns": [_arn(sqs, source)]}
            )
        },
    )["QueueUrl"]
    fifo = sqs.create_queue(QueueName="dlq.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    missing = _arn(sqs, closed).replace("closed-dlq", "no-such-queue")
    for policy in (
        _policy(_arn(sqs, closed)),  # denyAll
        _policy(missing),
        _policy(_arn(sqs, fifo)),  # a standard queue's dead letters in a FIFO queue
        _policy(_arn(sqs, chosen), 0),
        _policy(_arn(sqs, chosen).replace(":acme:", ":globex:")),
        "not json",
    ):
        with pytest.raises(ClientError) as caught:
            sqs.set_queue_attributes(QueueUrl=source, Attributes={"RedrivePolicy": policy})
        assert _code(caught) == "InvalidParameterValue", policy
    assert "Attributes" not in sqs.get_queue_attributes(
        QueueUrl=source, AttributeNames=["RedrivePolicy"]
    )
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName="other", Attributes={"RedrivePolicy": _policy(missing)})
    assert _code(caught) == "InvalidParameterValue"
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="other")
    # byQueue lets the listed source in
    sqs.set_queue_attributes(
        QueueUrl=source, Attributes={"RedrivePolicy": _policy(_arn(sqs, chosen))}
    )


def _wait_for_task(sqs: Any, arn: str) -> dict[str, Any]:
    for _ in range(300):  # a bound on the wait, not an assertion on its length
        [task] = sqs.list_message_move_tasks(SourceArn=arn)["Results"]
        if task["Status"] not in ("RUNNING", "CANCELLING"):
            return dict(task)
        time.sleep(0.1)
    raise AssertionError(f"task still {task['Status']}")


def test_a_move_task_sends_dead_letters_back(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="moves-dlq")["QueueUrl"]
    source = sqs.create_queue(
        QueueName="moves", Attributes={"RedrivePolicy": _policy(_arn(sqs, dlq))}
    )["QueueUrl"]
    for body in ("a", "b"):
        _dead_letter(sqs, source, body)
    arn = _arn(sqs, dlq)
    with pytest.raises(ClientError) as caught:  # not a dead-letter queue
        sqs.start_message_move_task(SourceArn=_arn(sqs, source))
    assert _code(caught) == "AWS.SimpleQueueService.UnsupportedOperation"

    handle = sqs.start_message_move_task(SourceArn=arn)["TaskHandle"]
    task = _wait_for_task(sqs, arn)

    assert task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 2
    assert task["ApproximateNumberOfMessagesToMove"] == 2
    got = []
    while len(got) < 2:
        answer = sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, WaitTimeSeconds=5)
        assert answer.get("Messages"), f"{len(got)} of 2 back"
        got += [m["Body"] for m in answer["Messages"]]
    assert sorted(got) == ["a", "b"]
    with pytest.raises(ClientError) as caught:
        sqs.cancel_message_move_task(TaskHandle=handle)
    assert _code(caught) == "AWS.SimpleQueueService.UnsupportedOperation"
    with pytest.raises(ClientError) as caught:
        sqs.cancel_message_move_task(TaskHandle="bm90IGEgdGFzaw==")
    assert _code(caught) == "ResourceNotFoundException"
