"""``bdq bench faults``: the BlueDove evaluation (seed 000, section V) under one fault at a time.

Each *level* is one run on a fresh queue: sender threads offer a steady load of
the paper's payloads (2048 random bytes carrying sender, sequence number and a
CRC32, see :mod:`spark_queue.bench.consistency`), single-message sends retried
until they succeed; receiver processes (:mod:`spark_queue.bench.faults_receiver`)
receive, record and ack. After the senders stop, the receivers drain the queue
(crashed ones are restarted); then every acknowledged send is looked up among
the recorded deliveries. A level measures loss (must be 0), duplication,
out-of-order rate, average displacement, send and receive response times and
received throughput per second. The faults:

* ``network``: senders and receivers talk to the nodes through the bench's
  fault-injecting proxies (:mod:`spark_queue.bench.faultproxy`, one per node on
  127.0.0.61 and up), which drop the connection with probability p per client
  request. The driver reconnects; a send whose connection dropped raised and
  is retried (a duplicate when it had landed), a receive's or ack's lost
  response leaves the message to come back after its visibility timeout.
* ``receiver``: each receiver SIGKILLs itself with probability p per received
  batch, after recording it and before acking it; the bench restarts it. Its
  messages come back after the visibility timeout (duplicates, delay).
* ``node``: a random node of the local three-node cluster is SIGKILLed after an
  exponential time with mean MTTF and restarted MTTR seconds later (the restart
  itself then takes a while), while the load runs at LOCAL_QUORUM. The first
  crash comes within the first third of the run, so every run has one.
* ``load`` (the paper's Fig. 4 shape, no fault): the offered load is stepped
  up until the send or receive response time p99 passes 200 ms (or the
  senders fall behind); the saturation rate is the last step below that.

The parameters are in ``faults_params``; the levels' results in
``faults_results``; the network and node faults in ``faults_injection``; a
level's senders in ``faults_senders`` and its receivers in ``faults_supervisor``.
"""

from __future__ import annotations

import os
import random
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from spark_queue.bench.consistency import order_stats, percentile
from spark_queue.bench.faultproxy import FaultProxy, open_queue
from spark_queue.bench.faults_injection import NodeChaos, network_proxy, through_proxies
from spark_queue.bench.faults_params import FAULTS, FaultsParams, check_faults
from spark_queue.bench.faults_results import (
    SATURATION_MS,
    FaultsResult,
    LevelResult,
    within_saturation,
)
from spark_queue.bench.faults_senders import send_paced
from spark_queue.bench.faults_supervisor import Receivers, read_records, wait_for_deliveries
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting
from spark_queue.local.node import LocalCluster
from spark_queue.store import session as store_session

Echo = Callable[[str], None]


def run_faults_bench(
    settings: ConnectionSettings,
    params: FaultsParams,
    workdir: Path,
    *,
    cluster: LocalCluster | None = None,
    faults: Sequence[str] = FAULTS,
    proxy_address: str = "127.0.0.61",
    echo: Echo = print,
) -> FaultsResult:
    """Run the chosen faults' levels one after another.

    Args:
        settings: Cluster and keyspace (which must exist: ``bdq bench faults`` creates its own).
        params: Loads, durations and fault levels.
        workdir: Folder for the receivers' delivery records.
        cluster: The local cluster to crash nodes of; ``node`` needs it.
        faults: Which of ``network``, ``receiver``, ``node`` and ``load`` to run.
        proxy_address: Loopback address of the first node's proxy (``network``);
            the next nodes' proxies take the next addresses.
        echo: Where progress lines go.
    """
    check_faults(faults)
    if any(f not in FAULTS for f in faults):
        raise InvalidSetting(f"faults {','.join(faults)!r}: the Spark relay's run in faults_levels")
    if "node" in faults and cluster is None:
        raise InvalidSetting("faults 'node': needs a local cluster the bench can kill nodes of")
    echo(f"bench faults: seed {params.seed}")
    rng = random.Random(params.seed)
    levels: list[LevelResult] = []
    with QueueClient(settings=settings) as client:
        run = _LevelRunner(client, settings, params, workdir, rng, echo)
        if "network" in faults:
            for p in params.drop_levels:
                net = network_proxy(settings, proxy_address, p, rng.randrange(2**31), params)
                levels.append(run("network", f"p={p:g}", params.rate, params.seconds, net=net))
        if "receiver" in faults:
            for p in params.crash_levels:
                levels.append(run("receiver", f"p={p:g}", params.rate, params.seconds, crash=p))
        if "node" in faults:
            assert cluster is not None
            chaos = NodeChaos(cluster, params, rng)
            level = f"MTTF {params.mttf:g}s, MTTR {params.mttr:g}s"
            levels.append(run("node", level, params.rate, params.node_seconds, chaos=chaos))
        if "load" in faults:
            for rate in params.load_steps:
                result = run("load", f"{rate:g}/s", rate, params.load_seconds)
                levels.append(result)
                if not within_saturation(result):
                    echo(f"p99 past {SATURATION_MS:g} ms (or senders behind) at {rate:g} msgs/s")
                    break
    return FaultsResult(params, levels)


