"""The offset of the bdq source: one step of a stream, as Spark keeps it in the checkpoint.

A step is fixed when it is planned (``latestOffset``) and a replay after a
restart rebuilds its partitions from the offset alone, so everything that
decides what a partition reads is written here: the buckets, each one's
share, its queue, the id slice of a split bucket, and which incarnation of
each queue (its ``queue_id``) the stream was reading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_queue.errors import InvalidSetting

#: A part's id slice ``(first, end)``: ids ``first <= id < end`` of its bucket.
Slice = tuple[int, int]


@dataclass(frozen=True)
class Offset:
    """One step of the stream.

    ``buckets``, ``shares`` (messages each bucket's partition may lease),
    ``queues`` (the queue of each bucket) and ``slices`` (the id slice of each
    part of a split bucket) are fixed when the step is planned, so a replay
    splits the same way. ``incarnations`` maps each queue the stream reads to
    the ``queue_id`` (hex) it planned from, so a queue deleted and re-created
    under the stream is told from the one it was reading.

    Offsets written by older sources lack some fields: without ``queues`` the
    buckets belong to the one queue of the ``queue`` option (see ``parts``),
    without ``slices`` every part reads its whole bucket, without
    ``incarnations`` no incarnation is checked.
    """

    stream: str
    step: int
    buckets: tuple[int, ...] = ()
    shares: tuple[int, ...] = ()
    queues: tuple[str, ...] = ()
    incarnations: tuple[tuple[str, str], ...] = ()
    slices: tuple[Slice | None, ...] = ()
    #: The input partition of each bucket (``planning.group_buckets``); empty: one per bucket.
    partition_of: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "stream": self.stream,
            "step": self.step,
            "buckets": list(self.buckets),
            "shares": list(self.shares),
        }
        if self.queues:
            value["queues"] = list(self.queues)
        if self.incarnations:
            value["incarnations"] = dict(self.incarnations)
        if any(s is not None for s in self.slices):
            value["slices"] = [None if s is None else list(s) for s in self.slices]
        if self.partition_of:
            value["partitions"] = list(self.partition_of)
        return value

    @property
    def incarnation(self) -> dict[str, str]:
        """``queue_id`` (hex) of each queue the stream read when this step was planned."""
        return dict(self.incarnations)

    def parts(self, queues: Sequence[str]) -> list[tuple[str, int, int]]:
        """``(queue, bucket, share)`` of each partition; ``queues`` is the ``queue`` option.

        Raises:
            InvalidSetting: An offset without queue names (written by an older
                source) while the source does not read exactly one queue.
        """
        if self.queues or not self.buckets:
            return list(zip(self.queues, self.buckets, self.shares, strict=True))
        if len(queues) != 1:
            raise InvalidSetting(
                f"offset of step {self.step}: written by a bdq source that read one queue and"
                " did not name it; restart this checkpoint with option 'queue' set to that"
                " single queue (a list or 'queuePattern' can start a new checkpoint)"
            )
        return [(queues[0], b, n) for b, n in zip(self.buckets, self.shares, strict=True)]

    def part_slices(self) -> list[Slice | None]:
        """The id slice of each part, None for a whole bucket."""
        return list(self.slices) if self.slices else [None] * len(self.buckets)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Offset:
        try:
            offset = cls(
                str(value["stream"]),
                int(value["step"]),
                tuple(int(b) for b in value.get("buckets", ())),
                tuple(int(n) for n in value.get("shares", ())),
                tuple(str(q) for q in value.get("queues", ())),
                incarnations_of(value.get("incarnations", {})),
                tuple(
                    None if s is None else (int(s[0]), int(s[1])) for s in value.get("slices", ())
                ),
                tuple(int(p) for p in value.get("partitions", ())),
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            offset = None
            cause: Exception | None = e
        else:
            cause = None
        if (
            offset is None
            or len(offset.shares) != len(offset.buckets)
            or len(offset.queues) not in (0, len(offset.buckets))
            or len(offset.slices) not in (0, len(offset.buckets))
            or len(offset.partition_of) not in (0, len(offset.buckets))
            or any(p < 0 for p in offset.partition_of)
        ):
            raise InvalidSetting(
                f"offset {json.dumps(value)}: not a bdq offset"
                " (was the checkpoint written by another source?)"
            ) from cause
        return offset


def incarnations_of(value: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The canonical (sorted) form of a ``{queue: queue_id hex}`` map."""
    return tuple(sorted((str(k), str(v)) for k, v in value.items()))
