"""``bdq bench head``: what reading the head of a queue costs after it has moved many messages.

CassieQ's warning: consume by deleting and every read wades through the
tombstones of everything consumed before. Here buckets are dropped whole, so
a receive at the head should cost the same after a million messages as on a
fresh queue. The benchmark measures one receive of one message before and
after moving M messages, with Cassandra's query trace (buckets scanned, live
rows and tombstone cells read) and the wall time of the receive.
"""

from __future__ import annotations

import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cassandra import InvalidRequest

from spark_queue import defaults
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.queue import Queue

_TRACE_READ = re.compile(r"Read (\d+) live rows and (\d+) tombstone cells")


@dataclass(frozen=True)
class HeadCost:
    """The cost of receiving (and acking) the one message at the head."""

    buckets_scanned: int
    live_rows: int
    tombstones: int
    receive_ms: float


@dataclass(frozen=True)
class HeadBenchResult:
    """Before and after moving ``moved`` messages through one queue."""

    moved: int
    move_seconds: float
    head_bucket: int
    before: HeadCost
    after: HeadCost
    compaction_wait: float  # seconds waited for the node's compactions before "after"

    @property
    def move_rate(self) -> float:
        return self.moved / self.move_seconds if self.move_seconds else 0.0


def traced_receive(queue: Queue) -> tuple[list[bytes], list[int], int, int]:
    """Receive one message (and ack it) with every bucket scan traced by Cassandra.

    Returns the payloads, the buckets scanned, and the live rows and tombstone
    cells Cassandra read to answer those scans.
    """
    with queue.buckets.traced_scans() as traces:
        deliveries = queue.receive(1)
    live_rows = tombstones = 0
    for _, trace in traces:
        for event in trace.events:
            match = _TRACE_READ.search(event.description)
            if match:
                live_rows += int(match[1])
                tombstones += int(match[2])
    queue.ack_batch([d.receipt for d in deliveries])
    return [d.payload for d in deliveries], [b for b, _ in traces], live_rows, tombstones


def _head_cost(queue: Queue, samples: int) -> HeadCost:
    """Trace one receive at the head, then time ``samples`` untraced ones."""
    queue.send(b"head")
    _, scanned, live_rows, tombstones = traced_receive(queue)
    times = []
    for _ in range(samples):
        queue.send(b"head")
        began = time.perf_counter()
        deliveries = queue.receive(1)
        times.append((time.perf_counter() - began) * 1000)
        queue.ack_batch([d.receipt for d in deliveries])
    return HeadCost(len(scanned), live_rows, tombstones, statistics.median(times))


def run_head_bench(
    settings: ConnectionSettings,
    *,
    messages: int = 1_000_000,
    batch: int = 1000,
    payload_bytes: int = 100,
    bucket_size: int = defaults.BUCKET_SIZE,
    samples: int = 50,
    progress: Callable[[str], None] = lambda _: None,
) -> HeadBenchResult:
    """Measure the head before and after moving ``messages`` through a fresh queue."""
    name = f"bench-head-{uuid.uuid4().hex[:8]}"
    seal_delay = 1.0
    with QueueClient(settings=settings) as client:
        queue = client.create_queue(name, bucket_size=bucket_size, seal_delay=seal_delay)
        try:
            before = _head_cost(queue, samples)
            payload = b"x" * payload_bytes
            began = time.monotonic()
            moved = 0
            while moved < messages:
                n = min(batch, messages - moved)
                queue.send_batch([payload] * n)
                while deliveries := queue.receive(n):
                    queue.ack_batch([d.receipt for d in deliveries])
                moved += n
                if moved % (batch * 100) == 0:
                    progress(f"moved {moved:,} of {messages:,} messages")
            move_seconds = time.monotonic() - began
            # Let the last full buckets seal and drop, as a live queue would.
            queue.maintain()
            time.sleep(seal_delay + 0.2)
            _, head = queue.maintain()
            waited = _wait_for_compactions(queue, progress)
            after = _head_cost(queue, samples)
        finally:
            client.delete_queue(name, missing_ok=True)
    return HeadBenchResult(moved, move_seconds, head, before, after, waited)


def _wait_for_compactions(
    queue: Queue, progress: Callable[[str], None], timeout: float = 120.0
) -> float:
    """Wait (bounded) until the coordinator runs no compaction, so "after" times the head.

    Right after a write-heavy phase the node compacts on the same cores the
    receive needs; that is the cluster's backlog, not the queue's head.
    """
    began = time.monotonic()
    session = queue.buckets.store.session
    while time.monotonic() - began < timeout:
        try:
            running = session.execute("SELECT keyspace_name FROM system_views.sstable_tasks").all()
        except InvalidRequest:  # no such view (Cassandra before 4.0): do not wait
            return 0.0
        if not running:
            break
        progress(f"waiting for {len(running)} compaction(s) to finish")
        time.sleep(1.0)
    return time.monotonic() - began
