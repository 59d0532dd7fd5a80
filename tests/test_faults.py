"""The queue on a three-node local cluster with replication factor 3, nodes killed under it.

One cluster serves the whole module, started by ``bdq cassandra start --nodes 3``
(a minute or two; the first test checks what that command did); each test first
brings every node back up and waits for a settled ring.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from spark_queue import BackendUnavailable, ConnectionSettings, QueueClient
from spark_queue.bench.faults_bench import run_faults_bench
from spark_queue.bench.faults_params import FaultsParams
from spark_queue.bench.faults_pipeline import NodeFaults, run_pipeline_faults
from spark_queue.bench.faults_report import write_report
from spark_queue.cli import main
from spark_queue.config import HostPort
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster
from spark_queue.message import Delivery
from tests.helpers import assert_killed_and_exactly_once, chosen_seed, drain

pytestmark = [pytest.mark.cassandra, pytest.mark.multinode, pytest.mark.slow]

ADDRESSES = ("127.0.0.41", "127.0.0.42", "127.0.0.43")
#: Relay kills in the pipeline test: a node dies in every other run, so each of the
#: three nodes once; each run costs a Spark start and a node restart (about 50 s here).
PIPELINE_KILLS = 6


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


def settings_for(keyspace: str) -> ConnectionSettings:
    return ConnectionSettings.from_env(
        {},
        hosts=",".join(ADDRESSES),
        keyspace=keyspace,
        replication_factor=3,
        request_timeout=10.0,
    )


@dataclass
class ThreeNodes:
    """The module's cluster, and the output of the ``bdq cassandra start`` that began it."""

    cluster: LocalCluster
    started: Result


@pytest.fixture(scope="module")
def three_nodes(
    tmp_path_factory: pytest.TempPathFactory, classpath_cache: Path
) -> Iterator[ThreeNodes]:
    """Three local nodes on 127.0.0.41-43 (JMX 7280-7282), started through the CLI.

    Stopped after the module. The CLI start is itself under test (its first test).
    """
    home = tmp_path_factory.mktemp("faults") / "bdq"
    shutil.copytree(classpath_cache, home / "lib")
    cluster = LocalCluster(home, address=ADDRESSES[0], jmx_port=7280)
    args = ["cassandra", "start", "--nodes", "3", "--home", str(home),
            "--address", ADDRESSES[0], "--jmx-port", "7280"]  # fmt: skip
    try:
        began = time.monotonic()
        started = CliRunner().invoke(main, args, env={"BDQ_CASSANDRA_HOSTS": None})
        print(f"three nodes started in {time.monotonic() - began:.1f}s")
        yield ThreeNodes(cluster, started)
    finally:
        cluster.stop()


@pytest.fixture
def cluster(three_nodes: ThreeNodes) -> LocalCluster:
    return three_nodes.cluster


def test_the_command_line_starts_three_nodes_that_see_each_other(
    three_nodes: ThreeNodes,
) -> None:
    # Given three nodes started with 'bdq cassandra start --nodes 3' (node1 the seed)
    started = three_nodes.started
    why = f"exit {started.exit_code}\nstdout:\n{started.stdout}\nstderr:\n{started.stderr}"
    # Then the start says where each one answers CQL
    assert started.exit_code == 0, why
    for index, address in enumerate(ADDRESSES, start=1):
        assert f"at {address}:9042 (node{index}," in started.stdout, why
    # And 'bdq cassandra status' finds all three ready
    home = str(three_nodes.cluster.home)
    status = CliRunner().invoke(main, ["cassandra", "status", "--home", home, "--json"])
    assert status.exit_code == 0, status.output
    assert [n["ready"] for n in json.loads(status.stdout)["nodes"]] == [True] * 3
    # And node1 knows the other two as its peers
    with cql.connect(settings_for("system"), only=HostPort(ADDRESSES[0])) as session:
        peers = sorted(str(row.peer) for row in session.execute("SELECT peer FROM system.peers"))
    assert peers == list(ADDRESSES[1:])


def all_up(cluster: LocalCluster, keyspace: str) -> ConnectionSettings:
    """Start whichever of the three nodes is down and wait until the ring has settled."""
    cluster.start(nodes=3)
    settings = settings_for(keyspace)
    deadline = time.monotonic() + 120
    while not all_normal(settings):
        assert time.monotonic() < deadline, "the three nodes never all saw each other NORMAL"
        time.sleep(1)
    cql.ensure_keyspace(settings)  # replicated three times, with its tables
    return settings


