"""``bdq bench queue``: the BlueDove paper's client-level benchmark (seed 000, section V.A).

A run has two phases, as in the paper. First every sender thread starts at
once and sends its share of the ``M`` messages, each payload ``L`` random bytes
carrying the sender, a sequence number and a checksum. Then every receiver
thread starts at once and loops: receive a batch, check each payload, wait
the processing delay per message, ack the batch; until every message has
been seen, or no new one arrived for a while (the stall timeout); the phases
themselves are in ``queue_phases``.

In the same run, on the same node, the **raw baseline** measures what
Cassandra takes without the queue: the same payloads as plain prepared
INSERTs through the driver's concurrent execution, once before the queue
phases and once after (see ``baseline``). Queue rates are also given as a
ratio to the mean of the two.

Each run uses fresh, uniquely named queues and baseline table, and removes
them at the end.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spark_queue import defaults
from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.baseline import RawInsertBaseline
from spark_queue.bench.consistency import (
    MIN_PAYLOAD_BYTES,
    duplication_rate,
    loss_rate,
    order_stats,
    percentile,
)
from spark_queue.bench.queue_phases import (
    Progress as Progress,  # re-exported: the progress sink of every bench
)
from spark_queue.bench.queue_phases import (
    ReceivePhase,
    Sender,
    SendPhase,
    make_senders,
    receive_phase,
    send_phase,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_int, check_seconds
from spark_queue.errors import BackendUnavailable, InvalidSetting
from spark_queue.store.session import Store


@dataclass(frozen=True, kw_only=True)
class QueueBenchParams:
    """One run's parameters (the paper's names in brackets).

    Attributes:
        messages: Messages sent and expected back in all [M].
        payload_bytes: Size of each payload [L].
        queues: Queues, each with its own sender and receiver threads [Q].
        send_threads: Sender threads per queue [Tsend].
        recv_threads: Receiver threads per queue [Trecv].
        order_hint: Receive among the oldest K visible messages per message asked [K].
        visibility_timeout: Seconds a received message stays invisible.
        receive_delay: Seconds of "processing" per received message [δrecv].
        send_batch: Messages per send operation (1: ``send``; more: ``send_batch``).
        async_send: Send single messages with ``send_async`` (the handle's
            producer batches them) and wait for every future at the end.
        receive_batch: ``max_messages`` of each receive.
        bucket_size: Ids per bucket of the queues.
        seed: Seed of the random payloads (chosen at random when not given).
        baseline: Measure the raw insert baseline too.
        baseline_concurrency: In-flight requests of the raw baseline.
        recv_processes: Run each receiver in its own process instead of a thread.
        kill_receiver: SIGKILL one receiver (a process) once half the messages were
            seen, and report when the messages it held were taken over.
        plain_acks: Receivers ack with a read and a plain write while the lease
            surely holds (``Queue.plain_acks``), whatever the cluster's size;
            False keeps the handles' default.
    """

    messages: int = 20_000
    payload_bytes: int = 2048
    queues: int = 1
    send_threads: int = 3
    recv_threads: int = 3
    order_hint: int = defaults.ORDER_HINT
    visibility_timeout: float = defaults.VISIBILITY_TIMEOUT
    receive_delay: float = 0.0
    send_batch: int = 1
    async_send: bool = False
    receive_batch: int = 10
    bucket_size: int = defaults.BUCKET_SIZE
    seed: int = field(default_factory=lambda: random.randrange(2**32))
    baseline: bool = True
    baseline_concurrency: int = BASELINE_CONCURRENCY
    recv_processes: bool = False
    kill_receiver: bool = False
    plain_acks: bool = False

    def __post_init__(self) -> None:
        check_int("messages", self.messages, 1, 100_000_000)
        check_int("payload_bytes", self.payload_bytes, MIN_PAYLOAD_BYTES, 16 * 1024 * 1024)
        check_int("queues", self.queues, 1, 1000)
        check_int("send_threads", self.send_threads, 1, 1000)
        check_int("recv_threads", self.recv_threads, 1, 1000)
        check_int("order_hint", self.order_hint, 1, defaults.MAX_ORDER_HINT)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("receive_delay", self.receive_delay, allow_zero=True)
        check_int("send_batch", self.send_batch, 1, 10_000)
        check_int("receive_batch", self.receive_batch, 1, 10_000)
        check_int("bucket_size", self.bucket_size, 1, 100_000)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("baseline_concurrency", self.baseline_concurrency, 1, 4096)
        if self.kill_receiver and self.recv_threads * self.queues < 2:
            raise InvalidSetting(
                f"kill_receiver with recv_threads {self.recv_threads}: needs at least 2"
                " receivers, one to kill and one to take over"
            )
        if self.async_send and self.send_batch != 1:
            raise InvalidSetting(
                f"send_batch {self.send_batch}: async_send sends single messages (its producer"
                " batches them); drop one of the two"
            )
        if self.messages < self.queues * self.send_threads:
            raise InvalidSetting(
                f"messages {self.messages}: fewer than the {self.queues * self.send_threads}"
                " sender threads (queues x send_threads); send more or use fewer threads"
            )

    @property
    def stall_timeout(self) -> float:
        """Seconds without a new message after which the receive phase gives up.

        Long enough for a lost lease to expire and its message to come back,
        and for a receiver to process one whole batch.
        """
        return max(10.0, 2 * self.visibility_timeout, 2 * self.receive_delay * self.receive_batch)


@dataclass(frozen=True, kw_only=True)
class QueueBenchResult:
    """What one run measured. Rates are messages per second, times milliseconds per operation.

    Attributes:
        params: The run's parameters.
        send_seconds: Length of the send phase.
        receive_seconds: Length of the receive phase.
        send_rate: Messages sent per second.
        receive_rate: Distinct messages received and acked per second (receive+ack rate).
        delivery_rate: Deliveries (duplicates included) per second.
        send_ops: Send operations (``send`` or ``send_batch`` calls).
        receive_ops: Receives that returned messages.
        empty_receives: Receives that returned nothing.
        send_p50_ms: Median send response time.
        send_p99_ms: 99th percentile send response time.
        receive_p50_ms: Median receive response time (receives that returned messages).
        receive_p99_ms: 99th percentile receive response time.
        ack_p50_ms: Median ``ack_batch`` response time.
        ack_p99_ms: 99th percentile ``ack_batch`` response time.
        deliveries: Deliveries received, duplicates and corrupt ones included.
        distinct: Distinct intact messages received.
        corrupt: Deliveries whose checksum failed.
        stale_acks: Receipts ``ack_batch`` reported stale (lost a race to a duplicate).
        errors: Backend errors that were retried.
        stalled: The receive phase ended by the stall timeout, not by seeing every message.
        duplication_rate: Deliveries beyond the first per message, over M [λ].
        loss_rate: Messages missing or corrupt, over M [ε].
        out_of_order_rate: Messages outside their sender's longest increasing subsequence.
        average_displacement: Mean distance from the correct position, per message.
        baseline_rate: Raw prepared inserts per second (mean of the measures before
            and after the queue phases), or None when not measured.
        baseline_rates: Each measure of the raw baseline, in the order taken.
        killed_held: Messages the killed receiver held (received, unacked) when
            killed, or None without ``kill_receiver``.
        takeover_seconds: From the kill until every held message was delivered to
            another receiver; None without a kill or if some never came back.
        lost_held: Held messages never delivered again before the phase ended
            (counted in ``loss_rate``).
    """

    params: QueueBenchParams
    send_seconds: float
    receive_seconds: float
    send_rate: float
    receive_rate: float
    delivery_rate: float
    send_ops: int
    receive_ops: int
    empty_receives: int
    send_p50_ms: float | None
    send_p99_ms: float | None
    receive_p50_ms: float | None
    receive_p99_ms: float | None
    ack_p50_ms: float | None
    ack_p99_ms: float | None
    deliveries: int
    distinct: int
    corrupt: int
    stale_acks: int
    errors: int
    stalled: bool
    duplication_rate: float
    loss_rate: float
    out_of_order_rate: float
    average_displacement: float
    baseline_rate: float | None
    baseline_rates: list[float]
    killed_held: int | None = None
    takeover_seconds: float | None = None
    lost_held: int = 0

    @property
    def send_ratio(self) -> float | None:
        """Send rate over the raw baseline."""
        return self.send_rate / self.baseline_rate if self.baseline_rate else None

    @property
    def receive_ratio(self) -> float | None:
        """Receive+ack rate over the raw baseline."""
        return self.receive_rate / self.baseline_rate if self.baseline_rate else None

    def to_dict(self) -> dict[str, Any]:
        """Every field and ratio as plain JSON-ready values."""
        values = asdict(self)
        values["send_ratio"] = self.send_ratio
        values["receive_ratio"] = self.receive_ratio
        return values


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One order hint of an order sweep: the paper's order/duplication trade-off.

    Attributes:
        order_hint: K.
        duplication_rate: Deliveries beyond the first per message, over M.
        out_of_order_rate: Messages out of their sender's order.
        average_displacement: Mean distance from the correct position.
        receive_rate: Distinct messages received and acked per second.
        loss_rate: Messages missing or corrupt, over M.
    """

    order_hint: int
    duplication_rate: float
    out_of_order_rate: float
    average_displacement: float
    receive_rate: float
    loss_rate: float


