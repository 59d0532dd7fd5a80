"""Pure logic of the fault benchmarks: the kill plan and where a kill lands."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_queue.bench.faults_bench import _measure
from spark_queue.bench.faults_params import FaultsParams, check_faults
from spark_queue.bench.faults_pipeline import (
    PHASES,
    Checkpoint,
    NodeFaults,
    plan_kills,
    reached,
)
from spark_queue.bench.faults_results import FaultsResult, LevelResult
from spark_queue.cli import main
from spark_queue.errors import InvalidSetting


def test_a_kill_plan_is_repeatable_and_visits_every_phase() -> None:
    plan = plan_kills(7, 10)

    assert plan == plan_kills(7, 10)
    assert plan != plan_kills(8, 10)
    assert len(plan) == 10
    assert {k.phase for k in plan[:5]} == set(PHASES)
    assert {k.phase for k in plan[5:]} == set(PHASES)
    assert all(k.settle == 0 for k in plan if k.phase == "committing")
    assert all(0.4 <= k.settle <= 1.5 for k in plan if k.phase == "writing")


def test_phases_are_read_off_the_checkpoint_since_the_run_started() -> None:
    start = (4, 3)  # batch 4 was running when the last run died
    # the restart replays batch 4 and commits it: a commit, then planning
    assert reached("committing", (4, 4), start)
    assert reached("planning", (4, 4), start)
    assert not reached("reading", (4, 4), start)
    # batch 5 is planned: acking 4, then reading and writing 5
    for phase in ("acking", "reading", "writing"):
        assert reached(phase, (5, 4), start)
    assert not reached("planning", (5, 4), start)
    # nothing new yet
    assert not any(reached(p, start, start) for p in PHASES)


def test_checkpoint_describes_the_last_batch(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path)
    assert checkpoint.snapshot() == (-1, -1)
    assert checkpoint.describe() == "no batch planned yet"
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for name in ("0", "1", "2", ".2.crc"):
        (tmp_path / "offsets" / name).touch()
    (tmp_path / "commits" / "1").touch()
    assert checkpoint.snapshot() == (2, 1)
    assert checkpoint.describe() == "batch 2 running"
    (tmp_path / "commits" / "2").touch()
    assert checkpoint.describe() == "batch 2 committed, next not planned"


def test_bad_fault_names_and_levels_are_refused_before_anything_runs() -> None:
    with pytest.raises(InvalidSetting, match=r"faults 'receiver,net': must be a comma list"):
        check_faults(["receiver", "net"])
    with pytest.raises(InvalidSetting, match=r"crash level 1.5: must be a probability"):
        FaultsParams(crash_levels=(0.1, 1.5))
    result = CliRunner().invoke(main, ["bench", "faults", "--faults", "disk"])
    assert result.exit_code == 1
    assert (
        "faults 'disk': must be a comma list of network, receiver, node, load, skew, pause,"
        " speculation, stage-retry" in result.output
    )
    with pytest.raises(InvalidSetting, match=r"drop level -0.1: must be a probability"):
        FaultsParams(drop_levels=(-0.1,))


def test_saturation_is_the_highest_load_step_with_p99_within_200_ms() -> None:
    def step(offered: float, sent: int, send_p99: float, recv_p99: float) -> LevelResult:
        level = LevelResult("load", f"{offered:g}/s", offered=offered, seconds=10, sent=sent)
        level.send_p99, level.recv_p99 = send_p99, recv_p99
        return level

    params = FaultsParams(seed=1)
    # p99 passes 200 ms at 400/s (receives); at 800/s the senders also fall behind
    steps = [step(100, 1000, 20, 40), step(200, 2000, 90, 199), step(400, 4000, 60, 250)]
    assert FaultsResult(params, steps).saturation == 200
    behind = [step(100, 1000, 20, 40), step(200, 1500, 30, 50)]  # 150/s of 200 offered
    assert FaultsResult(params, behind).saturation == 100
    assert FaultsResult(params, [step(100, 1000, 201, 40)]).saturation is None


def test_a_level_is_measured_from_the_receivers_records(tmp_path: Path) -> None:
    # Given two receivers' records: (0, 2) arrives twice, (1, 1) before (1, 0),
    # a corrupt payload, and a line cut short by a SIGKILL
    (tmp_path / "receiver-0.txt").write_text(
        "100.0 12.5 0 0 1 10\n100.1 -1 0 1 1 11\n100.2 -1 0 2 1 12\n103.0 30.0 0 2 1 12\n"
        "103.1 -1 9 9 0 99\n103.5 -1 1 1 1 31\n"
    )
    (tmp_path / "receiver-1.txt").write_text("100.5 20.0 1 1 1 21\n101.5 8.0 1 0 1 20\n102.0 4.")
    result = LevelResult("receiver", "p=0.1", offered=10, seconds=1)
    sent = {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)}

    _measure(result, sent, [5.0, 7.0], tmp_path, began_wall=100.0)

    # Then (1, 2) is lost, two duplicates, one corrupt, one of five out of order
    assert (result.lost, result.corrupt, result.deliveries, result.distinct) == (1, 1, 8, 5)
    assert result.duplication == pytest.approx(2 / 6)
    # (0, 2) came twice as message 12: a redelivery; (1, 1) as 21 and 31: written twice
    assert (result.send_duplicates, result.redeliveries) == (1, 1)
    assert result.out_of_order == pytest.approx(1 / 5)
    assert (result.recv_p50, result.send_p50) == (pytest.approx(16.25), pytest.approx(6.0))
    assert result.throughput == [4, 1, 0, 3]  # deliveries per second since 100.0


def test_node_faults_take_every_node_in_turn_and_only_in_odd_runs() -> None:
    class Nodes:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def kill(self, index: int) -> None:
            self.calls.append(f"kill {index}")

        def start(self, nodes: int, echo: object) -> None:
            self.calls.append(f"start {nodes}")

    nodes = Nodes()
    faults = NodeFaults(nodes, 5, delay=(0.0, 0.0), down=0.0, echo=lambda line: None)  # type: ignore[arg-type]
    for run in range(6):
        faults(run)

    # Then runs 1, 3, 5 each killed a different node and started all three again
    assert [c for c in nodes.calls if c.startswith("start")] == ["start 3"] * 3
    assert sorted(c for c in nodes.calls if c.startswith("kill")) == ["kill 1", "kill 2", "kill 3"]
    assert [e.split(":")[0] for e in faults.events] == [
        "run 1",
        "run 1",
        "run 3",
        "run 3",
        "run 5",
        "run 5",
    ]


def test_the_node_fault_needs_the_pipeline_and_the_bench_s_own_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    result = CliRunner().invoke(main, ["bench", "faults", "--node-fault"])
    assert result.exit_code == 1
    assert "--node-fault: needs --pipeline and the bench's own three nodes" in result.output
    monkeypatch.setenv("BDQ_CASSANDRA_HOSTS", "127.0.0.1")
    result = CliRunner().invoke(main, ["bench", "faults", "--pipeline", "--node-fault"])
    assert result.exit_code == 1
    assert "(BDQ_CASSANDRA_HOSTS unset)" in result.output
