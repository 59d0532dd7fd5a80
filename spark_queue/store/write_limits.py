"""What one write may hold, read from the cluster: the bound of ``max_message_bytes``.

Cassandra refuses a mutation over ``max_mutation_size`` (half of
``commitlog_segment_size`` unless set: 16 MiB by default) and a request over
``native_transport_max_message_size`` (protocol v5) or
``native_transport_max_frame_size`` (v4 and earlier), 16 MiB each by default. A
message's row is one mutation, sent in one request, so the largest
``max_message_bytes`` a queue may have is the smallest of these less
``ROW_ROOM``, room for the row's other columns and the request's framing.

The limits are read from the coordinator's ``system_views.settings`` when a
queue is created with a ``max_message_bytes`` or its ``max_message_bytes`` is
changed; a node that does not answer there (before Cassandra 4.0, or a role
that may not read it) is taken to have Cassandra's defaults. Nodes may be
configured apart and their settings changed later: the check knows the node
that answered. Whatever a node refuses, a send writes all of a batch or none of
it (``engine/sending.py``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from spark_queue.errors import BackendUnavailable, InvalidSetting, SparkQueueError
from spark_queue.store.session import Store

__all__ = [
    "DEFAULT_LIMIT",
    "ROW_ROOM",
    "WriteLimit",
    "check_max_message_bytes",
    "parse_size",
    "write_limit",
]

log = logging.getLogger(__name__)

#: Cassandra's default of each limit below: 16 MiB.
DEFAULT_LIMIT = 16 * 1024 * 1024
#: Bytes a message's row and request take besides payload, headers and key (a few
#: hundred in fact: the room is wide so that no node's framing comes near it).
ROW_ROOM = 64 * 1024

_KIB, _MIB = 1024, 1024 * 1024
#: Each setting read: its name since Cassandra 4.1 (values with a unit, "16MiB") and in
#: 4.0 (a number in the unit its name says), as (limit, unit of a bare number).
_SETTINGS = {
    "max_mutation_size": ("max_mutation_size", 1),
    "max_mutation_size_in_kb": ("max_mutation_size", _KIB),
    "commitlog_segment_size": ("commitlog_segment_size", _MIB),
    "commitlog_segment_size_in_mb": ("commitlog_segment_size", _MIB),
    "native_transport_max_message_size": ("native_transport_max_message_size", 1),
    "native_transport_max_frame_size": ("native_transport_max_frame_size", _MIB),
    "native_transport_max_frame_size_in_mb": ("native_transport_max_frame_size", _MIB),
}
_UNITS = {"B": 1, "KiB": _KIB, "MiB": _MIB, "GiB": 1024 * _MIB}
_SIZE = re.compile(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*")


def parse_size(text: str, unit: int = 1) -> int | None:
    """Bytes of a size as a node shows it ("16384KiB", "16777216B"; a bare number in ``unit``).

    None for anything else (a null, a setting left to its default shown as text).
    """
    match = _SIZE.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)) * (_UNITS[match.group(2)] if match.group(2) else unit)


@dataclass(frozen=True, slots=True)
class WriteLimit:
    """The largest ``max_message_bytes`` a cluster takes, and what bounds it (for messages)."""

    largest: int
    reason: str


def write_limit(store: Store) -> WriteLimit:
    """The largest ``max_message_bytes`` the node answering ``store`` takes in one write."""
    try:
        found = store.node_settings(list(_SETTINGS))
    except BackendUnavailable:
        raise
    except SparkQueueError as e:  # no such table, or no permission to read it
        log.info("the cluster's write limits could not be read; assuming the defaults: %s", e)
        found = {}
    limits: dict[str, tuple[int, str]] = {}
    for name, text in found.items():
        limit, unit = _SETTINGS[name]
        size = parse_size(str(text), unit)
        if size is not None and size > 0:
            limits.setdefault(limit, (size, f"{name} {text}"))
    if "max_mutation_size" not in limits and "commitlog_segment_size" in limits:
        size, said = limits["commitlog_segment_size"]
        limits["max_mutation_size"] = (size // 2, f"half of {said}")
    limits.pop("commitlog_segment_size", None)
    if not limits:
        return WriteLimit(
            DEFAULT_LIMIT - ROW_ROOM,
            f"Cassandra's default of {DEFAULT_LIMIT} bytes a write; this cluster's own"
            " settings could not be read",
        )
    size, said = min(limits.values())
    return WriteLimit(size - ROW_ROOM, f"{said} on the node that answered")


def check_max_message_bytes(store: Store, value: int) -> None:
    """InvalidSetting unless a message of ``value`` bytes fits in one write of the cluster."""
    limit = write_limit(store)
    if value > limit.largest:
        raise InvalidSetting(
            f"max_message_bytes {value}: over what one write of this cluster may hold"
            f" ({limit.reason}, less {ROW_ROOM} bytes for the rest of a message's row);"
            f" choose at most {limit.largest}"
        )
