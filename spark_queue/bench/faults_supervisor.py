"""The receiving side of a ``bdq bench faults`` level: receiver processes and their records.

The bench starts the receivers (``faults_receiver``) as processes of their
own, restarts those that die, and reads back the deliveries they recorded.
The history run supervises its producers (``faults_senders``) the same way.
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from spark_queue import defaults
from spark_queue.bench.faultproxy import FaultProxy
from spark_queue.bench.faults_params import FaultsParams
from spark_queue.config import ConnectionSettings


class Workers:
    """Worker processes of one command, restarted when they die, stopped with SIGTERM.

    Process ``i`` writes ``{prefix}-{i}.txt`` (``--out``, when ``records``) and
    ``{prefix}-{i}.jsonl`` (``--history``, when ``history``) in ``folder``, and
    gets ``--seed``: the run's seed plus its index, new at each restart so that a
    restarted worker draws anew. ``processes`` always holds the live ones, for
    whoever signals them (the history run's nemesis).
    """

    def __init__(
        self,
        command: list[str],
        folder: Path,
        prefix: str,
        count: int,
        seed: int,
        *,
        records: bool = True,
        history: bool = False,
    ) -> None:
        self.command = command
        self.folder = folder
        self.prefix = prefix
        self.count = count
        self.seed = seed
        self.records = records
        self.history = history
        self.processes: list[subprocess.Popen[bytes]] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._supervise, daemon=True)

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        base = self.folder / f"{self.prefix}-{index}"
        files = [
            *(["--out", f"{base}.txt"] if self.records else []),
            *(["--history", f"{base}.jsonl"] if self.history else []),
        ]
        with open(f"{base}.log", "ab") as log:
            seed = self.seed + 7919 * self.restarts + index  # a restart draws new crashes
            return subprocess.Popen(
                [*self.command, *files, "--seed", str(seed)], stdout=log, stderr=log
            )

    def start(self) -> None:
        self.processes = [self._spawn(i) for i in range(self.count)]
        self._watch.start()

    def _supervise(self) -> None:
        while not self._stop.wait(0.1):
            for i, process in enumerate(self.processes):
                if process.poll() is not None and not self._stop.is_set():
                    self.restarts += 1
                    self.processes[i] = self._spawn(i)

    def stop(self) -> int:
        """Stop every worker (a paused one is continued first); returns the restarts."""
        self._stop.set()
        if self._watch.is_alive():
            self._watch.join()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only after
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return self.restarts


class Receivers(Workers):
    """The level's receiver processes (``faults_receiver``), writing ``receiver-{i}.txt``."""

    def __init__(
        self,
        settings: ConnectionSettings,
        params: FaultsParams,
        queue: str,
        folder: Path,
        crash: float,
        seed: int,
        *,
        net: FaultProxy | None = None,
        history: bool = False,
        hold: float = 0.0,
    ) -> None:
        routes = ",".join(f"{n}={t}" for n, t in net.translator().routes.items()) if net else ""
        command = [
            sys.executable, "-m", "spark_queue.bench.faults_receiver",
            "--hosts", ",".join(str(h) for h in settings.hosts),
            "--keyspace", settings.keyspace, "--consistency", settings.consistency,
            "--queue", queue, "--crash", str(crash),
            "--batch", str(params.receive_batch),
            "--visibility-timeout", str(params.visibility_timeout),
            *(["--translate", routes, "--protocol", "4"] if net else []),
            *(["--hold", str(hold)] if hold else []),
        ]  # fmt: skip
        super().__init__(command, folder, "receiver", params.receivers, seed, history=history)


def read_records(folder: Path) -> list[tuple[float, float, int, int, bool, int]]:
    """Every recorded delivery (time, receive ms or -1, sender, seq, intact, message id).

    In time order. A line cut by a SIGKILL mid-write is no delivery.
    """
    rows = []
    for path in folder.glob("receiver-*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 6:
                at, ms, sender, seq, ok, mid = parts
                rows.append((float(at), float(ms), int(sender), int(seq), ok == "1", int(mid)))
    rows.sort(key=lambda r: r[0])
    return rows


def stall_seconds(visibility: float) -> float:
    """How long a drain waits for progress before it counts what is missing as lost.

    See :func:`wait_for_deliveries`: four rounds of a lease running out and a
    lane's takeover (at most ``ceil(LANE_PERIOD) + 1`` s), at least 30 s.
    """
    return max(30.0, 4 * (visibility + math.ceil(defaults.LANE_PERIOD) + 1))


def wait_for_deliveries(
    sent: set[tuple[int, int]], receivers: Receivers, folder: Path, visibility: float
) -> None:
    """Until every acknowledged send was received, or nothing new arrived for a long while.

    "A long while" covers several redeliveries: a crashed receiver's messages
    come back once its lease ran out and, in a lane it owned, once another
    receiver took the lane over (at most ceil(LANE_PERIOD) + 1 s after its last
    renewal). A receiver that takes the lane may crash again on its first batch,
    so four such rounds are waited for before the rest counts as lost.
    """
    stall = stall_seconds(visibility)
    seen_count, last_change = -1, time.monotonic()
    while True:
        got = {(r[2], r[3]) for r in read_records(folder) if r[4]}
        if sent <= got:
            return
        if len(got) != seen_count:
            seen_count, last_change = len(got), time.monotonic()
        elif time.monotonic() - last_change > stall:
            return  # measured as loss
        time.sleep(0.5)
