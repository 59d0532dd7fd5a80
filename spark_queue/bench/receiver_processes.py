"""Receivers of ``bdq bench queue`` as separate processes, and the SIGKILL of one of them.

``--recv-processes`` runs each receiver in its own process (its own
interpreter, driver session and queue handle, as separate machines would):
competing consumers without anything shared in memory. ``--kill-receiver``
also SIGKILLs the first receiver once half the messages have been seen and
reports the **takeover time**: from the kill until every message it held
(received, not acked) was delivered to another receiver. Those messages come
back when their lease ends, so the takeover time is bounded by the
visibility timeout (plus one receive).

Each child streams what it received (ids and payloads) and acked through a
pipe; the parent checks payloads and keeps the run's arrival order. A child
stopped in order also reports the CPU time it spent receiving (from ready to
stop: its start-up is left out), for the sweep's CPU per message.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import SparkQueueError

#: Seconds a receiver process sleeps after an empty receive.
EMPTY_PAUSE = 0.01
#: Backend errors a receiver process tolerates (each retried) before it gives up.
MAX_ERRORS = 20


@dataclass(frozen=True, slots=True)
class ReceiverSpec:
    """What a receiver process needs (picklable)."""

    settings: ConnectionSettings
    queue: str
    receive_batch: int
    visibility_timeout: float
    order_hint: int
    receive_delay: float
    plain_acks: bool = False


def _receiver_main(spec: ReceiverSpec, out: Connection, go: Any, stop: Any) -> None:
    """Receive, report, ack, report; from ``go`` until told to stop (runs in the child)."""
    errors = 0
    with QueueClient(settings=spec.settings) as client:
        queue = client.queue(spec.queue)
        queue.plain_acks = queue.plain_acks or spec.plain_acks
        out.send(("ready",))
        # All start at once: one started early would have the queue to itself while
        # the others still start (32 interpreters take many seconds on 2 cores).
        go.wait()
        cpu = time.process_time()
        while not stop.is_set():
            try:
                began = time.perf_counter()
                got = queue.receive(
                    spec.receive_batch,
                    visibility_timeout=spec.visibility_timeout,
                    order_hint=spec.order_hint,
                )
                took = time.perf_counter() - began
                if not got:
                    out.send(("empty",))
                    time.sleep(EMPTY_PAUSE)
                    continue
                out.send(("got", took, [(d.id, d.payload) for d in got]))
                if spec.receive_delay:
                    time.sleep(spec.receive_delay * len(got))
                began = time.perf_counter()
                stale = set(queue.ack_batch([d.receipt for d in got], strict=False))
                took = time.perf_counter() - began
                acked = [d.id for d in got if d.receipt not in stale]
                out.send(("acked", took, acked, len(stale)))
            except SparkQueueError:
                errors += 1
                out.send(("error",))
                if errors > MAX_ERRORS:
                    raise
        out.send(("cpu", time.process_time() - cpu))
    out.close()


@dataclass
class ProcessOutcome:
    """What the receiver processes reported, and the kill's outcome."""

    receive_seconds: list[float] = field(default_factory=list)
    ack_seconds: list[float] = field(default_factory=list)
    empty_receives: int = 0
    errors: int = 0
    seconds: float = 0.0  # from every receiver ready to the end of the phase
    killed: bool = False
    held: set[int] = field(default_factory=set)  # received, not known acked, by the killed one
    taken_over: dict[int, float] = field(default_factory=dict)  # id -> seconds after kill
    per_receiver: list[int] = field(default_factory=list)  # deliveries per process
    cpu_seconds: float | None = None  # CPU of the processes that reported it (all but killed)

    @property
    def takeover_seconds(self) -> float | None:
        """Seconds from the kill until the last held message was delivered elsewhere."""
        if not self.killed or not self.held:
            return None
        if set(self.taken_over) < self.held:
            return None  # some never came back within the phase
        return max(self.taken_over[i] for i in self.held)

    @property
    def lost_held(self) -> int:
        return len(self.held - set(self.taken_over))


