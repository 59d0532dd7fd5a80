"""Reject (Queue.reject, bdq reject): a received message to the dead-letter queue at once.

Kafka share groups' REJECT: the message leaves its queue now, not after
``max_deliveries`` receives, and reaches the dead-letter queue once. The
``both_stores`` tests run on a MemoryStore and on the real node; the CLI's on
the node.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, InvalidSetting, QueueClient, StaleReceipt
from spark_queue.cli import main
from spark_queue.engine.dead_letters import (
    HEADER_DELIVERIES,
    HEADER_ORIGINAL_ID,
    HEADER_REJECT_REASON,
    HEADER_SOURCE,
)
from spark_queue.queue import Queue

both_stores = pytest.mark.both_stores


def queues(client: QueueClient, timeout: float = 30.0) -> tuple[Queue, Queue]:
    dead = client.create_queue("rejected")
    source = client.create_queue(
        "work", visibility_timeout=timeout, max_deliveries=5, dead_letter_queue="rejected"
    )
    return source, dead


@both_stores
def test_a_rejected_message_moves_to_the_dead_letter_queue_at_once(client: QueueClient) -> None:
    source, dead = queues(client)
    (mid,) = source.send_batch([b"poison"], headers={"k": "v"})
    (delivery,) = source.receive(1)

    moved = source.reject(delivery.receipt, "cannot parse")

    # Then it left its queue (nothing to receive, nothing counted) ...
    assert source.stats(exact=True).total == 0
    # ... and is in the dead-letter queue once, with where it came from and why
    (letter,) = dead.receive(10)
    assert letter.id == moved and letter.payload == b"poison"
    assert letter.headers == {
        "k": "v",
        HEADER_SOURCE: "work",
        HEADER_DELIVERIES: "1",
        HEADER_ORIGINAL_ID: str(mid),
        HEADER_REJECT_REASON: "cannot parse",
    }
    # And the receipt is spent: a second reject or an ack changes nothing
    with pytest.raises(StaleReceipt):
        source.reject(delivery.receipt)
    with pytest.raises(StaleReceipt):
        source.ack(delivery.receipt)
    assert dead.stats(exact=True).total == 1


@both_stores
def test_a_stale_or_expired_receipt_moves_nothing(client: QueueClient) -> None:
    source, dead = queues(client, timeout=0.3)
    source.send(b"m")
    (first,) = source.receive(1)
    time.sleep(0.5)

    # Its lease ran out: the message is visible again, and may be someone else's
    with pytest.raises(StaleReceipt):
        source.reject(first.receipt)
    # Received again: the first receipt names an older delivery
    (second,) = source.receive(1, wait=2.0)
    with pytest.raises(StaleReceipt):
        source.reject(first.receipt)

    assert dead.stats(exact=True).total == 0
    source.ack(second.receipt)  # the current delivery is untouched


@both_stores
def test_bad_input_changes_nothing(client: QueueClient) -> None:
    plain = client.create_queue("no-dlq", visibility_timeout=30)
    plain.send(b"m")
    (delivery,) = plain.receive(1)
    with pytest.raises(InvalidSetting, match="queue 'no-dlq' has no dead_letter_queue"):
        plain.reject(delivery.receipt)

    source, dead = queues(client)
    source.send(b"n")
    (other,) = source.receive(1)
    with pytest.raises(InvalidSetting, match=r"reason 'xxxx.*at most 1000 characters"):
        source.reject(other.receipt, "x" * 1001)

    # Neither receipt was spent: both still ack
    plain.ack(delivery.receipt)
    source.ack(other.receipt)
    assert dead.stats(exact=True).total == 0


@pytest.mark.cassandra
def test_bdq_reject(keyspace: ConnectionSettings) -> None:
    connection = [
        "--hosts",
        ",".join(str(h) for h in keyspace.hosts),
        "--keyspace",
        keyspace.keyspace,
    ]
    with QueueClient(settings=keyspace) as client:
        queues(client)
        client.queue("work").send(b"poison")
    runner = CliRunner()
    out = runner.invoke(main, ["receive", "work", "-n", "1", "--json", *connection])
    (received,) = json.loads(out.stdout)

    done = runner.invoke(
        main, ["reject", "work", received["receipt"], "--reason", "bad", "--json", *connection]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["dead_letter_queue"] == "rejected"

    shown = runner.invoke(main, ["peek", "rejected", *connection], env={"COLUMNS": "200"})
    assert "rejected from 'work': bad" in shown.stdout

    again = runner.invoke(main, ["reject", "work", received["receipt"], *connection])
    assert again.exit_code == 1 and "no longer names the current delivery" in again.stderr
    with QueueClient(settings=keyspace) as client:
        (letter,) = client.queue("rejected").peek(10)
        assert letter.headers[HEADER_REJECT_REASON] == "bad"
        client.delete_queue("work")
        client.delete_queue("rejected")
