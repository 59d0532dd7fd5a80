"""Several ``bdq serve`` processes over one keyspace, on the real node.

Front ends keep no state (DESIGN.md section 7): a message sent through one is
received and deleted through another, and a server killed under load loses
nothing that a client was told was sent, when the client retries on the other
server as an SDK behind a load balancer does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from spark_queue.config import ConnectionSettings
from tests.service_server import Server, running_server

pytestmark = pytest.mark.cassandra

T = TypeVar("T")
#: What a client sees of a server that died: it tries the other one.
SERVER_GONE = (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError)
WORKERS = 4
ROUNDS = 40  # per worker: one send and one receive each
DRAIN_LIMIT_S = 90.0  # leases of the dead server run out after the visibility timeout


@pytest.fixture(scope="module")
def servers(_module_keyspace: ConnectionSettings) -> Iterator[tuple[Server, Server]]:
    with (
        running_server(_module_keyspace) as first,
        running_server(_module_keyspace, peer=first) as second,
    ):
        yield first, second


def _sqs(server: Server) -> Any:
    key = server.acme
    return boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
        config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=30),
    )


def test_sent_through_one_server_received_and_deleted_through_the_other(
    servers: tuple[Server, Server],
) -> None:
    # Given two front ends of one keyspace
    a, b = (_sqs(s) for s in servers)
    url_a = a.create_queue(QueueName="across")["QueueUrl"]
    url_b = b.get_queue_url(QueueName="across")["QueueUrl"]

    # When a message is sent through one and received and deleted through the other
    sent = a.send_message(QueueUrl=url_a, MessageBody="hop")
    got = b.receive_message(QueueUrl=url_b, WaitTimeSeconds=5)["Messages"]
    b.delete_message(QueueUrl=url_b, ReceiptHandle=got[0]["ReceiptHandle"])

    # Then it is the same message, and it is gone for both
    assert [(m["MessageId"], m["Body"]) for m in got] == [(sent["MessageId"], "hop")]
    assert "Messages" not in a.receive_message(QueueUrl=url_a, VisibilityTimeout=0)
    attributes = a.get_queue_attributes(QueueUrl=url_a, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


class Balancer:
    """Round-robin over two servers' clients; a call whose server is gone goes to the other."""

    def __init__(self, clients: list[Any]) -> None:
        self.clients = clients
        self._turn = 0
        self._lock = threading.Lock()

    def call(self, action: Callable[[Any], T]) -> T:
        with self._lock:
            self._turn += 1
            first = self._turn % len(self.clients)
        try:
            return action(self.clients[first])
        except SERVER_GONE:
            return action(self.clients[1 - first])


class Load:
    """Clients that send numbered messages and receive and delete, recording both."""

    def __init__(self, balancer: Balancer, url: str) -> None:
        self.balancer = balancer
        self.url = url
        self.acked: set[str] = set()  # bodies whose send returned success
        self.received: set[str] = set()
        self.third_sent = threading.Event()
        self._lock = threading.Lock()

    def work(self, worker: int) -> None:
        """One client: ROUNDS times, send one message then receive and delete what comes."""
        for i in range(ROUNDS):
            body = f"{worker}-{i}"
            self.balancer.call(partial(self._send, body=body))
            with self._lock:
                self.acked.add(body)
                if len(self.acked) >= WORKERS * ROUNDS // 3:
                    self.third_sent.set()
            self.balancer.call(self.receive_and_delete)

    def _send(self, client: Any, body: str) -> None:
        client.send_message(QueueUrl=self.url, MessageBody=body)

    def receive_and_delete(self, client: Any) -> None:
        """Receive up to 10 messages through ``client`` and delete them."""
        found = client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10)
        for m in found.get("Messages", []):
            with self._lock:
                self.received.add(m["Body"])
            # A delete lost with its server, or late after a 2 s lease ran out, only
            # brings the message back: a duplicate, which this test allows.
            try:
                client.delete_message(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"])
            except SERVER_GONE:
                pass
            except ClientError as e:
                if e.response["Error"]["Code"] != "ReceiptHandleIsInvalid":
                    raise

    def missing(self) -> set[str]:
        with self._lock:
            return self.acked - self.received


def test_a_server_killed_under_load_loses_nothing(
    _module_keyspace: ConnectionSettings,
) -> None:
    # Given two servers of their own (one will die) and a queue whose leases run out fast
    with (
        running_server(_module_keyspace) as survivor,
        running_server(_module_keyspace, peer=survivor) as victim,
    ):
        balancer = Balancer([_sqs(survivor), _sqs(victim)])
        url = balancer.call(
            lambda c: c.create_queue(QueueName="kill", Attributes={"VisibilityTimeout": "2"})
        )["QueueUrl"]
        load = Load(balancer, url)

        # When one server is SIGKILLed while four clients send and receive across both
        with ThreadPoolExecutor(WORKERS) as pool:
            futures = [pool.submit(load.work, w) for w in range(WORKERS)]
            assert load.third_sent.wait(timeout=120)
            victim.process.kill()
            for future in futures:
                future.result(timeout=300)
        assert victim.process.wait() == -9  # killed, not shut down gracefully

        # Then every message whose send succeeded is received, through the survivor
        deadline = time.monotonic() + DRAIN_LIMIT_S
        while load.missing() and time.monotonic() < deadline:
            load.receive_and_delete(balancer.clients[0])
            if load.missing():
                time.sleep(0.2)
        assert len(load.acked) == WORKERS * ROUNDS
        assert sorted(load.missing()) == []
