"""The local Cassandra node through ``bdq cassandra``, against real Cassandra processes.

Every node here lives in a temporary home on its own loopback address and JMX
port, so the developer's node on 127.0.0.1:9042 (and its JMX port 7199) is
never touched. A node start takes about 13 s; the module starts one node twice.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner, Result

from spark_queue.cli import main
from spark_queue.config import ConnectionSettings, parse_hosts
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster

ADDRESS = "127.0.0.20"
JMX_PORT = 7250
VERSION_LINE = re.compile(
    r"Cassandra (5\.0\.\d+) at (\S+) \(node1, pid (\d+), (started|already running)\)"
)


def bdq(args: Sequence[str], **env: str | None) -> Result:
    """Run ``bdq`` in-process; BDQ_CASSANDRA_HOSTS is unset unless given."""
    runner = CliRunner()
    return runner.invoke(main, list(args), env={"BDQ_CASSANDRA_HOSTS": None, **env})


def explain(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def settings_for(address: str, keyspace: str = "bdq") -> ConnectionSettings:
    return ConnectionSettings(hosts=parse_hosts([f"{address}:9042"]), keyspace=keyspace)


@dataclass
class Node:
    """The module's node: its home and the output of the start that launched it."""

    home: Path
    started: Result | None = None

    @property
    def start_args(self) -> list[str]:
        return ["cassandra", "start", "--home", str(self.home), "--address", ADDRESS,
                "--jmx-port", str(JMX_PORT)]  # fmt: skip

    @property
    def pid(self) -> int:
        return int((self.home / "node1" / "cassandra.pid").read_text())


pytestmark = [pytest.mark.cassandra, pytest.mark.usefixtures("local_node_tools")]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, classpath_cache: Path) -> Iterator[Node]:
    """One node on 127.0.0.20, started through the CLI; stopped when the module is done."""
    node = Node(tmp_path_factory.mktemp("node") / "bdq")
    shutil.copytree(classpath_cache, node.home / "lib")
    try:
        node.started = bdq(node.start_args)
        assert node.started.exit_code == 0, explain(node.started)
        yield node
    finally:
        LocalCluster(node.home).stop()


@pytest.mark.slow
def test_start_prints_version_and_address(node: Node) -> None:
    # Given a node started in an empty home (the fixture)
    assert node.started is not None
    # Then the command said which Cassandra answers where
    match = VERSION_LINE.search(node.started.stdout)
    assert match, explain(node.started)
    assert match[2] == f"{ADDRESS}:9042"
    assert match[4] == "started"
    # And the node keeps its log in its folder
    assert (node.home / "node1" / "logs" / "system.log").stat().st_size > 0


@pytest.mark.slow
def test_cql_round_trip(node: Node) -> None:
    # Given the running node
    settings = settings_for(ADDRESS, "round_trip")
    # When a keyspace, a table and a row are written
    assert cql.ensure_keyspace(settings)
    with cql.connect(settings) as session:
        session.execute("CREATE TABLE round_trip.kv (k text PRIMARY KEY, v int)")
        session.execute("INSERT INTO round_trip.kv (k, v) VALUES ('answer', 42)")
        # Then they read back
        row = session.execute("SELECT v FROM round_trip.kv WHERE k = 'answer'").one()
    assert row.v == 42
    cql.drop_keyspace(settings)


@pytest.mark.slow
def test_start_while_running_is_harmless_and_says_so(node: Node) -> None:
    # Given the running node and its pid
    pid = node.pid
    # When it is started again
    again = bdq(node.start_args)
    # Then nothing new starts, the same process answers, and the output says so
    assert again.exit_code == 0, explain(again)
    match = VERSION_LINE.search(again.stdout)
    assert match, explain(again)
    assert (int(match[3]), match[4]) == (pid, "already running")
    assert node.pid == pid


@pytest.mark.slow
def test_status_shows_the_node_ready(node: Node) -> None:
    # When status is asked for, as a table and as JSON
    table = bdq(["cassandra", "status", "--home", str(node.home)])
    as_json = bdq(["cassandra", "status", "--home", str(node.home), "--json"])
    # Then both report node1 ready with its address and version, and exit 0
    assert table.exit_code == 0, explain(table)
    assert re.search(rf"node1 .*{re.escape(ADDRESS)}:9042 .*ready .*5\.0\.\d+", table.stdout)
    assert as_json.exit_code == 0, explain(as_json)
    (entry,) = json.loads(as_json.stdout)["nodes"]
    assert entry["address"] == f"{ADDRESS}:9042"
    assert entry["running"] and entry["ready"]
    assert entry["version"].startswith("5.0.")


