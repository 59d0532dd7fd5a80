"""What a redrive refuses or leaves behind: a queue that is no dead-letter queue, a message
its target no longer takes (real node).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from spark_queue import ConnectionSettings, InvalidSetting, QueueClient

pytestmark = pytest.mark.cassandra


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def test_a_queue_no_queue_names_as_its_dead_letter_queue_is_refused_before_any_lease(
    client: QueueClient,
) -> None:
    plain = client.create_queue("plain")
    plain.send_batch([b"a", b"b", b"c"])

    with pytest.raises(InvalidSetting, match="queue 'plain': is not a dead-letter queue"):
        plain.redrive(max_messages=1)

    stats = plain.stats(exact=True)
    assert (stats.visible, stats.in_flight) == (3, 0)  # nothing leased, nothing moved
    # given a target, the move is explicit, and allowed
    client.create_queue("elsewhere")
    assert plain.redrive(to="elsewhere").moved == 3


def test_a_dead_letter_its_target_refuses_is_left_visible_and_reported_and_blocks_nothing(
    client: QueueClient,
) -> None:
    dead = client.create_queue("dead")
    orders = client.create_queue("orders", max_deliveries=1, dead_letter_queue="dead")
    orders.send_batch([b"small", b"x" * 2000, b"tiny"])
    assert len(orders.receive(3, visibility_timeout=0.2)) == 3
    time.sleep(0.3)
    assert orders.receive(3) == []  # all three moved to 'dead'
    client.update_queue("orders", max_message_bytes=1024)  # the large one no longer fits

    first = dead.redrive(visibility_timeout=60)

    assert first.moved == 2
    ((left_id, why),) = first.left_messages.items()
    assert "refused by queue 'orders'" in why and "max_message_bytes" in why
    assert dict(first.left) == {"refused by queue 'orders'": 1}
    # left visible at once, not a 60 s lease later, and a second run is not blocked by it
    (shown,) = dead.receive(10, visibility_timeout=0.1)
    assert (shown.id, len(shown.payload)) == (left_id, 2000)
    time.sleep(0.2)
    again = dead.redrive()
    assert (again.moved, list(again.left_messages)) == (0, [left_id])
    assert sorted(d.payload for d in orders.receive(10)) == [b"small", b"tiny"]
