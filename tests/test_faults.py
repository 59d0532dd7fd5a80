"""The queue on a three-node local cluster with replication factor 3, nodes killed under it."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_queue import BackendUnavailable, ConnectionSettings, QueueClient
from spark_queue.local.node import LocalCluster
from spark_queue.queue import Queue

pytestmark = [pytest.mark.cassandra, pytest.mark.multinode, pytest.mark.slow]

ADDRESSES = ("127.0.0.41", "127.0.0.42", "127.0.0.43")


def drain(queue: Queue) -> list[bytes]:
    payloads = []
    while deliveries := queue.receive(100):
        payloads += [d.payload for d in deliveries]
        queue.ack_batch([d.receipt for d in deliveries])
    return payloads


def test_replicated_queue_survives_one_node_down_and_fails_clearly_without_quorum(
    node_home: Path,
) -> None:
    cluster = LocalCluster(node_home, address=ADDRESSES[0], jmx_port=7280)
    cluster.start(nodes=3)
    settings = ConnectionSettings.from_env(
        {},
        hosts=",".join(ADDRESSES),
        keyspace="faults",
        replication_factor=3,
        request_timeout=10.0,
    )
    try:
        with QueueClient(settings=settings) as client:
            # Given a queue replicated three times, partly consumed
            queue = client.create_queue("orders", bucket_size=50, seal_delay=0.5)
            queue.send_batch([f"a{i}".encode() for i in range(200)])
            first = queue.receive(60)
            queue.ack_batch([d.receipt for d in first])

            # When one replica is killed, LOCAL_QUORUM and LOCAL_SERIAL still have 2 of 3
            cluster.kill(3)
            queue.send_batch([f"b{i}".encode() for i in range(200)])
            rest = drain(queue)

            # Then every message is delivered, once
            expected = {f"a{i}".encode() for i in range(60, 200)} | {
                f"b{i}".encode() for i in range(200)
            }
            assert sorted(rest) == sorted(expected)
            assert queue.stats().total == 0

            # When a second replica dies, the quorum is gone: a clear error, not a silent loss
            queue.send(b"before")
            cluster.kill(2)
            with pytest.raises(
                BackendUnavailable, match=r"replicas|did not answer|no Cassandra host"
            ):
                queue.receive(10)

            # And once it is back, the message sent before is still there
            cluster.start(nodes=2)
            assert drain(queue) == [b"before"]
    finally:
        cluster.stop()
