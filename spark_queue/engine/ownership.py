"""Ownership: short, renewable claims of buckets (or slices of buckets) by one consumer.

Seed 004 (Astyanax) guards each shard with a row lock so that consumers
never collide; Kafka hands each consumer of a group its own partitions. Here
the unit is a **key** ``(bucket, slice)``: slice ``s`` of a bucket is a
contiguous range of its ids (``slice_range``), and slice 0 of a queue cut in
one slice per bucket is the whole bucket. A consumer that owns a key is the
only one receiving from it until its ownership ends.

The table ``ownership`` holds one row per owned key, keyed by
``(queue_id, bucket)`` with ``slice`` as clustering column, so every slice of
a bucket sits in one partition and the changes of one call go in one
conditional batch per bucket (its statements: ``store/owners.py``). A row
carries its owner and lives for the period by TTL: an owner that stops
renewing (crash, SIGKILL, lost network) loses the key when the row expires,
with nothing to clean up.

Cost: one lightweight transaction per bucket per call (``take``, ``renew``,
``release``), whatever the number of slices, when no other owner interferes;
a batch whose conditions do not all hold is applied as a whole or not at all,
so on a conflict the keys of that bucket are tried again one by one. A
consumer renewing every third of the period pays about three LWTs per key
per period, never one per message.

Time bounds. Cassandra keeps TTLs in whole seconds from the second the
replica applies the write, so the row is written with ``TTL ceil(period) +
1``: a key granted by a call that *started* at monotonic time ``t`` is held
until ``t + period`` at least (the caller's safe deadline, ``Grant.until``),
and it expires at most ``ceil(period) + 1`` seconds after the call returned.
That second number is the takeover bound: another consumer may take the key
from then on.

The calls are cheap enough for a Spark driver (issue 9: two queries sharing a
queue split its buckets) as well as for every receive of a consumer.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from spark_queue.errors import InvalidSetting
from spark_queue.store.owners import Key, OwnerTable
from spark_queue.store.session import Store

#: Shortest period accepted: below it the TTL's whole seconds dominate.
MIN_PERIOD = 1.0
#: Longest period accepted.
MAX_PERIOD = 3600.0


def ttl_of(period_s: float) -> int:
    """The row TTL for a period: whole seconds, one more for the replica's truncation."""
    return math.ceil(period_s) + 1


def check_period(period_s: float) -> float:
    """``period_s`` if it is a number of seconds ownership may last; else InvalidSetting."""
    if (
        isinstance(period_s, bool)
        or not isinstance(period_s, int | float)
        or not MIN_PERIOD <= period_s <= MAX_PERIOD
    ):
        raise InvalidSetting(
            f"period_s = {period_s!r}: ownership must last between {MIN_PERIOD:g} and"
            f" {MAX_PERIOD:g} seconds, such as 30"
        )
    return float(period_s)


def check_owner(owner: str) -> str:
    """``owner`` if it is a non-empty string; else InvalidSetting."""
    if not isinstance(owner, str) or not owner:
        raise InvalidSetting(f"owner = {owner!r}: must be a non-empty string naming the consumer")
    return owner


def check_keys(keys: Iterable[Key]) -> list[Key]:
    """The keys, each a ``(bucket, slice)`` pair of non-negative ints, without repeats."""
    out: list[Key] = []
    for key in keys:
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in key)
        ):
            raise InvalidSetting(
                f"ownership key {key!r}: must be a (bucket, slice) pair of non-negative ints"
            )
        if key not in out:
            out.append(key)
    return out


