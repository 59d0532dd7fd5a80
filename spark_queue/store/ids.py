"""Monotonic message ids, handed out in blocks: one lightweight transaction per block.

CassieQ took one LWT per message from its ``monoton`` table; that caps a queue
at a few hundred sends a second (CassieQ issue 126). Here a writer reserves a
block of ids with one compare-and-set and hands them out from memory.

A block is only good for a while: every id carries the monotonic time at which
its block was requested, and a write that completes more than the queue's
``seal_delay`` after that time must check whether its bucket was sealed in the
meantime (see ``Queue``). Ids left over when a block grows old are dropped;
they become gaps, which readers never wait for.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from spark_queue.errors import BackendUnavailable, QueueNotFound
from spark_queue.store.session import Store

MIN_BLOCK = 16
MAX_BLOCK = 4096
CAS_ATTEMPTS = 50

ALLOCATE = "UPDATE {ks}.sequences SET next_id = ? WHERE queue_id = ? IF next_id = ?"
READ_NEXT = "SELECT next_id FROM {ks}.sequences WHERE queue_id = ?"


@dataclass(frozen=True, slots=True)
class IdBlock:
    """Ids ``start .. start + count - 1`` of a block requested at ``requested_at`` (monotonic).

    Called a block, never a lease: a lease is a delivery's token (see ``Receipt``).
    """

    start: int
    count: int
    requested_at: float

    @property
    def ids(self) -> range:
        return range(self.start, self.start + self.count)


class IdBlocks:
    """Hands out ids of one queue to the threads of one process.

    Args:
        store: Where the sequence lives.
        queue_id: The queue incarnation.
        queue_name: For error messages.
        lifetime: Seconds a block's ids may be handed out after it was requested.
        bucket_size: The queue's; bounds the block size.
    """

    def __init__(
        self,
        store: Store,
        queue_id: uuid.UUID,
        queue_name: str,
        lifetime: float,
        bucket_size: int,
    ) -> None:
        self._store = store
        # A block much larger than a bucket would spread reserved, empty ids
        # over buckets that readers must scan until they are sealed.
        self._max_block = min(MAX_BLOCK, max(bucket_size, MIN_BLOCK))
        self._queue_id = queue_id
        self._queue_name = queue_name
        self._lifetime = lifetime
        self._lock = threading.Lock()
        self._next = 0  # next id to hand out from the current block
        self._end = 0  # end (exclusive) of the current block
        self._requested_at = 0.0
        self._block = MIN_BLOCK
        self._known_next = 0  # our best knowledge of the sequence's next_id
        #: Highest next_id this process has seen (a cheap tail hint for readers).
        self.high_water = 0

    def take(self, count: int) -> list[IdBlock]:
        """Reserve ``count`` ids (consecutive within each block), allocating blocks as needed."""
        blocks: list[IdBlock] = []
        with self._lock:
            while count > 0:
                now = time.monotonic()
                if self._next >= self._end or now - self._requested_at > self._lifetime:
                    self._grow_or_shrink(now)
                    self._allocate(max(self._block, min(count, self._max_block)))
                n = min(count, self._end - self._next)
                blocks.append(IdBlock(self._next, n, self._requested_at))
                self._next += n
                count -= n
        return blocks

    def _grow_or_shrink(self, now: float) -> None:
        # A block used up quickly means a busy writer: fewer LWTs with bigger
        # blocks. A block that grew old means a slow one: smaller blocks, fewer gaps.
        if self._requested_at and self._next >= self._end:
            if now - self._requested_at < self._lifetime / 4:
                self._block = min(self._block * 2, self._max_block)
        elif self._requested_at:
            self._block = max(self._block // 2, MIN_BLOCK)

    def _allocate(self, size: int) -> None:
        # Other writers (processes) have likely moved the sequence since this
        # one's last block: a plain read costs less than a compare-and-set bound
        # to fail (a Spark sink's tasks alternate between two worker processes,
        # so each of its writes paid a failed one), and a busy writer's blocks
        # grow until allocations are rare.
        expected = max(self._known_next, self._read_next())
        for _ in range(CAS_ATTEMPTS):
            requested_at = time.monotonic()
            row = self._store.execute(
                ALLOCATE,
                (expected + size, self._queue_id, expected),
                what=f"allocating ids for queue {self._queue_name!r}",
            ).one()
            applied, current = row[0], (row[1] if len(row) > 1 else None)
            if applied:
                self._next, self._end = expected, expected + size
                self._requested_at = requested_at
                self._known_next = self.high_water = expected + size
                return
            if current is None:
                raise self._deleted()
            expected = current
            self.high_water = max(self.high_water, current)
        raise BackendUnavailable(
            f"queue {self._queue_name!r}: could not reserve ids after {CAS_ATTEMPTS} attempts"
            " (heavy contention on its id sequence); try again"
        )

    def _read_next(self) -> int:
        row = self._store.execute(
            READ_NEXT,
            (self._queue_id,),
            what=f"reading the id sequence of queue {self._queue_name!r}",
        ).one()
        if row is None:
            raise self._deleted()
        return int(row[0])

    def _deleted(self) -> QueueNotFound:
        return QueueNotFound(
            f"queue {self._queue_name!r}: it was deleted while in use (its id sequence"
            " is gone); create it again and open a new handle with client.queue()"
        )
