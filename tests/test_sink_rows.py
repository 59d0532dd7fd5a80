"""The sink's rows: the column-wise split per queue (pure), and the check before any send."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.errors import InvalidSetting, MessageTooLarge
from spark_queue.spark.options import SinkOptions, connector_options
from spark_queue.spark.sink import CHUNK_ROWS, BdqStreamWriter, _Rows, _split, write_batches

HEADERS = pa.map_(pa.string(), pa.string())


def test_rows_go_to_their_queue_with_headers_and_delays_in_seconds() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "payload": [b"a", b"b", b"c"],
            "queue": ["x", None, "y"],
            "headers": pa.array([[("k", "v")], None, []], HEADERS),
            "delay_ms": pa.array([0, None, 1500], pa.int64()),
        }
    )
    assert dict(_split(batch, "d", 0, 0)) == {
        "x": _Rows([b"a"], [{"k": "v"}], [0.0], None, [0]),
        "d": _Rows([b"b"], [None], [0.0], None, [1]),
        "y": _Rows([b"c"], [None], [1.5], None, [2]),
    }


def test_payload_only_needs_no_per_row_columns() -> None:
    batch = pa.RecordBatch.from_pydict({"payload": ["s", "t"]})
    assert list(_split(batch, "d", 0, 0)) == [("d", _Rows(["s", "t"], None, None, None, [0, 1]))]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"payload": [b"a", None]}, "row 12 of partition 3: column 'payload' is null"),
        ({"payload": [b"a", b"b"], "delay_ms": [0, -5]}, "row 12 of partition 3: delay_ms -5"),
        ({"payload": [b"a", b"b"], "queue": ["q", None]}, "row 12 of partition 3: column 'queue'"),
    ],
)
def test_bad_rows_are_named_across_the_tasks_batches(
    columns: dict[str, list[object]], message: str
) -> None:
    with pytest.raises(InvalidSetting, match=message):
        list(_split(pa.RecordBatch.from_pydict(columns), None, 3, 10))


def test_rows_fill_chunks_in_order() -> None:
    rows = _Rows([1, 2, 3], None, None, None, [0, 1, 2])
    rows.extend(_Rows([4], [{"a": "b"}], [1.0], None, [3]))
    assert rows.chunks(2) == [
        _Rows([1, 2], [None, None], [0.0, 0.0], None, [0, 1]),
        _Rows([3, 4], [None, {"a": "b"}], [0.0, 1.0], None, [2, 3]),
    ]
    assert rows.chunks(2)[1].position(5)(1) == " (row 4 of partition 5)"


def test_the_key_column_goes_with_each_row_to_its_queue() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"payload": [b"a", b"b", b"c"], "queue": ["x", "y", "x"], "key": ["k1", None, "k2"]}
    )
    assert dict(_split(batch, None, 0, 0)) == {
        "x": _Rows([b"a", b"c"], None, None, ["k1", "k2"], [0, 2]),
        "y": _Rows([b"b"], None, None, [None], [1]),
    }
    only_nulls = pa.RecordBatch.from_pydict(
        {"payload": [b"a"], "key": pa.array([None], pa.string())}
    )
    assert list(_split(only_nulls, "d", 0, 0)) == [("d", _Rows([b"a"], None, None, None, [0]))]


def test_keys_fill_chunks_in_order() -> None:
    rows = _Rows([1, 2], None, None, None, [0, 1])
    rows.extend(_Rows([3], None, None, ["k"], [2]))
    assert rows.chunks(2) == [
        _Rows([1, 2], None, None, [None, None], [0, 1]),
        _Rows([3], None, None, ["k"], [2]),
    ]


@pytest.mark.cassandra
@pytest.mark.parametrize("writer_id", [None, "w"], ids=["plain", "send-once"])
def test_a_bad_row_after_a_full_chunk_fails_the_task_before_anything_is_sent(
    keyspace: ConnectionSettings, writer_id: str | None
) -> None:
    # Given a chunk's worth of good rows and more, then one over the queue's size limit
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("sink-rows", max_message_bytes=1024)
        options = {**connector_options(keyspace), "queue": "sink-rows"}
        if writer_id is not None:
            options["writerId"] = writer_id
        good = pa.RecordBatch.from_pydict(
            {"payload": [b"ok %d" % i for i in range(CHUNK_ROWS + 200)]}
        )
        bad = pa.RecordBatch.from_pydict({"payload": [b"x" * 2000]})

        # When the task writes them
        with pytest.raises(MessageTooLarge, match=rf"row {CHUNK_ROWS + 201} of partition 0"):
            write_batches(SinkOptions.parse(options), iter([good, bad]), 1, writer_id or "run-1")

        # Then nothing was sent: not the first, full chunk either
        assert queue.stats(exact=True).total == 0


@pytest.mark.cassandra
def test_a_streaming_abort_drops_what_the_batchs_tasks_staged(keyspace: ConnectionSettings) -> None:
    # Given a micro-batch's task that staged its rows (no writerId: at-least-once),
    # through the writer Spark made for the batch's tasks
    with QueueClient(settings=keyspace) as client:
        queue = client.create_queue("sink-abort")
        options = SinkOptions.parse({**connector_options(keyspace), "queue": "sink-abort"})
        task_writer = BdqStreamWriter(options)
        rows = pa.RecordBatch.from_pydict({"payload": [b"m %d" % i for i in range(30)]})
        done = task_writer.write(iter([rows]))
        assert queue.stats(exact=True).total == 30  # staged, invisible
        assert queue.receive(10) == []

        # When the batch aborts (another task failed) through the writer Spark makes
        # anew for the abort, which did not stage anything itself
        BdqStreamWriter(options).abort([done, None], 0)

        # Then the staged messages are dropped, not left invisible until their TTL
        assert queue.stats(exact=True).total == 0
        assert queue.receive(10) == []
