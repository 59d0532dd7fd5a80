"""A queue -> Spark -> queue pipeline SIGKILLed at random points, then checked by source id.

The relay (:mod:`spark_queue.bench.faults_relay`) runs as its own process group:
the Python driver, its JVM and the Python workers. Killing the group is a crash
of the whole pipeline. Where it dies is read off Spark's checkpoint, which
writes ``offsets/N`` before batch N runs and ``commits/N`` after the sink
committed it; the source acks batch N while planning N+1 (right after
``offsets/N+1`` is written). A seeded plan picks, for each kill, a phase and a
random delay after the phase's event:

* ``planning``: a batch was committed in this run and the next is not planned
  (the driver is polling ``latestOffset``);
* ``acking``: just after a new ``offsets/N+1`` (the source acks N then);
* ``reading``: a little later, while the tasks lease their messages;
* ``writing``: later still, while the sink sends;
* ``committing``: the moment ``commits/N`` appears (the sink has committed).

After the kills the relay is started once more with ``availableNow`` and drains
the rest. Exactly-once holds when the target holds every source id once, with
its payload, and the source queue is empty. The state the checkpoint showed at
each kill is recorded, so a report says where each kill really landed.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import LocalNodeError
from spark_queue.local.node import LocalCluster
from spark_queue.spark.options import connector_options

PHASES = ("planning", "acking", "reading", "writing", "committing")

#: Seconds after the phase's event before the kill, as (low, high) of a uniform draw.
_SETTLE = {
    "planning": (0.0, 0.4),
    "acking": (0.0, 0.1),
    "reading": (0.1, 0.4),
    "writing": (0.4, 1.5),
    "committing": (0.0, 0.0),
}

#: Rows per micro-batch. A run costs its start (JVM, query, Python workers: most of
#: its time) and one batch per kill is replayed or planned, so 20000 messages in
#: batches of 1500 leave ten kills mid-stream and a few batches to the final drain.
MAX_PER_TRIGGER = 1500
#: Short: the planning phase (committed, next not planned) lasts about this long.
TRIGGER_SECONDS = 0.5
#: No artificial slowness: each Python UDF stage is one more worker to start after a kill.
ROW_DELAY_MS = 0
#: Generous: on a 2-core host shared with other JVMs one run took up to 5 minutes.
RUN_TIMEOUT = 900.0
#: The source's lease on a batch's messages. Exactly-once across a crash needs the
#: restart within it: a batch whose leases ran out before its ack is delivered again
#: (a whole batch of duplicates, never a loss). At 120 s, on a host where restarts took
#: minutes, a run duplicated two batches: as many as it had kills right after a commit.
VISIBILITY_TIMEOUT = RUN_TIMEOUT
#: A run that ends by itself (a query failed, e.g. while a node was down) is started again.
MAX_EARLY_EXITS = 10


@dataclass(frozen=True)
class KillPoint:
    """Where one kill lands: after ``phase``'s event, ``settle`` seconds later."""

    phase: str
    settle: float


def plan_kills(seed: int, count: int) -> list[KillPoint]:
    """``count`` kill points from ``seed``: every phase in turn (shuffled), random delays.

    Args:
        seed: Seed of the plan; the same seed gives the same plan.
        count: Number of kills (>= 0).
    """
    rng = random.Random(seed)
    phases: list[str] = []
    while len(phases) < count:
        batch = list(PHASES)
        rng.shuffle(batch)
        phases += batch
    return [KillPoint(p, round(rng.uniform(*_SETTLE[p]), 3)) for p in phases[:count]]


