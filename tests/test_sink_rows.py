"""The sink's column-wise split of an Arrow batch into rows per queue (pure logic, no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_queue.errors import InvalidSetting
from spark_queue.spark.sink import _Rows, _split

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
        "x": _Rows([b"a"], [{"k": "v"}], [0.0]),
        "d": _Rows([b"b"], [None], [0.0]),
        "y": _Rows([b"c"], [None], [1.5]),
    }


def test_payload_only_needs_no_per_row_columns() -> None:
    batch = pa.RecordBatch.from_pydict({"payload": ["s", "t"]})
    assert list(_split(batch, "d", 0, 0)) == [("d", _Rows(["s", "t"], None, None))]


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
    rows = _Rows([1, 2, 3], None, None)
    rows.extend(_Rows([4], [{"a": "b"}], [1.0]))
    assert rows.take(2) == _Rows([1, 2], [None, None], [0.0, 0.0])
    assert rows == _Rows([3, 4], [None, {"a": "b"}], [0.0, 1.0])


def test_the_key_column_goes_with_each_row_to_its_queue() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"payload": [b"a", b"b", b"c"], "queue": ["x", "y", "x"], "key": ["k1", None, "k2"]}
    )
    assert dict(_split(batch, None, 0, 0)) == {
        "x": _Rows([b"a", b"c"], None, None, ["k1", "k2"]),
        "y": _Rows([b"b"], None, None, [None]),
    }
    only_nulls = pa.RecordBatch.from_pydict(
        {"payload": [b"a"], "key": pa.array([None], pa.string())}
    )
    assert list(_split(only_nulls, "d", 0, 0)) == [("d", _Rows([b"a"], None, None))]


def test_keys_fill_chunks_in_order() -> None:
    rows = _Rows([1, 2], None, None)
    rows.extend(_Rows([3], None, None, ["k"]))
    assert rows.take(2) == _Rows([1, 2], None, None, [None, None])
    assert rows == _Rows([3], None, None, ["k"])
