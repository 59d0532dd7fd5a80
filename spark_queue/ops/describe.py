"""A queue described for an operator: its settings, its consumers, and its backlog per lane.

What ``kafka-consumer-groups --describe`` shows for a group, ``describe``
shows for a queue: who owns each lane (plain consumers) and each bucket or
slice (Spark queries), when that owner last renewed it and how long it has
left, and per lane the messages waiting and the age of the oldest. Messages
stored with a negative lane were sent without a key and are shown as
``keyless``; rows older than lanes count as lane 0.

It reads every live bucket (``store/consumer_reads.py``): the cost grows with
the backlog, like ``stats(exact=True)``, and nothing is written.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from spark_queue.client import QueueClient
from spark_queue.config import QueueSettings
from spark_queue.store.consumer_reads import (
    OwnerRow,
    bucket_owners,
    lane_owners,
    unacked_rows,
)

#: The lane key under which keyless messages are grouped.
KEYLESS = "keyless"


@dataclass(frozen=True)
class Holder:
    """Who owns a key now.

    Attributes:
        owner: The owner's name (``lanes-...`` for a plain consumer, the Spark
            query's for a query).
        renewed_at: When its row was last written: a take or a renewal (UTC).
        expires_in: Seconds left before the key is free unless renewed.
    """

    owner: str
    renewed_at: datetime
    expires_in: float | None


@dataclass
class LaneBacklog:
    """One lane: its owner and what waits in it.

    Attributes:
        lane: The lane number, or ``"keyless"``.
        holder: Its owner, None when free.
        visible: Messages a receive could take now.
        in_flight: Messages received and leased.
        delayed: Messages sent with a delay not yet passed.
        oldest_age: Seconds since the oldest of them was sent; None when there is none.
    """

    lane: int | str
    holder: Holder | None = None
    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    oldest_age: float | None = None

    @property
    def backlog(self) -> int:
        """Every unacked, unexpired message of the lane."""
        return self.visible + self.in_flight + self.delayed


@dataclass(frozen=True)
class BucketHolder:
    """A bucket, or a slice of one, owned by a Spark query."""

    bucket: int
    slice: int
    holder: Holder


@dataclass
class Description:
    """What ``bdq queue describe`` shows.

    Attributes:
        name: The queue.
        queue_id: Its incarnation.
        settings: Its settings.
        dead_letter_sources: Queues whose dead letters come here.
        live_buckets: Buckets not dropped yet.
        lanes: Each lane of the queue, then keyless messages when there are some.
        buckets: Buckets and slices owned, by bucket and slice.
    """

    name: str
    queue_id: str
    settings: QueueSettings
    dead_letter_sources: list[str]
    live_buckets: int
    lanes: list[LaneBacklog] = field(default_factory=list)
    buckets: list[BucketHolder] = field(default_factory=list)

    def consumers(self) -> dict[str, dict[str, list[int | str]]]:
        """Each owner with the lanes and buckets it holds (``bucket/slice`` strings)."""
        found: dict[str, dict[str, list[int | str]]] = defaultdict(
            lambda: {"lanes": [], "buckets": []}
        )
        for lane in self.lanes:
            if lane.holder is not None:
                found[lane.holder.owner]["lanes"].append(lane.lane)
        for held in self.buckets:
            found[held.holder.owner]["buckets"].append(f"{held.bucket}/{held.slice}")
        return dict(sorted(found.items()))


def describe(client: QueueClient, name: str) -> Description:
    """Read queue ``name``'s settings, owners and backlog per lane.

    Raises:
        QueueNotFound: No such queue.
    """
    queue = client.queue(name)
    store, queue_id = queue.buckets.store, queue.buckets.queue_id
    settings = queue.settings
    live = queue.live_buckets()
    now_ms = int(time.time() * 1000)
    lanes: dict[int | str, LaneBacklog] = {n: LaneBacklog(n) for n in range(settings.lanes)}
    for row in lane_owners(store, queue_id):
        lanes.setdefault(row.slice, LaneBacklog(row.slice)).holder = _holder(row)
    for message in unacked_rows(store, queue_id, live):
        if message.expires_ms <= now_ms:
            continue  # expired: gone for every reader
        key: int | str = KEYLESS if (message.lane or 0) < 0 else (message.lane or 0)
        lane = lanes.setdefault(key, LaneBacklog(key))
        if message.visible_ms <= now_ms:
            lane.visible += 1
        elif message.delivery_count > 0:
            lane.in_flight += 1
        else:
            lane.delayed += 1
        age = max(0.0, (now_ms - message.enqueued_ms) / 1000)
        lane.oldest_age = age if lane.oldest_age is None else max(lane.oldest_age, age)
    numbered = sorted(k for k in lanes if isinstance(k, int))
    ordered = [lanes[k] for k in numbered] + ([lanes[KEYLESS]] if KEYLESS in lanes else [])
    held = [
        BucketHolder(r.bucket, r.slice, _holder(r)) for r in bucket_owners(store, queue_id, live)
    ]
    return Description(
        name=name,
        queue_id=str(queue_id),
        settings=settings,
        dead_letter_sources=client.dead_letter_sources(name),
        live_buckets=len(live),
        lanes=ordered,
        buckets=held,
    )


def _holder(row: OwnerRow) -> Holder:
    return Holder(
        owner=row.owner,
        renewed_at=datetime.fromtimestamp(row.written_us / 1_000_000, tz=UTC),
        expires_in=None if row.ttl is None else float(row.ttl),
    )
