"""A query that stops frees its buckets at once (spark_queue.spark.stopping).

pyspark ends the source's process with a SIGTERM when the query stops; the
reader's ``stop`` must still run, or the buckets the query owns stay owned
for a whole ownership period and another query waits that long for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.engine.ownership import Ownership
from tests.test_spark_source import stream, to_memory, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.cassandra]


def test_a_stopped_query_frees_the_bucket_its_last_step_held(
    spark: SparkSession, keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("held", bucket_size=100)
        queue.send_batch([f"a{i}" for i in range(5)])
        owners = Ownership(queue.buckets.store, queue.queue_id)
        # An hour-long trigger: the first step runs at once and is never committed
        # (Spark commits a step while planning the next), so it holds bucket 0,
        # owned for 120 s and renewed, until the query stops.
        df = stream(spark, keyspace, "held", visibilityTimeout="120s")
        query, table = to_memory(df, tmp_path / "a", available_now=False, interval="1 hour")
        try:
            wait_for(lambda: spark.table(table).count() == 5, 120, "the first step's 5 rows")
            assert owners.owners([(0, 0)])
        finally:
            query.stop()
        wait_for(lambda: not owners.owners([(0, 0)]), 30, "bucket 0 freed by the stop")
        assert queue.stats().in_flight == 5  # never committed: back after their timeout

        # Another query (a checkpoint of its own) reads the bucket's new messages now.
        queue.send_batch([f"b{i}" for i in range(3)])
        query, table = to_memory(stream(spark, keyspace, "held"), tmp_path / "b")
        query.awaitTermination(120)
        assert sorted(r.payload for r in spark.table(table).collect()) == [b"b0", b"b1", b"b2"]
