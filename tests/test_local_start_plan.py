"""How many nodes ``bdq cassandra start`` brings up, from the nodes recorded under its home.

Fast tests of ``LocalCluster.nodes_to_start`` and of the command's refusal: the
homes here hold node folders as a start leaves them, and no node is started
(the refusal comes before any launch, and nothing runs under these homes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_queue.cli import main
from spark_queue.errors import LocalNodeError
from spark_queue.local.node import LocalCluster


def recorded_cluster(home: Path, nodes: int) -> LocalCluster:
    """A home holding ``nodes`` stopped nodes, as ``bdq cassandra start --nodes N`` leaves it."""
    cluster = LocalCluster(home, address="127.0.0.70", jmx_port=7470)
    for index in range(1, nodes + 1):
        spec = cluster.node(index)
        spec.folder.mkdir(parents=True)
        meta = {
            "address": spec.address,
            "native_port": spec.native_port,
            "storage_port": spec.storage_port,
            "jmx_port": spec.jmx_port,
        }
        (spec.folder / "node.json").write_text(json.dumps(meta))
    return cluster


def test_a_start_without_a_count_brings_up_every_recorded_node(tmp_path: Path) -> None:
    # Given a home where three nodes were started once
    cluster = recorded_cluster(tmp_path / "bdq", 3)

    # Then a start that names no count starts the three, not node 1 alone
    assert cluster.nodes_to_start() == 3
    # And asking for as many, or more (the cluster grows), is taken as asked
    assert cluster.nodes_to_start(3) == 3
    assert cluster.nodes_to_start(4) == 4


def test_the_command_without_nodes_starts_the_whole_recorded_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a home with three recorded nodes, and a start that only notes what it was asked
    home = tmp_path / "bdq"
    recorded_cluster(home, 3)
    asked: list[int | None] = []

    def noting_start(self: LocalCluster, nodes: int | None = None, **kwargs: object) -> None:
        asked.append(nodes)
        raise LocalNodeError("noted, not started")

    monkeypatch.setattr(LocalCluster, "start", noting_start)

    # When `bdq cassandra start` runs with no --nodes (as `make run` does)
    result = CliRunner().invoke(
        main, ["cassandra", "start", "--home", str(home)], env={"BDQ_CASSANDRA_HOSTS": None}
    )

    # Then it asks for the three nodes
    assert "noted, not started" in result.stderr
    assert asked == [3]


def test_a_new_home_starts_one_node(tmp_path: Path) -> None:
    assert LocalCluster(tmp_path / "missing").nodes_to_start() == 1
    assert recorded_cluster(tmp_path / "bdq", 0).nodes_to_start() == 1
    assert LocalCluster(tmp_path / "other").nodes_to_start(3) == 3


@pytest.mark.parametrize("nodes", [0, 10])
def test_a_count_out_of_range_is_refused(tmp_path: Path, nodes: int) -> None:
    with pytest.raises(LocalNodeError, match=rf"^nodes {nodes}: must be between 1 and 9$"):
        LocalCluster(tmp_path).nodes_to_start(nodes)


def test_fewer_nodes_than_the_cluster_has_are_refused_with_the_command_that_starts_all(
    tmp_path: Path,
) -> None:
    # Given a home with three recorded nodes
    home = tmp_path / "bdq"
    recorded_cluster(home, 3)

    # When the user asks the command line for one
    result = CliRunner().invoke(
        main,
        ["cassandra", "start", "--nodes", "1", "--home", str(home), "--address", "127.0.0.70"],
        env={"BDQ_CASSANDRA_HOSTS": None},
    )

    # Then it is refused, naming the flag, the value, the rule and the fix, and nothing started
    assert result.exit_code == 1, result.output
    message = " ".join(result.stderr.split())  # rich may wrap the long line
    rule = f"--nodes 1: must be at least the 3 nodes of the local cluster under {home.resolve()}"
    assert message.startswith(f"Error: {rule}")
    assert "start them all with 'bdq cassandra start' (no --nodes)" in message
    assert not list(home.glob("node*/cassandra.pid"))