def test_replicated_queue_survives_one_node_down_and_fails_clearly_without_quorum(
    cluster: LocalCluster,
) -> None:
    settings = all_up(cluster, "faults")
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
        killed_at = time.monotonic()
        eventually(probe, "an LWT with one node down")
        probed = time.monotonic() - killed_at
        queue.send_batch([f"b{i}".encode() for i in range(200)])
        sent = time.monotonic() - killed_at
        receives: list[tuple[float, list[Delivery]]] = []  # (seconds after the kill, batch)
        while batch := queue.receive(100):
            receives.append((time.monotonic() - killed_at, batch))
            queue.ack_batch([d.receipt for d in batch])
        rest = [d.payload for _, batch in receives for d in batch]

        # Then every message is delivered, once
        expected = {f"a{i}".encode() for i in range(60, 200)} | {
            f"b{i}".encode() for i in range(200)
        }
        repeats = [
            (n, round(at, 1), d.id, d.delivery_count)
            for n, (at, batch) in enumerate(receives)
            for d in batch
            if rest.count(d.payload) > 1
        ]
        assert sorted(rest) == sorted(expected), (
            f"probed {probed:.1f} s and sent {sent:.1f} s after the kill; (receive, seconds"
            f" after the kill, id, delivery count) of each repeat: {repeats}"
        )
        assert queue.stats(exact=True).total == 0

        # When a second replica dies, the quorum is gone: a clear error, not a silent loss
        queue.send(b"before")
        cluster.kill(2)
        with pytest.raises(BackendUnavailable, match=r"replicas|did not answer|no Cassandra host"):
            queue.receive(10)

        # And once it is back, the message sent before is still there
        cluster.start(nodes=2)
        eventually(probe, "an LWT after the restart")
        assert drain(queue) == [b"before"]


def test_bench_faults_slice_loses_nothing_and_writes_its_report(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    # Given the bench's workload on the three nodes, with short levels: receivers
    # crashing at p = 0.2 per batch, a node killed and restarted, two load steps
    settings = all_up(cluster, "faults_bench")
    params = FaultsParams(
        rate=40, seconds=6, receivers=2, visibility_timeout=3, crash_levels=(0.2,),
        mttf=4, mttr=2, node_seconds=12, load_steps=(40, 80), load_seconds=4, seed=11,
    )  # fmt: skip
    result = run_faults_bench(
        settings, params, tmp_path / "work", cluster=cluster, faults=["receiver", "node", "load"]
    )  # the network fault has its own slice below

    # Then no level lost a message, the faults happened, and the report has its plots
    by_fault = {level.fault: level for level in result.levels}
    assert [(level.level, level.lost, level.corrupt) for level in result.levels] == [
        (level.level, 0, 0) for level in result.levels
    ]
    assert all(level.sent > 0 and level.distinct == level.sent for level in result.levels)
    assert by_fault["receiver"].restarts > 0
    node_events = [what for _, what in by_fault["node"].events]
    assert node_events[:2] == [node_events[0], node_events[0].replace("killed", "back")]
    assert node_events[0].endswith("killed")
    files = write_report(result, tmp_path / "report", "bdq bench faults (test slice)")
    assert {f.name for f in files} == {
        "report.md",
        "faults-load.png",
        "faults-throughput.png",
        "faults-duplication.png",
    }
    assert all(f.stat().st_size > 0 for f in files)
    assert "Lost messages in all: **0**" in (tmp_path / "report" / "report.md").read_text()


def test_bench_network_drops_cost_redeliveries_never_a_message_or_a_second_write(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    # Given the bench's workload through its proxies (127.0.0.64-66), which drop
    # the connection on 5% of the client requests, senders' and receivers' alike
    settings = all_up(cluster, "faults_net")
    params = FaultsParams(
        rate=40, seconds=8, receivers=2, visibility_timeout=3, drop_levels=(0.05,), seed=5
    )
    result = run_faults_bench(
        settings, params, tmp_path / "work", faults=["network"], proxy_address="127.0.0.64"
    )

    # Then connections were dropped, and every acknowledged send arrived intact
    [level] = result.levels
    assert level.drops > 0 and level.requests > level.drops
    assert (level.lost, level.corrupt) == (0, 0)
    assert level.sent > 0 and level.distinct == level.sent
    # And no send was written twice: a write whose answer was lost is repeated with
    # its ids and write time (store/retries.py); duplicates are redeliveries only
    assert level.send_duplicates == 0, level


@pytest.mark.spark
def test_pipeline_killed_at_random_while_nodes_die_delivers_each_message_exactly_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    # Given a relay of 20000 messages at LOCAL_QUORUM on the three nodes, killed at
    # six random points, and in every other run one node of three killed and restarted
    settings = all_up(cluster, "faults_pipeline")
    seed = chosen_seed()
    print(f"random-kill pipeline with node kills: seed {seed} (BDQ_TEST_SEED={seed} repeats it)")
    progress: list[str] = []

    def echo(line: str) -> None:
        progress.append(line)
        print(line)

    nodes = NodeFaults(cluster, seed, echo=echo)
    result = run_pipeline_faults(
        settings, tmp_path, messages=20_000, kills=PIPELINE_KILLS, seed=seed, disturb=nodes,
        echo=echo,
    )  # fmt: skip

    # Then the nodes did die, each of the three, and every message arrived exactly once
    why = f"seed {seed}, relay log {tmp_path / 'relay.log'}:\n" + "\n".join(progress)
    killed = [e for e in nodes.events if " killed " in e]
    assert len(killed) >= PIPELINE_KILLS // 2, why
    assert {e.split()[3] for e in killed} == {"1", "2", "3"}, why
    assert all(f"node {e.split()[3]} back" in " ".join(nodes.events) for e in killed), why
    assert_killed_and_exactly_once(result, 20_000, PIPELINE_KILLS, why)
