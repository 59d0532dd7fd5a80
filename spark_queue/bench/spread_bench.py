"""``bdq bench spread``: how one queue's writes spread over the nodes of a cluster (issue 44).

One queue is sent 2 KiB messages at a target rate while, every window (0.25 s),
each node is asked alone for its count of local writes to the ``messages``
table (``system_views.local_write_latency``: node-local, and a count that only
grows while the node runs). The windows' shares per node and effective number
of busy nodes come from ``spread_figures``.

The benchmark starts its own three local nodes (``LocalCluster`` on addresses
and JMX ports of their own, in a fresh home) and stops them at the end, or
measures an existing cluster whose every node is listed in the hosts. Either
way it makes a keyspace of its own at the replication factor asked, and drops it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_queue import defaults
from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.spread_figures import SpreadFigures, Window, spread_figures, windows
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, HostPort, check_int, check_seconds
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster
from spark_queue.local.node_conf import default_home
from spark_queue.queue import Queue

if TYPE_CHECKING:
    from cassandra.cluster import Session

#: Seconds between two readings of the nodes' write counts (issue 44's window).
WINDOW = 0.25
#: Nodes of the cluster the benchmark starts itself.
LOCAL_NODES = 3
#: First address and JMX port of that cluster: clear of the shared node (127.0.0.1)
#: and of the test suite's three nodes (127.0.0.41-43, JMX 7280-7282).
LOCAL_ADDRESS = "127.0.0.51"
LOCAL_JMX_PORT = 7290
#: Seconds each of the benchmark's nodes may take to stop before it is killed.
STOP_TIMEOUT = 30.0
#: Most sends in flight per second asked of all threads (a sanity bound on --rate).
MAX_RATE = 1_000_000

_COUNT = (
    "SELECT count FROM system_views.local_write_latency"
    " WHERE keyspace_name = %s AND table_name = 'messages'"
)


@dataclass(frozen=True, kw_only=True)
class SpreadParams:
    """One run's parameters.

    Attributes:
        replication_factor: Replicas of the benchmark's keyspace (1 to the nodes counted).
        lanes: Lanes of the queue.
        rate: Messages per second asked of all sender threads together; 0 for full speed.
        seconds: How long the senders send.
        threads: Sender threads.
        batch: Messages per send (1: ``send``; more: ``send_batch``).
        payload_bytes: Size of each message.
        bucket_size: Ids per bucket of the queue.
        hosts: The nodes to count, every node of an existing cluster; empty to
            start three local nodes.
        address: First address of the local nodes (the next two follow it).
        jmx_port: First JMX port of the local nodes.
        home: Folder of the local nodes; None for a fresh temporary one, removed at the end.
    """

    replication_factor: int = 1
    lanes: int = defaults.LANES
    rate: int = 2000
    seconds: float = 20.0
    threads: int = 3
    batch: int = 1
    payload_bytes: int = 2048
    bucket_size: int = defaults.BUCKET_SIZE
    hosts: tuple[HostPort, ...] = ()
    address: str = LOCAL_ADDRESS
    jmx_port: int = LOCAL_JMX_PORT
    home: Path | None = None

    def __post_init__(self) -> None:
        nodes = len(self.hosts) or LOCAL_NODES
        where = f"the {len(self.hosts)} hosts listed" if self.hosts else "the three local nodes"
        if not isinstance(self.replication_factor, int) or not (
            1 <= self.replication_factor <= nodes
        ):
            raise InvalidSetting(
                f"replication_factor {self.replication_factor!r}: must be a whole number from 1"
                f" to {nodes}, the nodes counted ({where}); list every node of the cluster"
            )
        check_int("lanes", self.lanes, 1, defaults.MAX_LANES)
        check_int("rate", self.rate, 0, MAX_RATE)
        check_seconds("seconds", self.seconds)
        if self.seconds < 2 * WINDOW:
            raise InvalidSetting(
                f"seconds {self.seconds!r}: must be at least {2 * WINDOW} (two windows of"
                f" {WINDOW} s)"
            )
        check_int("threads", self.threads, 1, 256)
        check_int("batch", self.batch, 1, defaults.MAX_BATCH)
        check_int("payload_bytes", self.payload_bytes, 1, 1024 * 1024)
        check_int("bucket_size", self.bucket_size, 1, defaults.MAX_BUCKET_SIZE)
        if len(set(self.hosts)) != len(self.hosts):
            names = ", ".join(map(str, self.hosts))
            raise InvalidSetting(f"hosts {names!r}: must name each node once")


@dataclass(frozen=True)
class SpreadResult:
    """What one run measured.

    Attributes:
        params: The run's parameters.
        nodes: The nodes counted, as ``host:port``.
        sent: Messages sent.
        send_seconds: Seconds from the first send to the last one's return.
        window_list: Every window, idle ones included, in order.
        figures: The spread over the windows with writes.
    """

    params: SpreadParams
    nodes: tuple[str, ...]
    sent: int
    send_seconds: float
    window_list: tuple[Window, ...]
    figures: SpreadFigures

    @property
    def rate(self) -> float:
        """Messages per second achieved."""
        return self.sent / self.send_seconds if self.send_seconds else 0.0


def run_spread_bench(
    settings: ConnectionSettings,
    params: SpreadParams,
    *,
    progress: Progress = lambda _: None,
) -> SpreadResult:
    """Send to one queue at ``params.rate`` and count each node's writes every window.

    Args:
        settings: Credentials, TLS and timeouts (its hosts and keyspace are replaced:
            by ``params.hosts`` or the local nodes, and by a keyspace of the run's own).
        params: The run.
        progress: Where status lines go.

    Raises:
        SparkQueueError: A node did not start, a host does not answer, a sender
            failed, or no window saw a write.
    """
    keyspace = f"spread_{uuid.uuid4().hex[:12]}"
    with _cluster(params, progress) as hosts:
        run_settings = dataclasses.replace(
            settings,
            hosts=hosts,
            keyspace=keyspace,
            replication_factor=params.replication_factor,
        )
        progress(f"creating keyspace {keyspace} at RF {params.replication_factor}")
        cql.ensure_keyspace(run_settings)
        try:
            return _measure(run_settings, params, hosts, progress)
        finally:
            progress(f"dropping keyspace {keyspace}")
            cql.drop_keyspace(run_settings)


@contextlib.contextmanager
def _cluster(params: SpreadParams, progress: Progress) -> Iterator[tuple[HostPort, ...]]:
    """The nodes to count: ``params.hosts``, or three local nodes started here and stopped after.

    The stop is in a ``finally``, so Ctrl-C (KeyboardInterrupt) stops the nodes
    too, each within ``STOP_TIMEOUT`` before it is killed.
    """
    if params.hosts:
        yield params.hosts
        return
    home = params.home or Path(tempfile.mkdtemp(prefix="bdq-spread-"))
    _seed_classpath(home)
    cluster = LocalCluster(home, address=params.address, jmx_port=params.jmx_port)
    try:
        progress(f"starting {LOCAL_NODES} local nodes from {params.address} under {home}")
        statuses = cluster.start(nodes=LOCAL_NODES, echo=progress)
        yield tuple(HostPort(s.address, s.native_port) for s in statuses)
    finally:
        progress("stopping the local nodes")
        cluster.stop(timeout=STOP_TIMEOUT, echo=progress)
        if params.home is None:
            shutil.rmtree(home, ignore_errors=True)


def _seed_classpath(home: Path) -> None:
    """Reuse the default home's resolved classpath, so a fresh home starts without Maven."""
    source = default_home() / "lib"
    target = home / "lib"
    if source.is_dir() and not target.exists():
        shutil.copytree(source, target)


def _measure(
    settings: ConnectionSettings,
    params: SpreadParams,
    hosts: Sequence[HostPort],
    progress: Progress,
) -> SpreadResult:
    """Send for ``params.seconds`` while reading each node's write count every window."""
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(cql.connect(settings, only=host)) for host in hosts]
        client = stack.enter_context(QueueClient(settings=settings))
        queue_name = "spread"
        client.create_queue(queue_name, lanes=params.lanes, bucket_size=params.bucket_size)

        def counts() -> tuple[int, ...]:
            # One node at a time, each asked alone: the virtual table is node-local.
            return tuple(_write_count(s, settings.keyspace) for s in sessions)

        senders = Senders(client.queue(queue_name), params)
        readings = read_windows(senders, counts, params.seconds, progress)
        senders.raise_failure()
        all_windows = windows(readings)
        return SpreadResult(
            params=params,
            nodes=tuple(str(h) for h in hosts),
            sent=senders.sent,
            send_seconds=senders.seconds,
            window_list=tuple(all_windows),
            figures=spread_figures(all_windows),
        )


