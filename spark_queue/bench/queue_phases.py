"""The two timed phases of ``bdq bench queue``: senders, then receivers.

Every sender thread starts at once and sends its share of the messages (one
call per message or batch, or through the handle's producer); then every
receiver (a thread with its own queue handle, or a process of its own) starts
at once and loops receive, check, ack until every message has been seen or no
new one arrived for the stall timeout. What the receivers saw goes into one
``Tally`` per queue, with the run's global arrival order for the order metrics.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from spark_queue.bench.consistency import make_payload, parse_payload
from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.queue_bench_params import QueueBenchParams
from spark_queue.bench.receiver_processes import ReceiverSpec, run_receiver_processes
from spark_queue.client import QueueClient
from spark_queue.errors import BackendUnavailable, InvalidSetting
from spark_queue.message import Delivery
from spark_queue.queue import Queue

#: Backend errors tolerated per phase (each retried) before the run is abandoned.
MAX_ERRORS = 20
#: Seconds a receiver sleeps after an empty receive.
EMPTY_PAUSE = 0.01
#: Seconds between two progress reports.
PROGRESS_INTERVAL = 0.5


@dataclass(frozen=True, slots=True)
class Sender:
    """One sender thread's stream: the index of its queue, its id and its pre-made payloads."""

    queue_index: int
    sender: int
    payloads: list[bytes]


