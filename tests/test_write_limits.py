"""What one write of a cluster holds, from the settings a node shows: pure logic, no Cassandra.

The rule against a real node (and the memory store) is in tests/test_queue.py
(``test_max_message_bytes_is_bounded_by_what_the_cluster_takes_in_one_write``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest

from spark_queue.errors import BackendUnavailable, InvalidSetting, SparkQueueError
from spark_queue.store.session import Store
from spark_queue.store.write_limits import (
    DEFAULT_LIMIT,
    ROW_ROOM,
    check_max_message_bytes,
    parse_size,
    write_limit,
)

MIB = 1024 * 1024


class Node:
    """A store whose node shows ``settings`` (or raises ``error``) in ``system_views.settings``."""

    def __init__(self, settings: dict[str, str], error: Exception | None = None) -> None:
        self.settings = settings
        self.error = error

    def node_settings(self, names: Sequence[str]) -> dict[str, str]:
        if self.error is not None:
            raise self.error
        return {n: v for n, v in self.settings.items() if n in names}


def store(settings: dict[str, str], error: Exception | None = None) -> Store:
    return cast(Store, Node(settings, error))


@pytest.mark.parametrize(
    ("text", "unit", "size"),
    [
        ("16384KiB", 1, 16 * MIB),
        ("16MiB", 1, 16 * MIB),
        ("16777216B", 1, 16 * MIB),
        ("1GiB", 1, 1024 * MIB),
        ("16", MIB, 16 * MIB),  # Cassandra 4.0: the unit is in the setting's name
        ("null", 1, None),
        ("", 1, None),
        ("16 MB", 1, None),
    ],
)
def test_a_size_is_read_as_a_node_shows_it(text: str, unit: int, size: int | None) -> None:
    assert parse_size(text, unit) == size


def test_the_smallest_limit_of_a_node_bounds_a_message() -> None:
    # Cassandra 5.0 with its defaults but a smaller frame
    node = store(
        {
            "max_mutation_size": "16384KiB",
            "commitlog_segment_size": "32MiB",
            "native_transport_max_message_size": "16777216B",
            "native_transport_max_frame_size": "8MiB",
        }
    )

    limit = write_limit(node)

    assert limit.largest == 8 * MIB - ROW_ROOM
    assert limit.reason == "native_transport_max_frame_size 8MiB on the node that answered"


def test_without_a_mutation_size_half_the_commitlog_segment_bounds_it() -> None:
    # Cassandra 4.0: units in the names, and max_mutation_size_in_kb left unset (null)
    node = store(
        {"commitlog_segment_size_in_mb": "8", "native_transport_max_frame_size_in_mb": "16"}
    )

    limit = write_limit(node)

    assert limit.largest == 4 * MIB - ROW_ROOM
    assert "half of commitlog_segment_size_in_mb 8" in limit.reason


@pytest.mark.parametrize(
    "node",
    [store({}), store({}, SparkQueueError("reading the cluster's settings: unconfigured table"))],
    ids=["not shown", "unreadable"],
)
def test_a_node_that_shows_no_limit_is_taken_to_have_cassandras_defaults(node: Store) -> None:
    limit = write_limit(node)

    assert limit.largest == DEFAULT_LIMIT - ROW_ROOM
    assert "could not be read" in limit.reason


def test_an_unreachable_cluster_is_raised_not_taken_for_the_defaults() -> None:
    with pytest.raises(BackendUnavailable):
        write_limit(store({}, BackendUnavailable("no host answered")))


def test_a_value_over_the_limit_is_refused_naming_the_value_the_rule_and_the_largest() -> None:
    node = store({"max_mutation_size": "1024KiB"})
    largest = MIB - ROW_ROOM

    check_max_message_bytes(node, largest)
    with pytest.raises(
        InvalidSetting,
        match=rf"max_message_bytes {largest + 1}: over what one write of this cluster may hold"
        rf" \(max_mutation_size 1024KiB on the node that answered, less {ROW_ROOM} bytes.*"
        rf" choose at most {largest}",
    ):
        check_max_message_bytes(node, largest + 1)