def read_windows(
    senders: Senders,
    counts: Callable[[], tuple[int, ...]],
    seconds: float,
    progress: Progress = lambda _: None,
) -> list[tuple[float, tuple[int, ...]]]:
    """Start ``senders`` and read ``counts()`` every window until their time is up.

    Returns ``(seconds since the start, counts)`` readings: one before the first
    send, one every ``WINDOW`` while the sends are scheduled, and one after every
    sender returned from its last send (whose writes landed before it returned),
    closing a last window that may be shorter.
    """
    readings = [(0.0, counts())]
    began = time.monotonic()
    senders.start(began)
    try:
        # Readings follow the sends' schedule, not the threads: a thread still in
        # its last send would add windows without writes at the end.
        while senders.running() and len(readings) * WINDOW < seconds:
            due = began + len(readings) * WINDOW
            time.sleep(max(0.0, due - time.monotonic()))
            readings.append((time.monotonic() - began, counts()))
            if len(readings) % 20 == 0:
                progress(f"{senders.sent:,} messages sent in {time.monotonic() - began:.0f} s")
    except BaseException:  # Ctrl-C included: the senders stop before the nodes do
        senders.stop()
        raise
    senders.join()
    readings.append((time.monotonic() - began, counts()))
    return readings


def _write_count(session: Session, keyspace: str) -> int:
    """The node's local writes to ``keyspace``'s messages table since it started."""
    row = session.execute(_COUNT, (keyspace,)).one()
    # A node that has not written to the table yet may have no row for it.
    return int(row.count) if row is not None else 0


