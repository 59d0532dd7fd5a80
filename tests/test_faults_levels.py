"""Exactly-once through the faults of a real cluster: skew, a zombie, speculation, stage retries.

The lean version of ``bdq bench faults --faults skew,pause,speculation,stage-retry``
(spark_queue.bench.faults_levels): one short round per fault kind, each checked by
source id as the random-kill test is. The bench runs the longer levels (both
skews, more kills and messages).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from spark_queue import ConnectionSettings
from spark_queue.bench.faults_levels import (
    PipelineLevel,
    cluster_level,
    pause_level,
    skew_level,
)
from tests.helpers import chosen_seed

pytestmark = [pytest.mark.spark, pytest.mark.cassandra, pytest.mark.slow]


@pytest.fixture
def keyspace(shared_keyspace: ConnectionSettings) -> ConnectionSettings:
    return shared_keyspace


def assert_exactly_once(level: PipelineLevel, messages: int, workdir: Path) -> None:
    why = f"seed {level.result.seed}, logs in {workdir}:\n" + "\n".join(level.evidence)
    r = level.result
    # one by one, so that a failure says which part of exactly-once broke
    assert r.missing == 0, why
    assert r.duplicates == 0, why
    assert (r.extra, r.corrupt) == (0, 0), why
    assert r.delivered == messages, why
    assert (r.source_left, r.target_left) == (0, 0), why


def needs_faketime() -> None:
    """Skip without Debian's faketime; under CI (which `make test` installs it for), fail."""
    if shutil.which("faketime") is None:
        why = "faketime is not on PATH: 'make test' installs it, or apt-get install faketime"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)


def test_a_replay_on_a_clock_20_s_behind_its_first_run_delivers_each_message_once(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    needs_faketime()
    # Given a relay at +10 s killed while it writes, then drained at -10 s
    seed = chosen_seed()
    print(f"skew level: seed {seed} (BDQ_TEST_SEED={seed} repeats it)")

    level = skew_level(
        keyspace, tmp_path, skew=10, messages=3000, kills=1, phases=["writing"], seed=seed
    )

    # Then the kill landed mid-batch, and every source id arrived once
    assert level.result.kills[0].landed.endswith("running"), level.evidence
    assert_exactly_once(level, 3000, tmp_path)


def test_a_relay_paused_past_its_lease_and_resumed_as_a_zombie_duplicates_nothing(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # Given a relay SIGSTOPped mid-batch for longer than its 8 s lease, a successor
    # from its checkpoint, and the first SIGCONTed while the successor drains
    seed = chosen_seed()
    print(f"pause level: seed {seed} (BDQ_TEST_SEED={seed} repeats it)")

    level = pause_level(keyspace, tmp_path, messages=4000, lease=8, seed=seed)

    # Then every source id arrived once
    assert any("SIGCONT" in line for line in level.evidence), level.evidence
    assert_exactly_once(level, 4000, tmp_path)


@pytest.mark.skipif(
    os.environ.get("BDQ_LONG_FAULTS") != "1",
    reason="local-cluster mode takes minutes to start: BDQ_LONG_FAULTS=1 runs it"
    " (bdq bench faults --faults stage-retry,speculation runs it too)",
)
def test_a_stage_re_attempt_after_an_executor_kill_with_speculation_on_duplicates_nothing(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # Given a relay on two executors with speculation on, a straggling first attempt,
    # a shuffle after the source, and the executor of batch 1's source stage killed
    seed = chosen_seed()

    level = cluster_level(
        keyspace, tmp_path, speculation=True, stage_retry=True, messages=3000, seed=seed
    )

    # Then the source stage ran again (attempt numbers from 0), the workers ran this
    # checkout, and every source id arrived once
    evidence = "\n".join(level.evidence)
    assert level.counts["executors_killed"] == 1, evidence
    assert level.counts["stage_reattempts"] >= 1, evidence
    assert f"spark_queue from {Path(__file__).parent.parent}" in evidence, evidence
    assert_exactly_once(level, 3000, tmp_path)
