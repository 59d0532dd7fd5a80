"""A history run: producer and consumer processes under a seeded nemesis, then the checker.

Producers (``faults_senders`` as processes) send paced single messages, half of
them keyed; consumers (``faults_receiver`` with ``--history``) receive batches
of ten under a short visibility timeout, work on each for up to ``hold``
seconds, and ack them. The default timeout, 2.5 s, is short enough for pauses
of a few seconds to outlast it and long enough for a quick ack to take the
own-lease path (a plain write while ``ACK_PLAIN_MARGIN``, 2 s, of the lease is
left by the consumer's monotonic clock, ``engine/lease_memory.py``), so both ack
paths meet the faults. Both log every operation
with its times (:mod:`spark_queue.bench.history`), and both are supervised as
the fault bench's receivers are (``faults_supervisor.Workers``: one that dies is
started again). Meanwhile a nemesis, drawn from the run's seed, now and then:

* SIGKILLs a consumer (its leases run out; its lanes and shares go to others
  after their period);
* SIGSTOPs a consumer for longer than the visibility timeout, then SIGCONTs it:
  it resumes mid-receive or mid-ack with leases that ran out, and others may
  have received its messages meanwhile;
* SIGSTOPs a producer alike, mid-send.

Then every paused process is continued, the producers stop, the consumers
drain until every returned send was acked (or no new ack came for a long
while), and the whole history is checked. The seed fixes the nemesis's plan
and the processes' seeds; the interleaving is the operating system's, so a
replayed seed repeats the faults, not necessarily the outcome.
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from spark_queue.bench.faults_params import FaultsParams
from spark_queue.bench.faults_supervisor import Receivers, Workers, stall_seconds
from spark_queue.bench.history import HistoryReport, check_history, read_history
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_int, check_seconds

#: Seconds between two of the nemesis's actions, drawn uniformly.
ACTION_GAP = (0.4, 1.5)
#: Seconds past the visibility timeout a paused process stays stopped, drawn uniformly.
PAUSE_PAST_LEASE = (0.3, 1.5)


@dataclass(frozen=True, kw_only=True)
class HistoryParams:
    """One history run.

    Attributes:
        seed: Seed of the nemesis's plan and of every process.
        producers: Producer processes.
        consumers: Consumer processes.
        rate: Sends per second of each producer.
        visibility_timeout: The queue's visibility timeout, in seconds.
        hold: Most seconds a consumer works on a batch before acking it.
        fault_seconds: How long producers send under the nemesis.
    """

    seed: int
    producers: int = 3
    consumers: int = 3
    rate: float = 10.0
    visibility_timeout: float = 2.5
    hold: float = 0.8
    fault_seconds: float = 40.0

    def __post_init__(self) -> None:
        check_int("producers", self.producers, 1, 32)
        check_int("consumers", self.consumers, 1, 32)
        check_seconds("rate", self.rate)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("hold", self.hold, allow_zero=True)
        check_seconds("fault_seconds", self.fault_seconds)


class Nemesis:
    """SIGKILLs and SIGSTOPs of the run's processes on a plan drawn from one seed."""

    def __init__(self, consumers: Workers, producers: Workers, params: HistoryParams) -> None:
        self.consumers = consumers
        self.producers = producers
        self.params = params
        self.rng = random.Random(params.seed)
        #: (seconds since the faults began, what was done to which process)
        self.events: list[tuple[float, str]] = []
        self._paused: dict[int, tuple[float, Workers, int]] = {}

    def run(self, stop: threading.Event) -> None:
        """Act until ``stop`` is set, then continue every process still paused."""
        began = time.monotonic()
        due = began + self.rng.uniform(*ACTION_GAP)
        while not stop.wait(0.05):
            now = time.monotonic()
            for pid, (resume_at, workers, index) in list(self._paused.items()):
                if now >= resume_at:
                    self._signal(workers, index, pid, "SIGCONT", began)
            if now >= due:
                self._act(began)
                due = now + self.rng.uniform(*ACTION_GAP)
        for pid, (_, workers, index) in list(self._paused.items()):
            self._signal(workers, index, pid, "SIGCONT", began)

    def _act(self, began: float) -> None:
        # the draws come first, all of them, so the plan depends on the seed alone
        what = self.rng.choices(("kill", "pause consumer", "pause producer"), (3, 4, 3))[0]
        workers = self.producers if what == "pause producer" else self.consumers
        index = self.rng.randrange(workers.count)
        pause = self.params.visibility_timeout + self.rng.uniform(*PAUSE_PAST_LEASE)
        process = workers.processes[index]
        if process.poll() is not None:
            return  # died and not yet restarted: this action is skipped
        if what == "kill":
            self._paused.pop(process.pid, None)
            self._signal(workers, index, process.pid, "SIGKILL", began)
        elif process.pid not in self._paused:
            self._paused[process.pid] = (time.monotonic() + pause, workers, index)
            self._signal(workers, index, process.pid, "SIGSTOP", began)

    def _signal(self, workers: Workers, index: int, pid: int, name: str, began: float) -> None:
        process = workers.processes[index]
        if name == "SIGCONT":
            self._paused.pop(pid, None)
        if process.pid != pid or process.poll() is not None:
            return  # it died meanwhile; its pid may be someone else's by now
        process.send_signal(signal.Signals[name])
        # named as the process names itself in the history
        role = "producer" if workers is self.producers else "consumer"
        self.events.append((round(time.monotonic() - began, 2), f"{name} {role}-{pid}"))