class _LevelRunner:
    def __init__(
        self,
        client: QueueClient,
        settings: ConnectionSettings,
        params: FaultsParams,
        workdir: Path,
        rng: random.Random,
        echo: Echo,
    ) -> None:
        self.client = client
        self.settings = settings
        self.params = params
        self.workdir = workdir
        self.rng = rng
        self.echo = echo

    def __call__(
        self,
        fault: str,
        level: str,
        rate: float,
        seconds: float,
        *,
        crash: float = 0.0,
        chaos: NodeChaos | None = None,
        net: FaultProxy | None = None,
    ) -> LevelResult:
        p = self.params
        name = f"faults-{fault}-{uuid.uuid4().hex[:6]}"
        queue = self.client.create_queue(name, bucket_size=1000)
        folder = self.workdir / name
        folder.mkdir(parents=True)
        result = LevelResult(fault, level, rate, seconds)
        began, began_wall = time.monotonic(), time.time()
        lock = threading.Lock()

        def mark(what: str) -> None:
            with lock:
                result.events.append((round(time.monotonic() - began, 2), what))
            self.echo(f"  {fault} {level}: {what}")

        self.echo(f"{fault} {level}: {rate:g} msgs/s offered for {seconds:g}s")
        settings, sender = self.settings, None
        if net is not None:
            net.start()
            settings = through_proxies(net, self.settings)
            store_session.use_address_translator(net.translator())
            try:
                sender = open_queue(settings, name)
            except BaseException:
                store_session.use_address_translator(None)
                net.stop()
                raise
            queue = sender.queue(name)
        receivers = Receivers(settings, p, name, folder, crash, self.rng.randrange(2**31), net=net)
        stop = threading.Event()
        chaos_thread = None
        if chaos:
            chaos_thread = threading.Thread(target=chaos.run, args=(stop, mark), daemon=True)
            chaos_thread.start()
        try:
            receivers.start()
            sending = time.monotonic()
            sent, send_times, errors = send_paced(
                queue, p, rate, seconds, self.rng.randrange(2**31)
            )
            result.sent, result.send_errors = len(sent), errors
            result.seconds = time.monotonic() - sending  # > seconds when senders fell behind
            stop.set()
            if chaos_thread:
                chaos_thread.join()
            wait_for_deliveries(sent, receivers, folder, p.visibility_timeout)
        finally:
            stop.set()
            result.restarts = receivers.stop()
            if net is not None:
                assert sender is not None
                sender.close()
                store_session.use_address_translator(None)
                net.stop()
                result.requests, result.drops = net.stats.requests, net.stats.drops
        _measure(result, sent, send_times, folder, began_wall=began_wall)
        self.echo(
            f"  sent {result.sent}, lost {result.lost}, duplication {result.duplication:.2%}"
            f" ({result.send_duplicates} written twice, {result.redeliveries} redelivered),"
            f" out-of-order {result.out_of_order:.2%}, receiver restarts {result.restarts}"
            + (f", {result.drops} of {result.requests} requests dropped" if net else "")
        )
        return result


def _measure(
    result: LevelResult,
    sent: set[tuple[int, int]],
    send_times: list[float],
    folder: Path,
    *,
    began_wall: float,
) -> None:
    rows = read_records(folder)
    intact = [(r[2], r[3]) for r in rows if r[4]]
    result.deliveries = len(rows)
    result.corrupt = len(rows) - len(intact)
    counts = Counter(intact)
    result.distinct = len(counts)
    result.lost = len(sent - counts.keys())
    if sent:
        result.duplication = (len(intact) - len(counts)) / len(sent)
    # A send written twice arrives under two ids; a redelivery under the same id again.
    ids: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
    for r in rows:
        if r[4]:
            ids[(r[2], r[3])].add(r[5])
    result.send_duplicates = sum(len(v) - 1 for v in ids.values())
    result.redeliveries = len(intact) - len(counts) - result.send_duplicates
    order = order_stats(intact)
    result.out_of_order, result.displacement = order.out_of_order_rate, order.average_displacement
    if send_times:
        result.send_p50, result.send_p99 = percentile(send_times, 50), percentile(send_times, 99)
    receive_times = [r[1] for r in rows if r[1] >= 0]
    if receive_times:
        result.recv_p50 = percentile(receive_times, 50)
        result.recv_p99 = percentile(receive_times, 99)
    per_second: Counter[int] = Counter(int(r[0] - began_wall) for r in rows)
    last = max(per_second, default=-1)
    result.throughput = [per_second.get(s, 0) for s in range(last + 1)]


def fresh_workdir(base: Path | None = None) -> Path:
    """A new folder for one run's records (under ``base`` or the system temp folder)."""
    return Path(tempfile.mkdtemp(prefix="bdq-faults-", dir=base or os.environ.get("TMPDIR")))
