"""Ownership of buckets and slices: the slicing maths alone, and the table on a real node."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from spark_queue.config import ConnectionSettings
from spark_queue.engine.ownership import (
    Ownership,
    check_keys,
    new_owner,
    slice_count,
    slice_of,
    slice_range,
    ttl_of,
)
from spark_queue.errors import InvalidSetting
from spark_queue.store.session import Store

# -- pure logic ------------------------------------------------------------------------


def test_slices_cut_a_bucket_into_contiguous_ranges_in_id_order() -> None:
    ranges = [slice_range(3, s, 1000, 4) for s in range(4)]

    assert ranges == [(3000, 3250), (3250, 3500), (3500, 3750), (3750, 4000)]
    assert all(slice_of(i, 1000, 4) == (3, i // 250 - 12) for i in range(3000, 4000, 7))


def test_uneven_slices_cover_the_bucket_once() -> None:
    # 10 ids in 4 slices: widths 3, 3, 3, 1
    covered = [i for s in range(slice_count(10, 4)) for i in range(*slice_range(2, s, 10, 4))]

    assert covered == list(range(20, 30))
    assert slice_count(10, 4) == 4
    assert slice_count(3, 8) == 3  # never an empty slice
    assert all(slice_of(i, 10, 4)[1] < slice_count(10, 4) for i in range(20, 30))


def test_one_slice_is_the_whole_bucket() -> None:
    assert slice_range(5, 0, 100, 1) == (500, 600)
    assert slice_of(599, 100, 1) == (5, 0)


def test_the_ttl_outlasts_the_period_by_the_replicas_truncation() -> None:
    assert ttl_of(1.0) == 2
    assert ttl_of(2.5) == 4
    assert ttl_of(30) == 31


@pytest.mark.parametrize("keys", [[(1,)], [(1, -1)], [("1", 0)], [(True, 0)], ["b"]])
def test_bad_keys_are_rejected_naming_the_rule(keys: list[object]) -> None:
    with pytest.raises(InvalidSetting, match="non-negative ints"):
        check_keys(keys)  # type: ignore[arg-type]


def test_repeated_keys_count_once() -> None:
    assert check_keys([(1, 0), (1, 0), (0, 2)]) == [(1, 0), (0, 2)]


def test_owner_names_are_unique() -> None:
    assert new_owner("q") != new_owner("q")
    assert new_owner("q").startswith("q-")


# -- on a real node --------------------------------------------------------------------


@pytest.fixture
def ownership(keyspace: ConnectionSettings) -> Iterator[Ownership]:
    store = Store(keyspace)
    try:
        yield Ownership(store, uuid.uuid4())
    finally:
        store.close()


@pytest.mark.cassandra
def test_bad_input_writes_nothing(ownership: Ownership) -> None:
    with pytest.raises(InvalidSetting, match="period_s = 0"):
        ownership.take("a", [(0, 0)], 0)
    with pytest.raises(InvalidSetting, match="owner = ''"):
        ownership.take("", [(0, 0)], 5)
    with pytest.raises(InvalidSetting, match="ownership key"):
        ownership.take("a", [(0, 0), (0, -1)], 5)

    assert ownership.owners([(0, 0)]) == {}


@pytest.mark.cassandra
def test_one_owner_per_key_and_release_frees_it(ownership: Ownership) -> None:
    # Given keys in two buckets, taken by a
    started = time.monotonic()
    grant = ownership.take("a", [(0, 0), (0, 1), (1, 0)], 30)
    assert grant.keys == [(0, 0), (0, 1), (1, 0)]
    assert started + 30 <= grant.until <= time.monotonic() + 30

    # When b asks for an overlapping set, it gets only the free key
    assert ownership.take("b", [(0, 1), (0, 2), (1, 0)], 30).keys == [(0, 2)]
    assert ownership.owners([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]) == {
        (0, 0): "a",
        (0, 1): "a",
        (0, 2): "b",
        (1, 0): "a",
    }
    # b cannot renew or release what a holds
    assert ownership.renew("b", [(0, 1), (0, 2)], 30).keys == [(0, 2)]
    assert ownership.release("b", [(0, 0), (0, 2)]) == [(0, 2)]

    # Then a taking again keeps what it holds (a renewal), and a release frees keys for b
    assert ownership.take("a", [(0, 0), (0, 2)], 30).keys == [(0, 0), (0, 2)]
    assert ownership.release("a", [(0, 1), (1, 0)]) == [(0, 1), (1, 0)]
    assert ownership.take("b", [(0, 1), (1, 0)], 30).keys == [(0, 1), (1, 0)]
    assert ownership.owned_in([0, 1]) == {(0, 0): "a", (0, 1): "b", (0, 2): "a", (1, 0): "b"}


@pytest.mark.cassandra
def test_unrenewed_ownership_expires_and_is_taken_over(ownership: Ownership) -> None:
    # Given a holds two keys for 1 s and renews one of them
    ownership.take("a", [(4, 0), (4, 1)], 1)
    time.sleep(0.5)
    assert ownership.renew("a", [(4, 1)], 5).keys == [(4, 1)]

    # When b tries again until the takeover bound of the other (ttl_of(1) = 2 s) has passed
    deadline = time.monotonic() + ttl_of(1) + 1.0
    got: list[tuple[int, int]] = []
    while not got and time.monotonic() < deadline:
        got = ownership.take("b", [(4, 0), (4, 1)], 5).keys
        time.sleep(0.2)

    # Then b took over the expired key, never the renewed one, and a cannot renew the lost one
    assert got == [(4, 0)]
    assert ownership.renew("a", [(4, 0), (4, 1)], 5).keys == [(4, 1)]
    assert ownership.owners([(4, 0), (4, 1)]) == {(4, 0): "b", (4, 1): "a"}
