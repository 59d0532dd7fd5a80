"""The bdq sink on a real SparkSession against a real Cassandra node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.engine.lanes import lane_of
from spark_queue.queue import Queue
from spark_queue.spark.options import connector_options

pytestmark = [pytest.mark.spark, pytest.mark.cassandra]


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def consume(queue: Queue) -> list[tuple[bytes, dict[str, str]]]:
    got = []
    while deliveries := queue.receive(100):
        got += [(d.payload, dict(d.headers)) for d in deliveries]
        queue.ack_batch([d.receipt for d in deliveries])
    return got


def test_rows_are_routed_by_queue_column_with_headers_and_delay(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    for name in ("default", "a", "b"):
        client.create_queue(name)
    df = spark.createDataFrame(
        [
            ("one", "a", {"k": "1"}, 0),
            ("two", "b", None, 0),
            ("three", None, {"k": "3"}, 0),
            ("later", "a", None, 60_000),
        ],
        "payload string, queue string, headers map<string,string>, delay_ms bigint",
    )

    df.write.format("bdq").options(**connector_options(keyspace)).option("queue", "default").mode(
        "append"
    ).save()

    assert consume(client.queue("a")) == [(b"one", {"k": "1"})]
    assert consume(client.queue("b")) == [(b"two", {})]
    assert consume(client.queue("default")) == [(b"three", {"k": "3"})]
    assert client.queue("a").stats().delayed == 1


def test_the_key_column_puts_each_row_in_its_keys_lane(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    queue = client.create_queue("keyed-sink", lanes=8)
    df = spark.createDataFrame(
        [(f"m{i}", f"user-{i % 3}") for i in range(12)], "payload string, key string"
    ).repartition(3)

    df.write.format("bdq").options(**connector_options(keyspace)).option(
        "queue", "keyed-sink"
    ).option("writerId", "keyed").mode("append").save()

    rows = queue.buckets.store.rows(
        "SELECT payload, lane FROM {ks}.messages WHERE queue_id = ? AND bucket = 0",
        (queue.queue_id,),
    )
    assert sorted((bytes(p), lane) for p, lane in rows) == sorted(
        (f"m{i}".encode(), lane_of(f"user-{i % 3}", 8)) for i in range(12)
    )


def test_writer_id_makes_a_repeated_write_send_nothing(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    queue = client.create_queue("once")
    df = spark.range(0, 500, numPartitions=3).select(F.col("id").cast("string").alias("payload"))
    write = df.write.format("bdq").options(**connector_options(keyspace)).option("queue", "once")

    write.option("writerId", "import-2026-11-20").mode("append").save()
    write.option("writerId", "import-2026-11-20").mode("append").save()

    payloads = sorted(int(p) for p, _ in consume(queue))
    assert payloads == list(range(500))


def test_without_writer_id_a_repeated_write_sends_again(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    queue = client.create_queue("twice")
    df = spark.range(0, 50, numPartitions=2).select(
        F.encode(F.col("id").cast("string"), "UTF-8").alias("payload")
    )
    write = df.write.format("bdq").options(**connector_options(keyspace)).option("queue", "twice")

    write.mode("append").save()
    write.mode("append").save()

    assert len(consume(queue)) == 100


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        (
            "body string",
            {"queue": "q"},
            "column 'body': not accepted by the bdq sink; accepted columns: payload",
        ),
        ("payload string, extra int", {"queue": "q"}, "column 'extra': not accepted"),
        ("payload int", {"queue": "q"}, "column 'payload' of type int: wrong type"),
        (
            "payload string, headers map<string,int>",
            {"queue": "q"},
            "column 'headers' of type map<string,int>",
        ),
        (
            "payload string",
            {},
            "option 'queue' is required when the DataFrame has no 'queue' column",
        ),
        (
            "payload string",
            {"queue": "q", "writerId": "has space"},
            "option 'writerId' = 'has space'",
        ),
        (
            "payload string",
            {"queue": "q", "batchSize": "3"},
            "option 'batchsize': unknown for the bdq sink",
        ),
    ],
)
def test_bad_sink_columns_and_options_fail_before_writing(
    spark: SparkSession,
    keyspace: ConnectionSettings,
    client: QueueClient,
    tmp_path: Path,
    ddl: str,
    options: dict[str, str],
    message: str,
) -> None:
    queue = client.create_queue("q")
    df = spark.createDataFrame([], ddl)

    with pytest.raises(Exception, match=message):
        df.write.format("bdq").options(**connector_options(keyspace)).options(**options).mode(
            "append"
        ).save()
    with pytest.raises(Exception, match=message):
        stream = (
            spark.readStream.format("rate")
            .load()
            .selectExpr(
                *[
                    f"CAST(NULL AS {f.dataType.simpleString()}) AS {f.name}"
                    for f in df.schema.fields
                ]
            )
        )
        query = (
            stream.writeStream.format("bdq")
            .options(**connector_options(keyspace))
            .options(**options)
            .option("checkpointLocation", str(tmp_path))
            .start()
        )
        query.awaitTermination(60)
    assert queue.stats().total == 0


def test_null_payload_row_fails_the_write_and_names_the_row(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    client.create_queue("q")
    df = spark.createDataFrame([("ok",), (None,)], "payload string").coalesce(1)

    with pytest.raises(Exception, match="row 2 of partition 0: column 'payload' is null"):
        df.write.format("bdq").options(**connector_options(keyspace)).option("queue", "q").mode(
            "append"
        ).save()


@pytest.mark.parametrize("writer_id", [None, "import-bad"], ids=["plain", "writer-id"])
def test_a_bad_row_in_one_task_leaves_the_whole_write_invisible(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient, writer_id: str | None
) -> None:
    # Given a write of 3 tasks where only the last holds a bad row (one over the size limit)
    queue = client.create_queue("whole", max_message_bytes=1024)
    rows = [(f"ok {i}",) for i in range(300)] + [("x" * 2000,)]
    df = spark.createDataFrame(rows, "payload string").repartitionByRange(3, "payload")
    write = df.write.format("bdq").options(**connector_options(keyspace)).option("queue", "whole")
    if writer_id is not None:
        write = write.option("writerId", writer_id)

    # When the write fails (the first two tasks staged their rows before the third failed)
    with pytest.raises(Exception, match=r"row \d+ of partition 2\): over .*1024"):
        write.mode("append").save()

    # Then no message of it is visible, and without a writerId none is even left staged
    assert queue.peek(10) == []
    assert queue.receive(10) == []
    if writer_id is None:
        assert queue.stats(exact=True).total == 0
