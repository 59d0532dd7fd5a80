"""minPartitions: how a step's busiest buckets are cut into id slices (pure logic)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import SourceOptions
from spark_queue.spark.planning import Part
from spark_queue.spark.slicing import cut, slice_counts, split


def test_slices_go_to_the_busiest_parts_and_never_hold_less_than_one_message() -> None:
    assert slice_counts([100], 4) == [4]
    assert slice_counts([100, 10], 4) == [3, 1]
    assert slice_counts([2, 1], 8) == [2, 1]  # messages run short: fewer partitions
    assert slice_counts([5, 5], 1) == [1, 1]


def test_cut_covers_the_bucket_without_overlap_and_shares_the_ids_evenly() -> None:
    ids = [103, 104, 110, 150, 151, 160, 199]
    slices = cut(ids, 3, 100, 200)
    assert slices == [((100, 150), 3), ((150, 160), 2), ((160, 200), 2)]
    bounds = [b for b, _ in slices]
    assert bounds[0][0] == 100 and bounds[-1][1] == 200
    assert all(a[1] == b[0] for a, b in pairwise(bounds))
    for (first, end), share in slices:  # each slice's share is the ids inside it
        assert share == sum(first <= i < end for i in ids)


def test_split_slices_only_what_falls_short_of_min_partitions() -> None:
    plan = [Part("q", 2, 40), Part("r", 0, 3)]
    visible = {("q", 2): list(range(200, 240)), ("r", 0): [0, 1, 2]}
    result = split(plan, 4, lambda name: 100, lambda p: visible[(p.queue, p.bucket)])
    assert result == [
        (Part("q", 2, 14), (200, 214)),
        (Part("q", 2, 13), (214, 227)),
        (Part("q", 2, 13), (227, 300)),
        (Part("r", 0, 3), None),
    ]
    assert split(plan, 2, lambda name: 100, lambda p: []) == [(p, None) for p in plan]
    # A bucket with one visible message is not split.
    assert split([Part("q", 0, 1)], 4, lambda name: 100, lambda p: [5]) == [(Part("q", 0, 1), None)]


@pytest.mark.parametrize("value", ["0", "65", "many"])
def test_bad_min_partitions_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidSetting, match=rf"option 'minPartitions' = '{value}': must be"):
        SourceOptions.parse({"hosts": "127.0.0.1:9042", "queue": "q", "minPartitions": value})
    options = SourceOptions.parse({"hosts": "h", "queue": "q", "MINPARTITIONS": "4"})
    assert options.min_partitions == 4