@dataclass(frozen=True, slots=True)
class OrderSweep:
    """An order sweep: one full run per K.

    Attributes:
        rows: One row per order hint, in the order run.
        runs: The complete result of each run.
        baseline_rate: Raw prepared inserts per second (from the first run), or None.
    """

    rows: list[SweepRow]
    runs: list[QueueBenchResult]
    baseline_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        """Rows, runs and baseline as plain JSON-ready values."""
        return {
            "baseline_rate": self.baseline_rate,
            "rows": [asdict(row) for row in self.rows],
            "runs": [run.to_dict() for run in self.runs],
        }


def run_queue_bench(
    settings: ConnectionSettings,
    *,
    messages: int = 20_000,
    payload_bytes: int = 2048,
    queues: int = 1,
    send_threads: int = 3,
    recv_threads: int = 3,
    order_hint: int = defaults.ORDER_HINT,
    visibility_timeout: float = defaults.VISIBILITY_TIMEOUT,
    receive_delay: float = 0.0,
    send_batch: int = 1,
    async_send: bool = False,
    receive_batch: int = 10,
    bucket_size: int = defaults.BUCKET_SIZE,
    seed: int | None = None,
    baseline: bool = True,
    baseline_concurrency: int = BASELINE_CONCURRENCY,
    recv_processes: bool = False,
    kill_receiver: bool = False,
    plain_acks: bool = False,
    progress: Progress | None = None,
) -> QueueBenchResult:
    """Run the benchmark once against ``settings``' cluster and keyspace.

    See ``QueueBenchParams`` for the parameters; ``progress`` receives a short
    status line now and then. The keyspace and queue tables are created when
    missing; the run's queues and baseline table are removed at the end.

    Raises:
        InvalidSetting: A parameter breaks its rule (nothing is run).
        BackendUnavailable: Cassandra failed more than ``MAX_ERRORS`` times.
    """
    params = QueueBenchParams(
        messages=messages,
        payload_bytes=payload_bytes,
        queues=queues,
        send_threads=send_threads,
        recv_threads=recv_threads,
        order_hint=order_hint,
        visibility_timeout=visibility_timeout,
        receive_delay=receive_delay,
        send_batch=send_batch,
        async_send=async_send,
        receive_batch=receive_batch,
        bucket_size=bucket_size,
        baseline=baseline,
        baseline_concurrency=baseline_concurrency,
        recv_processes=recv_processes or kill_receiver,
        kill_receiver=kill_receiver,
        plain_acks=plain_acks,
        **({} if seed is None else {"seed": seed}),
    )
    store = Store(settings)
    try:
        return _run(store, params, progress or _quiet)
    finally:
        store.close()


