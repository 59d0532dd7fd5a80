"""Exactly-once through pipeline crashes: a relay SIGKILLed at five random points.

A queue -> Spark -> queue relay with a writerId moves 20000 messages while its
whole process group (driver, JVM, Python workers) is SIGKILLed five times at
points a seed picks, in every phase of a micro-batch (planning, acking,
reading, writing, committing), restarted from its checkpoint each time and
finally drained with ``availableNow`` (spark_queue.bench.faults_pipeline).
Every run after the first replays the batch the last one left, so kills also
land during and after a replay. ``BDQ_TEST_SEED=N`` repeats a run's kill plan.

CI runs the same relay kills on three nodes, with nodes dying too
(``tests/test_faults.py``), which covers this case; this single-node run, about
4 minutes, isolates a failure from node faults: ``BDQ_LONG_FAULTS=1`` runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_queue import ConnectionSettings
from spark_queue.bench.faults_pipeline import run_pipeline_faults
from tests.helpers import assert_killed_and_exactly_once, chosen_seed

pytestmark = [
    pytest.mark.spark,
    pytest.mark.cassandra,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("BDQ_LONG_FAULTS") != "1",
        reason="tests/test_faults.py kills the same relay on three nodes; BDQ_LONG_FAULTS=1"
        " runs this single-node case too (as does bdq bench faults --pipeline)",
    ),
]

MESSAGES = 20_000
#: One kill per phase (faults_pipeline.PHASES): each run costs a Spark start, about
#: 30 s here; the seed changes every run, so each run explores new points.
KILLS = 5


def test_relay_killed_at_five_random_points_delivers_each_message_exactly_once(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # Given 20000 messages and a relay killed at five points chosen by a seed, one per phase
    seed = chosen_seed()
    print(f"random-kill pipeline: seed {seed} (BDQ_TEST_SEED={seed} repeats the plan)")
    progress: list[str] = []

    def echo(line: str) -> None:
        progress.append(line)
        print(line)

    result = run_pipeline_faults(
        keyspace, tmp_path, messages=MESSAGES, kills=KILLS, seed=seed, echo=echo
    )

    # Then every kill landed, and the target holds every source id once, the source nothing
    why = f"seed {seed}, relay log {tmp_path / 'relay.log'}:\n" + "\n".join(progress)
    assert_killed_and_exactly_once(result, MESSAGES, KILLS, why)
