"""TLS end to end: a node that requires TLS, reached by client, CLI, source and sink.

The module starts one node on 127.0.0.60 (JMX 7300) with ``bdq cassandra start
--tls-required`` from a home of its own and stops it at the end. The node asks
TLS clients for a certificate signed by its CA (mutual TLS), so every round
trip here also exercises the client certificate settings.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import trustme
from click.testing import CliRunner, Result
from pyspark.sql import SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.cli import main
from spark_queue.config import parse_hosts
from spark_queue.errors import BackendUnavailable
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster
from spark_queue.spark.options import connector_options

pytestmark = [pytest.mark.cassandra, pytest.mark.slow, pytest.mark.usefixtures("local_node_tools")]

ADDRESS = "127.0.0.60"
JMX_PORT = 7300
#: A password set on every connection below, searched for wherever it must not show.
PASSWORD = f"pw-{uuid.uuid4().hex}"


@dataclass
class TlsNode:
    home: Path
    started: Result
    settings: ConnectionSettings  # TLS with the node's CA and the client certificate


def explain(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


@pytest.fixture(scope="module")
def tls_node(tmp_path_factory: pytest.TempPathFactory, classpath_cache: Path) -> Iterator[TlsNode]:
    home = tmp_path_factory.mktemp("tls") / "bdq"
    shutil.copytree(classpath_cache, home / "lib")
    args = ["cassandra", "start", "--home", str(home), "--address", ADDRESS,
            "--jmx-port", str(JMX_PORT), "--tls-required"]  # fmt: skip
    try:
        started = CliRunner().invoke(main, args, env={"BDQ_CASSANDRA_HOSTS": None})
        assert started.exit_code == 0, explain(started)
        files = LocalCluster(home).tls_files
        settings = ConnectionSettings(
            hosts=parse_hosts([f"{ADDRESS}:9042"]),
            keyspace=f"t_{uuid.uuid4().hex[:8]}",
            tls_ca_file=str(files.ca),
            tls_cert_file=str(files.client_cert),
            tls_key_file=str(files.client_key),
        )
        cql.ensure_keyspace(settings)
        yield TlsNode(home, started, settings)
    finally:
        LocalCluster(home).stop()


def test_start_prints_how_to_connect(tls_node: TlsNode) -> None:
    out = tls_node.started.stdout
    files = LocalCluster(tls_node.home).tls_files
    assert f"at {ADDRESS}:9042 (node1" in out
    assert "TLS required" in out
    assert f"BDQ_CASSANDRA_TLS_CA_FILE={files.ca}" in out
    assert f"BDQ_CASSANDRA_TLS_CERT_FILE={files.client_cert}" in out
    for path in (files.ca, files.client_cert, files.client_key, files.node):
        assert path.read_bytes().startswith(b"-----BEGIN ")


def test_client_round_trip_over_tls(tls_node: TlsNode) -> None:
    with QueueClient(settings=tls_node.settings) as client:
        queue = client.create_queue("secure", exist_ok=True)
        queue.send_batch([b"a", b"b"])
        got = queue.receive(max_messages=2)
        queue.ack_batch([d.receipt for d in got])

        assert sorted(d.payload for d in got) == [b"a", b"b"]
        assert queue.stats().visible == 0


def test_cli_round_trip_over_tls_from_the_printed_variables(tls_node: TlsNode) -> None:
    # Given the variables `bdq cassandra start --tls-required` printed
    env = {
        line.split("=", 1)[0].removeprefix("  export "): line.split("=", 1)[1]
        for line in tls_node.started.stdout.splitlines()
        if line.startswith("  export ")
    }
    env["BDQ_KEYSPACE"] = tls_node.settings.keyspace
    runner = CliRunner()

    # When bdq creates a queue, sends and peeks with nothing else
    created = runner.invoke(main, ["queue", "create", "cli-tls"], env=env)
    sent = runner.invoke(main, ["send", "cli-tls", "hello"], env=env)
    peeked = runner.invoke(main, ["peek", "cli-tls", "--json"], env=env)

    # Then each went over TLS
    assert created.exit_code == 0, explain(created)
    assert sent.exit_code == 0, explain(sent)
    assert [m["payload"] for m in json.loads(peeked.stdout)] == ["hello"]


def test_plain_text_is_refused_with_the_host_and_a_hint(tls_node: TlsNode) -> None:
    plain = replace(tls_node.settings, tls=False, tls_ca_file=None, tls_cert_file=None,
                    tls_key_file=None, connect_timeout=5.0)  # fmt: skip

    with pytest.raises(BackendUnavailable) as caught:
        QueueClient(settings=plain)

    message = str(caught.value)
    assert ADDRESS in message
    assert "turn tls on" in message


def test_a_wrong_ca_is_refused_naming_the_certificate_problem(
    tls_node: TlsNode, tmp_path: Path
) -> None:
    # A CA of the test's own (trustme), which signed nothing the node holds
    other = tmp_path / "other-ca.pem"
    trustme.CA(organization_name="some other CA").cert_pem.write_to_path(str(other))
    wrong = replace(tls_node.settings, tls_ca_file=str(other), connect_timeout=5.0)

    with pytest.raises(BackendUnavailable) as caught:
        QueueClient(settings=wrong)

    message = str(caught.value)
    assert ADDRESS in message
    assert "TLS: the certificate of" in message
    assert "tls_ca_file" in message


def test_no_client_certificate_is_refused_by_the_node(tls_node: TlsNode) -> None:
    server_only = replace(
        tls_node.settings, tls_cert_file=None, tls_key_file=None, connect_timeout=5.0
    )

    with pytest.raises(BackendUnavailable) as caught:
        QueueClient(settings=server_only)

    assert ADDRESS in str(caught.value)


@pytest.mark.spark
def test_source_and_sink_over_tls_keep_the_password_out_of_sight(
    tls_node: TlsNode,
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # spark-queue's and the driver's logs (py4j's own DEBUG log echoes every call
    # to the JVM, option values included, and is not spark-queue's to change)
    caplog.set_level("DEBUG", logger="spark_queue")
    caplog.set_level("DEBUG", logger="cassandra")
    # A password on every connection (the node does not ask for one, the driver
    # just does not use it): it must never show anywhere a user looks.
    settings = replace(tls_node.settings, username="bdq", password=PASSWORD)
    options = connector_options(settings)
    with QueueClient(settings=settings) as client:
        client.create_queue("tls-in", exist_ok=True)
        client.create_queue("tls-out", exist_ok=True)

        # When the sink writes and a stream relays the messages over TLS
        spark.createDataFrame([(f"m{i}",) for i in range(20)], "payload string").write.format(
            "bdq"
        ).options(**options).option("queue", "tls-in").mode("append").save()
        checkpoint = tmp_path / "checkpoint"
        stream = spark.readStream.format("bdq").options(**options).option("queue", "tls-in").load()
        query = (
            stream.select("payload")
            .writeStream.format("bdq")
            .options(**options)
            .option("queue", "tls-out")
            .option("writerId", "tls-relay")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        progress = "\n".join(p.json for p in query.recentProgress)
        plan = stream._jdf.queryExecution().toString()
        batch_plan = (
            spark.read.format("bdq")
            .options(**options)
            .option("queue", "tls-out")
            .load()
            ._jdf.queryExecution()
            .toString()
        )
        out = client.queue("tls-out").peek(100)

        # Then every message made it through
        assert sorted(m.payload for m in out) == sorted(f"m{i}".encode() for i in range(20))
        assert query.exception() is None

    # And the password shows in none of these
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in str(settings)
    assert PASSWORD not in progress
    assert PASSWORD not in plan and PASSWORD not in batch_plan
    ours = [r for r in caplog.records if r.name.startswith(("spark_queue", "cassandra"))]
    assert ours  # the driver did log (connections at DEBUG), so the search means something
    assert all(PASSWORD not in r.getMessage() for r in ours)
    for file in checkpoint.rglob("*"):
        if file.is_file():
            assert PASSWORD.encode() not in file.read_bytes(), file
