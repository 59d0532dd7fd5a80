"""Redrive of dead letters (spark_queue.engine.redrive, ``bdq dlq redrive``) against a real node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, QueueClient, SparkQueueError
from spark_queue.cli import main
from spark_queue.engine.dead_letters import HEADER_DELIVERIES, HEADER_ORIGINAL_ID, HEADER_SOURCE
from spark_queue.engine.ownership import ttl_of
from spark_queue.engine.redrive import HEADER_REDRIVES, redriven_headers
from spark_queue.queue import Queue
from tests.helpers import drain_deliveries

# The tests marked ``both_stores`` run on a MemoryStore too (conftest.py's ``client``).
both_stores = pytest.mark.both_stores


def connection(settings: ConnectionSettings) -> list[str]:
    return ["--hosts", ",".join(map(str, settings.hosts)), "--keyspace", settings.keyspace]


def dead_letters(client: QueueClient, count: int) -> Queue:
    """Queue 'orders' whose ``count`` messages went to 'dead' after 1 delivery each."""
    dead = client.create_queue("dead")
    orders = client.create_queue("orders", max_deliveries=1, dead_letter_queue="dead")
    orders.send_batch([b"order %d" % i for i in range(count)], headers={"trace": "t1"})
    assert len(orders.receive(count, visibility_timeout=0.2)) == count
    time.sleep(0.3)
    assert orders.receive(count) == []  # each came back past max_deliveries: moved
    return dead


def drain(queue: Queue) -> list[tuple[bytes, dict[str, str]]]:
    return [(d.payload, dict(d.headers)) for d in drain_deliveries(queue)]


def test_headers_lose_the_dead_letter_ones_and_count_redrives() -> None:
    headers = {HEADER_SOURCE: "a", HEADER_DELIVERIES: "3", HEADER_ORIGINAL_ID: "7", "k": "v"}
    assert redriven_headers(headers) == {"k": "v", HEADER_REDRIVES: "1"}
    assert redriven_headers({HEADER_REDRIVES: "4"}) == {HEADER_REDRIVES: "5"}


@both_stores
def test_redrive_sends_dead_letters_back_to_their_source(client: QueueClient) -> None:
    dead = dead_letters(client, 5)
    assert dead.stats().visible == 5

    result = dead.redrive()

    assert (result.moved, dict(result.by_target), dict(result.left)) == (5, {"orders": 5}, {})
    back = drain(client.queue("orders"))
    assert sorted(p for p, _ in back) == [b"order %d" % i for i in range(5)]
    assert {json.dumps(h, sort_keys=True) for _, h in back} == {
        json.dumps({"trace": "t1", HEADER_REDRIVES: "1"}, sort_keys=True)
    }
    assert dead.stats().total == 0


@both_stores
def test_messages_without_a_source_stay_unless_sent_somewhere(client: QueueClient) -> None:
    dead = client.create_queue("dead")
    client.create_queue("feeds-dead", max_deliveries=3, dead_letter_queue="dead")
    other = client.create_queue("other")
    dead.send_batch([b"no source", b"gone source"], headers=[{}, {HEADER_SOURCE: "deleted"}])

    left = dead.redrive(visibility_timeout=1.0)
    assert left.moved == 0
    assert dict(left.left) == {"no source header (use --to)": 1, "queue 'deleted' missing": 1}

    # no wait for the first run's lease: what it left shows again as soon as it ends
    moved = dead.redrive(to="other", max_messages=1)
    assert moved.moved == 1
    moved = dead.redrive(to="other")
    assert moved.moved == 1
    assert sorted(p for p, _ in drain(other)) == [b"gone source", b"no source"]


@both_stores
def test_a_run_that_dies_between_sends_and_ack_sends_nothing_twice(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = dead_letters(client, 20)

    # Given a run that dies after its sends returned but before the dead letters were acked
    def die(*args: object, **kwargs: object) -> list[str]:
        raise SparkQueueError("killed")

    monkeypatch.setattr(dead, "ack_batch", die)
    with pytest.raises(SparkQueueError, match="killed"):
        dead.redrive(max_messages=8, visibility_timeout=1.0)
    monkeypatch.undo()
    time.sleep(1.1)  # the dead run's leases end: its messages show again

    # When the redrive runs again
    result = dead.redrive()

    # Then every message reached the source exactly once
    assert result.moved == 20
    back = Counter(p for p, _ in drain(client.queue("orders")))
    assert back == Counter({b"order %d" % i: 1 for i in range(20)})


@pytest.mark.cassandra
def test_bdq_dlq_redrive_killed_midway_and_run_again_moves_each_once(
    keyspace: ConnectionSettings, client: QueueClient
) -> None:
    # Given 120 dead letters, moved by the CLI at 40 a second
    dead = client.create_queue("dead")
    orders = client.create_queue("orders", max_deliveries=3, dead_letter_queue="dead")
    dead.send_batch(
        [b"m%03d" % i for i in range(120)],
        headers=[{HEADER_SOURCE: "orders", HEADER_ORIGINAL_ID: str(i)} for i in range(120)],
    )
    bdq = str(Path(sys.executable).with_name("bdq"))
    args = [bdq, "dlq", "redrive", "dead", "--rate", "40", "--visibility-timeout", "2"]
    args += connection(keyspace)

    # When the first run is killed (SIGKILL: no clean-up) after about a second
    first = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while orders.stats().visible < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    moved_before = orders.stats().visible
    assert 0 < moved_before < 120, "the first run must be killed midway"
    time.sleep(ttl_of(2.0) + 0.2)  # its leases end, and its lanes (ownership.py's bound)

    # And run again to the end
    again = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=120)

    # Then the source got each message exactly once, and the dead-letter queue is empty
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["moved"] >= 120 - moved_before
    back = Counter(p for p, _ in drain(orders))
    assert back == Counter({b"m%03d" % i: 1 for i in range(120)})
    assert dead.stats().total == 0


@pytest.mark.cassandra
def test_bdq_peek_of_a_dead_letter_queue_says_why(
    keyspace: ConnectionSettings, client: QueueClient
) -> None:
    dead_letters(client, 1)
    result = CliRunner().invoke(main, ["peek", "dead", "--json", *connection(keyspace)])
    assert result.exit_code == 0, result.output
    [message] = json.loads(result.stdout)
    assert message["dead_letter_reason"] == (
        "delivered 1 times from 'orders' without an ack (was message 0)"
    )
    result = CliRunner().invoke(main, ["peek", "dead", *connection(keyspace)])
    assert result.exit_code == 0 and "order 0" in result.stdout
