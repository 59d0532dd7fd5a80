"""Lanes: units of order, each received by one consumer at a time (Kafka's partitions).

Why. Consumers that take the head of a queue one chunk at a time keep its
order but move it one chunk per conditional lease, however many they are;
consumers taking different chunks side by side deliver one producer's
messages out of order. Kafka answers both with order per key: a key's
messages go to one partition, and a partition is read by one consumer of a
group at a time, in order. Here that unit is the **lane**.

* **A message's lane** is written with it (the ``lane`` column of
  ``messages``): ``crc32(key) % lanes`` when the sender gives a key. A keyless
  message of a queue of several lanes needs no order and takes no lane: its
  lane is ``KEYLESS`` and any number of consumers receive it through shares
  (``shares.py``), so a lone producer's messages reach every consumer. In a
  queue of one lane, every message is in lane 0: the whole queue is one unit
  of order. Rows written before lanes existed count as lane 0.
* **Ownership of lanes.** A plain consumer (a handle receiving without naming
  buckets) receives only from lanes it owns, queue-wide, in the table
  ``lane_ownership`` (one partition per queue, one row per owned lane, owner
  and TTL; the rows and calls of ``ownership.py``). Taking or renewing costs a
  lightweight transaction, renewals of all of a consumer's lanes go in one
  conditional batch, at a third of the period (``LANE_PERIOD``); a lane found
  without messages for a third of the period is released instead.
* **Fair sharing without a coordinator.** A consumer whose lanes come up
  short (or that owns none) looks for lanes with visible messages that no
  live consumer owns (the owners' one partition, then the lane and
  visibility columns of a few head buckets, no payloads) and takes ONE of
  them: the free lane of the oldest visible message first, the next one when
  another consumer took that first; so three consumers on three busy lanes
  end up with one each, and a lone consumer takes lanes oldest first. After
  a fruitless look it waits ``LANE_LOOK_PAUSE`` seconds before the next,
  doubling up to ``LANE_LOOK_PAUSE_MAX``. A consumer owning busy lanes takes
  one more free busy lane per renewal, so a lone consumer ends up serving all
  of them. When every lane with keyed messages is owned by others, a
  consumer receives only keyless messages (Kafka: consumers beyond the number
  of partitions idle; its share groups, like shares here, do not).
* **Takeover.** An owner that stops renewing (crash, SIGKILL, lost network)
  loses its lanes when their rows expire, at most ``ceil(period) + 1``
  seconds after its last renewal (the bound of ``ownership.py``); a closed
  client releases its lanes at once. Its in-flight deliveries come back when
  their visibility timeout ends, as before. The period is ``LANE_PERIOD``,
  shortened for a queue whose visibility timeout is shorter (``lane_period``)
  so that the rows expire no later than the leases written at the last
  renewal: the messages come back to a successor when they come due, not up
  to a period later.

The receive of an owner (``receiving.py``) leases with plain writes, only
while its grant is surely held (``Grant.until``), since nobody else leases in
its lanes. This module is the pure logic and the owner's bookkeeping.
"""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from spark_queue.defaults import (
    LANE_LOOK_PAUSE,
    LANE_LOOK_PAUSE_MAX,
    LANE_PERIOD,
    LANE_PERIOD_MIN,
    LANE_TRIES,
)
from spark_queue.engine.ownership import Ownership, check_period, new_owner
from spark_queue.errors import InvalidMessage
from spark_queue.store.owners import Key
from spark_queue.store.session import Store

#: The ``bucket`` column of every lane row: one partition per queue.
LANE_GROUP = 0

#: Reads lanes with visible messages, given the lanes owned (by anyone) already.
BusyLanes = Callable[[Collection[int]], Collection[int]]

#: The lane of a keyless message in a queue of several lanes: in no lane, read by shares.
KEYLESS = -1


def check_key(key: object) -> str | None:
    """``key`` if it may key one message (a str, or None); else InvalidMessage."""
    if key is not None and not isinstance(key, str):
        raise InvalidMessage(f"key {key!r}: must be a str (the unit of order), or None")
    return key