@pytest.mark.slow
def test_status_with_hosts_env_asks_that_cluster(node: Node, tmp_path: Path) -> None:
    # Given BDQ_CASSANDRA_HOSTS naming the running node and a port nobody listens on
    hosts = f"{ADDRESS}:9042,{ADDRESS}:9"
    # When status is asked for, from a home that has no node at all
    result = bdq(["cassandra", "status", "--json", "--home", str(tmp_path)],
                 BDQ_CASSANDRA_HOSTS=hosts)  # fmt: skip
    # Then each listed host is probed; one not answering makes the exit status 1
    assert result.exit_code == 1, explain(result)
    report = json.loads(result.stdout)
    assert report["source"] == "BDQ_CASSANDRA_HOSTS"
    assert [(n["address"], n["ready"]) for n in report["nodes"]] == [
        (f"{ADDRESS}:9042", True),
        (f"{ADDRESS}:9", False),
    ]


@pytest.mark.slow
def test_stop_then_restart_keeps_the_data(node: Node) -> None:
    # Given a row written to the running node
    settings = settings_for(ADDRESS, "durable")
    cql.ensure_keyspace(settings)
    with cql.connect(settings) as session:
        session.execute("CREATE TABLE IF NOT EXISTS durable.kv (k text PRIMARY KEY, v int)")
        session.execute("INSERT INTO durable.kv (k, v) VALUES ('kept', 7)")
    pid = node.pid

    # When the node is stopped
    stopped = bdq(["cassandra", "stop", "--home", str(node.home)])
    # Then its process is gone and status says so with exit status 1
    assert stopped.exit_code == 0, explain(stopped)
    assert "stopped 1 node" in stopped.stdout
    assert not pid_alive(pid)
    status = bdq(["cassandra", "status", "--home", str(node.home)])
    assert status.exit_code == 1, explain(status)
    assert "stopped" in status.stdout

    # When it is started again
    restarted = bdq(node.start_args)
    # Then it is a new process and the row is still there
    assert restarted.exit_code == 0, explain(restarted)
    match = VERSION_LINE.search(restarted.stdout)
    assert match and match[4] == "started" and int(match[3]) != pid, explain(restarted)
    with cql.connect(settings) as session:
        row = session.execute("SELECT v FROM durable.kv WHERE k = 'kept'").one()
    assert row is not None and row.v == 7


def test_hosts_env_starts_and_stops_nothing(tmp_path: Path) -> None:
    # Given BDQ_CASSANDRA_HOSTS naming the user's own cluster
    home = tmp_path / "bdq"
    env = {"BDQ_CASSANDRA_HOSTS": "cassandra.example:9042"}
    # When start and stop run
    start = bdq(["cassandra", "start", "--home", str(home)], **env)
    stop = bdq(["cassandra", "stop", "--home", str(home)], **env)
    # Then both succeed, say why they did nothing, and no node folder appears
    assert start.exit_code == 0, explain(start)
    assert "BDQ_CASSANDRA_HOSTS is set (cassandra.example:9042)" in start.stdout
    assert "no local node started" in start.stdout
    assert stop.exit_code == 0, explain(stop)
    assert "no local node stopped" in stop.stdout
    assert not home.exists()


def test_port_in_use_fails_naming_the_port(node_home: Path) -> None:
    # Given another process listening on the CQL port of the node's address
    address = "127.0.0.21"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind((address, 9042))
        squatter.listen()
        # When the node is started there
        result = bdq(["cassandra", "start", "--home", str(node_home), "--address", address,
                      "--jmx-port", "7251"])  # fmt: skip
    # Then it fails with a message naming the port and the fix, and launches nothing
    assert result.exit_code == 1, explain(result)
    assert f"CQL (native transport) port {address}:9042 is already in use" in result.stderr
    assert "--native-port" in result.stderr
    assert "Traceback" not in result.output
    assert not (node_home / "node1" / "cassandra.pid").exists()


def test_start_uses_a_node_that_already_answers_there(
    node_home: Path, cassandra: ConnectionSettings
) -> None:
    # Given a Cassandra node (the session's) answering on a loopback address
    first = cassandra.hosts[0]
    if not first.host.startswith("127."):
        pytest.skip(f"the test Cassandra at {first} is not on loopback")
    # When a home that never started a node is asked to start one there
    result = bdq(["cassandra", "start", "--home", str(node_home), "--address", first.host,
                  "--native-port", str(first.port), "--jmx-port", "7253"])  # fmt: skip
    # Then it uses that node and launches nothing
    assert result.exit_code == 0, explain(result)
    assert f"already answers at {first.host}:{first.port}" in result.stderr
    assert not (node_home / "node1" / "cassandra.pid").exists()


@pytest.mark.slow
def test_bad_setting_fails_with_the_log_tail(node_home: Path) -> None:
    # Given a setting Cassandra rejects at startup
    args = ["cassandra", "start", "--home", str(node_home), "--address", "127.0.0.22",
            "--jmx-port", "7252", "--set", "commitlog_sync=bogus", "--timeout", "120"]  # fmt: skip
    # When the node is started with it
    result = bdq(args)
    # Then the command fails and shows the end of the node's log, cause included
    assert result.exit_code == 1, explain(result)
    assert "exited during start" in result.stderr
    assert "--- last lines of" in result.stderr
    assert "Unable to find enum value 'bogus'" in result.stderr
    assert not pid_alive(int((node_home / "node1" / "cassandra.pid").read_text()))
