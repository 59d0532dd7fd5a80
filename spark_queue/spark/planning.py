"""Planning a micro-batch over several queues: which buckets, and how many messages each.

A step names its partitions as ``(queue, bucket, share)``. Planning takes the
buckets holding visible messages of each queue (oldest first) and deals them
out round-robin, one queue after the other, so a busy queue cannot starve
the others, until the batch's message limit or the partition limit is spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest

from spark_queue.defaults import MAX_BATCH


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