def run_receiver_processes(
    spec: ReceiverSpec,
    count: int,
    record: Callable[[Sequence[tuple[int, bytes]]], None],
    add_stale: Callable[[int], None],
    seen_fraction: Callable[[], float],
    done: Callable[[], bool],
    ready: Callable[[], None],
    *,
    kill_one: bool,
    deadline_after_kill: float,
    on_end: Callable[[], None] | None = None,
) -> ProcessOutcome:
    """Run ``count`` receiver processes until ``done()``; SIGKILL the first halfway if asked.

    ``ready()`` is called once every process is connected, when the clock starts.
    With ``kill_one``, the phase also waits (up to ``deadline_after_kill`` s
    after the kill) until every message the killed receiver held was
    delivered to another one. ``on_end()`` is called when the clock stops,
    before the processes are told to stop.
    """
    context = multiprocessing.get_context("spawn")
    go, stop = context.Event(), context.Event()
    outcome = ProcessOutcome(per_receiver=[0] * count)
    lock = threading.Lock()
    pipes, processes = [], []
    for _ in range(count):
        parent_end, child_end = context.Pipe(duplex=False)
        process = context.Process(target=_receiver_main, args=(spec, child_end, go, stop))
        process.start()
        child_end.close()
        pipes.append(parent_end)
        processes.append(process)
    for pipe in pipes:
        pipe.recv()  # "ready": every interpreter and session is up before the clock starts
    began = time.perf_counter()
    ready()
    go.set()
    kill_due = threading.Event()
    killed_at: list[float] = []
    delivered_by_killed: set[int] = set()
    acked_by_killed: set[int] = set()

    def read(n: int, pipe: Connection) -> None:
        while True:
            try:
                message = pipe.recv()
            except (EOFError, OSError):
                return
            kind = message[0]
            with lock:
                if kind == "empty":
                    outcome.empty_receives += 1
                elif kind == "error":
                    outcome.errors += 1
                elif kind == "cpu":
                    outcome.cpu_seconds = (outcome.cpu_seconds or 0.0) + message[1]
                elif kind == "got":
                    outcome.receive_seconds.append(message[1])
                    ids = [i for i, _ in message[2]]
                    outcome.per_receiver[n] += len(ids)
                    if n == 0 and not killed_at:
                        delivered_by_killed.update(ids)
                        if kill_due.is_set():
                            # Right after a receive: it holds these, its ack not sent yet.
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(processes[0].pid or 0, signal.SIGKILL)
                            killed_at.append(time.monotonic())
                    elif killed_at and n != 0:
                        now = time.monotonic() - killed_at[0]
                        for i in ids:
                            outcome.taken_over.setdefault(i, now)
                elif kind == "acked":
                    outcome.ack_seconds.append(message[1])
                    if n == 0:
                        acked_by_killed.update(message[2])
            if kind == "got":
                record(message[2])
            elif kind == "acked":
                add_stale(message[3])

    readers = [
        threading.Thread(target=read, args=(n, pipe), daemon=True) for n, pipe in enumerate(pipes)
    ]
    for reader in readers:
        reader.start()
    try:
        while True:
            if kill_one and not kill_due.is_set() and seen_fraction() >= 0.5:
                kill_due.set()
            if killed_at and not outcome.killed:
                processes[0].join()
                readers[0].join()  # everything it sent before dying is read
                with lock:
                    outcome.killed = True
                    outcome.held = delivered_by_killed - acked_by_killed
            if done():
                if not killed_at:
                    break
                with lock:
                    if outcome.held <= set(outcome.taken_over):
                        break
                if time.monotonic() - killed_at[0] > deadline_after_kill:
                    break
            if not any(p.is_alive() for p in processes):
                break
            time.sleep(0.05)
        outcome.seconds = time.perf_counter() - began
        if on_end is not None:
            on_end()
    finally:
        stop.set()
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        for reader in readers:
            reader.join(timeout=5)
    return outcome
