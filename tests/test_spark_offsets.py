"""Offsets and partition shares of the bdq source: pure logic, no Spark job, no Cassandra."""

from __future__ import annotations

import json

import pytest

from spark_queue.defaults import MAX_BATCH
from spark_queue.errors import InvalidSetting
from spark_queue.spark.offsets import Offset
from spark_queue.spark.planning import plan


def test_offsets_round_trip_through_canonical_json() -> None:
    offset = Offset("abc", 7, (3, 4), (1000, 20))

    text = json.dumps(offset.to_dict(), sort_keys=True)

    assert Offset.from_dict(json.loads(text)) == offset


def test_incarnations_and_slices_round_trip_and_older_offsets_still_read() -> None:
    offset = Offset(
        "abc", 7, (3, 3), (10, 10), ("q", "q"), (("q", "ab12"),), ((300, 350), (350, 400))
    )

    value = json.loads(json.dumps(offset.to_dict(), sort_keys=True))

    assert value["incarnations"] == {"q": "ab12"}
    assert value["slices"] == [[300, 350], [350, 400]]
    assert Offset.from_dict(value) == offset
    older = Offset.from_dict({"stream": "abc", "step": 7, "buckets": [3], "shares": [10]})
    assert (older.incarnation, older.part_slices()) == ({}, [None])
    assert "incarnations" not in older.to_dict() and "slices" not in older.to_dict()


@pytest.mark.parametrize(
    "value",
    [
        {"step": 1},
        {"stream": "s", "step": "x"},
        {"stream": "s", "step": 1, "buckets": [1]},
        {"stream": "s", "step": 1, "buckets": [1], "shares": [1], "slices": [[1, 2], [2, 3]]},
        {"stream": "s", "step": 1, "incarnations": ["q"]},
    ],
)
def test_foreign_offsets_are_refused(value: dict[str, object]) -> None:
    with pytest.raises(InvalidSetting, match="not a bdq offset"):
        Offset.from_dict(value)


@pytest.mark.parametrize(
    ("limit", "buckets", "size", "expected"),
    [
        (10_000, 13, 1000, [1000] * 10),  # whole buckets first, none left half-read
        (120, 3, 50, [50, 50, 20]),
        (100, 4, 1000, [100]),
        (50_000, 3, 100_000, [MAX_BATCH, MAX_BATCH, MAX_BATCH]),
        (0, 3, 10, []),
    ],
)
def test_shares_fill_buckets_oldest_first_within_the_limit(
    limit: int, buckets: int, size: int, expected: list[int]
) -> None:
    result = [p.share for p in plan([[("q", b, size) for b in range(buckets)]], limit, 64)]

    assert result == expected
    assert sum(result) <= limit
