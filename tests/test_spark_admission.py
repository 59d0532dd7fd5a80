"""maxBytesPerTrigger and refused Kafka options: parsing, the byte cap of a plan, sizes."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.errors import InvalidSetting, KeyspaceNotFound
from spark_queue.spark.admission import byte_limit, cap_bytes
from spark_queue.spark.options import SinkOptions, SourceOptions
from spark_queue.spark.planning import Part
from spark_queue.store.buckets import visible_sizes
from spark_queue.store.message_values import now_ms
from spark_queue.store.session import Store


def parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({"hosts": "127.0.0.1:9042", "queue": "q", **options})


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1048576", 1048576), ("512k", 512 * 1024), (" 10 MB ", 10 * 1024**2), ("1g", 1024**3)],
)
def test_max_bytes_per_trigger_takes_sizes_with_binary_units(value: str, expected: int) -> None:
    assert parse(MAXBYTESPERTRIGGER=value).max_bytes_per_trigger == expected
    assert parse().max_bytes_per_trigger is None


@pytest.mark.parametrize("value", ["0", "-5", "ten", "1.5m", "2t", "2048g"])
def test_bad_max_bytes_per_trigger_is_refused_naming_option_value_and_rule(value: str) -> None:
    with pytest.raises(
        InvalidSetting, match=rf"option 'maxBytesPerTrigger' = '{value}': must be a size from 1"
    ):
        parse(maxBytesPerTrigger=value)


def test_the_stricter_byte_limit_of_the_option_and_spark_s_wins() -> None:
    assert byte_limit(None, ReadAllAvailable()) is None
    assert byte_limit(None, ReadMaxRows(5)) is None
    assert byte_limit(100, ReadMaxRows(5)) == 100
    assert byte_limit(100, ReadMaxBytes(40)) == 40
    assert byte_limit(None, ReadMaxBytes(40)) == 40


def test_cap_keeps_parts_in_order_until_the_bytes_are_spent() -> None:
    plan = [Part("a", 0, 3), Part("b", 7, 2), Part("a", 1, 3)]
    sizes = {("a", 0): [10, 10, 10], ("b", 7): [15, 15], ("a", 1): [1, 1, 1]}
    asked: list[Part] = []

    def read(part: Part) -> list[int]:
        asked.append(part)
        return sizes[(part.queue, part.bucket)]

    assert cap_bytes(plan, 1000, read) == plan
    asked.clear()
    assert cap_bytes(plan, 45, read) == [Part("a", 0, 3), Part("b", 7, 1)]
    assert asked == plan[:2]  # sizes of parts past the limit are never read
    assert cap_bytes(plan, 30, read) == [Part("a", 0, 3)]


def test_cap_lets_one_message_above_the_limit_go_alone_and_drops_empty_parts() -> None:
    plan = [Part("a", 0, 3), Part("a", 1, 2)]
    assert cap_bytes(plan, 100, lambda p: [500, 1] if p.bucket == 0 else [1]) == [Part("a", 0, 1)]
    assert cap_bytes(plan, 100, lambda p: [] if p.bucket == 0 else [60, 60]) == [Part("a", 1, 1)]


@pytest.mark.cassandra
def test_sizes_come_from_the_size_column_or_for_older_rows_from_the_payload(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("sizes", bucket_size=10)
        ids = queue.send_batch([b"a" * 3, b"b" * 70_000, b""])
        buckets = queue.buckets
        assert visible_sizes(buckets, 0, now_ms(), 10) == [
            (ids[0], 3),
            (ids[1], 70_000),
            (ids[2], 0),
        ]
        assert visible_sizes(buckets, 0, now_ms(), 1) == [(ids[0], 3)]
        assert visible_sizes(buckets, 0, now_ms(), 10, (ids[1], ids[2])) == [(ids[1], 70_000)]
        # A row sent before the size column existed has none: its payload is measured.
        buckets.store.execute(
            "UPDATE {ks}.messages SET payload_bytes = null WHERE queue_id = ? AND bucket = 0"
            " AND id = ?",
            (buckets.queue_id, ids[1]),
            what="clearing a size",
        )
        assert visible_sizes(buckets, 0, now_ms(), 10)[1] == (ids[1], 70_000)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"startingOffsets": "earliest"}, "'startingOffsets': a Kafka option .* no offsets"),
        ({"ENDINGOFFSETS": "latest"}, "'endingOffsets': a Kafka option .* no offsets"),
        ({"includeHeaders": "true"}, "'includeHeaders': .* 'headers' column .* always there"),
        ({"maxOffsetsPerTrigger": "5"}, "use option 'maxMessagesPerTrigger'"),
        ({"subscribe": "t"}, "'subscribe': .* use option 'queue'"),
        ({"kafka.bootstrap.servers": "h:9092"}, r"'kafka.bootstrap.servers': .*'hosts'"),
        ({"kafka.group.id": "g"}, "'kafka.group.id': a Kafka option"),
        ({"groupIdPrefix": "g"}, "not consumer groups"),
    ],
)
def test_kafka_options_are_refused_by_name_with_what_to_use(
    given: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidSetting, match=message):
        parse(**given)


def test_the_kafka_sink_s_topic_points_at_queue() -> None:
    with pytest.raises(InvalidSetting, match=r"'topic': a Kafka option the bdq sink .* 'queue'"):
        SinkOptions.parse({"hosts": "127.0.0.1:9042", "topic": "t"})


@pytest.mark.cassandra
def test_a_keyspace_made_before_the_size_column_is_refused_until_upgraded_explicitly(
    fresh_keyspace: ConnectionSettings,
) -> None:
    store = Store(fresh_keyspace)
    try:
        store.execute_ddl(f"ALTER TABLE {fresh_keyspace.keyspace}.messages DROP payload_bytes")
    finally:
        store.close()
    # A client only looks: it names the missing column and the command that adds it
    with pytest.raises(KeyspaceNotFound, match=r"no column messages\.payload_bytes"):
        QueueClient(settings=fresh_keyspace)
    QueueClient.create_keyspace(1, exist_ok=True, settings=fresh_keyspace)
    with QueueClient(settings=fresh_keyspace) as client:  # the upgrade added the column back
        queue = client.create_queue("upgraded", bucket_size=10)
        ids = queue.send_batch([b"abcd"])
        assert visible_sizes(queue.buckets, 0, now_ms(), 10) == [(ids[0], 4)]