def lane_of(key: str, lanes: int) -> int:
    """The lane of a message sent with ``key``: ``crc32(key) % lanes`` (stable everywhere)."""
    if check_key(key) is None:
        raise InvalidMessage("key None: a lane of a key needs a str")
    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidMessage(
            f"key {key!r}: not valid Unicode text ({e.reason} at position {e.start});"
            " text must encode as UTF-8"
        ) from e
    return zlib.crc32(data) % lanes


def lane_for(key: str | None, lanes: int) -> int:
    """The lane a message is written in: its key's, else ``KEYLESS`` (0 in a one-lane queue)."""
    if key is None:
        return KEYLESS if lanes > 1 else 0
    return lane_of(key, lanes)


def free_lanes(busy: Iterable[int], owners: Collection[int]) -> list[int]:
    """The lanes with visible messages that no live consumer owns, in ``busy``'s order.

    ``busy`` lists the lane of the oldest visible message first, so a lone
    consumer takes the queue's lanes oldest first (close to the send order
    across lanes), and consumers looking at once try the same lane, one wins
    it and the others go on to the next.
    """
    return [lane for lane in dict.fromkeys(busy) if lane not in owners]


@dataclass
class OwnedLane:
    """A lane this consumer owns: until when surely, and when it last had messages."""

    until: float
    busy_at: float


def lane_period(visibility_timeout: float) -> float:
    """The lanes' (and shares') period for a queue's visibility timeout, in seconds.

    ``LANE_PERIOD`` at most, and short enough that an owner's rows, which
    expire ``ceil(period) + 1`` seconds after a renewal, are gone no later
    than a lease written at that renewal runs out; never below
    ``LANE_PERIOD_MIN``, so that a queue with a visibility timeout of a few
    seconds still renews at most once a second. A receive that passes a
    shorter timeout of its own keeps the queue's period.

    Two clocks meet here: the rows expire by the node's, the leases end by
    the receiver's (``visible_at`` is its now plus the timeout). Under skew a
    successor takes over that much earlier or later, nothing more: a lane
    taken before the leases in it end hands out nothing early, as its
    messages stay invisible until then.
    """
    fitting = math.floor(visibility_timeout) - 1
    return float(max(LANE_PERIOD_MIN, min(LANE_PERIOD, fitting)))


