"""The history checker on a real run: producers and consumers as processes under a nemesis.

Three producer and three consumer processes on one queue (visibility timeout
2.5 s, up to 0.8 s of work per batch) for 25 s while a seeded nemesis SIGKILLs
consumers and SIGSTOPs consumers and producers past the visibility timeout;
then a drain and the checker
(``spark_queue.bench.history``). About a minute. The seed is printed; set
``BDQ_HISTORY_SEED`` to replay its plan of faults.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from spark_queue.bench.history_run import HistoryParams, run_history
from spark_queue.config import ConnectionSettings


@pytest.mark.cassandra
@pytest.mark.slow
def test_a_history_under_kills_and_pauses_keeps_every_promise(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # Given a seed, printed so that a failure can be replayed
    seed = int(os.environ.get("BDQ_HISTORY_SEED") or random.randrange(2**31))
    print(f"history seed {seed} (replay: BDQ_HISTORY_SEED={seed})")

    # When producers and consumers run under the nemesis and the queue is drained
    report, events = run_history(keyspace, HistoryParams(seed=seed), tmp_path)

    # Then the history breaks no promise; the faults and the duplicates are told
    print(f"nemesis: {len(events)} actions: " + ", ".join(f"{t}s {e}" for t, e in events))
    print(report.summary())
    assert any(e.startswith("SIGKILL") for _, e in events)
    assert any(e.startswith("SIGSTOP") for _, e in events)
    assert report.sent > 0
    assert not report.violations, f"seed {seed}: {report.describe()}"