class Checkpoint:
    """What a streaming query's checkpoint says about its batches."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def last(self, kind: str) -> int:
        """The highest batch id in ``offsets`` or ``commits``; -1 when there is none."""
        path = self.folder / kind
        if not path.is_dir():
            return -1
        return max((int(p.name) for p in path.iterdir() if p.name.isdigit()), default=-1)

    def snapshot(self) -> tuple[int, int]:
        """(last planned batch, last committed batch)."""
        return self.last("offsets"), self.last("commits")

    def describe(self) -> str:
        planned, committed = self.snapshot()
        if planned < 0:
            return "no batch planned yet"
        if planned > committed:
            return f"batch {planned} running"
        return f"batch {committed} committed, next not planned"


def reached(phase: str, now: tuple[int, int], start: tuple[int, int]) -> bool:
    """Whether the event of ``phase`` happened since ``start`` (both checkpoint snapshots)."""
    planned, committed = now
    if phase == "planning":
        return committed > start[1] and planned == committed
    if phase == "committing":
        return committed > start[1]
    # acking, reading, writing: a batch planned in this run is running
    return planned > start[0] and planned > committed


@dataclass(frozen=True)
class KillRecord:
    """One relay run: the kill planned, and where it landed (or how the run ended)."""

    phase: str
    settle: float
    landed: str
    seconds: float
    exit_code: int | None = None  # set when the relay ended by itself before the kill

    @property
    def killed(self) -> bool:
        return self.exit_code is None


@dataclass
class PipelineFaultsResult:
    """The outcome of one random-kill run, checked by source id."""

    seed: int
    messages: int
    kills: list[KillRecord]
    seconds: float
    delivered: int = 0
    duplicates: int = 0
    missing: int = 0
    extra: int = 0
    corrupt: int = 0
    source_left: int = 0
    target_left: int = 0
    events: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return not (
            self.duplicates
            or self.missing
            or self.extra
            or self.corrupt
            or self.source_left
            or self.target_left
        )


class Relay:
    """Starts, kills and drains the relay process (group) of one pipeline.

    Args:
        settings, source, target: The cluster and the two queues.
        checkpoint, log: The query's checkpoint folder and the relay's log file.
        writer_id: The sink's writerId.
        max_per_trigger: Rows per micro-batch.
        visibility_timeout: The source's lease, seconds.
        args: More relay flags (``--master``, ``--conf``, faults: see faults_relay).
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        source: str,
        target: str,
        checkpoint: Path,
        log: Path,
        *,
        writer_id: str = "relay-under-faults",
        max_per_trigger: int = MAX_PER_TRIGGER,
        visibility_timeout: float = VISIBILITY_TIMEOUT,
        args: Sequence[str] = (),
    ) -> None:
        options = connector_options(settings)
        self.command = [
            sys.executable, "-m", "spark_queue.bench.faults_relay",
            "--hosts", options["hosts"], "--keyspace", options["keyspace"],
            "--source", source, "--target", target,
            "--consistency", options["consistency"],
            "--checkpoint", str(checkpoint), "--writer-id", writer_id,
            "--max-per-trigger", str(max_per_trigger),
            "--trigger-seconds", str(TRIGGER_SECONDS), "--row-delay-ms", str(ROW_DELAY_MS),
            "--visibility-timeout", f"{visibility_timeout:.0f}s", *args,
        ]  # fmt: skip
        self.checkpoint = Checkpoint(checkpoint)
        self.log = log
        #: Put before the relay's command (e.g. ``faketime -f +10s``); per run.
        self.wrap: Sequence[str] = ()

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        """Start a relay run in its own process group (``extra``: more flags)."""
        # loopback only: Spark would otherwise bind the driver to the host's first interface
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.log, "ab") as out:
            return subprocess.Popen(
                [*self.wrap, *self.command, *extra],
                stdout=out,
                stderr=out,
                env=env,
                start_new_session=True,  # its own process group: JVM and workers die with it
            )

    def run_until(self, kill: KillPoint, timeout: float = RUN_TIMEOUT) -> KillRecord:
        """Start the relay, wait for ``kill``'s event and delay, SIGKILL its process group."""
        start = self.checkpoint.snapshot()
        began = time.monotonic()
        process = self.start()
        try:
            while not reached(kill.phase, self.checkpoint.snapshot(), start):
                code = process.poll()
                if code is not None:
                    return KillRecord(
                        kill.phase, kill.settle, self.checkpoint.describe(),
                        time.monotonic() - began, exit_code=code,
                    )  # fmt: skip
                if time.monotonic() - began > timeout:
                    raise TimeoutError(
                        f"the relay did not reach {kill.phase!r} in {timeout:.0f}s"
                        f" ({self.checkpoint.describe()}); see {self.log}"
                    )
                time.sleep(0.01)
            time.sleep(kill.settle)
            landed = self.checkpoint.describe()
        finally:
            kill_group(process)
        return KillRecord(kill.phase, kill.settle, landed, time.monotonic() - began)

    def drain(self, timeout: float = RUN_TIMEOUT) -> int:
        """Run the relay with ``availableNow`` to the end; its exit code."""
        process = self.start("--available-now")
        try:
            return process.wait(timeout=timeout)
        finally:
            kill_group(process)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a relay run's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)


