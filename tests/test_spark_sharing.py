"""Two stream readers on one queue split its buckets through ownership (real Cassandra, no job).

The Spark test of the same (two queries, duplicates counted) is
``test_two_queries_on_one_queue_lose_nothing_and_duplicate_at_most_one_percent``.
"""

from __future__ import annotations

import time

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.engine.ownership import Ownership
from spark_queue.spark.options import SourceOptions, connector_options
from spark_queue.spark.sharing import BucketSharing
from spark_queue.spark.source import BdqStreamReader

pytestmark = [pytest.mark.cassandra]


def test_readers_plan_disjoint_buckets_and_free_them_when_acked_or_stopped(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("shared", bucket_size=10).send_batch([b"x"] * 40)
        options = SourceOptions.parse({**connector_options(keyspace), "queue": "shared"})
        first, second = BdqStreamReader(options), BdqStreamReader(options)
        try:
            start_a, start_b = first.initialOffset(), second.initialOffset()
            end_a = first.latestOffset(start_a, ReadMaxRows(20))
            end_b = second.latestOffset(start_b, ReadMaxRows(20))
            assert end_a["buckets"] == [0, 1]
            assert end_b["buckets"] == [2, 3]  # the first query owns 0 and 1

            first.commit(end_a)  # acked (nothing was read): its buckets are free again
            time.sleep(0.2)  # past the second reader's idle answer
            assert second.latestOffset(end_b, ReadMaxRows(20))["buckets"] == [0, 1]
        finally:
            first.stop()
            second.stop()


def test_a_bucket_kept_between_steps_is_owned_without_another_round_trip(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("kept", bucket_size=10)
        queue.send_batch([b"x"] * 15)
        mine, other = BucketSharing("a"), BucketSharing("b")

        assert mine.take(queue, [0, 1], 60) == {0, 1}
        mine.hold(1, [("kept", 0), ("kept", 1)])
        assert mine.take(queue, [0, 1], 60) == {0, 1}  # the next step plans them again
        assert mine.takes == 1
        assert other.take(queue, [0, 1], 60) == set()

        # a renewal answering after the release must not make the bucket ours again
        grant_until = time.monotonic() + 60
        mine.done(1, client.queue)
        mine._note("kept", [0, 1], {0, 1}, grant_until, renewal=True)
        assert other.take(queue, [0, 1], 60) == {0, 1}
        assert mine.take(queue, [0, 1], 60) == set()  # asked Cassandra again, and refused
        assert mine.takes == 2
        other.release_all(client.queue)
        mine.release_all(client.queue)


def test_a_bucket_released_unplanned_is_not_granted_again_from_memory(
    keyspace: ConnectionSettings,
) -> None:
    # Given a query that took bucket 0 for a plan, then left it out (maxBytesPerTrigger)
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("released", bucket_size=10)
        queue.send_batch([b"x"] * 5)
        first, second = BucketSharing("first"), BucketSharing("second")
        assert first.take(queue, [0], 30.0) == {0}
        first.release([("released", 0)], client.queue)

        # When another query takes it meanwhile
        assert second.take(queue, [0], 30.0) == {0}

        # Then the first is refused it: it no longer trusts its memory of the grant
        assert first.take(queue, [0], 30.0) == set()
        second.release_all(client.queue)


def test_a_replayed_step_owns_its_buckets_again_before_its_parts_read(
    keyspace: ConnectionSettings,
) -> None:
    # Given a step planned by a run that stopped (and so released its buckets)
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("replayed", bucket_size=10)
        queue.send_batch([b"x"] * 15)
        options = SourceOptions.parse({**connector_options(keyspace), "queue": "replayed"})
        first = BdqStreamReader(options)
        start = first.initialOffset()
        end = first.latestOffset(start, ReadMaxRows(20))
        first.stop()
        ownership = Ownership(queue.buckets.store, queue.queue_id)
        keys = [(bucket, 0) for bucket in end["buckets"]]
        assert ownership.owners(keys) == {}

        # When a restarted run replays it
        second = BdqStreamReader(options)
        try:
            assert second.partitions(start, end)

            # Then it owns the step's buckets before any part reads them
            owner = second._sharing.owner
            assert ownership.owners(keys) == {key: owner for key in keys}
        finally:
            second.stop()
