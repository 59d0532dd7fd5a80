"""format("bdq") from a Spark Connect client: the server from the pip installation, on loopback.

The module starts ``SparkConnectServer`` with ``spark-submit`` (``local[2]``,
gRPC bound to 127.0.0.1 on a free port), drives the source and the sink from a
``SparkSession.builder.remote(...)`` client, and stops the server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.spark.options import connector_options

pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect] (make venv installs it)")

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cassandra]

BIN = Path(sys.executable).parent
START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    env.pop("SPARK_HOME", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    log = folder / "server.log"
    command = [
        str(BIN / "spark-submit"),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        # A Python worker (the stream's source runner) has 15 s to connect back by
        # default: not enough on a loaded 2-core machine.
        "--conf", "spark.python.authenticate.socketTimeout=120s",
        "--conf", f"spark.sql.streaming.checkpointLocation={folder / 'checkpoints'}",
    ]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _port_open(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the Connect server did not listen:\n{log.read_text(errors='replace')[-3000:]}"
                )
            time.sleep(1.0)
        yield f"sc://127.0.0.1:{port}"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[Any]:
    # The suite's local SparkSession may already run in this process, and the
    # classic builder refuses a remote session beside it (SESSION_ALREADY_EXIST);
    # the Connect client's own builder makes one regardless.
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    session = RemoteSession.builder.remote(connect_url).create()
    try:
        yield session
    finally:
        session.stop()


def test_source_and_sink_from_a_connect_client(
    remote: Any, keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    options = connector_options(keyspace)
    with QueueClient(settings=keyspace) as client:
        client.create_queue("connect-in").send_batch([f"c{i}".encode() for i in range(30)])
        client.create_queue("connect-out")

        # When a Connect client relays the queue with readStream/writeStream format("bdq")
        query = (
            remote.readStream.format("bdq")
            .options(**options)
            .option("queue", "connect-in")
            .load()
            .selectExpr("payload", "map('via', 'connect') AS headers")
            .writeStream.format("bdq")
            .options(**options)
            .option("queue", "connect-out")
            .option("writerId", "connect-relay")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        # and peeks it with a batch read
        peeked = (
            remote.read.format("bdq").options(**options).option("queue", "connect-out").load()
        ).collect()

        # Then every message went through once, and the source queue is drained
        out = client.queue("connect-out").peek(100)
        assert query.exception() is None
        assert sorted(m.payload for m in out) == sorted(f"c{i}".encode() for i in range(30))
        assert {m.headers["via"] for m in out} == {"connect"}
        assert len(peeked) == 30
        assert client.queue("connect-in").stats().visible == 0
