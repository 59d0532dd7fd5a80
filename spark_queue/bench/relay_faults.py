"""Faults the relay injects inside its own Spark tasks: stragglers and a killed executor.

The relay (:mod:`spark_queue.bench.faults_relay`) wraps its rows in a Python UDF
from here, once in the stage that reads the source and, with a shuffle, once in
the stage that writes the sink. On the first row of each task attempt the UDF
appends one line to ``events.jsonl`` in the fault folder: where it ran, the
batch, stage, partition, attempt number, task attempt id and the time. Then:

* a *straggler*: attempt 0 of partition 0 sleeps ``straggle_ms``, so that
  speculation (``spark.speculation``) starts a second attempt of that task
  while the first still runs;
* a *killed executor*: partition 0 of the sink stage of batch ``kill_batch``
  SIGKILLs, once (a marker file says it happened), the executor JVMs that ran
  that batch's source stage (their pids are in the source stage's events).
  Their map outputs go with them, so the stage after the source fails to fetch
  them and Spark runs the source stage again: a stage re-attempt, whose tasks
  count ``attemptNumber`` from 0 again.

The lines tell afterwards what really happened (``read_events``): which tasks
ran twice, and whether two attempts overlapped in time. They only work in
``local-cluster`` mode, where executors are processes of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_queue.errors import MissingExtra

if TYPE_CHECKING:
    import psutil

#: The executor's JVM main class: the only process the kill may hit.
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"

# Task attempts this Python worker has seen: one event per attempt, not per row.
_seen: set[int] = set()


@dataclass(frozen=True)
class RelayFaults:
    """What the relay's tasks do to themselves (picklable: it travels in the UDF).

    Attributes:
        folder: Where ``events.jsonl`` and the kill marker go.
        straggle_ms: Sleep of attempt 0 of partition 0 of every stage; 0 for none.
        kill_batch: Batch whose sink stage kills its executor once; -1 for none.
    """

    folder: str
    straggle_ms: int = 0
    kill_batch: int = -1


def touch(where: str, faults: RelayFaults, value: bytes) -> bytes:
    """The UDF body: record the task attempt at its first row, inject its fault, pass ``value``."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None or context.taskAttemptId() in _seen:
        return value
    _seen.add(context.taskAttemptId())
    batch = int(context.getLocalProperty("streaming.sql.batchId") or -1)
    first_try = context.partitionId() == 0 and context.attemptNumber() == 0
    straggle = faults.straggle_ms if first_try else 0
    kill = (
        where == "sink"
        and batch == faults.kill_batch
        and context.partitionId() == 0
        and _first_time(Path(faults.folder) / "killed")
    )
    event = {
        "where": where,
        "batch": batch,
        "stage": context.stageId(),
        "partition": context.partitionId(),
        "attempt": context.attemptNumber(),
        "task": context.taskAttemptId(),
        "at": time.time(),
        "straggle_ms": straggle,
        "kill": kill,
        "executor": _executor_pid(),
        "module": __file__,
    }
    _append(Path(faults.folder), event)
    if kill:
        for e in read_events(Path(faults.folder)):
            if e["where"] == "source" and e["batch"] == batch and e["executor"]:
                _kill(e["executor"])
    if straggle:
        time.sleep(straggle / 1000)
    return value


def read_events(folder: Path) -> list[dict[str, Any]]:
    """The task attempts the UDF recorded, in the order they were written."""
    path = folder / "events.jsonl"
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a SIGKILL of its writer
            continue
    return events


def overlapping_attempts(events: list[dict[str, Any]]) -> int:
    """Task attempts that began while an earlier attempt of the same task still straggled.

    Two attempts of one task at once: the later one (a speculative copy) read and
    wrote while the first was asleep with its rows and leases in hand.
    """
    sleeping = {
        (e["stage"], e["partition"]): (e["at"], e["at"] + e["straggle_ms"] / 1000)
        for e in events
        if e["straggle_ms"]
    }
    count = 0
    for e in events:
        window = sleeping.get((e["stage"], e["partition"]))
        if e["attempt"] > 0 and window and window[0] <= e["at"] <= window[1]:
            count += 1
    return count


def stage_reattempts(events: list[dict[str, Any]]) -> int:
    """Source tasks of a batch that ran again with ``attemptNumber`` 0 (their stage ran again).

    Spark resubmits the lost map output's stage (under a new stage id when the
    job of the stage after it is planned anew), and its tasks count attempts
    from 0: the case a step part's first attempt cannot tell from a replay.
    """
    firsts: dict[tuple[int, int], int] = {}
    for e in events:
        if e["where"] == "source" and e["attempt"] == 0:
            key = (e["batch"], e["partition"])
            firsts[key] = firsts.get(key, 0) + 1
    return sum(n - 1 for n in firsts.values())


def _first_time(marker: Path) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _append(folder: Path, event: dict[str, Any]) -> None:
    # One short O_APPEND write per line: lines of several workers do not interleave.
    fd = os.open(folder / "events.jsonl", os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    try:
        os.write(fd, (json.dumps(event) + "\n").encode())
    finally:
        os.close(fd)


def _executor_pid() -> int:
    """The executor JVM above this Python worker (worker -> daemon -> JVM); 0 in local mode."""
    process = _process(os.getppid())
    for _ in range(3):
        if process is None:
            break
        if _is_executor(process):
            return process.pid
        process = process.parent()
    return 0


def _kill(pid: int) -> None:
    """SIGKILL an executor JVM, after checking that the pid still is one."""
    process = _process(pid)
    if process is None:
        return
    import psutil  # _process imported it, or said which extra is missing

    with contextlib.suppress(psutil.NoSuchProcess):  # gone meanwhile
        if _is_executor(process):
            # psutil refuses a pid that a new process took over since the lookup.
            process.kill()


def _is_executor(process: psutil.Process) -> bool:
    return any(EXECUTOR_CLASS in arg for arg in process.cmdline())


def _process(pid: int) -> psutil.Process | None:
    """The process ``pid``, or None if it has exited."""
    # Imported in the tasks that need it, so that bdq itself runs without the local extra.
    try:
        import psutil
    except ImportError as e:
        raise MissingExtra(
            "bdq bench faults --pipeline (its relay's faults)", "local", e.name
        ) from e
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
