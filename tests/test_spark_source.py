"""The bdq streaming source on a real SparkSession against a real Cassandra node."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.message import QueueStats
from spark_queue.queue import MAX_BATCH, Queue
from spark_queue.spark import source
from spark_queue.spark.options import SourceOptions, connector_options
from spark_queue.spark.source import SCHEMA, BdqStreamReader

pytestmark = [pytest.mark.spark, pytest.mark.cassandra]

APPS = Path(__file__).parent / "apps"


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def stream(
    spark: SparkSession, settings: ConnectionSettings, queue: str, **options: str
) -> DataFrame:
    return (
        spark.readStream.format("bdq")
        .options(**connector_options(settings))
        .option("queue", queue)
        .options(**options)
        .load()
    )


def to_memory(
    df: DataFrame, checkpoint: Path, *, available_now: bool = True, interval: str = "0.5 seconds"
) -> tuple[StreamingQuery, str]:
    name = f"out_{uuid.uuid4().hex[:8]}"
    writer = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime=interval)
    )
    return writer.start(), name


def wait_for(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_streaming_round_trip_delivers_every_message_once_and_empties_the_queue(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("in", bucket_size=50)
    keys = [f"k{i % 3}" if i % 4 else None for i in range(300)]  # a quarter keyless
    ids = queue.send_batch(
        [f"m{i}" for i in range(300)], headers=[{"n": str(i)} for i in range(300)], key=keys
    )
    df = stream(spark, keyspace, "in", maxMessagesPerTrigger="120")
    assert df.schema == SCHEMA
    assert df.columns[-1] == "key"  # last: positional users of the others are unaffected

    query, table = to_memory(df, tmp_path / "ck")
    query.awaitTermination(180)

    columns = ["queue", "id", "payload", "headers", "delivery_count", "key"]
    out = spark.table(table).select(*columns)
    expected = spark.createDataFrame(
        [("in", i, f"m{n}".encode(), {"n": str(n)}, 1, keys[n]) for n, i in enumerate(ids)],
        out.schema,
    )
    # chispa sorts rows to compare them; Spark cannot sort maps, so compare them as JSON
    assert_df_equality(
        out.withColumn("headers", F.to_json("headers")),
        expected.withColumn("headers", F.to_json("headers")),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert sizes and max(sizes) <= 120 and sum(sizes) == 300
    assert 0 not in sizes  # the last batch is acked with no empty batch after it
    assert queue.stats().total == 0


def test_batch_read_peeks_without_consuming(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    queue = client.create_queue("peeked", bucket_size=10)
    queue.send_batch([f"p{i}" for i in range(25)], key=[f"k{i}" for i in range(25)])

    df = (
        spark.read.format("bdq")
        .options(**connector_options(keyspace))
        .option("queue", "peeked")
        .load()
    )

    rows = df.collect()
    assert sorted(r.payload for r in rows) == sorted(f"p{i}".encode() for i in range(25))
    assert {r.delivery_count for r in rows} == {0}
    assert {(r.payload, r.key) for r in rows} == {(f"p{i}".encode(), f"k{i}") for i in range(25)}
    assert queue.stats().visible == 25


def test_batch_read_of_a_queue_never_sent_to_is_empty(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    # Given a new queue: no bucket yet, so the reader plans no partition
    client.create_queue("untouched")

    # When it is peeked (pyspark then reads one partition holding None)
    df = (
        spark.read.format("bdq")
        .options(**connector_options(keyspace))
        .option("queue", "untouched")
        .load()
    )

    # Then it is empty, not an error
    assert df.collect() == []


def test_batch_read_returns_every_visible_message_of_a_bucket_larger_than_one_receive(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    # Given one bucket holding more messages than one peek may return (MAX_BATCH)
    queue = client.create_queue("wide", bucket_size=MAX_BATCH + 5000)
    total = MAX_BATCH + 50
    queue.send_batch([f"w{i}" for i in range(MAX_BATCH)])
    queue.send_batch([f"w{i}" for i in range(MAX_BATCH, total)])
    leased = {d.id for d in queue.receive(max_messages=5, visibility_timeout=300)}

    # When it is read as a batch DataFrame
    df = (
        spark.read.format("bdq")
        .options(**connector_options(keyspace))
        .option("queue", "wide")
        .load()
    )
    ids = [r.id for r in df.select("id").collect()]

    # Then every visible message comes back once, and the leased ones do not
    assert len(ids) == total - 5
    assert len(set(ids)) == len(ids)
    assert leased.isdisjoint(ids)


def test_backlog_counts_run_one_at_a_time(
    keyspace: ConnectionSettings, client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a source whose counts take longer than the interval between them
    queue = client.create_queue("counted", bucket_size=10)
    queue.send_batch([f"c{i}" for i in range(25)])
    monkeypatch.setattr(source, "REPORT_INTERVAL", 0.0)
    running, most, started = 0, 0, 0
    lock = threading.Lock()
    real_stats = Queue.stats

    def slow_stats(self: Queue) -> QueueStats:
        nonlocal running, most, started
        with lock:
            running, started = running + 1, started + 1
            most = max(most, running)
        try:
            time.sleep(0.2)  # a count over a large backlog
            return real_stats(self)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(Queue, "stats", slow_stats)
    options = SourceOptions.parse({**connector_options(keyspace), "queue": "counted"})
    reader = BdqStreamReader(options)

    # When Spark asks for the backlog far more often than a count takes
    reports = []
    for _ in range(60):
        reports.append(reader.reportLatestOffset())
        time.sleep(0.02)
    wait_for(lambda: running == 0, 10, "the last count to finish")

    # Then counts never overlapped, yet kept coming, and report the queue's backlog
    assert most == 1
    assert started >= 2
    report = reader.reportLatestOffset()
    assert report is not None
    assert (report["visible"], report["inFlight"], report["delayed"]) == (25, 0, 0)
    pickle.dumps(reader)  # Spark ships the reader between Python processes


def test_idle_stream_acks_its_last_batch_and_never_redelivers(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    # The lease must outlast a (slow, loaded) batch from read to commit; the idle
    # wait below must outlast the lease.
    queue = client.create_queue("idle", visibility_timeout=8.0)
    queue.send_batch([f"i{i}" for i in range(40)])
    query, table = to_memory(stream(spark, keyspace, "idle"), tmp_path / "ck", available_now=False)
    try:
        wait_for(lambda: spark.table(table).count() == 40, 120, "40 rows")
        # Idle for well over the 8 s visibility timeout
        time.sleep(20)
        rows = spark.table(table).collect()
        assert len(rows) == 40
        assert {r.delivery_count for r in rows} == {1}
        assert queue.stats().total == 0
    finally:
        query.stop()


def test_two_queries_on_one_queue_lose_nothing_and_duplicate_at_most_one_percent(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    queue = client.create_queue("shared", bucket_size=50, visibility_timeout=60)
    ids = set(queue.send_batch([f"s{i}" for i in range(400)]))
    first, table_a = to_memory(
        stream(spark, keyspace, "shared", maxMessagesPerTrigger="50"),
        tmp_path / "a",
        available_now=False,
    )
    second, table_b = to_memory(
        stream(spark, keyspace, "shared", maxMessagesPerTrigger="50"),
        tmp_path / "b",
        available_now=False,
    )
    try:
        wait_for(lambda: queue.stats().total == 0, 180, "the queue to drain")
    finally:
        first.stop()
        second.stop()

    received = [r.id for t in (table_a, table_b) for r in spark.table(t).select("id").collect()]
    counts = Counter(received)
    assert set(counts) == ids
    duplicates = len(received) - len(counts)
    print(f"two queries: {len(received)} rows for {len(ids)} messages, {duplicates} duplicates")
    # They split the buckets through ownership (spark_queue.spark.sharing), so
    # neither leases what the other planned.
    assert duplicates <= len(ids) // 100


def test_round_trip_with_executors_in_separate_processes(
    keyspace: ConnectionSettings, client: QueueClient, tmp_path: Path
) -> None:
    client.create_queue("a", bucket_size=25)
    client.create_queue("b")
    sent = client.queue("a").send_batch([f"x{i}" for i in range(100)])
    hosts = connector_options(keyspace)["hosts"]

    result = subprocess.run(
        [
            sys.executable, str(APPS / "relay.py"), "--hosts", hosts,
            "--keyspace", keyspace.keyspace, "--source", "a", "--target", "b",
            "--checkpoint", str(tmp_path / "ck"), "--available-now",
            "--master", "local-cluster[2,1,1024]",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr[-3000:]
    delivered = []
    b = client.queue("b")
    while deliveries := b.receive(100):
        delivered += [d.headers["source-id"] for d in deliveries]
        b.ack_batch([d.receipt for d in deliveries])
    assert sorted(map(int, delivered)) == sorted(sent)
    assert client.queue("a").stats().total == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'queue' is required"),
        ({"queue": "in", "visibilityTimeout": "-5s"}, "option 'visibilityTimeout' = '-5s'"),
        (
            {"queue": "in", "maxMessagesPerTrigger": "lots"},
            "option 'maxMessagesPerTrigger' = 'lots'",
        ),
        ({"queue": "in", "orderHint": "0"}, "option 'orderHint' = '0'"),
        ({"queue": "in", "visibilityTimout": "5s"}, "option 'visibilitytimout': unknown"),
        ({"queue": "missing"}, "queue 'missing': does not exist"),
    ],
)
def test_bad_source_options_fail_at_query_start(
    spark: SparkSession,
    keyspace: ConnectionSettings,
    client: QueueClient,
    tmp_path: Path,
    options: dict[str, str],
    message: str,
) -> None:
    client.create_queue("in")
    df = (
        spark.readStream.format("bdq")
        .options(**connector_options(keyspace))
        .options(**options)
        .load()
    )

    with pytest.raises(Exception, match=message):
        query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start()
        query.awaitTermination(60)
