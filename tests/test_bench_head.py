"""``bdq bench head`` on a real node: structure of its result, not its timings."""

from __future__ import annotations

import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.bench.head_bench import run_head_bench

pytestmark = pytest.mark.cassandra


def test_head_bench_moves_everything_and_reads_no_tombstone(keyspace: ConnectionSettings) -> None:
    result = run_head_bench(keyspace, messages=3000, batch=500, bucket_size=500, samples=3)

    assert result.moved == 3000 and result.move_seconds > 0
    assert result.head_bucket >= 6  # every full bucket sealed and dropped
    for cost in (result.before, result.after):
        # the head bucket and, when the newest id lies past it, the next one
        assert 1 <= cost.buckets_scanned <= 2
        assert cost.tombstones == 0
        assert 1 <= cost.live_rows <= 2 * 500  # at most those buckets' rows
    with QueueClient(settings=keyspace) as client:
        assert client.list_queues() == []  # the benchmark removed its queue
