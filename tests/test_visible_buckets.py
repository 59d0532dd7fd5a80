"""Which buckets hold visible messages: what the Spark source plans from (real Cassandra)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from spark_queue import ConnectionSettings, QueueClient

pytestmark = pytest.mark.cassandra


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def test_buckets_in_flight_are_skipped_until_their_first_lease_ends(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle buckets are rechecked only after 30 s here, so a bucket seen again
    # sooner was skipped until its first lease ended, as it should be.
    monkeypatch.setattr("spark_queue.engine.bounds.IDLE_RECHECK", 30.0)
    queue = client.create_queue("planned", bucket_size=5)
    queue.send_batch([str(i) for i in range(26)])  # buckets 0-4 full, one message in 5
    leased = queue.receive(10, buckets=[0, 1], visibility_timeout=1.5)
    done = queue.receive(5, buckets=[2])
    queue.ack_batch([d.receipt for d in done])
    assert {d.bucket for d in leased} == {0, 1} and len(leased) == 10

    assert queue.visible_buckets(10) == [3, 4, 5]
    assert queue.visible_buckets(2) == [3, 4]  # oldest first, at most max_buckets
    assert queue.visible_buckets(10, below=20) == [3]

    time.sleep(2.0)  # the leases of buckets 0 and 1 ran out
    assert queue.visible_buckets(10) == [0, 1, 3, 4, 5]  # bucket 2, all acked, stays out
