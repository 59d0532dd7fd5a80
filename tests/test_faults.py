"""The queue on a three-node local cluster with replication factor 3, nodes killed under it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_queue import BackendUnavailable, ConnectionSettings, QueueClient
from spark_queue.config import HostPort
from spark_queue.local import cql
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


def eventually(action: Callable[[], object], what: str, timeout: float = 120) -> None:
    """Retry ``action`` until it stops raising BackendUnavailable."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            action()
            return
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing after {timeout:.0f}s") from None
            time.sleep(1)


def all_normal(settings: ConnectionSettings) -> bool:
    """Every node sees every node as a NORMAL ring member (no join still pending)."""
    for address in ADDRESSES:
        with cql.connect(settings, only=HostPort(address)) as session:
            rows = session.execute("SELECT status_with_port FROM system_views.gossip_info")
            states = [r.status_with_port or "" for r in rows]
        if len(states) != len(ADDRESSES) or not all(s.startswith("NORMAL") for s in states):
            return False
    return True


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
        deadline = time.monotonic() + 120
        while not all_normal(settings):
            assert time.monotonic() < deadline, "the three nodes never all saw each other NORMAL"
            time.sleep(1)
        with QueueClient(settings=settings) as client:
            # Creating throw-away queues (three LWTs each) probes until Cassandra
            # has noticed a change in the ring: an operation racing the failure
            # detector may time out (a clear error, nothing lost), and retrying
            # it on the queue under test could add duplicates.
            probes = iter(range(1000))

            def probe() -> None:
                client.create_queue(f"probe-{next(probes)}")

            # Given a queue replicated three times, partly consumed
            queue = client.create_queue("orders", bucket_size=50, seal_delay=0.5)
            queue.send_batch([f"a{i}".encode() for i in range(200)])
            first = queue.receive(60)
            queue.ack_batch([d.receipt for d in first])

            # When one replica is killed, LOCAL_QUORUM and LOCAL_SERIAL still have 2 of 3
            cluster.kill(3)
            eventually(probe, "an LWT with one node down")
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
            eventually(probe, "an LWT after the restart")
            assert drain(queue) == [b"before"]
    finally:
        cluster.stop()
