"""Queue tags through ``bdq serve`` (boto3 against the real node)."""

from __future__ import annotations

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


def test_tags_are_set_listed_and_removed(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="tagged", tags={"team": "data", "env": "test"})["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "cost": "42"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {
        "team": "data",
        "env": "prod",
        "cost": "42",
    }
    sqs.untag_queue(QueueUrl=url, TagKeys=["team", "cost", "never-set"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)


def test_bad_tags_are_refused_and_change_nothing(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="limits", tags={"a": "1"})["QueueUrl"]
    for tags in (
        {f"k{i}": "v" for i in range(50)},  # 51 with the one set
        {"x" * 129: "v"},
        {"k": "v" * 257},
        {"aws:owner": "me"},
        {"bad*key": "v"},
    ):
        with pytest.raises(ClientError) as caught:
            sqs.tag_queue(QueueUrl=url, Tags=tags)
        assert _code(caught) == "InvalidParameterValue", tags
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1"}
    sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(49)})  # 50 in all
    with pytest.raises(ClientError) as caught:
        sqs.create_queue(QueueName="limits-new", tags={f"k{i}": "v" for i in range(51)})
    assert _code(caught) == "InvalidParameterValue"
    with pytest.raises(ClientError):
        sqs.get_queue_url(QueueName="limits-new")


def test_another_accounts_queue_cannot_be_tagged(server: Server, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="mine")["QueueUrl"]
    other = boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=server.globex.access_key_id,
        aws_secret_access_key=server.globex.secret_access_key,
        config=Config(retries={"max_attempts": 1}),
    )
    with pytest.raises(ClientError) as caught:
        other.tag_queue(QueueUrl=url, Tags={"stolen": "yes"})
    assert _code(caught) == "AWS.SimpleQueueService.NonExistentQueue"
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