class Errors:
    """Backend errors shared by a phase's threads: retried up to ``MAX_ERRORS``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def retry(self, call: Callable[[], Any]) -> Any:
        """Call until it succeeds, counting each BackendUnavailable; re-raise past the limit."""
        while True:
            try:
                return call()
            except BackendUnavailable:
                with self._lock:
                    self.count += 1
                    over = self.count > MAX_ERRORS
                if over:
                    raise
                time.sleep(0.1)

    def note(self, error: BaseException) -> None:
        """Count a BackendUnavailable that surfaced elsewhere (a future); re-raise past the limit.

        Any other error is re-raised at once, as ``retry`` lets it through.
        """
        if not isinstance(error, BackendUnavailable):
            raise error
        with self._lock:
            self.count += 1
            over = self.count > MAX_ERRORS
        if over:
            raise error


class Tally:
    """What the receivers of one queue have seen, shared with the run's global arrival order.

    Args:
        expected: Messages sent to this queue.
        arrivals: The run's ``(sender, seq)`` list in global arrival order.
        lock: Guards ``arrivals`` and every tally of the run.
    """

    def __init__(
        self, expected: int, arrivals: list[tuple[int, int]], lock: threading.Lock
    ) -> None:
        self.expected = expected
        self.arrivals = arrivals
        self.lock = lock
        self.seen: set[tuple[int, int]] = set()
        self.corrupt_ids: set[int] = set()
        self.deliveries = 0
        self.corrupt = 0
        self.stale_acks = 0
        self.last_new = time.monotonic()
        self.complete = threading.Event()

    def record(self, deliveries: Sequence[tuple[int, bytes]]) -> None:
        """Check each ``(id, payload)`` and append the good ones to the arrival order."""
        parsed = [(message_id, parse_payload(payload)) for message_id, payload in deliveries]
        with self.lock:
            self.deliveries += len(parsed)
            before = len(self.seen) + len(self.corrupt_ids)
            for message_id, key in parsed:
                if key is None:
                    self.corrupt += 1
                    self.corrupt_ids.add(message_id)
                else:
                    self.arrivals.append(key)
                    self.seen.add(key)
            if len(self.seen) + len(self.corrupt_ids) > before:
                self.last_new = time.monotonic()
            if len(self.seen) + len(self.corrupt_ids) >= self.expected:
                self.complete.set()

    def add_stale(self, count: int) -> None:
        with self.lock:
            self.stale_acks += count


def make_senders(params: QueueBenchParams) -> list[Sender]:
    """Every sender's payloads, split ``M`` as evenly as the senders allow."""
    count = params.queues * params.send_threads
    share, extra = divmod(params.messages, count)
    master = random.Random(params.seed)
    senders = []
    for sender in range(count):
        rng = random.Random(master.getrandbits(64))
        n = share + (1 if sender < extra else 0)
        payloads = [make_payload(seq, sender, params.payload_bytes, rng) for seq in range(n)]
        senders.append(Sender(sender // params.send_threads, sender, payloads))
    return senders


# -- send phase ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendPhase:
    seconds: float
    op_seconds: list[float]
    errors: int


def send_phase(
    params: QueueBenchParams,
    handles: Sequence[Queue],
    senders: Sequence[Sender],
    progress: Progress,
) -> SendPhase:
    errors = Errors()
    times: list[list[float]] = [[] for _ in senders]
    sent = [0] * len(senders)
    batch = params.send_batch

    def send(n: int) -> None:
        s, op_times = senders[n], times[n]
        queue = handles[s.queue_index]
        for start in range(0, len(s.payloads), batch):
            chunk = s.payloads[start : start + batch]
            began = time.perf_counter()
            if batch == 1:
                errors.retry(functools.partial(queue.send, chunk[0]))
            else:
                errors.retry(functools.partial(queue.send_batch, chunk))
            op_times.append(time.perf_counter() - began)
            sent[n] += len(chunk)

    def send_async(n: int) -> None:
        # Every message through the handle's producer, shared by the sender
        # threads; the phase ends once every future resolved (every message durable).
        s, op_times = senders[n], times[n]
        queue = handles[s.queue_index]
        futures = []
        for payload in s.payloads:
            began = time.perf_counter()
            future = errors.retry(functools.partial(queue.send_async, payload))
            future.add_done_callback(functools.partial(_note_done, op_times, began))
            futures.append((payload, future))
            sent[n] += 1
        for payload, future in futures:
            error = future.exception()
            if error is not None:  # counted as send's are, then sent again synchronously
                errors.note(error)
                errors.retry(functools.partial(queue.send, payload))

    seconds = run_threads(
        [
            functools.partial(send_async if params.async_send else send, n)
            for n in range(len(senders))
        ],
        lambda: progress(f"sending: {sum(sent)}/{params.messages} messages"),
    )
    return SendPhase(seconds, [t for ts in times for t in ts], errors.count)


def _note_done(op_times: list[float], began: float, _future: Future[int]) -> None:
    """A send_async's response time: from the call until its message was durable."""
    op_times.append(time.perf_counter() - began)


# -- receive phase -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReceivePhase:
    seconds: float
    receive_seconds: list[float]
    ack_seconds: list[float]
    empty_receives: int
    arrivals: list[tuple[int, int]]
    tallies: list[Tally]
    stalled: bool
    errors: int
    killed_held: int | None = None
    takeover_seconds: float | None = None
    lost_held: int = 0
    #: Deliveries each receiver got, in receiver order (its share of the work).
    per_receiver: tuple[int, ...] = ()
    #: CPU seconds the receiver processes spent from ready to stop; None for threads.
    receiver_cpu: float | None = None


def receive_phase(
    params: QueueBenchParams,
    handles: Sequence[Queue],
    senders: Sequence[Sender],
    progress: Progress,
    *,
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> ReceivePhase:
    """Receive, check and ack until every message was seen or the phase stalled.

    ``on_start`` and ``on_end`` are called when the phase's clock starts and
    stops (every receiver ready; the last one done), for meters of the same span.
    """
    lock = threading.Lock()
    arrivals: list[tuple[int, int]] = []
    tallies = []
    for index in range(len(handles)):
        expected = sum(len(s.payloads) for s in senders if s.queue_index == index)
        tallies.append(Tally(expected, arrivals, lock))
    if params.recv_processes:
        return _receive_phase_processes(params, handles, tallies, arrivals, on_start, on_end)
    errors = Errors()
    threads = [(q, t) for q, t in enumerate(tallies) for _ in range(params.recv_threads)]
    receive_times: list[list[float]] = [[] for _ in threads]
    ack_times: list[list[float]] = [[] for _ in threads]
    empties = [0] * len(threads)
    got_by = [0] * len(threads)
    stalled = threading.Event()

    def receive(n: int) -> None:
        queue_index, tally = threads[n]
        # Each receiver is an independent consumer (the paper's receivers run on
        # other machines): its own handle, sharing only the driver session.
        shared = handles[queue_index]
        queue = QueueClient(store=shared.buckets.store).queue(shared.name)
        queue.plain_acks = queue.plain_acks or params.plain_acks
        receive_once = functools.partial(
            queue.receive,
            max_messages=params.receive_batch,
            visibility_timeout=params.visibility_timeout,
            order_hint=params.order_hint,
        )
        with tally.lock:
            tally.last_new = time.monotonic()  # the stall clock starts with the phase
        while not tally.complete.is_set() and not stalled.is_set():
            # Checked on every pass, not only when the queue looks empty: redeliveries
            # of messages already seen must not keep a hopeless phase alive either.
            if time.monotonic() - tally.last_new > params.stall_timeout:
                stalled.set()
                break
            began = time.perf_counter()
            got: list[Delivery] = errors.retry(receive_once)
            took = time.perf_counter() - began
            if not got:
                empties[n] += 1
                time.sleep(EMPTY_PAUSE)
                continue
            receive_times[n].append(took)
            got_by[n] += len(got)
            tally.record([(d.id, d.payload) for d in got])
            if params.receive_delay:
                time.sleep(params.receive_delay * len(got))
            receipts = [d.receipt for d in got]
            began = time.perf_counter()
            stale = errors.retry(functools.partial(queue.ack_batch, receipts, strict=False))
            ack_times[n].append(time.perf_counter() - began)
            tally.add_stale(len(stale))

    def report() -> None:
        with lock:
            seen = sum(len(t.seen) for t in tallies)
            deliveries = sum(t.deliveries for t in tallies)
        progress(f"receiving: {seen}/{params.messages} messages ({deliveries} deliveries)")

    seconds = run_threads(
        [functools.partial(receive, n) for n in range(len(threads))], report, on_start, on_end
    )
    return ReceivePhase(
        seconds=seconds,
        receive_seconds=[t for ts in receive_times for t in ts],
        ack_seconds=[t for ts in ack_times for t in ts],
        empty_receives=sum(empties),
        arrivals=arrivals,
        tallies=tallies,
        stalled=stalled.is_set(),
        errors=errors.count,
        per_receiver=tuple(got_by),
    )


def _receive_phase_processes(
    params: QueueBenchParams,
    handles: Sequence[Queue],
    tallies: Sequence[Tally],
    arrivals: list[tuple[int, int]],
    on_start: Callable[[], None] | None,
    on_end: Callable[[], None] | None,
) -> ReceivePhase:
    """The receive phase with receiver processes (one queue; see ``receiver_processes``)."""
    if len(handles) != 1:
        raise InvalidSetting(
            f"queues {len(handles)}: receiver processes run against one queue; use --queues 1"
        )
    (tally,) = tallies
    spec = ReceiverSpec(
        settings=handles[0].buckets.store.settings,
        queue=handles[0].name,
        receive_batch=params.receive_batch,
        visibility_timeout=params.visibility_timeout,
        order_hint=params.order_hint,
        receive_delay=params.receive_delay,
        plain_acks=params.plain_acks,
    )

    def done() -> bool:
        stalled = time.monotonic() - tally.last_new > params.stall_timeout
        return tally.complete.is_set() or stalled

    def ready() -> None:
        with tally.lock:
            tally.last_new = time.monotonic()  # the stall clock starts with the phase
        if on_start is not None:
            on_start()

    outcome = run_receiver_processes(
        spec,
        params.recv_threads,
        tally.record,
        tally.add_stale,
        lambda: len(tally.seen) / tally.expected,
        done,
        ready,
        kill_one=params.kill_receiver,
        deadline_after_kill=params.visibility_timeout + params.stall_timeout,
        on_end=on_end,
    )
    if outcome.held - set(outcome.taken_over):
        # Held but never delivered again: acked after all (its report died with
        # it), or lost. Ask the queue; a dropped bucket held only acked messages.
        missing = outcome.held - set(outcome.taken_over)
        buckets = handles[0].buckets
        by_bucket: dict[int, list[int]] = {}
        for i in missing:
            by_bucket.setdefault(buckets.bucket_of(i), []).append(i)
        unacked = {
            m.id for b, ids in by_bucket.items() for m, acked in buckets.read(b, ids) if not acked
        }
        outcome.held -= missing - unacked
    return ReceivePhase(
        seconds=outcome.seconds,
        receive_seconds=outcome.receive_seconds,
        ack_seconds=outcome.ack_seconds,
        empty_receives=outcome.empty_receives,
        arrivals=arrivals,
        tallies=list(tallies),
        stalled=not tally.complete.is_set(),
        errors=outcome.errors,
        killed_held=len(outcome.held) if outcome.killed else None,
        takeover_seconds=outcome.takeover_seconds,
        lost_held=outcome.lost_held,
        per_receiver=tuple(outcome.per_receiver),
        receiver_cpu=outcome.cpu_seconds,
    )


def run_threads(
    work: Sequence[Callable[[], None]],
    report: Callable[[], None],
    on_start: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> float:
    """Start every worker at once; return the seconds until the last one finished.

    ``on_start`` and ``on_end`` are called as the clock starts and stops. The
    first exception of a worker is re-raised here once all have stopped.
    """
    failures: list[BaseException] = []
    start = threading.Barrier(len(work) + 1)

    def body(task: Callable[[], None]) -> None:
        start.wait()
        try:
            task()
        except BaseException as e:  # handed to the main thread, which re-raises it
            failures.append(e)

    threads = [threading.Thread(target=body, args=(task,), daemon=True) for task in work]
    for thread in threads:
        thread.start()
    start.wait()
    if on_start is not None:
        on_start()
    began = time.perf_counter()
    for thread in threads:
        while thread.is_alive():
            thread.join(PROGRESS_INTERVAL)
            report()
    seconds = time.perf_counter() - began
    if on_end is not None:
        on_end()
    if failures:
        raise failures[0]
    return seconds
