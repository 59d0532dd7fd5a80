"""The faults of a real cluster, as levels of the Spark relay checked by source id.

Each level moves messages through the relay of :mod:`spark_queue.bench.faults_pipeline`
(writerId on), under one fault, drains it and checks that the target holds
every source id exactly once and the source nothing:

* ``skew``: every relay process (driver, JVM, Python workers) runs under a fake
  clock, ``faketime -f +Ds`` or ``-Ds`` in turn from run to run, and each run but
  the last is SIGKILLed at a seeded point, so a replay runs on a clock 2D away
  from the run it replays. The relay's writes then carry timestamps D away
  from those the Cassandra node assigns (its lightweight transactions) and
  from the test's own (the sends, the check): only the difference of clocks
  reaches Cassandra, so a process skewed against the node covers a node skewed
  against the processes. The level waits out D after the sends and after the
  drain: a consumer within D of a release is the documented duplicate.
* ``pause``: the relay is SIGSTOPped mid-batch past its lease (the source's
  visibility timeout), a second relay starts from the same checkpoint and
  drains, and the first is SIGCONTed while the second runs: a zombie driver
  that finishes its old batch and then competes for the checkpoint.
* ``speculation`` and ``stage-retry`` run on a standalone Spark cluster the
  level starts and stops (:mod:`spark_queue.bench.spark_standalone`): two
  1-core workers on 127.0.0.2 and 127.0.0.3. Spark places a speculative copy
  only on a host without an attempt of its task, so ``local-cluster`` mode (one
  host) never speculates, nor does local mode (one executor). Speculation:
  aggressive settings and a first attempt that sleeps with its rows in hand
  until a second attempt of its task starts on the other host, then goes on, so
  both read and write at once. Stage re-attempt: a shuffle after the source and
  a SIGKILL of the executor of the source stage by the stage after it, so that
  stage cannot fetch the source stage's output and Spark runs the source stage
  again, its tasks counting ``attemptNumber`` from 0 (:mod:`relay_faults`).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_queue.bench.faults_params import PIPELINE_FAULTS
from spark_queue.bench.faults_pipeline import (
    RUN_TIMEOUT,
    KillPoint,
    KillRecord,
    PipelineFaultsResult,
    Relay,
    check_by_source_id,
    fill_source,
    kill_group,
    plan_kills,
    reached,
)
from spark_queue.bench.relay_faults import (
    WAKES,
    on_other_hosts,
    overlapping_attempts,
    read_events,
    stage_reattempts,
)
from spark_queue.bench.spark_standalone import StandaloneCluster
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting

Echo = Callable[[str], None]

#: The skews of the ``skew`` levels, seconds each way.
SKEWS = (2.0, 10.0)
#: A cluster level's drain: a relay on a started cluster took about a minute here.
CLUSTER_RUN_TIMEOUT = 600.0
#: Speculate a task 1.5 times slower than the median once half its stage finished, and
#: a stage's only task after 1 s (a batch's source stage has one task: see below).
SPECULATION = (
    "spark.speculation=true",
    "spark.speculation.task.duration.threshold=1s",
    "spark.speculation.interval=100ms",
    "spark.speculation.quantile=0.5",
    "spark.speculation.multiplier=1.5",
    "spark.speculation.minTaskRuntime=200ms",
    # judge by time alone: a sleeping task is not "inefficient" in Spark's other sense
    "spark.speculation.efficiency.enabled=false",
)
# One source partition per batch (no minPartitions): the shuffle then brings each sink
# task its rows from one map task, in the same order in every attempt, as the sink's
# send-once needs (several map tasks' blocks arrive in any order).
#: The straggling first attempt's longest wait for a speculative copy: on a loaded host
#: a copy's first row came 2.5 to 3.5 s after the straggler's (threshold 1 s).
STRAGGLE_MS = 15000
#: Extra seconds on top of a skew or a lease before the next step relies on it.
MARGIN = 2.0
#: Drains after a run that ended early before the level gives up.
DRAINS = 3


@dataclass
class PipelineLevel:
    """One level's outcome: the exactly-once check and what the fault really did."""

    fault: str
    level: str
    rounds: int
    result: PipelineFaultsResult
    evidence: list[str] = field(default_factory=list)
    waited: float = 0.0
    #: What the fault did, counted: e.g. ``overlapping`` attempts, ``stage_reattempts``.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return self.result.exactly_once


