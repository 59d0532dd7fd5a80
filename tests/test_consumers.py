"""Competing consumers on a real node: each message goes to one of them, nothing is lost.

Consumers here are independent (their own client, as separate processes or
machines would be), not threads sharing one handle, which never race anyway.
A duplicate is a delivery beyond a message's first; each test counts them
and bounds them, and checks every message was acked exactly once. The thread
test runs on a MemoryStore too (``both_stores``, conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.engine.lanes import lane_of
from spark_queue.engine.ownership import ttl_of

if TYPE_CHECKING:
    from tests.conftest import Backend


CONSUMER = Path(__file__).parent / "apps" / "consumer.py"
MESSAGES = 600


def fill(client: QueueClient, name: str, **settings: object) -> set[int]:
    """600 messages of 8 keys: one per lane of the queue's 8, so consumers can share them."""
    queue = client.create_queue(name, bucket_size=100, order_hint=1, lanes=8, **settings)  # type: ignore[arg-type]
    keys = [str(lane) for lane in range(8)]
    assert sorted(lane_of(k, 8) for k in keys) == list(range(8))
    return set(
        queue.send_batch(
            [str(i).encode() for i in range(MESSAGES)], key=[keys[i % 8] for i in range(MESSAGES)]
        )
    )


def check(deliveries: Counter[int], acked: Counter[int], ids: set[int]) -> int:
    """Every message acked exactly once; return the duplicate deliveries."""
    assert set(acked) == ids, f"lost: {sorted(ids - set(acked))[:10]}"
    assert max(acked.values()) == 1
    return sum(deliveries.values()) - len(deliveries)


@pytest.mark.both_stores
@pytest.mark.parametrize("consumers", [2, 3])
def test_competing_consumer_threads_split_the_work(
    backend: Backend, client: QueueClient, consumers: int
) -> None:
    # Given 600 messages and independent consumers starting at the same instant, K = 1
    ids = fill(client, f"threads-{consumers}", visibility_timeout=60)
    deliveries: Counter[int] = Counter()
    acked: Counter[int] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(consumers)

    def consume() -> None:
        with backend.client() as own:
            queue = own.queue(f"threads-{consumers}")
            start.wait()
            while got := queue.receive(10):
                stale = set(queue.ack_batch([d.receipt for d in got], strict=False))
                with lock:
                    deliveries.update(d.id for d in got)
                    acked.update(d.id for d in got if d.receipt not in stale)

    threads = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)

    # Then each message was acked once, and racing cost next to no duplicate
    duplicates = check(deliveries, acked, ids)
    assert duplicates <= MESSAGES // 100


def _consumer(settings: ConnectionSettings, queue: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(CONSUMER),
        "--hosts",
        ",".join(str(h) for h in settings.hosts),
        "--keyspace",
        settings.keyspace,
        "--queue",
        queue,
        *extra,
    ]


@pytest.mark.cassandra
@pytest.mark.parametrize("consumers", [2, 3])
def test_competing_consumer_processes_split_the_work(
    keyspace: ConnectionSettings, client: QueueClient, consumers: int
) -> None:
    ids = fill(client, f"procs-{consumers}", visibility_timeout=60)
    start_at = f"{time.time() + 4.0:.3f}"  # after every interpreter has connected
    processes = [
        subprocess.Popen(
            _consumer(keyspace, f"procs-{consumers}", "--start-at", start_at),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(consumers)
    ]
    outputs = [p.communicate(timeout=180)[0] for p in processes]

    assert [p.returncode for p in processes] == [0] * consumers
    deliveries: Counter[int] = Counter()
    acked: Counter[int] = Counter()
    for output in outputs:
        for line in output.splitlines():
            message_id, outcome = line.split()
            deliveries[int(message_id)] += 1
            acked[int(message_id)] += outcome == "acked"
    duplicates = check(deliveries, +acked, ids)
    assert duplicates <= MESSAGES // 100
    assert all(o.strip() for o in outputs)  # every process took a share


@pytest.mark.cassandra
def test_consumer_killed_while_holding_messages_loses_nothing(
    keyspace: ConnectionSettings, client: QueueClient
) -> None:
    # Given a consumer process owning lanes for 3 s periods and holding 50 messages
    # under a 3 s visibility timeout
    visibility, period = 3.0, 3.0
    ids = fill(client, "killed", visibility_timeout=visibility)
    holder = subprocess.Popen(
        _consumer(keyspace, "killed", "--hold", "50", "--lane-period", str(period)),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert holder.stdout is not None
    held = []
    for line in holder.stdout:
        if line.startswith("held "):
            held.append(int(line.split()[1]))
        elif line.strip() == "holding":
            break
    assert len(held) == 50

    # When it is SIGKILLed and another consumer drains the queue
    os.killpg(holder.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    holder.wait(timeout=30)
    holder.stdout.close()
    queue = client.queue("killed")
    acked: Counter[int] = Counter()
    taken_over_at: dict[int, float] = {}
    deadline = killed_at + visibility + 30
    while set(acked) != ids and time.monotonic() < deadline:
        got = queue.receive(50)
        if not got:
            time.sleep(0.1)
            continue
        for d in got:
            taken_over_at.setdefault(d.id, time.monotonic() - killed_at)
        stale = set(queue.ack_batch([d.receipt for d in got], strict=False))
        acked.update(d.id for d in got if d.receipt not in stale)

    # Then every message, the killed consumer's too, was acked once, and its
    # messages came back once both its leases and its lanes ran out (the lane's
    # bound is ceil(period) + 1, ownership.py), plus slack for this busy machine
    assert set(acked) == ids
    assert max(acked.values()) == 1
    takeover = max(taken_over_at[i] for i in held)
    assert takeover <= max(visibility, ttl_of(period)) + 5.0
