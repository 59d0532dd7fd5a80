"""``bdq bench queue --sweep-receivers``: does receiving scale with the receivers? (issue 22).

One point per receiver count N, each on a fresh queue: a lone sender thread
sends M keyless messages (the producer issue 22 starts from), then N
receivers (threads with a handle each, or processes) start at once and
receive, spend ``work_ms`` per message (a sleep, the simulated work), and ack,
until every message was seen. The sweep always measures N = 1 first: its rate
is one worker's rate, the reference of every ideal (``sweep_figures``).

M is chosen per point so that a point that scales lasts about ``seconds``:
``max(200, N x rate x seconds)``, with the work's own bound as the rate of
N = 1 and the measured rate of N = 1 after it. Over each receive phase the
sweep reads the CPU time of the client, of the local Cassandra node and of
the whole machine (``cpu_meter``), and the load average as it starts: the
verdict on where the machine saturates comes from those.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import replace

from spark_queue import defaults
from spark_queue.bench.consistency import percentile
from spark_queue.bench.cpu_meter import CpuMeter, local_node_pid
from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.queue_bench_params import QueueBenchParams
from spark_queue.bench.queue_phases import make_senders, receive_phase, send_phase
from spark_queue.bench.sweep_figures import ReceiverSweep, SweepPoint, messages_for, work_rate
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_int, check_seconds
from spark_queue.errors import BackendUnavailable, InvalidSetting
from spark_queue.store.session import Store

#: The receiver counts of issue 22's sweep.
DEFAULT_RECEIVERS = (1, 4, 16, 32)
#: Most receivers of one point.
MAX_RECEIVERS = 256
#: Simulated work per message of issue 22's sweep (ms).
DEFAULT_WORK_MS = 20.0
#: About how long each point receives, when it scales (s).
DEFAULT_SECONDS = 5.0


def sweep_receivers(receivers: Sequence[int]) -> list[int]:
    """The points to run: ``receivers`` sorted, without repeats, with N = 1 (the reference) first.

    Raises:
        InvalidSetting: A count is not a whole number from 1 to ``MAX_RECEIVERS``, or none is given.
    """
    if not receivers:
        raise InvalidSetting("sweep_receivers: give at least one receiver count, such as 1,4,16,32")
    for n in receivers:
        check_int("sweep_receivers", n, 1, MAX_RECEIVERS)
    return sorted({1, *receivers})


def run_receiver_sweep(
    settings: ConnectionSettings,
    *,
    receivers: Sequence[int] = DEFAULT_RECEIVERS,
    work_ms: float = DEFAULT_WORK_MS,
    seconds: float = DEFAULT_SECONDS,
    messages: int | None = None,
    recv_processes: bool = False,
    payload_bytes: int = 2048,
    send_threads: int = 1,
    send_batch: int = 1,
    async_send: bool = False,
    receive_batch: int = 10,
    order_hint: int = defaults.ORDER_HINT,
    visibility_timeout: float = defaults.VISIBILITY_TIMEOUT,
    bucket_size: int = defaults.BUCKET_SIZE,
    plain_acks: bool = False,
    seed: int | None = None,
    cassandra_pid: int | None = None,
    progress: Progress | None = None,
) -> ReceiverSweep:
    """Run one point per receiver count (N = 1 added first) and judge the scaling.

    Args:
        settings: Cluster and keyspace (which must exist).
        receivers: The receiver counts N.
        work_ms: Simulated work per delivered message, slept before its ack.
        seconds: About how long a point that scales receives (chooses its M).
        messages: M of every point instead (``seconds`` is then unused).
        recv_processes: Receivers are processes, not threads.
        payload_bytes: Bytes per payload.
        send_threads: Sender threads (issue 22: one).
        send_batch: Messages per send call of the send phase.
        async_send: Send through the handle's producer.
        receive_batch: ``max_messages`` of each receive.
        order_hint: K of each receive.
        visibility_timeout: Seconds a received message stays invisible.
        bucket_size: Ids per bucket of the queues.
        plain_acks: Receivers ack with a read and a plain write.
        seed: Seed of the payloads (random when None).
        cassandra_pid: The Cassandra node's pid, for its CPU time; None: the local
            node's (``bdq cassandra start``), when it runs on this machine.
        progress: Receives a short status line now and then.

    Raises:
        InvalidSetting: A parameter breaks its rule (nothing is run).
        BackendUnavailable: Cassandra failed more than the phases tolerate.
    """
    ns = sweep_receivers(receivers)
    check_seconds("work_ms", work_ms, allow_zero=True)
    if work_ms > 60_000:
        raise InvalidSetting(f"work_ms {work_ms!r}: must be at most 60000 (a minute per message)")
    check_seconds("seconds", seconds)
    base = QueueBenchParams(  # checks the rest before anything runs
        messages=max(messages or 0, send_threads),
        payload_bytes=payload_bytes,
        send_threads=send_threads,
        recv_threads=max(ns),
        order_hint=order_hint,
        visibility_timeout=visibility_timeout,
        receive_delay=work_ms / 1000,
        send_batch=send_batch,
        async_send=async_send,
        receive_batch=receive_batch,
        bucket_size=bucket_size,
        baseline=False,
        recv_processes=recv_processes,
        plain_acks=plain_acks,
    )
    if seed is not None:
        base = replace(base, seed=seed)
    report = progress or _quiet
    pid = cassandra_pid if cassandra_pid is not None else local_node_pid()
    store = Store(settings)
    points: list[SweepPoint] = []
    try:
        client = QueueClient(store=store)
        rate = work_rate(work_ms)
        for n in ns:
            m = messages or messages_for(n, rate, seconds)
            params = replace(base, messages=max(m, send_threads), recv_threads=n)
            points.append(_point(client, params, pid, _prefixed(report, f"N={n}: ")))
            if n == 1 and points[0].throughput > 0:
                rate = points[0].throughput
    finally:
        store.close()
    return ReceiverSweep(
        points=points,
        work_ms=work_ms,
        processes=recv_processes,
        settings={
            "payload_bytes": payload_bytes,
            "send_threads": send_threads,
            "send_batch": send_batch,
            "async_send": async_send,
            "receive_batch": receive_batch,
            "order_hint": order_hint,
            "visibility_timeout": visibility_timeout,
            "seconds": None if messages else seconds,
            "messages": messages,
            "seed": base.seed,
            "cassandra_pid": pid,
        },
    )


def _quiet(line: str) -> None:
    """Progress sink that drops every line."""


def _prefixed(progress: Progress, prefix: str) -> Progress:
    return lambda line: progress(prefix + line)


def _point(
    client: QueueClient, params: QueueBenchParams, pid: int | None, progress: Progress
) -> SweepPoint:
    """One N: a fresh queue, the send phase, the metered receive phase, the queue deleted."""
    progress("making payloads")
    senders = make_senders(params)
    name = f"bench-sweep-{uuid.uuid4().hex[:10]}"
    queue = client.create_queue(
        name,
        bucket_size=params.bucket_size,
        visibility_timeout=params.visibility_timeout,
        order_hint=params.order_hint,
    )
    meter = CpuMeter(pid)
    try:
        send_phase(params, [queue], senders, progress)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        phase = receive_phase(
            params, [queue], senders, progress, on_start=meter.start, on_end=meter.stop
        )
    finally:
        try:
            client.delete_queue(name, missing_ok=True)
        except BackendUnavailable:
            progress(f"could not delete benchmark queue {name!r}; delete it by hand")
    (tally,) = phase.tallies
    use = meter.use
    client_cpu = None
    if use is not None:
        client_cpu = use.client + (phase.receiver_cpu or 0.0)
    return SweepPoint(
        receivers=params.recv_threads,
        messages=params.messages,
        seconds=phase.seconds,
        distinct=len(tally.seen),
        deliveries=tally.deliveries,
        corrupt=tally.corrupt,
        per_receiver=phase.per_receiver,
        empty_receives=phase.empty_receives,
        stalled=phase.stalled,
        load=load,
        client_cpu=client_cpu,
        cassandra_cpu=None if use is None else use.cassandra,
        machine_cpu=None if use is None else use.machine,
        cores=use.cores if use is not None else (os.cpu_count() or 1),
        receive_p50_ms=_ms(phase.receive_seconds, 50),
        receive_p99_ms=_ms(phase.receive_seconds, 99),
        ack_p50_ms=_ms(phase.ack_seconds, 50),
        ack_p99_ms=_ms(phase.ack_seconds, 99),
    )


def _ms(values: Sequence[float], q: float) -> float | None:
    return percentile(values, q) * 1000 if values else None