@dataclass
class LaneOwner:
    """The lanes one queue handle owns (see the module doc); safe to share between threads.

    Args:
        store: The Cassandra session.
        queue_id: The queue incarnation.
        lanes: How many lanes the queue has.
        period: Seconds an ownership lasts unless renewed.
    """

    store: Store
    queue_id: uuid.UUID
    lanes: int
    period: float = LANE_PERIOD
    owner: str = field(default_factory=lambda: new_owner("lanes"))
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.period = check_period(self.period)
        self._ownership = Ownership(self.store, self.queue_id, table="lane_ownership")
        self._lock = threading.Lock()
        self._owned: dict[int, OwnedLane] = {}
        self._renew_at = 0.0
        self._look_at = 0.0
        self._pause = LANE_LOOK_PAUSE

    # -- what a receive asks --------------------------------------------------------

    def safe_lanes(self, margin: float = 0.0) -> list[int]:
        """The lanes held for at least ``margin`` more seconds, in a rotating order."""
        now = time.monotonic()
        with self._lock:
            lanes = [lane for lane, o in self._owned.items() if o.until - margin > now]
        self.rng.shuffle(lanes)  # no lane starves the others of a handle's receives
        return lanes

    def holds(self, lane: int, margin: float = 0.0) -> bool:
        """Whether ``lane`` is surely still ours ``margin`` seconds from now."""
        with self._lock:
            owned = self._owned.get(lane)
        return owned is not None and owned.until - margin > time.monotonic()

    def note(self, lane: int, found: bool) -> None:
        """A receive found messages in ``lane`` (or none): idle lanes are released later."""
        if found:
            with self._lock:
                owned = self._owned.get(lane)
                if owned is not None:
                    owned.busy_at = time.monotonic()

    # -- ownership calls ------------------------------------------------------------

    def keep(self, busy_lanes: BusyLanes) -> None:
        """Renew at a third of the period; release idle lanes; take one more free busy lane."""
        now = time.monotonic()
        with self._lock:
            if now < self._renew_at:
                return
            self._renew_at = now + self.period / 3  # sibling threads skip meanwhile
            idle = [k for k, o in self._owned.items() if now - o.busy_at > self.period / 3]
            kept = [k for k in self._owned if k not in idle]
        if idle:
            self._ownership.release(self.owner, [(LANE_GROUP, k) for k in idle])
        grant = self._ownership.renew(self.owner, [(LANE_GROUP, k) for k in kept], self.period)
        with self._lock:
            held = {lane for _, lane in grant.keys}
            for lane in idle + kept:
                if lane in held and lane in self._owned:
                    self._owned[lane].until = grant.until
                else:  # released, or lost (we were too slow to renew: someone took it)
                    self._owned.pop(lane, None)
        if kept:
            self.look(busy_lanes, force=True)

    def look(self, busy_lanes: BusyLanes, *, force: bool = False) -> int | None:
        """Take ONE free lane with visible messages; after a fruitless look, pause.

        A look that found nothing to take (every busy lane owned, or lost to a
        faster consumer) is not repeated for ``LANE_LOOK_PAUSE`` seconds,
        doubled after each fruitless look up to ``LANE_LOOK_PAUSE_MAX``, so
        consumers beyond the busy lanes cost little while they wait (and see
        a lane freed or filled up to that long later).

        Args:
            busy_lanes: Reads lanes with visible messages (a few head buckets),
                given the lanes owned already (it may stop at one that is not).
            force: Look even if the last look was less than a pause ago.

        Returns:
            The lane taken, or None.
        """
        with self._lock:
            if not force and time.monotonic() < self._look_at:
                return None
        taken = self._look(busy_lanes)
        with self._lock:
            if taken is None:  # nothing to take: do not look again for a while
                self._look_at = time.monotonic() + self._pause
                self._pause = min(self._pause * 2, LANE_LOOK_PAUSE_MAX)
            else:
                self._pause = LANE_LOOK_PAUSE
        return taken

    def _look(self, busy_lanes: BusyLanes) -> int | None:
        owners = {k[1]: o for k, o in self._ownership.owned_in([LANE_GROUP]).items()}
        with self._lock:  # a lane owned by this handle but lost shows up as someone else's
            for lane in [lane for lane in self._owned if owners.get(lane) != self.owner]:
                del self._owned[lane]
            # A take whose answer was lost (a timeout) may have applied: the row says
            # the lane is ours. Take it up, or no consumer reads it until the row expires.
            unknown = [lane for lane, o in owners.items() if o == self.owner]
            unknown = [lane for lane in unknown if lane not in self._owned]
        if unknown:
            grant = self._ownership.take(
                self.owner, [(LANE_GROUP, k) for k in unknown], self.period
            )
            with self._lock:
                for _, lane in grant.keys:
                    self._owned[lane] = OwnedLane(grant.until, time.monotonic())
            if grant.keys:
                return int(grant.keys[0][1])
        if len(owners) >= self.lanes:
            return None  # every lane owned: no need to read the buckets
        for free in free_lanes(busy_lanes(set(owners)), owners)[:LANE_TRIES]:
            grant = self._ownership.take(self.owner, [(LANE_GROUP, free)], self.period)
            if not grant.keys:
                continue  # another consumer took it first: try the next one
            with self._lock:
                self._owned[free] = OwnedLane(grant.until, time.monotonic())
                if len(self._owned) == 1:
                    self._renew_at = time.monotonic() + self.period / 3
            return free
        return None

    def release_all(self) -> list[Key]:
        """Give every lane up at once (the client closes): others take them without waiting."""
        with self._lock:
            lanes = list(self._owned)
            self._owned.clear()
        if not lanes:
            return []
        return self._ownership.release(self.owner, [(LANE_GROUP, k) for k in lanes])

    def owned(self) -> list[int]:
        """The lanes this handle believes it owns (for tests and tools)."""
        with self._lock:
            return sorted(self._owned)
