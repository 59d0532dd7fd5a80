"""``bdq serve``'s Prometheus series, from ``GET /metrics`` of a real server on the real node."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families

from spark_queue.config import ConnectionSettings
from tests.service_server import Server, running_server

pytestmark = pytest.mark.cassandra


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings) -> Iterator[Server]:
    with running_server(_module_keyspace) as running:
        yield running


def _sqs(server: Server, secret: str | None = None) -> Any:
    key = server.acme
    return boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=secret or key.secret_access_key,
        config=Config(retries={"max_attempts": 1}),
    )


def _samples(server: Server) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the server's scrape, by name and labels (unsigned, as Prometheus asks)."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _requests(samples: dict[Any, float], action: str, status: str) -> float:
    labels = frozenset({("action", action), ("status", status)})
    return samples.get(("bdq_sqs_requests_total", labels), 0.0)


def _latencies(samples: dict[Any, float], action: str) -> float:
    labels = frozenset({("action", action)})
    return samples.get(("bdq_sqs_request_duration_seconds_count", labels), 0.0)


def test_requests_move_the_counters_by_action_and_status(server: Server) -> None:
    # Given a queue and a first scrape
    sqs = _sqs(server)
    url = sqs.create_queue(QueueName="metered")["QueueUrl"]
    before = _samples(server)

    # When two messages are sent, one is signed with a wrong secret, and an unsigned
    # request names no action
    sqs.send_message(QueueUrl=url, MessageBody="one")
    sqs.send_message(QueueUrl=url, MessageBody="two")
    with pytest.raises(ClientError):
        _sqs(server, secret="wrong").send_message(QueueUrl=url, MessageBody="three")
    unsigned = urllib.request.Request(
        server.url + "/",
        data=b"{}",
        headers={"X-Amz-Target": "AmazonSQS.Bogus", "Content-Type": "application/x-amz-json-1.0"},
    )
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(unsigned, timeout=10)
    after = _samples(server)

    # Then each request counts once, under its action and status, with its latency
    assert _requests(after, "SendMessage", "200") - _requests(before, "SendMessage", "200") == 2
    assert _requests(after, "SendMessage", "403") - _requests(before, "SendMessage", "403") == 1
    assert _requests(after, "unknown", "403") - _requests(before, "unknown", "403") == 1
    assert _latencies(after, "SendMessage") - _latencies(before, "SendMessage") == 3
    # the engine's counters of the same process are in the same scrape
    engine = (
        "bdq_sent_total",
        frozenset({("keyspace", server.settings.keyspace), ("queue", "acme.metered")}),
    )
    assert after[engine] - before.get(engine, 0.0) == 2


def test_a_scrape_counts_every_worker(_module_keyspace: ConnectionSettings) -> None:
    # Given a server of two worker processes, sharing one port
    with running_server(_module_keyspace, workers=2) as server:
        url = _sqs(server).create_queue(QueueName="workers")["QueueUrl"]

        # When twelve sends arrive, each on a new connection (so both workers take some)
        for n in range(12):
            _sqs(server).send_message(QueueUrl=url, MessageBody=f"m{n}")

        # Then every scrape, whichever worker answers it, counts all twelve
        counts = {_requests(_samples(server), "SendMessage", "200") for _ in range(6)}
    assert counts == {12.0}
