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
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spark_queue import defaults
from spark_queue.bench.consistency import make_payload, order_stats, percentile
from spark_queue.bench.faultproxy import FaultProxy, open_queue
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_int, check_seconds, parse_hosts
from spark_queue.errors import BackendUnavailable, InvalidSetting, LocalNodeError
from spark_queue.local.node import LocalCluster
from spark_queue.queue import Queue
from spark_queue.store import session as store_session

#: Response time p99 past which the load steps stop (the paper's Fig. 4 reads 200 ms).
SATURATION_MS = 200.0


@dataclass(frozen=True, kw_only=True)
class FaultsParams:
    """One ``bdq bench faults`` run.

    Attributes:
        rate: Offered load of the fault runs, messages per second in all.
        seconds: Sending time of each fault level.
        senders: Sender threads per 100 msgs/s of offered load (at least this many).
        receivers: Receiver processes.
        payload_bytes: Size of each payload [L].
        receive_batch: ``max_messages`` of each receive.
        visibility_timeout: Seconds a received message stays invisible.
        drop_levels: Connection drop probabilities per client request.
        crash_levels: Receiver crash probabilities per received batch.
        mttf: Mean seconds between node crashes.
        mttr: Seconds a crashed node stays down before its restart begins.
        node_seconds: Sending time of the node-crash run.
        load_steps: Offered loads (msgs/s) of the Fig. 4 run, in order.
        load_seconds: Sending time of each load step.
        seed: Seed of payloads, crash draws and node choices.
    """

    rate: float = 200.0
    seconds: float = 60.0
    senders: int = 3
    receivers: int = 3
    payload_bytes: int = 2048
    receive_batch: int = 10
    visibility_timeout: float = 10.0
    drop_levels: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    crash_levels: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    mttf: float = 100.0
    mttr: float = 10.0
    node_seconds: float = 300.0
    load_steps: tuple[float, ...] = (100, 200, 400, 800, 1600, 3200)
    load_seconds: float = 20.0
    seed: int = field(default_factory=lambda: random.randrange(2**31))

    def __post_init__(self) -> None:
        check_seconds("rate", self.rate)
        check_seconds("seconds", self.seconds)
        check_int("senders", self.senders, 1, 64)
        check_int("receivers", self.receivers, 1, 32)
        check_int("payload_bytes", self.payload_bytes, 16, 1024 * 1024)
        check_int("receive_batch", self.receive_batch, 1, 1000)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("mttf", self.mttf)
        check_seconds("mttr", self.mttr)
        check_seconds("node_seconds", self.node_seconds)
        check_seconds("load_seconds", self.load_seconds)
        for what, levels in (("crash", self.crash_levels), ("drop", self.drop_levels)):
            for p in levels:
                if not 0 <= p <= 1:
                    raise InvalidSetting(f"{what} level {p}: must be a probability from 0 to 1")

    @classmethod
    def quick(cls, seed: int | None = None) -> FaultsParams:
        """Shorter levels and node faults (MTTF 20 s, MTTR 5 s): a few minutes in all."""
        return cls(
            rate=100.0,
            seconds=15.0,
            visibility_timeout=5.0,
            drop_levels=(0.0, 0.05),
            crash_levels=(0.0, 0.1),
            mttf=20.0,
            mttr=5.0,
            node_seconds=40.0,
            load_steps=(50, 100, 200, 400, 800),
            load_seconds=8.0,
            **({} if seed is None else {"seed": seed}),
        )


@dataclass
class LevelResult:
    """What one level measured; times in ms, rates in messages per second."""

    fault: str
    level: str
    offered: float
    seconds: float
    sent: int = 0
    send_errors: int = 0
    deliveries: int = 0
    distinct: int = 0
    lost: int = 0
    corrupt: int = 0
    duplication: float = 0.0
    out_of_order: float = 0.0
    displacement: float = 0.0
    send_p50: float | None = None
    send_p99: float | None = None
    recv_p50: float | None = None
    recv_p99: float | None = None
    restarts: int = 0
    #: client requests the network fault's proxies relayed, and connections they dropped
    requests: int = 0
    drops: int = 0
    #: received messages per whole second since the level began
    throughput: list[int] = field(default_factory=list)
    #: (seconds since the level began, what happened)
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def send_rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


@dataclass
class FaultsResult:
    params: FaultsParams
    levels: list[LevelResult]

    @property
    def lost(self) -> int:
        return sum(level.lost for level in self.levels)

    @property
    def saturation(self) -> float | None:
        """The highest offered load step whose p99 response times stayed within 200 ms."""
        fine = [level.offered for level in self.levels if level.fault == "load" and _within(level)]
        return max(fine, default=None)


def _within(level: LevelResult) -> bool:
    """Send and receive p99 within :data:`SATURATION_MS` and the senders kept up."""
    p99s = [t for t in (level.send_p99, level.recv_p99) if t is not None]
    return all(t <= SATURATION_MS for t in p99s) and level.send_rate >= 0.8 * level.offered


Echo = Callable[[str], None]

FAULTS = ("network", "receiver", "node", "load")


