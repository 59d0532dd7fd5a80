"""What the relay's task log counts as two attempts at once, a copy on another host, a stage re-run.

The cluster levels (tests/test_faults_levels.py) assert on these counts; here
they are checked on hand-made logs, so that a count that can never be 0 (or
never be more) is caught without a Spark cluster.
"""

from __future__ import annotations

from typing import Any

from spark_queue.bench.relay_faults import on_other_hosts, overlapping_attempts, stage_reattempts


def attempt(task: int, at: float, *, attempt: int = 0, host: str = "127.0.0.2") -> dict[str, Any]:
    return {
        "where": "source", "batch": 0, "stage": 3, "partition": 0, "attempt": attempt,
        "task": task, "at": at, "straggle_ms": 15000 if attempt == 0 else 0,
        "executor": 100 if host == "127.0.0.2" else 200, "host": host,
    }  # fmt: skip


def woke(task: int, at: float, saw: int) -> dict[str, Any]:
    return {"stage": 3, "task": task, "at": at, "saw": saw}


def test_a_copy_that_began_while_the_straggler_slept_counts_once_and_on_its_host() -> None:
    first, copy = attempt(1, 10.0), attempt(2, 11.5, attempt=1, host="127.0.0.3")

    pairs = overlapping_attempts([first, copy], [woke(1, 11.6, saw=2)])

    assert pairs == [(first, copy)]
    assert on_other_hosts(pairs) == 1


def test_a_copy_on_the_same_host_is_not_on_another_host() -> None:
    first, copy = attempt(1, 10.0), attempt(2, 11.5, attempt=1)

    pairs = overlapping_attempts([first, copy], [woke(1, 11.6, saw=2)])

    assert len(pairs) == 1
    assert on_other_hosts(pairs) == 0


def test_no_pair_without_a_copy_seen_or_with_a_copy_that_began_first() -> None:
    # the straggler saw nothing in its wait; another's copy began before it (it may
    # have ended before the straggler started: no proof of two at once)
    unanswered = overlapping_attempts([attempt(1, 10.0)], [woke(1, 25.0, saw=-1)])
    early = overlapping_attempts(
        [attempt(2, 9.3, attempt=1, host="127.0.0.3"), attempt(1, 10.0)], [woke(1, 10.1, saw=2)]
    )

    assert (unanswered, early) == ([], [])


def test_a_source_task_run_again_at_attempt_0_is_a_stage_re_attempt() -> None:
    runs = [attempt(1, 10.0), {**attempt(5, 30.0, host="127.0.0.3"), "stage": 4}]

    assert stage_reattempts(runs) == 1
    assert stage_reattempts(runs[:1]) == 0
