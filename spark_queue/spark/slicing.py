"""``minPartitions``: split the busiest buckets of a step into id slices read by different tasks.

A step normally reads each planned bucket in one task. When a backlog sits in
fewer buckets than ``minPartitions``, the busiest planned parts (largest
shares) are split into slices of ids, each read by its own task:

* a split part's visible ids (no payloads, at most its share) are read once
  while planning and cut into runs of nearly equal counts; the slices' bounds
  cover the whole bucket, first to last id, so none overlap and no id is left
  out, and each slice's share is its run's count (the step leases no more
  than before);
* the slices are written in the offset, so a replay splits the same way, and
  each slice is its own part of the step: its deliveries are recorded and
  acked, and its leases renewed, like a whole bucket's;
* the driver owns the whole bucket for the step (ownership key ``(bucket,
  0)``), as for an unsplit one: the slices are tasks of one query, so no other
  query may take any of them, and slice bounds that move from step to step
  never have to be agreed on with another owner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spark_queue.message import Delivery
from spark_queue.queue import Queue
from spark_queue.spark.offsets import Slice
from spark_queue.spark.planning import Part
from spark_queue.store.message_values import now_ms

if TYPE_CHECKING:
    from spark_queue.spark.partitions import BucketPartition

#: Visible ids of a part, oldest first, at most its share.
VisibleIds = Callable[[Part], Sequence[int]]


def slice_counts(shares: Sequence[int], wanted: int) -> list[int]:
    """How many slices each part gets so that there are ``wanted`` partitions in all.

    One more slice at a time goes to the part with the most messages per
    slice, and no slice is smaller than one message; fewer partitions come
    out when the messages run short.
    """
    counts = [1] * len(shares)
    while sum(counts) < wanted:
        best = max(
            (i for i in range(len(shares)) if shares[i] > counts[i]),
            key=lambda i: shares[i] / counts[i],
            default=None,
        )
        if best is None:
            break
        counts[best] += 1
    return counts


def cut(ids: Sequence[int], pieces: int, first: int, end: int) -> list[tuple[Slice, int]]:
    """``(slice, share)`` of ``pieces`` runs of ``ids`` covering ``first <= id < end``.

    ``ids`` are the visible ids, ascending, inside the bucket's range.
    """
    pieces = max(1, min(pieces, len(ids)))
    sizes = [len(ids) // pieces + (1 if i < len(ids) % pieces else 0) for i in range(pieces)]
    result: list[tuple[Slice, int]] = []
    start, low = 0, first
    for i, size in enumerate(sizes):
        start += size
        high = end if i == pieces - 1 else ids[start]
        result.append(((low, high), size))
        low = high
    return result


def split(
    plan: Sequence[Part], wanted: int, bucket_size: Callable[[str], int], visible: VisibleIds
) -> list[tuple[Part, Slice | None]]:
    """``plan`` with its busiest parts split so that it has about ``wanted`` partitions.

    Args:
        plan: The step's parts, in plan order.
        wanted: ``minPartitions``.
        bucket_size: The bucket size of a queue.
        visible: Reads a part's visible ids (only for parts being split).

    Returns:
        Each part or slice with its id slice (None for a whole bucket), in plan
        order, a split part's slices in id order.
    """
    if len(plan) >= wanted:
        return [(p, None) for p in plan]
    result: list[tuple[Part, Slice | None]] = []
    for part, pieces in zip(plan, slice_counts([p.share for p in plan], wanted), strict=True):
        if pieces == 1:
            result.append((part, None))
            continue
        size = bucket_size(part.queue)
        first = part.bucket * size
        ids = sorted(i for i in visible(part) if first <= i < first + size)
        if len(ids) < 2:
            result.append((part, None))
            continue
        result += [
            (Part(part.queue, part.bucket, share), bounds)
            for bounds, share in cut(ids[: part.share], pieces, first, first + size)
        ]
    return result


def split_plan(
    plan: Sequence[Part], wanted: int | None, open_queue: Callable[[str], Queue]
) -> list[tuple[Part, Slice | None]]:
    """``split`` with the queues' bucket sizes and visible ids (no payloads) read from Cassandra."""
    if wanted is None or len(plan) >= wanted:
        return [(p, None) for p in plan]

    def visible(part: Part) -> list[int]:
        buckets = open_queue(part.queue).buckets
        return [c.id for c in buckets.scan_candidates(part.bucket, now_ms(), part.share)]

    return split(plan, wanted, lambda name: open_queue(name).settings.bucket_size, visible)


def receive_slice(queue: Queue, partition: BucketPartition, *, reclaim: bool) -> list[Delivery]:
    """In a task: the deliveries of one slice part (recorded, so a replay returns them again)."""
    assert partition.ids is not None
    options = partition.options
    return queue.steps.receive_slice(
        partition.stream,
        partition.step,
        partition.part,
        partition.max_messages,
        bucket=partition.buckets[0],
        ids=partition.ids,
        visibility_timeout=options.visibility_timeout,
        order_hint=options.order_hint,
        fail_on_data_loss=options.fail_on_data_loss,
        reclaim=reclaim,
    )
