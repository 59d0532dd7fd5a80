"""Admission control by bytes: ``maxBytesPerTrigger``, applied while a step is planned.

pyspark 4.3 hands a source one ``ReadLimit`` at a time (``ReadMaxRows``,
``ReadMaxBytes``, ...) and has no composite of them, so the source keeps
Spark's default limit for messages (``maxMessagesPerTrigger``) and applies the
byte limit itself in ``latestOffset``, after the messages' limit, the
partition limit and ``minMessagesPerTrigger`` shaped the plan: the stricter
limit wins. A ``ReadMaxBytes`` Spark passes in is honoured the same way.

The driver learns sizes without reading payloads: each message row carries
its payload's size, written at send time (``payload_bytes``), and planning
reads ``(id, size)`` of at most the planned share of each planned part, oldest
first. The cost follows the batch, never the backlog.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxBytes

from spark_queue.queue import Queue
from spark_queue.spark.planning import Part
from spark_queue.store.buckets import visible_sizes
from spark_queue.store.message_values import now_ms

#: Payload sizes of the visible messages a part would lease, oldest first (at most its share).
Sizes = Callable[[Part], Sequence[int]]


def byte_limit(option: int | None, limit: ReadLimit) -> int | None:
    """The step's byte limit: the option's, or Spark's ``ReadMaxBytes``, whichever is lower."""
    given = [option] if option is not None else []
    if isinstance(limit, ReadMaxBytes):
        given.append(limit.max_bytes)
    return min(given) if given else None


def cap_bytes(plan: Sequence[Part], max_bytes: int, sizes: Sizes) -> list[Part]:
    """``plan`` cut so that its messages hold at most ``max_bytes`` of payload.

    Parts are taken in plan order (oldest bucket first, queues round-robin)
    and each share shrinks to the messages that fit; a part with none left is
    dropped. The first message always goes, however large, so one message
    above the limit still moves instead of stalling the stream.
    """
    result: list[Part] = []
    total = 0
    for part in plan:
        taken = 0
        full = False
        for size in sizes(part)[: part.share]:
            if total + size > max_bytes and (result or taken):
                full = True
                break
            total += size
            taken += 1
        if taken:
            result.append(replace(part, share=taken))
        if full:
            break
    return result


def visible_sizes_of(open_queue: Callable[[str], Queue]) -> Sizes:
    """``Sizes`` read from each part's bucket: at most its share, oldest first."""

    def sizes(part: Part) -> list[int]:
        buckets = open_queue(part.queue).buckets
        return [n for _, n in visible_sizes(buckets, part.bucket, now_ms(), part.share)]

    return sizes