def run_pipeline_faults(
    settings: ConnectionSettings,
    workdir: Path,
    *,
    messages: int = 20_000,
    kills: int = 10,
    seed: int | None = None,
    bucket_size: int = 750,
    disturb: Callable[[int], None] | None = None,
    echo: Callable[[str], None] = print,
) -> PipelineFaultsResult:
    """Move ``messages`` through a relay killed ``kills`` times, drain it, check by source id.

    Args:
        settings: Cluster and keyspace (which must exist) of the two queues.
        workdir: Folder for the checkpoint and the relay's log.
        messages: Messages sent to the source queue before the relay starts.
        kills: Number of SIGKILLs, at points planned from ``seed``.
        seed: Seed of the kill plan; random (and echoed) when None.
        bucket_size: Ids per bucket of the source queue (one input partition each).
        disturb: Called in a thread as each relay run ``i`` (0-based) starts, e.g. to
            kill or restart a Cassandra node while the relay runs.
        echo: Where progress lines go (the seed first).
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    echo(f"pipeline faults: seed {seed}, {messages} messages, {kills} kills")
    workdir.mkdir(parents=True, exist_ok=True)
    source, target, sent = fill_source(settings, messages, seed, bucket_size=bucket_size)
    relay = Relay(settings, source, target, workdir / "checkpoint", workdir / "relay.log")

    began = time.monotonic()
    records: list[KillRecord] = []
    early = 0
    for i, kill in enumerate(plan_kills(seed, kills)):
        while True:
            helper = _Disturbance(disturb, len(records)) if disturb else None
            try:
                record = relay.run_until(kill)
            finally:
                if helper:
                    helper.join()
            records.append(record)
            if record.killed:
                echo(
                    f"kill {i + 1}/{kills}: {kill.phase} (+{kill.settle:.2f}s) landed at"
                    f" {record.landed}, after {record.seconds:.1f}s"
                )
                break
            early += 1
            echo(f"run ended by itself (exit {record.exit_code}) at {record.landed}; restarting")
            if early > MAX_EARLY_EXITS:
                raise RuntimeError(f"the relay ended by itself {early} times; see {relay.log}")
    for attempt in range(1, MAX_EARLY_EXITS + 1):
        code = relay.drain()
        echo(f"drain (availableNow) exited with {code} at {relay.checkpoint.describe()}")
        if code == 0:
            break
        if attempt == MAX_EARLY_EXITS:
            raise RuntimeError(f"the final drain failed {attempt} times; see {relay.log}")
    result = PipelineFaultsResult(seed, messages, records, time.monotonic() - began)
    check_by_source_id(settings, source, target, sent, result)
    return result


def fill_source(
    settings: ConnectionSettings, messages: int, seed: int, *, bucket_size: int = 750
) -> tuple[str, str, dict[int, bytes]]:
    """Create a source and a target queue, send ``messages`` to the source.

    Returns:
        The source's and the target's names, and each sent id's payload.
    """
    suffix = uuid.uuid4().hex[:6]
    source, target = f"relay-src-{suffix}", f"relay-dst-{suffix}"
    with QueueClient(settings=settings) as client:
        src = client.create_queue(source, bucket_size=bucket_size)
        client.create_queue(target)
        sent: dict[int, bytes] = {}
        for first in range(0, messages, 1000):
            payloads = [f"m{i}:{seed}".encode() for i in range(first, min(messages, first + 1000))]
            sent.update(zip(src.send_batch(payloads), payloads, strict=True))
    return source, target, sent


class NodeFaults:
    """A ``disturb`` hook: in every other relay run, one Cassandra node of three dies.

    In runs 1, 3, 5, ... a node is SIGKILLed ``delay`` seconds after the run
    starts (a seeded draw, so it lands during the JVM start, the replay or a
    new batch) and started again ``down`` seconds later; the hook returns when
    it answers CQL again, so the next run starts with three nodes. The nodes
    are taken in seeded shuffled rounds of 1, 2, 3: never always the same one.

    Args:
        cluster: The local three-node cluster (replication factor 3, LOCAL_QUORUM).
        seed: Seed of the node choices and delays.
        delay: (low, high) seconds after a run starts before the kill.
        down: Seconds the node stays down before its restart begins.
        echo: Where a line per kill and restart goes.
    """

    def __init__(
        self,
        cluster: LocalCluster,
        seed: int,
        *,
        delay: tuple[float, float] = (2.0, 20.0),
        down: float = 5.0,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.delay = delay
        self.down = down
        self.echo = echo
        self._order: list[int] = []
        self.events: list[str] = []

    def _next_node(self) -> int:
        if not self._order:
            self._order = [1, 2, 3]
            self.rng.shuffle(self._order)
        return self._order.pop()

    def __call__(self, run: int) -> None:
        if run % 2 == 0:
            return
        node, wait = self._next_node(), self.rng.uniform(*self.delay)
        time.sleep(wait)
        self.cluster.kill(node)
        self._say(f"run {run}: node {node} killed {wait:.1f}s after the run started")
        time.sleep(self.down)
        began = time.monotonic()
        # On a loaded host the commit log replay can outlast one start's wait:
        # the node keeps starting, so waiting again a few times is enough.
        for attempt in range(1, 4):
            try:
                self.cluster.start(nodes=3, echo=lambda line: None)
                break
            except LocalNodeError:
                if attempt == 3:
                    raise
        self._say(f"run {run}: node {node} back after {self.down + time.monotonic() - began:.0f}s")

    def _say(self, line: str) -> None:
        self.events.append(line)
        self.echo(line)


class _Disturbance:
    """``disturb(run)`` on a thread; ``join`` re-raises what it raised, in the caller."""

    def __init__(self, action: Callable[[int], None], run: int) -> None:
        self.error: BaseException | None = None
        self._action = action
        self._thread = threading.Thread(
            target=self._run, args=(run,), name=f"disturb-{run}", daemon=True
        )
        self._thread.start()

    def _run(self, run: int) -> None:
        try:
            self._action(run)
        except BaseException as e:  # handed to the caller by join
            self.error = e

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"disturb failed: {self.error}") from self.error


def check_by_source_id(
    settings: ConnectionSettings,
    source: str,
    target: str,
    sent: dict[int, bytes],
    result: PipelineFaultsResult,
) -> None:
    """Read the whole target (acking it) and fill in the result's counts by source id."""
    seen: Counter[int] = Counter()
    with QueueClient(settings=settings) as client:
        dst = client.queue(target)
        while deliveries := dst.receive(1000):
            for d in deliveries:
                source_id = int(d.headers.get("source-id", "-1"))
                seen[source_id] += 1
                if source_id in sent and d.payload != sent[source_id]:
                    result.corrupt += 1
            dst.ack_batch([d.receipt for d in deliveries])
        result.source_left = client.queue(source).stats(exact=True).total
        result.target_left = dst.stats(exact=True).total
    result.delivered = sum(seen.values())
    result.duplicates = sum(n - 1 for n in seen.values())
    result.missing = len(sent.keys() - seen.keys())
    result.extra = len(seen.keys() - sent.keys())