def check_faults(names: Sequence[str]) -> list[str]:
    """``names`` if each is one of :data:`FAULTS` and there is at least one."""
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        raise InvalidSetting(
            f"faults {','.join(names)!r}: must be a comma list of {', '.join(FAULTS)}"
        )
    return list(names)


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
        settings: Cluster and keyspace (created with the settings' replication).
        params: Loads, durations and fault levels.
        workdir: Folder for the receivers' delivery records.
        cluster: The local cluster to crash nodes of; ``node`` needs it.
        faults: Which of ``network``, ``receiver``, ``node`` and ``load`` to run.
        proxy_address: Loopback address of the first node's proxy (``network``);
            the next nodes' proxies take the next addresses.
        echo: Where progress lines go.
    """
    check_faults(faults)
    if "node" in faults and cluster is None:
        raise InvalidSetting("faults 'node': needs a local cluster the bench can kill nodes of")
    echo(f"bench faults: seed {params.seed}")
    rng = random.Random(params.seed)
    levels: list[LevelResult] = []
    with QueueClient(settings=settings) as client:
        run = _LevelRunner(client, settings, params, workdir, rng, echo)
        if "network" in faults:
            for p in params.drop_levels:
                net = _proxy(settings, proxy_address, p, rng.randrange(2**31), params)
                levels.append(run("network", f"p={p:g}", params.rate, params.seconds, net=net))
        if "receiver" in faults:
            for p in params.crash_levels:
                levels.append(run("receiver", f"p={p:g}", params.rate, params.seconds, crash=p))
        if "node" in faults:
            assert cluster is not None
            chaos = _NodeChaos(cluster, params, rng)
            level = f"MTTF {params.mttf:g}s, MTTR {params.mttr:g}s"
            levels.append(run("node", level, params.rate, params.node_seconds, chaos=chaos))
        if "load" in faults:
            for rate in params.load_steps:
                result = run("load", f"{rate:g}/s", rate, params.load_seconds)
                levels.append(result)
                if not _within(result):
                    echo(f"p99 past {SATURATION_MS:g} ms (or senders behind) at {rate:g} msgs/s")
                    break
    return FaultsResult(params, levels)


def _proxy(
    settings: ConnectionSettings, first: str, drop: float, seed: int, params: FaultsParams
) -> FaultProxy:
    """Proxies for every contact point on ``first`` and the next addresses (not started)."""
    base = ipaddress.ip_address(first)
    routes = {str(base + i): (h.host, h.port) for i, h in enumerate(settings.hosts)}
    # bounded: the level's sending, its drain and the receivers' stop fit well within
    lifetime = params.seconds + max(30.0, 4 * params.visibility_timeout) + 600
    return FaultProxy(routes, drop=drop, seed=seed, lifetime=lifetime)


class _NodeChaos:
    """Kills a random node after Exp(MTTF) seconds, restarts it MTTR seconds later, repeats."""

    def __init__(self, cluster: LocalCluster, params: FaultsParams, rng: random.Random) -> None:
        self.cluster = cluster
        self.params = params
        self.rng = rng

    def run(self, stop: threading.Event, mark: Callable[[str], None]) -> None:
        # The first crash comes within a third of the level, so every node run has one.
        wait = min(self.rng.expovariate(1 / self.params.mttf), self.params.node_seconds / 3)
        while not stop.wait(wait):
            node = self.rng.randint(1, 3)
            self.cluster.kill(node)
            mark(f"node {node} killed")
            stop.wait(self.params.mttr)  # down for MTTR even when the level ends meanwhile
            mark(self._restart(node))
            wait = self.rng.expovariate(1 / self.params.mttf)

    def _restart(self, node: int) -> str:
        """Start the killed node again; what became of it, for the level's events."""
        # On a loaded host the commit log replay can outlast one start's wait: the
        # process keeps starting, so waiting again a few times is enough.
        failure: LocalNodeError | None = None
        for _ in range(3):
            try:
                self.cluster.start(nodes=3, echo=lambda line: None)
                return f"node {node} back"
            except LocalNodeError as e:
                failure = e
        return f"node {node} still not back after 3 starts ({failure})"


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
        chaos: _NodeChaos | None = None,
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
            settings = _through(net, self.settings)
            store_session.use_address_translator(net.translator())
            try:
                sender = open_queue(settings, name)
            except BaseException:
                store_session.use_address_translator(None)
                net.stop()
                raise
            queue = sender.queue(name)
        receivers = _Receivers(settings, p, name, folder, crash, self.rng.randrange(2**31), net=net)
        stop = threading.Event()
        chaos_thread = None
        if chaos:
            chaos_thread = threading.Thread(target=chaos.run, args=(stop, mark), daemon=True)
            chaos_thread.start()
        try:
            receivers.start()
            sending = time.monotonic()
            sent, send_times, errors = _send(queue, p, rate, seconds, self.rng.randrange(2**31))
            result.sent, result.send_errors = len(sent), errors
            result.seconds = time.monotonic() - sending  # > seconds when senders fell behind
            stop.set()
            if chaos_thread:
                chaos_thread.join()
            _wait_for(sent, receivers, folder, p.visibility_timeout)
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
            f"  sent {result.sent}, lost {result.lost}, duplication {result.duplication:.2%},"
            f" out-of-order {result.out_of_order:.2%}, receiver restarts {result.restarts}"
            + (f", {result.drops} of {result.requests} requests dropped" if net else "")
        )
        return result


