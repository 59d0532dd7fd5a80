"""A handle's receiver follows the queue's settings as they change (real node).

The read-ahead of a lane's scan is bounded in bytes at the queue's largest
message size; after ``update_queue(max_message_bytes=...)`` the bound must
follow the new size, not the one the handle was built with.
"""

from __future__ import annotations

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.engine import receiving

pytestmark = pytest.mark.cassandra


def test_the_read_ahead_bound_follows_a_changed_max_message_bytes(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    scan_limit = receiving.scan_limit

    def recorded(want: int, max_message_bytes: int) -> int:
        sizes.append(max_message_bytes)
        return scan_limit(want, max_message_bytes)

    monkeypatch.setattr(receiving, "scan_limit", recorded)
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("sizes", max_message_bytes=4096)
        queue.send_batch([b"a", b"b"], key="k")  # keyed: lanes read ahead, shares do not
        assert queue.receive(1)
        assert set(sizes) == {4096}

        client.update_queue("sizes", max_message_bytes=65536)  # this process: at once
        sizes.clear()
        assert queue.receive(1)

        assert set(sizes) == {65536}
