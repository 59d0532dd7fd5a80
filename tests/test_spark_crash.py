"""Exactly-once through driver crashes: a relay A -> B killed with SIGKILL and restarted.

The relay (spark_queue/bench/faults_relay.py, by path tests/apps/relay.py) runs
as its own process group: the Python driver, its JVM and the Python workers.
Killing the group is a driver crash at the worst moment. Spark's checkpoint
says where we are: ``offsets/N`` is written before batch N runs, ``commits/N``
after the sink committed it, and the source commits (acks) batch N only while
planning N+1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spark_queue import ConnectionSettings, QueueClient

pytestmark = [pytest.mark.spark, pytest.mark.cassandra, pytest.mark.slow]

RELAY = Path(__file__).parent / "apps" / "relay.py"
MESSAGES = 600


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / kind
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def running_batch(checkpoint: Path) -> bool:
    """A batch is planned (offsets/N) and its sink has not committed (no commits/N)."""
    return bool(batches(checkpoint, "offsets") - batches(checkpoint, "commits"))


def committed_not_acked(checkpoint: Path) -> bool:
    """The sink committed batch N but N+1 is not planned yet, so the source has not acked N."""
    commits, offsets = batches(checkpoint, "commits"), batches(checkpoint, "offsets")
    return bool(commits) and max(commits) == max(offsets)


class Relay:
    def __init__(self, settings: ConnectionSettings, checkpoint: Path, log: Path) -> None:
        self.command = [
            sys.executable, str(RELAY),
            "--hosts", ",".join(str(h) for h in settings.hosts),
            "--keyspace", settings.keyspace,
            "--source", "a", "--target", "b",
            "--checkpoint", str(checkpoint),
            "--writer-id", "relay-under-test",
            "--max-per-trigger", "100", "--trigger-seconds", "3", "--row-delay-ms", "5",
        ]  # fmt: skip
        self.checkpoint = checkpoint
        self.log = log

    def run_until(
        self, condition: Callable[[], bool], *, settle: float = 0.0, timeout: float = 240
    ) -> None:
        """Start the relay, wait for ``condition``, then SIGKILL its whole process group."""
        with open(self.log, "a") as out:
            process = subprocess.Popen(self.command, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + timeout
        try:
            while not condition():
                assert process.poll() is None, f"relay exited early, see {self.log}"
                assert time.monotonic() < deadline, f"condition not reached in {timeout}s"
                time.sleep(0.05)
            time.sleep(settle)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)

    def drain(self, timeout: float = 300) -> None:
        with open(self.log, "a") as out:
            result = subprocess.run(
                [*self.command, "--available-now"],
                stdout=out,
                stderr=out,
                timeout=timeout,
                check=False,
            )
        assert result.returncode == 0, f"the final relay run failed, see {self.log}"


def test_relay_killed_at_several_points_delivers_each_message_exactly_once(
    keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    # Given 600 messages in A and a relay A -> B with a writer identity
    a = client.create_queue("a", bucket_size=100)
    client.create_queue("b")
    sent = a.send_batch([f"m{i}" for i in range(MESSAGES)])
    checkpoint = tmp_path / "checkpoint"
    relay = Relay(keyspace, checkpoint, tmp_path / "relay.log")

    # When its driver is killed during a batch (first run: before any commit)
    relay.run_until(lambda: running_batch(checkpoint), settle=0.3)
    # and after a sink commit, before the source acked that batch
    relay.run_until(
        lambda: committed_not_acked(checkpoint) and len(batches(checkpoint, "commits")) >= 2
    )
    # and during a batch again, after a restart that replayed one
    progress = len(batches(checkpoint, "commits"))
    relay.run_until(
        lambda: running_batch(checkpoint) and len(batches(checkpoint, "commits")) > progress,
        settle=0.3,
    )
    # and it finally runs to the end
    relay.drain()

    # Then B holds every message of A exactly once, and A is empty
    b = client.queue("b")
    source_ids: Counter[int] = Counter()
    while deliveries := b.receive(200):
        source_ids.update(int(d.headers["source-id"]) for d in deliveries)
        b.ack_batch([d.receipt for d in deliveries])
    assert set(source_ids) == set(sent)
    assert [i for i, n in source_ids.items() if n > 1] == []
    assert a.stats(exact=True).total == 0