class Senders:
    """``params.threads`` threads sending to one queue, paced to ``params.rate`` together."""

    def __init__(self, queue: Queue, params: SpreadParams) -> None:
        self._params = params
        self._queue = queue
        self._payload = b"s" * params.payload_bytes
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sent = 0
        self._began = 0.0
        self._ended = 0.0
        self._failure: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._send, args=(i,), name=f"spread-sender-{i}", daemon=True)
            for i in range(params.threads)
        ]

    @property
    def sent(self) -> int:
        with self._lock:
            return self._sent

    @property
    def seconds(self) -> float:
        return max(0.0, self._ended - self._began)

    def start(self, began: float) -> None:
        self._began = began
        for thread in self._threads:
            thread.start()

    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def join(self) -> None:
        """Wait for the threads, which stop on their own once their time is up."""
        for thread in self._threads:
            thread.join()

    def stop(self) -> None:
        """Stop the threads early (each after the send it is in) and wait for them."""
        self._stop.set()
        self.join()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise SparkQueueError(f"a sender failed: {self._failure}") from self._failure

    def _send(self, index: int) -> None:
        params = self._params
        deadline = self._began + params.seconds
        # Each thread's sends are due at fixed times from the start, so a slow send
        # is caught up on rather than lowering the rate (an open-loop schedule).
        interval = params.batch * params.threads / params.rate if params.rate else 0.0
        due = self._began + index * interval / params.threads
        batch = [self._payload] * params.batch
        try:
            while not self._stop.is_set():
                if interval:
                    wait = due - time.monotonic()
                    if wait > 0 and self._stop.wait(wait):
                        break
                    due += interval
                if time.monotonic() >= deadline:
                    break
                if params.batch == 1:
                    self._queue.send(self._payload)
                else:
                    self._queue.send_batch(batch)
                with self._lock:
                    self._sent += params.batch
                    self._ended = max(self._ended, time.monotonic())
        except BaseException as e:  # reported by raise_failure, after the others stop
            self._failure = e
            self._stop.set()
