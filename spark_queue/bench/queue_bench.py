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

The parameters are in ``queue_bench_params`` and what a run measured in
``queue_bench_results``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from spark_queue import defaults
from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.baseline import RawInsertBaseline
from spark_queue.bench.consistency import (
    duplication_rate,
    loss_rate,
    order_stats,
    percentile,
)
from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.queue_bench_params import QueueBenchParams
from spark_queue.bench.queue_bench_results import OrderSweep, QueueBenchResult, SweepRow
from spark_queue.bench.queue_phases import (
    ReceivePhase,
    Sender,
    SendPhase,
    make_senders,
    receive_phase,
    send_phase,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, InvalidSetting
from spark_queue.store.session import Store


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
    status line now and then. The keyspace must exist (``bdq keyspace
    create``); the run's queues and baseline table are removed at the end.

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