def run_history(
    settings: ConnectionSettings, params: HistoryParams, folder: Path
) -> tuple[HistoryReport, list[tuple[float, str]]]:
    """Run producers and consumers under the nemesis on a fresh queue; check their history.

    Args:
        settings: Cluster and keyspace (which must exist).
        params: The run's processes, rates, timeout and seed.
        folder: Where the processes write their histories and logs.

    Returns:
        The checker's report, and the nemesis's events.
    """
    name = f"history-{params.seed}-{int(time.time())}"
    vt = params.visibility_timeout
    with QueueClient(settings=settings) as client:
        client.create_queue(name, visibility_timeout=vt)
    consumer_params = FaultsParams(receivers=params.consumers, visibility_timeout=vt)
    consumers = Receivers(
        settings, consumer_params, name, folder, 0.0, params.seed, history=True, hold=params.hold
    )
    producer_command = [
        sys.executable, "-m", "spark_queue.bench.faults_senders",
        "--hosts", ",".join(str(h) for h in settings.hosts), "--keyspace", settings.keyspace,
        "--queue", name, "--rate", str(params.rate),
    ]  # fmt: skip
    # the producers' seeds are their payloads' senders: far from the consumers' seeds
    producers = Workers(
        producer_command, folder, "producer", params.producers, params.seed % 2**30 + 2**30,
        records=False, history=True,
    )  # fmt: skip
    nemesis = Nemesis(consumers, producers, params)
    stop = threading.Event()
    acting = threading.Thread(target=nemesis.run, args=(stop,), daemon=True)
    try:
        consumers.start()
        producers.start()
        acting.start()
        stop.wait(params.fault_seconds)
        stop.set()
        acting.join()
        producers.stop()
        wait_until_acked(folder, stall_seconds(vt))
    finally:
        stop.set()
        producers.stop()
        consumers.stop()
    return check_history(read_history(folder)), nemesis.events


def wait_until_acked(folder: Path, stall: float) -> None:
    """Until an ack removed (or may have) every message whose send returned.

    Or until ``stall`` seconds passed with no new one: what is missing then is lost.
    """
    removed_count, last_change = -1, time.monotonic()
    while True:
        history = read_history(folder)
        removed = history.removed()
        if history.returned_sends() <= removed:
            return
        if len(removed) != removed_count:
            removed_count, last_change = len(removed), time.monotonic()
        elif time.monotonic() - last_change > stall:
            return  # the checker reports what is missing as lost
        time.sleep(0.5)