def slice_width(bucket_size: int, slices: int) -> int:
    """Ids per slice when a bucket of ``bucket_size`` ids is cut in ``slices``."""
    return -(-bucket_size // max(1, min(slices, bucket_size)))


def slice_range(bucket: int, piece: int, bucket_size: int, slices: int) -> tuple[int, int]:
    """Ids ``[start, end)`` of slice ``piece`` of ``bucket``: contiguous, in id order."""
    width = slice_width(bucket_size, slices)
    base = bucket * bucket_size
    return base + piece * width, min(base + (piece + 1) * width, base + bucket_size)


def slice_of(message_id: int, bucket_size: int, slices: int) -> Key:
    """The key ``(bucket, slice)`` holding ``message_id``."""
    bucket = message_id // bucket_size
    return bucket, (message_id - bucket * bucket_size) // slice_width(bucket_size, slices)


def slice_count(bucket_size: int, slices: int) -> int:
    """How many slices a bucket really has (fewer than asked when they would be empty)."""
    return -(-bucket_size // slice_width(bucket_size, slices))


def new_owner(label: str = "") -> str:
    """A fresh owner name, unique among processes and handles."""
    return f"{label or 'consumer'}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class Grant:
    """Keys held after a ``take`` or ``renew``.

    Attributes:
        keys: The keys held, in the order asked.
        until: Monotonic time until which they are surely held (the call's
            start plus the period): act as their owner only before it.
    """

    keys: list[Key]
    until: float


class Ownership:
    """The owners of one queue's buckets and slices (see the module doc).

    Args:
        store: The Cassandra session.
        queue_id: The queue incarnation.
        table: The table of owners: ``ownership`` (buckets and slices, the
            Spark source) or ``lane_ownership`` (lanes, ``lanes.py``), both
            of the same columns.
    """

    def __init__(self, store: Store, queue_id: uuid.UUID, table: str = "ownership") -> None:
        self.queue_id = queue_id
        self._table = OwnerTable(store, queue_id, table)

    def take(
        self, owner: str, keys: Iterable[Key], period_s: float, *, piecemeal: bool = True
    ) -> Grant:
        """Take the keys no live consumer owns; renew those ``owner`` holds already.

        Args:
            owner: Who takes them (``new_owner()``).
            keys: ``(bucket, slice)`` pairs.
            period_s: Seconds the ownership lasts unless renewed.
            piecemeal: When a bucket's batch does not apply (a key there is
                not free), try its keys one by one. Without it that bucket's
                keys are lost at the cost of one batch: for a caller that
                reads the owners again and asks for free keys only.

        Returns:
            The keys ``owner`` now holds, and until when.

        Raises:
            InvalidSetting: A bad owner, key or period (nothing is written).
        """
        owner, wanted, period = check_owner(owner), check_keys(keys), check_period(period_s)
        started = time.monotonic()
        ttl = ttl_of(period)
        won = self._table.insert_free(owner, wanted, ttl, piecemeal=piecemeal)
        if not piecemeal:
            return Grant([k for k in wanted if k in won], started + period)
        # A key this owner holds already is not free, yet it is ours: renew it.
        taken_by_others = [k for k in wanted if k not in won]
        mine = [k for k, o in self.owners(taken_by_others).items() if o == owner]
        renewed = self._table.extend(owner, mine, ttl) if mine else set()
        return Grant([k for k in wanted if k in won or k in renewed], started + period)

    def renew(self, owner: str, keys: Iterable[Key], period_s: float) -> Grant:
        """Extend ``owner``'s keys by another period; keys it lost are left out.

        Returns:
            The keys still held, and until when.
        """
        owner, wanted, period = check_owner(owner), check_keys(keys), check_period(period_s)
        started = time.monotonic()
        kept = self._table.extend(owner, wanted, ttl_of(period))
        return Grant([k for k in wanted if k in kept], started + period)

    def release(self, owner: str, keys: Iterable[Key]) -> list[Key]:
        """Give keys up so that others may take them at once; return those released."""
        owner, wanted = check_owner(owner), check_keys(keys)
        done = self._table.delete_own(owner, wanted)
        return [k for k in wanted if k in done]

    def owners(self, keys: Iterable[Key]) -> dict[Key, str]:
        """The live owner of each key that has one (a plain read, one query per bucket)."""
        wanted = set(check_keys(keys))
        live = self._table.live_owners(bucket for bucket, _ in wanted)
        return {key: who for key, who in live.items() if key in wanted}

    def owned_in(self, buckets: Iterable[int]) -> dict[Key, str]:
        """Every live owner of a slice of ``buckets`` (one query per bucket)."""
        return self._table.live_owners(buckets)