def run_order_sweep(
    settings: ConnectionSettings,
    *,
    order_hints: Sequence[int] = (1, 2, 3),
    progress: Progress | None = None,
    **options: Any,
) -> OrderSweep:
    """Run the benchmark once per order hint, each with a fresh queue and send phase.

    The raw baseline is measured once, in the first run.

    Args:
        settings: Cluster and keyspace.
        order_hints: The values of K to try.
        progress: Receives a short status line now and then.
        **options: Any other ``run_queue_bench`` parameter (``recv_threads``, ...).
    """
    if not order_hints:
        raise InvalidSetting("order_hints: give at least one order hint, such as (1, 2, 3)")
    if "order_hint" in options:
        raise InvalidSetting("order_hint: a sweep sets it; pass order_hints instead")
    report = progress or _quiet
    wants_baseline = options.pop("baseline", True)
    seed = options.pop("seed", None)
    first = QueueBenchParams(
        order_hint=order_hints[0], **({} if seed is None else {"seed": seed}), **options
    )
    store = Store(settings)
    runs: list[QueueBenchResult] = []
    try:
        for n, k in enumerate(order_hints):
            params = replace(first, order_hint=k, baseline=wants_baseline and n == 0)
            runs.append(_run(store, params, _prefixed(report, f"K={k}: ")))
    finally:
        store.close()
    baseline_rate = runs[0].baseline_rate
    rows = [
        SweepRow(
            order_hint=run.params.order_hint,
            duplication_rate=run.duplication_rate,
            out_of_order_rate=run.out_of_order_rate,
            average_displacement=run.average_displacement,
            receive_rate=run.receive_rate,
            loss_rate=run.loss_rate,
        )
        for run in runs
    ]
    return OrderSweep(rows=rows, runs=runs, baseline_rate=baseline_rate)