def _through(net: FaultProxy, settings: ConnectionSettings) -> ConnectionSettings:
    """``settings`` with the proxies as contact points, at protocol v4 (frames they can read)."""
    hosts = ",".join(f"{listen}:{port}" for listen, (_, port) in net.routes.items())
    return dataclasses.replace(settings, hosts=parse_hosts(hosts), protocol_version=4)


def _send(
    queue: Queue, params: FaultsParams, rate: float, seconds: float, seed: int
) -> tuple[set[tuple[int, int]], list[float], int]:
    """Paced single-message sends; returns the acknowledged (sender, seq), times (ms), errors."""
    threads = max(params.senders, math.ceil(rate / 100))
    per_thread = rate / threads
    sent: set[tuple[int, int]] = set()
    times: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def sender(index: int) -> None:
        rng = random.Random(seed + index)
        seq = 0
        while True:
            due = start + seq / per_thread
            if due - start >= seconds:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            payload = make_payload(seq, index, params.payload_bytes, rng)
            while True:  # a send that failed may have landed: a retry can duplicate, never lose
                began = time.monotonic()
                try:
                    queue.send(payload)
                    break
                except BackendUnavailable:
                    with lock:
                        errors[0] += 1
                    time.sleep(0.1)
            took = (time.monotonic() - began) * 1000
            with lock:
                sent.add((index, seq))
                times.append(took)
            seq += 1

    workers = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sent, times, errors[0]


class _Receivers:
    """Receiver processes, restarted when they die, stopped with SIGTERM."""

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
    ) -> None:
        routes = ",".join(f"{n}={t}" for n, t in net.translator().routes.items()) if net else ""
        self.command = [
            sys.executable, "-m", "spark_queue.bench.faults_receiver",
            "--hosts", ",".join(str(h) for h in settings.hosts),
            "--keyspace", settings.keyspace, "--consistency", settings.consistency,
            "--queue", queue, "--crash", str(crash),
            "--batch", str(params.receive_batch),
            "--visibility-timeout", str(params.visibility_timeout),
            *(["--translate", routes, "--protocol", "4"] if net else []),
        ]  # fmt: skip
        self.folder = folder
        self.count = params.receivers
        self.seed = seed
        self.processes: list[subprocess.Popen[bytes]] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._supervise, daemon=True)

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        out = self.folder / f"receiver-{index}.txt"
        with open(self.folder / f"receiver-{index}.log", "ab") as log:
            seed = self.seed + 7919 * self.restarts + index  # a restart draws new crashes
            return subprocess.Popen(
                [*self.command, "--out", str(out), "--seed", str(seed)],
                stdout=log,
                stderr=log,
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
        self._stop.set()
        if self._watch.is_alive():
            self._watch.join()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return self.restarts


def _records(folder: Path) -> list[tuple[float, float, int, int, bool]]:
    """Every recorded delivery (time, receive ms or -1, sender, seq, intact), in time order."""
    rows = []
    for path in folder.glob("receiver-*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 5:  # a line cut by a SIGKILL mid-write is not a delivery
                at, ms, sender, seq, ok = parts
                rows.append((float(at), float(ms), int(sender), int(seq), ok == "1"))
    rows.sort(key=lambda r: r[0])
    return rows


def _wait_for(
    sent: set[tuple[int, int]], receivers: _Receivers, folder: Path, visibility: float
) -> None:
    """Until every acknowledged send was received, or nothing new arrived for a long while.

    "A long while" covers several redeliveries: a crashed receiver's messages
    come back once its lease ran out and, in a lane it owned, once another
    receiver took the lane over (at most ceil(LANE_PERIOD) + 1 s after its last
    renewal). A receiver that takes the lane may crash again on its first batch,
    so four such rounds are waited for before the rest counts as lost.
    """
    takeover = math.ceil(defaults.LANE_PERIOD) + 1
    stall = max(30.0, 4 * (visibility + takeover))
    seen_count, last_change = -1, time.monotonic()
    while True:
        got = {(r[2], r[3]) for r in _records(folder) if r[4]}
        if sent <= got:
            return
        if len(got) != seen_count:
            seen_count, last_change = len(got), time.monotonic()
        elif time.monotonic() - last_change > stall:
            return  # measured as loss
        time.sleep(0.5)


def _measure(
    result: LevelResult,
    sent: set[tuple[int, int]],
    send_times: list[float],
    folder: Path,
    *,
    began_wall: float,
) -> None:
    rows = _records(folder)
    intact = [(r[2], r[3]) for r in rows if r[4]]
    result.deliveries = len(rows)
    result.corrupt = len(rows) - len(intact)
    counts = Counter(intact)
    result.distinct = len(counts)
    result.lost = len(sent - counts.keys())
    if sent:
        result.duplication = (len(intact) - len(counts)) / len(sent)
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
