"""The producer's bookkeeping: messages accepted, taken as a batch, and written per bucket.

``spark_queue.producer.Producer`` moves each message through these records:
accepted by ``send`` (``Accepted``), taken from the buffer with others
(``Batch``), written as one single-partition batch of one bucket
(``BucketWrite``), and answered by Cassandra (``Landed``).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_queue.engine.sending import Outgoing


@dataclass(slots=True)
class Accepted:
    """A message accepted by ``send``, waiting for its batch."""

    seq: int
    outgoing: Outgoing
    size: int
    at: float  # monotonic time of acceptance
    future: Future[int]


@dataclass(slots=True)
class Batch:
    """Messages taken from the buffer together: ``remaining`` of them are unresolved."""

    first_seq: int
    remaining: int


@dataclass(slots=True)
class BucketWrite:
    """One single-partition batch of one bucket, in flight."""

    batch: Batch
    items: list[Accepted]
    ids: list[tuple[int, float]]  # (id, monotonic time its block was requested)
    enqueued_at: int  # ms; a repair sends again with the same enqueue time
    statement: Any = None  # the write, repeated as it is after a transient failure
    params: Any = ()
    attempts: int = 0
    first_try: float = 0.0  # monotonic


Landed = tuple[BucketWrite, BaseException | None]  # a write Cassandra answered, and its error