def faketime(offset: float) -> list[str]:
    """The prefix that runs a command on a clock ``offset`` seconds off (Debian's faketime).

    Monotonic clocks move by the same offset, which no interval notices. Keeping
    them real (``FAKETIME_DONT_FAKE_MONOTONIC``) breaks Python's ``time.sleep``
    under libfaketime 0.9.10 (EINVAL from its shifted absolute deadline).
    """
    if shutil.which("faketime") is None:
        raise InvalidSetting(
            "level 'skew': needs Debian's faketime (libfaketime) on PATH;"
            " install it with 'apt-get install -y faketime'"
        )
    return ["faketime", "-f", f"{offset:+g}s"]


def _wait_out(since: float, seconds: float) -> float:
    """Sleep until ``seconds`` have passed since the monotonic time ``since``; the sleep."""
    left = max(0.0, since + seconds - time.monotonic())
    time.sleep(left)
    return left


def _drain(relay: Relay, echo: Echo, timeout: float = RUN_TIMEOUT) -> None:
    for _ in range(DRAINS):
        code = relay.drain(timeout)
        echo(f"  drain (availableNow) exited with {code} at {relay.checkpoint.describe()}")
        if code == 0:
            return
    raise RuntimeError(f"the drain failed {DRAINS} times; see {relay.log}")


def _finish(level: PipelineLevel, settings: ConnectionSettings, run: _Run, echo: Echo) -> None:
    check_by_source_id(settings, run.source, run.target, run.sent, level.result)
    level.result.seconds = time.monotonic() - run.began
    r = level.result
    echo(
        f"  {level.fault} {level.level}: {r.delivered} delivered of {r.messages},"
        f" {r.duplicates} duplicates, {r.missing} missing; left in source {r.source_left},"
        f" in target {r.target_left}; {r.seconds:.0f}s"
    )


@dataclass
class _Run:
    source: str
    target: str
    sent: dict[int, bytes]
    began: float
    sent_at: float


def _fill(settings: ConnectionSettings, messages: int, seed: int) -> _Run:
    began = time.monotonic()
    source, target, sent = fill_source(settings, messages, seed)
    return _Run(source, target, sent, began, time.monotonic())


def skew_level(
    settings: ConnectionSettings,
    workdir: Path,
    *,
    skew: float,
    messages: int,
    kills: int,
    seed: int,
    phases: Sequence[str] = (),
    echo: Echo = print,
) -> PipelineLevel:
    """Relay runs on clocks ``+skew`` and ``-skew`` in turn, killed ``kills`` times, then drained.

    Args:
        phases: The kills' phases (see faults_pipeline.PHASES); a seeded plan when empty.
    """
    plan = plan_kills(seed, kills)
    if phases:
        plan = [KillPoint(p, k.settle) for p, k in zip(phases, plan, strict=False)]
    run = _fill(settings, messages, seed)
    level = PipelineLevel("skew", f"±{skew:g}s", len(plan) + 1, _result(seed, messages))
    relay = Relay(settings, run.source, run.target, workdir / "checkpoint", workdir / "relay.log")
    # A process behind by `skew` would see the sends as `skew` in the future (a delay), and
    # its leases and acks of them could lose to the sends' writes (a duplicate): wait.
    level.waited += _wait_out(run.sent_at, skew + MARGIN)
    for i, kill in enumerate(plan):
        offset = skew if i % 2 == 0 else -skew
        relay.wrap = faketime(offset)
        record = relay.run_until(kill)
        level.result.kills.append(record)
        said = f"run {i + 1} at {offset:+g}s: {kill.phase} (+{kill.settle:.2f}s) landed at"
        level.evidence.append(f"{said} {record.landed}" + _ended(record))
        echo(f"  {level.evidence[-1]}")
    offset = skew if len(plan) % 2 == 0 else -skew
    relay.wrap = faketime(offset)
    _drain(relay, echo)
    level.evidence.append(f"drained at {offset:+g}s")
    # The drain's releases carry the first attempt's time, up to `skew` ahead of this
    # clock: a receive within it would be overruled (the documented duplicate).
    level.waited += _wait_out(time.monotonic(), skew + MARGIN)
    _finish(level, settings, run, echo)
    return level


