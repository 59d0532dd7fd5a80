"""Faults the relay injects inside its own Spark tasks: stragglers and a killed executor.

The relay (:mod:`spark_queue.bench.faults_relay`) wraps its rows in a Python UDF
from here, once in the stage that reads the source and, with a shuffle, once in
the stage that writes the sink. On the first row of each task attempt the UDF
appends one line to ``events.jsonl`` in the fault folder: where it ran, the
batch, stage, partition, attempt number, task attempt id and the time. Then:

* a *straggler*: attempt 0 of partition 0 sleeps, so that speculation
  (``spark.speculation``) starts a second attempt of that task while the first
  still runs. It sleeps until that attempt records its first row (or at most
  ``straggle_ms``), notes in ``woke.jsonl`` which attempt it saw, and goes on:
  then both attempts hold the same rows and write at once;
* a *killed executor*: partition 0 of the sink stage of batch ``kill_batch``
  SIGKILLs, once (a marker file says it happened), the executor JVMs that ran
  that batch's source stage (their pids are in the source stage's events).
  Their map outputs go with them, so the stage after the source fails to fetch
  them and Spark runs the source stage again: a stage re-attempt, whose tasks
  count ``attemptNumber`` from 0 again.

The lines tell afterwards what really happened (``read_events``): which tasks
ran twice, whether two attempts overlapped in time, and on which executor and
host (the executor JVM's ``--hostname``) each ran. They need executors that are
processes of their own: a standalone cluster or ``local-cluster`` mode.
"""

from __future__ import annotations

import contextlib
import itertools
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

#: The files of the fault folder: one line per task attempt, one per straggler's wake-up.
EVENTS = "events.jsonl"
WAKES = "woke.jsonl"

Event = dict[str, Any]

# Task attempts this Python worker has seen: one event per attempt, not per row.
_seen: set[int] = set()


@dataclass(frozen=True)
class RelayFaults:
    """What the relay's tasks do to themselves (picklable: it travels in the UDF).

    Attributes:
        folder: Where ``events.jsonl`` and the kill marker go.
        straggle_ms: Longest sleep of attempt 0 of partition 0 of every stage, waiting
            for a second attempt of its task; 0 for none.
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
    executor = _executor_pid()
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
        "executor": executor,
        "host": _executor_host(executor),
        "module": __file__,
    }
    _append(Path(faults.folder), event)
    if kill:
        for e in read_events(Path(faults.folder)):
            if e["where"] == "source" and e["batch"] == batch and e["executor"]:
                _kill(e["executor"])
    if straggle:
        copy = _await_copy(Path(faults.folder), event, straggle / 1000)
        woke = {"stage": event["stage"], "task": event["task"], "at": time.time(), "saw": copy}
        _append(Path(faults.folder), woke, WAKES)
    return value


def _await_copy(folder: Path, first: Event, seconds: float) -> int:
    """Sleep until another attempt of ``first``'s task starts: its task id, -1 after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for e in read_events(folder):
            same = (e["stage"], e["partition"]) == (first["stage"], first["partition"])
            if same and e["task"] != first["task"] and e["attempt"] > first["attempt"]:
                return int(e["task"])
        time.sleep(0.1)
    return -1


def read_events(folder: Path, name: str = EVENTS) -> list[Event]:
    """The task attempts the UDF recorded (or, with ``WAKES``, the stragglers' wake-ups)."""
    path = folder / name
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a SIGKILL of its writer
            continue
    return events


def overlapping_attempts(events: list[Event], wakes: list[Event]) -> list[tuple[Event, Event]]:
    """Pairs (straggler, later attempt) of one task whose later attempt began during the sleep.

    Two attempts of one task at once: the straggler, asleep with its rows (and
    leases) in hand, saw the later attempt's first row recorded, then woke and
    went on, while the later one (a speculative copy) read and wrote.
    """
    by_task = {e["task"]: e for e in events}
    pairs = []
    for w in wakes:
        first, later = by_task.get(w["task"]), by_task.get(w["saw"])
        # a later attempt whose first row came before the straggler's may have ended by then
        if first and later and first["at"] <= later["at"] <= w["at"]:
            pairs.append((first, later))
    return pairs


def on_other_hosts(pairs: list[tuple[Event, Event]]) -> int:
    """How many of ``overlapping_attempts``' pairs ran on two executors of different hosts."""
    return sum(
        a["executor"] != b["executor"] and a.get("host", "") != b.get("host", "") for a, b in pairs
    )


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


def _append(folder: Path, event: Event, name: str = EVENTS) -> None:
    # One short O_APPEND write per line: lines of several workers do not interleave.
    fd = os.open(folder / name, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
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


def _executor_host(pid: int) -> str:
    """The host an executor JVM runs as (its ``--hostname``); "" when unknown."""
    process = _process(pid) if pid else None
    if process is None:
        return ""
    import psutil  # _process imported it, or said which extra is missing

    with contextlib.suppress(psutil.NoSuchProcess):
        for flag, value in itertools.pairwise(process.cmdline()):
            if flag == "--hostname":
                return value
    return ""


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
