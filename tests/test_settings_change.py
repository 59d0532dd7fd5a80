"""``QueueClient.update_queue`` and ``bdq queue update`` against a real node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from spark_queue import (
    ConnectionSettings,
    InvalidSetting,
    MessageTooLarge,
    QueueClient,
    QueueNotFound,
)
from spark_queue.cli import main
from spark_queue.defaults import SETTINGS_REFRESH
from spark_queue.message import Receipt

pytestmark = pytest.mark.cassandra


@pytest.fixture
def clients(keyspace: ConnectionSettings) -> Iterator[tuple[QueueClient, QueueClient]]:
    """Two clients with their own sessions and handles, as two processes would have."""
    with QueueClient(settings=keyspace) as a, QueueClient(settings=keyspace) as b:
        yield a, b


def test_every_handle_picks_up_a_change_within_the_refresh_time(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    a.create_queue("jobs", visibility_timeout=30.0, max_message_bytes=1000)
    theirs = b.queue("jobs")
    assert theirs.settings.visibility_timeout == 30.0

    new = a.update_queue("jobs", visibility_timeout=3.0, max_message_bytes=10)

    assert (new.visibility_timeout, new.max_message_bytes, new.bucket_size) == (3.0, 10, 1000)
    assert a.queue("jobs").settings.visibility_timeout == 3.0  # this client: at once
    time.sleep(SETTINGS_REFRESH + 0.1)
    with pytest.raises(MessageTooLarge, match="max_message_bytes of 10"):
        theirs.send(b"x" * 11)
    theirs.send(b"small")
    before = datetime.now(UTC)
    [delivery] = theirs.receive(1)
    assert delivery.visible_at is not None
    assert 2.0 < (delivery.visible_at - before).total_seconds() < 4.0  # the new 3 s lease


def test_fixed_and_bad_settings_are_refused_and_change_nothing(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, _ = clients
    a.create_queue("jobs", visibility_timeout=30.0)
    with pytest.raises(InvalidSetting, match="bucket_size 5: cannot change after"):
        a.update_queue("jobs", bucket_size=5)
    with pytest.raises(InvalidSetting, match="seal_delay"):
        a.update_queue("jobs", seal_delay=1.0, visibility_timeout=5.0)
    with pytest.raises(InvalidSetting, match="order_hint 0"):
        a.update_queue("jobs", visibility_timeout=5.0, order_hint=0)
    with pytest.raises(InvalidSetting, match="needs dead_letter_queue"):
        a.update_queue("jobs", max_deliveries=3)
    with pytest.raises(QueueNotFound, match="'nowhere'"):
        a.update_queue("jobs", max_deliveries=3, dead_letter_queue="nowhere")
    with pytest.raises(InvalidSetting, match="unknown"):
        a.update_queue("jobs", colour="blue")
    with pytest.raises(QueueNotFound):
        a.update_queue("missing", order_hint=2)
    settings = a.queue("jobs").settings
    assert (settings.visibility_timeout, settings.order_hint, settings.max_deliveries) == (
        30.0,
        1,
        None,
    )


def test_dead_letter_queue_can_be_set_and_cleared(clients: tuple[QueueClient, QueueClient]) -> None:
    a, _ = clients
    a.create_queue("dead")
    a.create_queue("jobs")
    a.update_queue("jobs", max_deliveries=2, dead_letter_queue="dead")
    assert (
        a.queue("jobs").settings.max_deliveries,
        a.queue("jobs").settings.dead_letter_queue,
    ) == (
        2,
        "dead",
    )
    a.update_queue("jobs", max_deliveries=None, dead_letter_queue=None)
    assert a.queue("jobs").settings.dead_letter_queue is None


def test_concurrent_updates_of_different_settings_both_take_effect(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, b = clients
    a.create_queue("jobs")
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def update(client: QueueClient, **change: object) -> None:
        start.wait()
        try:
            client.update_queue("jobs", **change)
        except BaseException as e:  # reported below, with the round
            errors.append(e)

    for round_ in range(1, 6):
        threads = [
            threading.Thread(
                target=update, args=(a,), kwargs={"visibility_timeout": 10.0 + round_}
            ),
            threading.Thread(target=update, args=(b,), kwargs={"order_hint": 1 + round_}),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, f"round {round_}: {errors}"
        settings = QueueClient(store=a._store).queue("jobs").settings
        assert (settings.visibility_timeout, settings.order_hint) == (10.0 + round_, 1 + round_)


def test_a_new_ttl_applies_to_messages_sent_after_it(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    a, _ = clients
    queue = a.create_queue("jobs", message_ttl=3600)
    queue.send(b"before")
    a.update_queue("jobs", message_ttl=60)
    queue.send(b"after")
    lifetimes = {
        d.payload: (Receipt.decode(d.receipt).expires_at_ms / 1000 - d.enqueued_at.timestamp())
        for d in queue.receive(2)
        if d.enqueued_at is not None
    }
    assert lifetimes[b"before"] == pytest.approx(3600, abs=1)
    assert lifetimes[b"after"] == pytest.approx(60, abs=1)


def test_bdq_queue_update(keyspace: ConnectionSettings) -> None:
    connection = ["--hosts", ",".join(map(str, keyspace.hosts)), "--keyspace", keyspace.keyspace]
    runner = CliRunner()
    assert runner.invoke(main, ["queue", "create", "jobs", *connection]).exit_code == 0
    result = runner.invoke(
        main,
        [
            "queue",
            "update",
            "jobs",
            "--visibility-timeout",
            "9",
            "--order-hint",
            "2",
            "--json",
            *connection,
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        json.loads(result.stdout)["visibility_timeout"],
        json.loads(result.stdout)["order_hint"],
    ) == (
        9.0,
        2,
    )
    result = runner.invoke(main, ["queue", "update", "jobs", "--bucket-size", "5", *connection])
    assert result.exit_code == 1
    assert "bucket_size 5: cannot change after a queue is created" in result.stderr
