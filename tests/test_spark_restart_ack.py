"""A query killed while its source acked a step: the restarted query acks that step.

Spark acks batch N (``commit``) right after it wrote ``offsets/N+1``. A crash
in between leaves batch N+1 to replay and Spark, on restart, replays it without
calling ``commit`` for N again, so the restarted reader must ack N itself: else
N's messages stay leased until their timeout and are then delivered again (the
random-kill relay found 3000 duplicates and 1500 messages left that way).
With nothing new after a step, the reader acks it when Spark asks what
follows, instead of planning an empty step for Spark to commit it.
The reader's calls are made here as Spark makes them (real Cassandra, no job).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.queue import Queue
from spark_queue.spark.options import SourceOptions, connector_options
from spark_queue.spark.sharing import BucketSharing
from spark_queue.spark.source import IDLE_POLL, BdqStreamReader

pytestmark = [pytest.mark.cassandra]


@pytest.fixture
def relay(keyspace: ConnectionSettings) -> Iterator[tuple[Queue, SourceOptions]]:
    """Queue ``relay`` holding 40 messages in buckets of 10, and a source's options on it."""
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("relay", bucket_size=10)
        queue.send_batch([f"m{i}".encode() for i in range(40)])
        yield (
            queue,
            SourceOptions.parse(
                {**connector_options(keyspace), "queue": "relay", "visibilityTimeout": "600s"}
            ),
        )


def run_batch(reader: BdqStreamReader, start: dict[str, Any], end: dict[str, Any]) -> int:
    """Read every partition of a batch as the executors would; the rows read."""
    return sum(
        batch.num_rows for part in reader.partitions(start, end) for batch in reader.read(part)
    )


def test_a_restarted_reader_acks_the_step_whose_ack_a_crash_cut_off(
    relay: tuple[Queue, SourceOptions],
) -> None:
    queue, options = relay
    # Given a query that read step 1, committed it in its sink, planned step 2
    # and died before its source acked step 1
    first = BdqStreamReader(options)
    try:
        start = first.initialOffset()
        one = first.latestOffset(start, ReadMaxRows(20))
        assert run_batch(first, start, one) == 20
        two = first.latestOffset(one, ReadMaxRows(20))
    finally:
        first.stop()

    # When the restarted query replays step 2 and commits it, as Spark does
    second = BdqStreamReader(options)
    try:
        assert run_batch(second, one, two) == 20
        second.commit(two)
    finally:
        second.stop()

    # Then both steps are acked: nothing is left leased to come back later
    assert queue.stats(exact=True).total == 0


def test_a_restarted_reader_owns_again_the_buckets_its_dead_driver_took(
    relay: tuple[Queue, SourceOptions],
) -> None:
    queue, options = relay
    # Given a driver that took buckets 0 and 1 while planning a batch and died
    # before Spark logged it (its ownership lasts 600 s: nothing releases it)
    start = BdqStreamReader(options).initialOffset()
    dead = BucketSharing("bdq")
    dead.name_after(start["stream"])
    assert dead.take(queue, [0, 1], 600) == {0, 1}

    # When the restarted query plans from the same checkpointed offset
    restarted = BdqStreamReader(options)
    try:
        end = restarted.latestOffset(start, ReadMaxRows(20))
    finally:
        restarted.stop()

    # Then it plans them again instead of leaving them out until the period ends
    assert end["buckets"] == [0, 1]


def test_with_nothing_new_the_reader_acks_the_last_step_without_an_empty_step(
    relay: tuple[Queue, SourceOptions],
) -> None:
    queue, options = relay
    reader = BdqStreamReader(options)
    try:
        # Given a step read and committed in the sink
        start = reader.initialOffset()
        one = reader.latestOffset(start, ReadMaxRows(40))
        assert run_batch(reader, start, one) == 40
        assert queue.stats().in_flight == 40

        # When Spark, having committed it, asks what follows and nothing does
        after = reader.latestOffset(one, ReadMaxRows(40))

        # Then the answer is the same offset (Spark runs no batch) and the step is acked
        assert after == one
        assert queue.stats().total == 0

        # And a message sent later is the next step, from that offset
        queue.send_batch([b"late"])
        time.sleep(2 * IDLE_POLL)  # past the reuse of the idle answer
        two = reader.latestOffset(one, ReadMaxRows(40))
        assert two["step"] == one["step"] + 1
        assert run_batch(reader, one, two) == 1
    finally:
        reader.stop()