def pause_level(
    settings: ConnectionSettings,
    workdir: Path,
    *,
    messages: int,
    lease: float,
    seed: int,
    max_per_trigger: int = 1000,
    zombie_seconds: float = 10.0,
    echo: Echo = print,
) -> PipelineLevel:
    """A relay SIGSTOPped mid-batch past its ``lease``, replaced, then SIGCONTed: a zombie."""
    rng = random.Random(seed)
    run = _fill(settings, messages, seed)
    level = PipelineLevel("pause", f"lease {lease:g}s", 2, _result(seed, messages))
    checkpoint = workdir / "checkpoint"

    def relay(name: str) -> Relay:
        return Relay(
            settings, run.source, run.target, checkpoint, workdir / f"relay-{name}.log",
            max_per_trigger=max_per_trigger, visibility_timeout=lease,
        )  # fmt: skip

    first, second = relay("zombie"), relay("successor")
    zombie = first.start()
    successor: subprocess.Popen[bytes] | None = None
    try:
        start = first.checkpoint.snapshot()
        _await(lambda: reached("writing", first.checkpoint.snapshot(), start), zombie, first)
        time.sleep(rng.uniform(0.2, 0.8))
        batch = first.checkpoint.snapshot()[0]
        os.killpg(zombie.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        level.evidence.append(f"relay SIGSTOPped at {first.checkpoint.describe()}")
        echo(f"  {level.evidence[-1]}; waiting out its {lease:g}s lease")
        # Its renewals stopped with it: past the lease, its batch's messages are free.
        time.sleep(lease + MARGIN)
        successor = second.start("--available-now")
        _await(lambda: first.checkpoint.last("commits") >= batch, successor, second)
        os.killpg(zombie.pid, signal.SIGCONT)
        paused = time.monotonic() - stopped
        level.evidence.append(
            f"SIGCONT after {paused:.0f}s, once the successor had committed batch {batch}"
        )
        echo(f"  {level.evidence[-1]}")
        code = successor.wait(timeout=RUN_TIMEOUT)
        level.evidence.append(f"successor (availableNow) exited with {code}")
        time.sleep(zombie_seconds)  # the zombie finishes its batch and fights for the checkpoint
    finally:
        kill_group(zombie)
        if successor is not None:
            kill_group(successor)
    failures = first.log.read_text(errors="replace").count("query failed")
    level.evidence.append(f"zombie's query failed {failures} time(s) after it woke")
    with QueueClient(settings=settings) as client:
        left = client.queue(run.source).stats(exact=True).total
    if left or code != 0:
        # The zombie leased a batch of its own before its kill: free after its lease.
        level.waited += _wait_out(time.monotonic(), lease + MARGIN)
        _drain(second, echo)
        level.rounds += 1
        level.evidence.append(f"{left} left in the source: drained once more")
    _finish(level, settings, run, echo)
    return level


def cluster_level(
    settings: ConnectionSettings,
    workdir: Path,
    *,
    speculation: bool,
    stage_retry: bool,
    messages: int,
    seed: int,
    cluster: StandaloneCluster | None = None,
    max_per_trigger: int = 1000,
    echo: Echo = print,
) -> PipelineLevel:
    """One availableNow relay on a standalone cluster of two hosts, with speculation and/or
    a stage retry.

    Args:
        cluster: A started cluster to run on; when None the level starts its own
            (:mod:`spark_queue.bench.spark_standalone`) and stops it at its end.
    """
    if not (speculation or stage_retry):
        raise InvalidSetting("cluster level: choose speculation, stage_retry or both")
    if cluster is None:
        with StandaloneCluster(workdir / "spark", echo=echo) as own:
            return cluster_level(
                settings, workdir, speculation=speculation, stage_retry=stage_retry,
                messages=messages, seed=seed, cluster=own, max_per_trigger=max_per_trigger,
                echo=echo,
            )  # fmt: skip
    faults = workdir / "task-faults"
    faults.mkdir(parents=True, exist_ok=True)
    args = [*cluster.relay_conf(), "--fault-folder", str(faults), "--restarts", "1"]
    names = []
    if speculation:
        names.append("speculation")
        args += ["--straggle-ms", str(STRAGGLE_MS)]
        args += [a for conf in SPECULATION for a in ("--conf", conf)]
    if stage_retry:
        names.append("stage-retry")
        args += ["--kill-executor-batch", "1"]
    args.append("--shuffle")  # a stage after the source's: speculated too
    run = _fill(settings, messages, seed)
    where = f"{len(cluster.hosts)} hosts"
    level = PipelineLevel("+".join(names), where, 1, _result(seed, messages))
    relay = Relay(
        settings, run.source, run.target, workdir / "checkpoint", workdir / "relay.log",
        max_per_trigger=max_per_trigger, args=args,
    )  # fmt: skip
    _drain(relay, echo, timeout=CLUSTER_RUN_TIMEOUT)
    events = read_events(faults)
    modules = sorted({str(Path(e["module"]).parent.parent.parent) for e in events})
    wakes = read_events(faults, WAKES)
    pairs = overlapping_attempts(events, wakes)
    c = level.counts
    c["attempts"], c["retries"] = len(events), sum(e["attempt"] > 0 for e in events)
    c["overlapping"], c["on_other_hosts"] = len(pairs), on_other_hosts(pairs)
    c["unanswered"] = sum(w["saw"] < 0 for w in wakes)
    c["stage_reattempts"] = stage_reattempts(events)
    c["executors_killed"] = int((faults / "killed").exists())
    hosts = sorted({e.get("host") or "?" for e in events})
    level.evidence += [
        f"{c['attempts']} task attempts ran the relay's rows on hosts {', '.join(hosts)}"
        f" (spark_queue from {', '.join(modules)})",
        f"{c['retries']} were retries or speculative copies",
        f"{c['overlapping']} began while an earlier attempt of the task straggled,"
        f" {c['on_other_hosts']} of them on another host; {c['unanswered']} straggler(s)"
        f" saw no second attempt in {STRAGGLE_MS / 1000:g}s",
        *(_pair(first, later) for first, later in pairs),
        f"{c['stage_reattempts']} source-stage tasks ran again with attemptNumber 0",
        f"executors SIGKILLed: {c['executors_killed']}",
    ]
    if speculation and not c["on_other_hosts"]:
        level.evidence.append("NOT TESTED: no second attempt began on another host beside one")
    if stage_retry and not (c["executors_killed"] and c["stage_reattempts"]):
        level.evidence.append("NOT TESTED: no source stage ran again after an executor kill")
    for line in level.evidence:
        echo(f"  {line}")
    _finish(level, settings, run, echo)
    return level


def _pair(first: dict[str, Any], later: dict[str, Any]) -> str:
    return (
        f"  batch {first['batch']} {first['where']} stage {first['stage']} partition"
        f" {first['partition']}: attempt {first['attempt']} on {first.get('host') or '?'}"
        f" slept until attempt {later['attempt']} on {later.get('host') or '?'} began,"
        f" {later['at'] - first['at']:.1f}s after it; then both ran"
    )


def run_pipeline_levels(
    settings: ConnectionSettings,
    workdir: Path,
    faults: Sequence[str],
    *,
    messages: int,
    kills: int,
    seed: int,
    lease: float = 10.0,
    echo: Echo = print,
) -> list[PipelineLevel]:
    """Run the chosen relay faults' levels (``skew`` is one level per skew in SKEWS).

    Args:
        faults: Any of ``skew``, ``pause``, ``speculation``, ``stage-retry``.
        messages: Messages each level moves.
        kills: SIGKILLs of the relay in each ``skew`` level.
        seed: Seed of the kill plans and pauses.
        lease: The ``pause`` level's visibility timeout, seconds.
    """
    unknown = [f for f in faults if f not in PIPELINE_FAULTS]
    if unknown:
        raise InvalidSetting(f"faults {','.join(unknown)!r}: not one of {PIPELINE_FAULTS}")
    levels: list[PipelineLevel] = []

    def folder(name: str) -> Path:
        return workdir / f"{name}-{len(levels)}"

    for fault in faults:
        echo(f"{fault}: {messages} messages through the relay")
        if fault == "skew":
            for skew in SKEWS:
                level = skew_level(
                    settings, folder(fault), skew=skew, messages=messages, kills=kills,
                    seed=seed, echo=echo,
                )  # fmt: skip
                levels.append(level)
        elif fault == "pause":
            level = pause_level(
                settings, folder(fault), messages=messages, lease=lease, seed=seed, echo=echo
            )
            levels.append(level)
        else:
            level = cluster_level(
                settings, folder(fault), speculation=fault == "speculation",
                stage_retry=fault == "stage-retry", messages=messages, seed=seed, echo=echo,
            )  # fmt: skip
            levels.append(level)
    return levels


#: The columns of the levels' table (terminal and report).
LEVEL_HEADERS = (
    "fault", "level", "runs", "sent", "delivered", "duplicates", "lost",
    "left", "waited", "time",
)  # fmt: skip


def level_cells(level: PipelineLevel) -> list[str]:
    """One level's figures as table cells."""
    r = level.result
    return [
        level.fault, level.level, str(level.rounds), f"{r.messages:,}", f"{r.delivered:,}",
        str(r.duplicates), str(r.missing), str(r.source_left + r.target_left),
        f"{level.waited:.0f}s", f"{r.seconds:.0f}s",
    ]  # fmt: skip


def levels_markdown(levels: Sequence[PipelineLevel], command: str) -> str:
    """The levels as a Markdown section: the table, then what each fault really did."""
    lines = [
        "# `bdq bench faults`: the Spark relay under the faults of a real cluster",
        "",
        f"Command: `{command}`. Each level is checked by source id: `lost` must be 0;",
        "`duplicates` and `left` are 0 when the level was exactly-once; `waited` is the",
        "time the check waited out a skew or a lease (the documented delay).",
        "",
        "| " + " | ".join(LEVEL_HEADERS) + " |",
        "|" + " --- |" * len(LEVEL_HEADERS),
        *("| " + " | ".join(level_cells(level)) + " |" for level in levels),
        "",
    ]
    for level in levels:
        lines += [f"## {level.fault} {level.level}", "", *(f"- {e}" for e in level.evidence), ""]
    return "\n".join(lines)


def _await(done: Callable[[], bool], process: subprocess.Popen[bytes], relay: Relay) -> None:
    began = time.monotonic()
    while not done():
        if process.poll() is not None:
            raise RuntimeError(f"the relay exited with {process.returncode}; see {relay.log}")
        if time.monotonic() - began > RUN_TIMEOUT:
            raise TimeoutError(
                f"the relay did not get there in {RUN_TIMEOUT:.0f}s; see {relay.log}"
            )
        time.sleep(0.05)


def _ended(record: KillRecord) -> str:
    return "" if record.killed else f" (ended by itself with {record.exit_code})"


def _result(seed: int, messages: int) -> PipelineFaultsResult:
    return PipelineFaultsResult(seed, messages, [], 0.0)
