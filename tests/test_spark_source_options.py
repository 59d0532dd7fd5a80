"""The source options a Kafka user looks for, on a real SparkSession against real Cassandra.

Several queues (a list, a pattern), minMessagesPerTrigger with maxTriggerDelay,
failOnDataLoss, and restarts from checkpoints written in the one-queue offset format.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.spark.options import connector_options
from tests.test_spark_source import to_memory, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.cassandra]


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def source(spark: SparkSession, settings: ConnectionSettings, **options: str) -> DataFrame:
    return (
        spark.readStream.format("bdq")
        .options(**connector_options(settings))
        .options(**options)
        .load()
    )


def run_batches(df: DataFrame, checkpoint: Path, handle: Callable[[DataFrame, int], None]) -> None:
    """Run ``df`` through ``handle`` until what is visible is drained (availableNow)."""
    query = (
        df.writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
    finally:
        query.stop()


def test_a_list_of_queues_reads_each_with_its_own_leases_and_acks(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    a = client.create_queue("la", bucket_size=10)
    b = client.create_queue("lb", bucket_size=50)
    client.create_queue("lc").send_batch([b"not read"])
    sent = {("la", i) for i in a.send_batch([f"a{i}" for i in range(30)])}
    sent |= {("lb", i) for i in b.send_batch([f"b{i}" for i in range(20)])}

    query, table = to_memory(source(spark, keyspace, queue="la,lb"), tmp_path / "ck")
    query.awaitTermination(180)

    rows = spark.table(table).select("queue", "id", "delivery_count").collect()
    assert Counter((r.queue, r.id) for r in rows) == Counter(sent)  # each once, told apart
    assert {r.delivery_count for r in rows} == {1}
    assert (a.stats().total, b.stats().total, client.queue("lc").stats().total) == (0, 0, 1)


def test_a_pattern_picks_up_queues_created_while_the_query_runs(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    client.create_queue("p1").send_batch([f"x{i}" for i in range(10)])
    client.create_queue("other").send_batch([b"not read"])
    df = source(spark, keyspace, queuePattern="p[0-9]+")
    query, table = to_memory(df, tmp_path / "ck", available_now=False)
    try:
        wait_for(lambda: spark.table(table).count() == 10, 120, "p1's 10 rows")
        client.create_queue("p2").send_batch([f"y{i}" for i in range(7)])
        wait_for(lambda: spark.table(table).count() == 17, 120, "p2's 7 rows as well")
    finally:
        query.stop()

    rows = spark.table(table).select("queue").collect()
    assert Counter(r.queue for r in rows) == {"p1": 10, "p2": 7}
    assert client.queue("other").stats().total == 1


def test_min_messages_per_trigger_waits_for_a_full_batch_unless_the_delay_passed(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("few", bucket_size=100)
    queue.send_batch([f"f{i}" for i in range(10)])
    df = source(spark, keyspace, queue="few", minMessagesPerTrigger="20", maxTriggerDelay="1h")
    query, table = to_memory(df, tmp_path / "a", available_now=False, interval="0.2 seconds")
    try:
        wait_for(lambda: query.lastProgress is not None, 120, "the query to run")
        time.sleep(3)  # many triggers, each finding only 10 of the 20
        assert spark.table(table).count() == 0
        assert queue.stats().in_flight == 0
        queue.send_batch([f"g{i}" for i in range(15)])
        wait_for(lambda: spark.table(table).count() == 25, 120, "25 rows")
        # Acked once Spark asks what follows the committed step (the next trigger): a
        # stop before that would leave the 25 leased, back for the next query in 30 s.
        wait_for(lambda: queue.stats().in_flight == 0, 120, "the 25 acked")
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [25]

    # Too few for the minimum ever, but the delay passes: they come anyway.
    queue.send_batch([f"h{i}" for i in range(5)])
    df = source(spark, keyspace, queue="few", minMessagesPerTrigger="1000", maxTriggerDelay="2s")
    query, table = to_memory(df, tmp_path / "b", available_now=False, interval="0.2 seconds")
    try:
        wait_for(lambda: spark.table(table).count() == 5, 120, "5 rows after the delay")
    finally:
        query.stop()


def _read_then_fail(
    spark: SparkSession, keyspace: ConnectionSettings, queue: str, checkpoint: Path
) -> list[int]:
    """Run a first batch whose sink fails after reading it: the ids it read, left uncommitted."""
    seen: list[int] = []

    def handle(batch: DataFrame, batch_id: int) -> None:
        seen.extend(r.id for r in batch.select("id").collect())
        raise RuntimeError("the sink failed")  # the batch stays uncommitted

    with pytest.raises(StreamingQueryException, match="the sink failed"):
        run_batches(source(spark, keyspace, queue=queue), checkpoint, handle)
    return seen


def test_fail_on_data_loss_names_queue_step_and_count_or_logs_and_goes_on(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("lossy", bucket_size=100)
    queue.send_batch([f"l{i}" for i in range(20)])
    checkpoint = tmp_path / "ck"
    first = _read_then_fail(spark, keyspace, "lossy", checkpoint)
    assert len(first) == 20
    queue.purge()  # the batch's messages are gone before its replay

    replayed: list[int] = []
    keep: Callable[[DataFrame, int], None] = lambda batch, _: replayed.extend(  # noqa: E731
        r.id for r in batch.select("id").collect()
    )
    with pytest.raises(
        StreamingQueryException,
        match=r"queue 'lossy': step 1 \(part 0\) of stream '\w+' was replayed and 20 of its 20",
    ):
        run_batches(source(spark, keyspace, queue="lossy"), checkpoint, keep)

    run_batches(source(spark, keyspace, queue="lossy", failOnDataLoss="false"), checkpoint, keep)
    assert replayed == []
    assert queue.stats().total == 0


def test_a_checkpoint_in_the_one_queue_offset_format_replays_the_same_messages(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("legacy", bucket_size=100)
    client.create_queue("legacy2")
    ids = queue.send_batch([f"o{i}" for i in range(20)])
    checkpoint = tmp_path / "ck"
    first = _read_then_fail(spark, keyspace, "legacy", checkpoint)
    # Rewrite the planned batch's offset as the source wrote it before it read several queues.
    log = checkpoint / "offsets" / "0"
    lines = log.read_text().splitlines()
    offset = json.loads(lines[2])
    assert offset.pop("queues") == ["legacy"]
    log.write_text("\n".join([*lines[:2], json.dumps(offset)]))

    with pytest.raises(StreamingQueryException, match="offset of step 1: written by a bdq source"):
        run_batches(source(spark, keyspace, queue="legacy,legacy2"), checkpoint, lambda b, i: None)

    replayed: list[tuple[int, int]] = []

    def keep(batch: DataFrame, batch_id: int) -> None:
        replayed.extend((r.id, r.delivery_count) for r in batch.collect())

    run_batches(source(spark, keyspace, queue="legacy"), checkpoint, keep)
    assert sorted(first) == sorted(ids)
    assert sorted(replayed) == sorted((i, 1) for i in ids)  # the same deliveries, not new ones
    assert queue.stats().total == 0


def test_a_queue_recreated_under_a_restarted_stream_fails_its_replay_or_goes_on_anew(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("reborn", bucket_size=100)
    queue.send_batch([f"old{i}" for i in range(20)])
    checkpoint = tmp_path / "ck"
    first = _read_then_fail(spark, keyspace, "reborn", checkpoint)
    assert len(first) == 20
    client.delete_queue("reborn")
    fresh = client.create_queue("reborn", bucket_size=100).send_batch([f"new{i}" for i in range(5)])

    replayed: list[int] = []
    keep: Callable[[DataFrame, int], None] = lambda batch, _: replayed.extend(  # noqa: E731
        r.id for r in batch.select("id").collect()
    )
    with pytest.raises(
        StreamingQueryException,
        match=r"queue 'reborn' was deleted and re-created under the stream; step 1 of stream"
        r" '\w+' is replayed but was planned from the queue's old incarnation: 20 message\(s\)",
    ):
        run_batches(source(spark, keyspace, queue="reborn"), checkpoint, keep)
    assert replayed == []

    run_batches(source(spark, keyspace, queue="reborn", failOnDataLoss="false"), checkpoint, keep)
    assert sorted(replayed) == sorted(fresh)  # the new incarnation, from its start
    assert client.queue("reborn").stats().total == 0


def test_a_queue_recreated_under_a_running_stream_fails_it_or_goes_on_anew(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    client.create_queue("alive", bucket_size=100).send_batch([f"old{i}" for i in range(10)])
    df = source(spark, keyspace, queue="alive")
    query, table = to_memory(df, tmp_path / "ck", available_now=False, interval="0.2 seconds")
    try:
        wait_for(lambda: spark.table(table).count() == 10, 120, "the old queue's 10 rows")
        client.delete_queue("alive")
        fresh = client.create_queue("alive", bucket_size=100).send_batch(
            [f"new{i}" for i in range(5)]
        )
        with pytest.raises(
            StreamingQueryException,
            match=r"queue 'alive' was deleted and re-created under the stream; step \d+ of"
            r" stream '\w+' meets its new incarnation: 0 message\(s\) the stream leased",
        ):
            query.awaitTermination(120)
    finally:
        query.stop()
    assert spark.table(table).count() == 10

    # The memory sink cannot restart from a checkpoint: go on through foreachBatch.
    rows: list[int] = []
    df = source(spark, keyspace, queue="alive", failOnDataLoss="false")
    run_batches(df, tmp_path / "ck", lambda batch, _: rows.extend(r.id for r in batch.collect()))
    assert sorted(rows) == sorted(fresh)


def test_max_bytes_per_trigger_caps_batches_lets_a_large_message_go_and_the_stricter_wins(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    # Given a large message first, then small ones; K = 1 receives exactly the planned ones.
    queue = client.create_queue("sized", bucket_size=10, order_hint=1)
    sent = queue.send_batch([b"L" * 5000] + [b"s" * 1000] * 5)
    batches: list[tuple[int, int]] = []
    ids: list[int] = []

    def keep(batch: DataFrame, _: int) -> None:
        rows = batch.select("id", "payload").collect()
        if rows:
            batches.append((len(rows), sum(len(r.payload) for r in rows)))
            ids.extend(r.id for r in rows)

    # When the byte limit is the stricter one.
    run_batches(
        source(spark, keyspace, queue="sized", maxBytesPerTrigger="3500"), tmp_path / "a", keep
    )
    # Then the large message goes alone, the others in batches of at most 3500 bytes.
    assert batches == [(1, 5000), (3, 3000), (2, 2000)]
    assert sorted(ids) == sorted(sent)

    # When the message limit is the stricter one, it wins.
    batches.clear()
    more = queue.send_batch([b"s" * 1000] * 3)
    df = source(
        spark, keyspace, queue="sized", maxbytespertrigger="3500", maxMessagesPerTrigger="2"
    )
    run_batches(df, tmp_path / "b", keep)
    assert batches == [(2, 2000), (1, 1000)]
    assert sorted(ids) == sorted(sent + more)
    assert queue.stats().total == 0


def test_a_kafka_option_fails_the_query_at_start_naming_it_and_what_to_use(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    client.create_queue("kafkaesque")
    df = source(spark, keyspace, queue="kafkaesque", startingOffsets="earliest")
    with pytest.raises(Exception, match="option 'startingOffsets': a Kafka option the bdq source"):
        to_memory(df, tmp_path / "ck")[0].awaitTermination(60)


def test_min_partitions_splits_a_busy_bucket_among_tasks_and_a_replay_splits_it_alike(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    from pyspark.sql.functions import spark_partition_id

    queue = client.create_queue("hot", bucket_size=100)
    sent = queue.send_batch([f"h{i}" for i in range(40)])  # a backlog in one bucket
    checkpoint = tmp_path / "ck"
    first: dict[int, set[int]] = {}
    replayed: dict[int, set[tuple[int, int]]] = {}

    def rows(batch: DataFrame) -> list[tuple[int, int, int]]:
        df = batch.select(spark_partition_id().alias("p"), "id", "delivery_count")
        return [(r.p, r.id, r.delivery_count) for r in df.collect()]

    def fail(batch: DataFrame, _: int) -> None:
        for p, i, _count in rows(batch):
            first.setdefault(p, set()).add(i)
        raise RuntimeError("the sink failed")  # the batch stays uncommitted

    def keep(batch: DataFrame, _: int) -> None:
        for p, i, count in rows(batch):
            replayed.setdefault(p, set()).add((i, count))

    with pytest.raises(StreamingQueryException, match="the sink failed"):
        run_batches(source(spark, keyspace, queue="hot", minPartitions="4"), checkpoint, fail)
    # Read by 4 tasks, 10 messages each, each message once.
    assert sorted(len(ids) for ids in first.values()) == [10, 10, 10, 10]
    assert sorted(i for ids in first.values() for i in ids) == sorted(sent)

    # A restart replays the slices the offset recorded, whatever minPartitions says now.
    run_batches(source(spark, keyspace, queue="hot", minPartitions="2"), checkpoint, keep)
    assert {p: {i for i, _ in got} for p, got in replayed.items()} == first
    assert {count for got in replayed.values() for _, count in got} == {1}  # same deliveries
    assert queue.stats().total == 0
