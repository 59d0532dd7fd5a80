"""The connector's per-process queue handles: reused briefly, looked up again after that."""

from __future__ import annotations

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.errors import QueueNotFound
from spark_queue.spark import source

pytestmark = pytest.mark.cassandra


def test_a_handle_is_reused_until_the_refresh_then_a_recreated_queue_is_seen(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source, "QUEUE_REFRESH", 0.0)  # look up again at every call
    with QueueClient(settings=keyspace) as client:
        client.create_queue("handles")
        first = source.open_queue(keyspace, "handles")
        client.delete_queue("handles")
        with pytest.raises(QueueNotFound, match="handles"):
            source.open_queue(keyspace, "handles")
        recreated = client.create_queue("handles")
        assert source.open_queue(keyspace, "handles").queue_id == recreated.queue_id

        monkeypatch.setattr(source, "QUEUE_REFRESH", 3600.0)
        kept = source.open_queue(keyspace, "handles")
        client.delete_queue("handles")
        assert source.open_queue(keyspace, "handles") is kept  # within the refresh: no read
        assert first.queue_id != kept.queue_id
