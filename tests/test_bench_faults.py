"""Pure logic of the fault benchmarks: the kill plan and where a kill lands."""

from __future__ import annotations

from pathlib import Path

from spark_queue.bench.faults_pipeline import PHASES, Checkpoint, plan_kills, reached


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
