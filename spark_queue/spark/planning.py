"""Planning a micro-batch over several queues: which buckets, and how many messages each.

A step names its partitions as ``(queue, bucket, share)``. Planning takes the
buckets holding visible messages of each queue (oldest first) and deals them
out round-robin, one queue after the other, so a busy queue cannot starve
the others, until the batch's message limit or the partition limit is spent.
Buckets of one queue then share input partitions (``group_buckets``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest

from spark_queue.defaults import MAX_BATCH

#: Messages one input partition reads at most when it groups several buckets.
PARTITION_MESSAGES = 5000


@dataclass(frozen=True)
class Part:
    """One input partition of a step: up to ``share`` messages from one bucket of one queue."""

    queue: str
    bucket: int
    share: int


def plan(
    found: Sequence[Sequence[tuple[str, int, int]]], max_messages: int, max_partitions: int
) -> list[Part]:
    """The partitions of a step.

    Args:
        found: Per queue, its ``(queue, bucket, bucket_size)`` with visible
            messages, oldest bucket first.
        max_messages: The batch's limit, spent oldest bucket first per queue.
        max_partitions: Most partitions (buckets) a step reads.

    Returns:
        Round-robin over the queues; each share up to a bucket's worth (and
        one receive's MAX_BATCH).
    """
    parts: list[Part] = []
    left = max_messages
    dealt = chain.from_iterable(zip_longest(*found))
    for entry in dealt:
        if entry is None:
            continue
        if left <= 0 or len(parts) >= max_partitions:
            break
        queue, bucket, size = entry
        share = min(size, left, MAX_BATCH)
        parts.append(Part(queue, bucket, share))
        left -= share
    return parts


def grouped_partition_messages() -> int:
    """Most messages of an input partition that groups several buckets (``group_buckets``)."""
    return min(PARTITION_MESSAGES, MAX_BATCH)


def group_buckets(parts: Sequence[tuple[str, int]]) -> tuple[int, ...]:
    """The input partition of each planned ``(queue, share)``: fewer, larger tasks.

    Spark's cost per task (scheduling, a Python worker round, the Arrow hand-over)
    was about twice a 1000-message bucket's own read, so buckets of one queue
    share a partition up to ``PARTITION_MESSAGES`` messages (and one receive's
    MAX_BATCH). A bucket larger than that keeps a partition of its own.
    """
    most = grouped_partition_messages()
    partition_of: list[int] = []
    open_group: dict[str, tuple[int, int]] = {}  # queue -> (partition, messages in it)
    count = 0
    for queue, share in parts:
        current = open_group.get(queue)
        if current is not None and current[1] + share <= most:
            partition_of.append(current[0])
            open_group[queue] = (current[0], current[1] + share)
        else:
            partition_of.append(count)
            open_group[queue] = (count, share)
            count += 1
    return tuple(partition_of)