# -- the run ---------------------------------------------------------------------------


def _quiet(line: str) -> None:
    """Progress sink that drops every line."""


def _prefixed(progress: Progress, prefix: str) -> Progress:
    """A progress sink that puts ``prefix`` before each line."""
    return lambda line: progress(prefix + line)


def _run(store: Store, params: QueueBenchParams, progress: Progress) -> QueueBenchResult:
    progress("making payloads")
    client = QueueClient(store=store)
    run_id = uuid.uuid4().hex[:10]
    names = [f"bench-{run_id}-{i}" for i in range(params.queues)]
    senders = make_senders(params)
    with contextlib.ExitStack() as stack:
        baseline = None
        if params.baseline:
            progress("raw baseline: creating its table")
            baseline = stack.enter_context(
                RawInsertBaseline(
                    store,
                    f"bench_raw_{run_id}",
                    [p for s in senders for p in s.payloads],
                    partition_rows=params.bucket_size,
                    concurrency=params.baseline_concurrency,
                )
            )
            progress(f"raw baseline: {params.messages} inserts")
            baseline.measure()
        send, receive = _queue_phases(client, names, params, senders, progress)
        if baseline is not None:
            progress(f"raw baseline again: {params.messages} inserts")
            baseline.measure()
            progress("raw baseline: dropping its table")
    rates = baseline.rates if baseline is not None else []
    return _result(params, send, receive, rates)


def _queue_phases(
    client: QueueClient,
    names: Sequence[str],
    params: QueueBenchParams,
    senders: Sequence[Sender],
    progress: Progress,
) -> tuple[SendPhase, ReceivePhase]:
    """Create the queues, run both phases, delete the queues."""
    try:
        handles = [
            client.create_queue(
                name,
                bucket_size=params.bucket_size,
                visibility_timeout=params.visibility_timeout,
                order_hint=params.order_hint,
            )
            for name in names
        ]
        send = send_phase(params, handles, senders, progress)
        receive = receive_phase(params, handles, senders, progress)
    finally:
        for name in names:
            try:
                client.delete_queue(name, missing_ok=True)
            except BackendUnavailable:
                progress(f"could not delete benchmark queue {name!r}; delete it by hand")
    return send, receive


# -- metrics -------------------------------------------------------------------------------


def _ms(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) * 1000 if values else None


def _result(
    params: QueueBenchParams,
    send: SendPhase,
    receive: ReceivePhase,
    baseline_rates: Sequence[float],
) -> QueueBenchResult:
    m = params.messages
    distinct = sum(len(t.seen) for t in receive.tallies)
    deliveries = sum(t.deliveries for t in receive.tallies)
    corrupt = sum(t.corrupt for t in receive.tallies)
    order = order_stats(receive.arrivals)
    return QueueBenchResult(
        params=params,
        send_seconds=send.seconds,
        receive_seconds=receive.seconds,
        send_rate=m / send.seconds,
        receive_rate=distinct / receive.seconds,
        delivery_rate=deliveries / receive.seconds,
        send_ops=len(send.op_seconds),
        receive_ops=len(receive.receive_seconds),
        empty_receives=receive.empty_receives,
        send_p50_ms=_ms(send.op_seconds, 50),
        send_p99_ms=_ms(send.op_seconds, 99),
        receive_p50_ms=_ms(receive.receive_seconds, 50),
        receive_p99_ms=_ms(receive.receive_seconds, 99),
        ack_p50_ms=_ms(receive.ack_seconds, 50),
        ack_p99_ms=_ms(receive.ack_seconds, 99),
        deliveries=deliveries,
        distinct=distinct,
        corrupt=corrupt,
        stale_acks=sum(t.stale_acks for t in receive.tallies),
        errors=send.errors + receive.errors,
        stalled=receive.stalled,
        duplication_rate=duplication_rate(deliveries - corrupt, distinct, m),
        # A held message never delivered again after the kill is lost to the run.
        loss_rate=loss_rate(m, distinct - receive.lost_held),
        out_of_order_rate=order.out_of_order_rate,
        average_displacement=order.average_displacement,
        baseline_rate=sum(baseline_rates) / len(baseline_rates) if baseline_rates else None,
        baseline_rates=list(baseline_rates),
        killed_held=receive.killed_held,
        takeover_seconds=receive.takeover_seconds,
        lost_held=receive.lost_held,
    )
