"""Shares: keyless messages received by any number of consumers (Kafka's share groups).

Why. A lane (``lanes.py``) keeps a key's messages in order by letting one
consumer at a time receive it, so a queue's parallelism was the number of
lanes holding messages: a lone producer's keyless messages reached one
consumer at a time, however many were started. Keyless messages need no such
order. In a queue of several lanes they carry the lane ``KEYLESS`` and lie in
**shares**: ``SHARE_IDS`` consecutive ids of a bucket. Any consumer takes
shares with visible messages, as a consumer of a Kafka share group acquires a
batch of a partition's records under a lock of its own, and many consumers
work on one bucket side by side.

* **Taking.** A receive whose lanes and shares came up short looks for free
  shares with visible keyless messages (``head_look.py``'s ``KeylessLook``:
  their ids from a floor, then the id ranges of shares nobody holds) and
  takes a run of them in one conditional batch in the bucket's partition of
  the ``ownership`` table (a share is slice ``SHARE_SLICES + index`` there,
  clear of the Spark source's slices), so one lightweight transaction buys a
  run of messages, never one per message. A take covers ``SHARE_TAKE``
  receives of the taker's size times a scale that follows the taker: doubled
  after a take drained within ``SHARE_HOLD / 2`` seconds, up to
  ``SHARE_TAKE_MAX`` ids, halved after one that lasted over ``2 *
  SHARE_HOLD``. A consumer doing work on each message keeps takes of a
  couple of receives, which others can share (issue 22); a consumer that
  only receives takes a few hundred ids per transaction, about what a lane
  costs it. A consumer alone in a bucket takes its oldest free shares (with
  the order hint K, one of the K oldest); where others own shares too it
  starts at one of the first ``1 + others`` free shares at random (up to
  ``SHARE_SPREAD``), so that consumers looking at once spread over a bucket
  rather than all trying its oldest share. A run lost to a faster consumer
  wins nothing (no transaction per share): the owners are read again and a
  run of the shares still free is tried.
* **Receiving.** The owner scans its shares' id ranges (keyless rows only,
  runs of consecutive shares in one scan) and leases with plain writes while
  its grant surely holds (``Grant.until``), as a lane owner does: nobody else
  leases there. A scan reads ahead as a lane's does (``receiving.py``), so one
  scan serves several receives. A share found without a visible message is
  dropped at once: not scanned, not renewed, its row lapses by TTL (no
  transaction to release it). A share still holding visible messages is
  renewed at a third of the period, with the lanes'.
* **Takeover.** A consumer that stops loses its shares when their rows expire
  (``ownership.py``'s bound: ``ceil(period) + 1`` seconds after the last
  renewal) and its deliveries when their visibility timeout ends. A message
  whose lease ran out in a share its live owner dropped is seen by that owner's
  next look (the row still names it, so it takes the share up again), or by
  anyone once the row lapsed.

Order and fairness. Shares are taken oldest first within a small random
spread, so keyless messages are received almost in order, as BlueDove's K
allows, and no consumer holds much more than ``SHARE_HOLD`` seconds of its
own receives that others could be working on. Competing consumers of one
producer's keyless messages still receive them out of that producer's order
(each works on a run of its own). Keyed messages keep their order per key
through lanes.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from spark_queue.defaults import (
    LANE_LOOK_BUCKETS,
    LANE_LOOK_PAUSE,
    LANE_LOOK_PAUSE_MAX,
    LANE_TRIES,
)
from spark_queue.engine.head_look import KEYLESS_PAGE, KeylessLook
from spark_queue.engine.ownership import Grant, Ownership, new_owner
from spark_queue.store.message_values import StoredMessage, now_ms
from spark_queue.store.owners import Key
from spark_queue.store.session import Store

#: Ids per share: the unit a consumer takes keyless messages in.
SHARE_IDS = 16
#: The smallest take covers about this many receives of the taker's size (in whole shares).
SHARE_TAKE = 2
#: Seconds a take should last its owner: one drained in less than half of it doubles the next.
SHARE_HOLD = 0.5
#: Most ids a take grows to (the smallest take may be larger: a receive of that many).
SHARE_TAKE_MAX = 512
#: At most, a look starts its take at one of this many oldest free shares, at random.
SHARE_SPREAD = 4
#: The ``slice`` of share 0 of a bucket in the ``ownership`` table (Spark's slices lie below).
SHARE_SLICES = 1 << 24

#: Scans ``bucket``'s keyless rows in ``[start, end)``: at most ``limit``, in id order.
Scan = Callable[[int, tuple[int, int], int], Sequence[StoredMessage]]


def share_of(message_id: int, bucket_size: int) -> Key:
    """``(bucket, index)`` of the share holding ``message_id``."""
    bucket = message_id // bucket_size
    return bucket, (message_id - bucket * bucket_size) // SHARE_IDS


def share_range(share: Key, bucket_size: int) -> tuple[int, int]:
    """Ids ``[start, end)`` of a share."""
    bucket, index = share
    base = bucket * bucket_size
    return base + index * SHARE_IDS, min(base + (index + 1) * SHARE_IDS, base + bucket_size)


def _counts(ids: Iterable[int], bucket_size: int) -> dict[int, int]:
    """How many of ``ids`` (of one bucket, in id order) each share holds, by share index."""
    counts: dict[int, int] = {}
    for i in ids:
        index = share_of(i, bucket_size)[1]
        counts[index] = counts.get(index, 0) + 1
    return counts


def runs(shares: Iterable[Key]) -> list[list[Key]]:
    """Sorted shares grouped into runs of consecutive indexes of one bucket."""
    out: list[list[Key]] = []
    for share in sorted(set(shares)):
        last = out[-1][-1] if out else None
        if last is not None and last[0] == share[0] and last[1] + 1 == share[1]:
            out[-1].append(share)
        else:
            out.append([share])
    return out


@dataclass
class ShareOwner:
    """The shares one queue handle owns (see the module doc); safe to share between threads.

    Args:
        store: The Cassandra session.
        queue_id: The queue incarnation.
        bucket_size: Ids per bucket of the queue.
        period: Returns the seconds an ownership lasts unless renewed (the lanes').
    """

    store: Store
    queue_id: uuid.UUID
    bucket_size: int
    period: Callable[[], float]
    owner: str = field(default_factory=lambda: new_owner("shares"))
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._ownership = Ownership(self.store, self.queue_id)
        self._lock = threading.Lock()
        self._owned: dict[Key, float] = {}  # share -> monotonic time it is surely held until
        self._renew_at = 0.0
        self._look_at = 0.0
        self._pause = LANE_LOOK_PAUSE
        self._scale = 1  # the next take covers SHARE_TAKE * want * _scale messages
        self._taken_at: float | None = None  # when the last take won, until the next look

    def _key(self, share: Key) -> Key:
        return share[0], SHARE_SLICES + share[1]

    def _share(self, key: Key) -> Key:
        return key[0], key[1] - SHARE_SLICES

    # -- what a receive asks --------------------------------------------------------

    def owned(self) -> list[Key]:
        """The shares this handle scans and renews, oldest first (for tests and tools)."""
        with self._lock:
            return sorted(self._owned)

    def holds(self, share: Key, margin: float = 0.0) -> bool:
        """Whether ``share`` is surely still ours ``margin`` seconds from now."""
        with self._lock:
            until = self._owned.get(share)
        return until is not None and until - margin > time.monotonic()

    def rows(
        self,
        scan: Scan,
        want: int,
        only: Collection[Key] | None = None,
        limit: int | None = None,
    ) -> tuple[list[StoredMessage], dict[int, Key]]:
        """Up to ``want`` visible keyless rows of the shares held (or ``only``), and their shares.

        With ``limit``, a run's scan may read up to ``limit`` rows in all (read
        ahead, kept by the receive), but the next run is scanned only while
        ``want`` is not met. Shares a scan shows without a visible row are
        dropped (module doc).
        """
        now = time.monotonic()
        with self._lock:
            held = [s for s, until in self._owned.items() if until > now]
        if only is not None:
            held = [s for s in held if s in only]
        found: list[StoredMessage] = []
        share_of_id: dict[int, Key] = {}
        drained: list[Key] = []
        for run in runs(held):
            if len(found) >= want:
                break
            start = share_range(run[0], self.bucket_size)[0]
            end = share_range(run[-1], self.bucket_size)[1]
            cap = max(want, limit or want) - len(found)
            got = scan(run[0][0], (start, end), cap)
            seen = {share_of(m.id, self.bucket_size) for m in got}
            # A scan cut at its limit says nothing of the shares past its last row.
            reached = share_of(got[-1].id, self.bucket_size) if len(got) >= cap else run[-1]
            drained += [s for s in run if s not in seen and s <= reached]
            share_of_id.update((m.id, share_of(m.id, self.bucket_size)) for m in got)
            found.extend(got)
        if drained:
            with self._lock:
                for share in drained:
                    self._owned.pop(share, None)
        return found, share_of_id

    # -- ownership calls ------------------------------------------------------------

    def keep(self) -> None:
        """Renew the shares still held, at a third of the period."""
        now, period = time.monotonic(), self.period()
        with self._lock:
            if now < self._renew_at or not self._owned:
                return
            self._renew_at = now + period / 3  # sibling threads skip meanwhile
            held = list(self._owned)
        grant = self._ownership.renew(self.owner, [self._key(s) for s in held], period)
        kept = {self._share(k) for k in grant.keys}
        with self._lock:
            for share in held:
                if share in kept and share in self._owned:
                    self._owned[share] = grant.until
                else:  # lost (renewed too late: someone took it), or dropped meanwhile
                    self._owned.pop(share, None)

    def look(self, look: KeylessLook, want: int, hint: int = 1) -> list[Key]:
        """Take free shares covering visible keyless messages for the next receives.

        A take covers ``SHARE_TAKE`` receives of ``want`` messages, times a
        scale that follows how fast this handle drains its takes: one drained
        within ``SHARE_HOLD / 2`` seconds doubles the next (up to
        ``SHARE_TAKE_MAX`` ids), one that lasted over ``2 * SHARE_HOLD``
        halves it, and a look that sees nothing visible starts over. A
        consumer doing work per message keeps small takes that others can
        share (issue 22); one that only receives takes a few hundred ids per
        lightweight transaction, about what a lane costs it.

        ``hint`` is the receive's order hint K: the take may start at any of the
        K oldest free shares (more where other consumers own shares: module doc).

        After a look that found visible keyless messages but could take none
        (others own their shares), the next one waits ``LANE_LOOK_PAUSE``
        seconds, doubled up to ``LANE_LOOK_PAUSE_MAX`` (as the lanes' look does).
        A look that found none visible sets no pause: the next receive looks
        again, so a consumer sees new messages at once, as a lane's owner does
        (such a look reads only the head buckets not known idle).

        Returns:
            The shares taken, oldest first (none: nothing free to take).
        """
        base = max(1, want) * SHARE_TAKE
        with self._lock:
            now = time.monotonic()
            if now < self._look_at:
                return []
            if self._taken_at is not None:
                lasted, self._taken_at = now - self._taken_at, None
                if lasted < SHARE_HOLD / 2 and base * self._scale < SHARE_TAKE_MAX:
                    self._scale *= 2
                elif lasted > 2 * SHARE_HOLD:
                    self._scale = max(1, self._scale // 2)
            size = max(base, min(base * self._scale, SHARE_TAKE_MAX))
        taken = self._look(look, size, hint, now_ms())
        with self._lock:
            if taken:
                self._pause = LANE_LOOK_PAUSE
                self._taken_at = time.monotonic()
            elif taken is not None:  # visible, but others own them: wait a while
                self._look_at = time.monotonic() + self._pause
                self._pause = min(self._pause * 2, LANE_LOOK_PAUSE_MAX)
            else:  # nothing visible: the next messages may come to consumers doing work
                self._scale = 1
        return taken or []

    def take_size(self, want: int) -> int:
        """How many messages the next take would cover for receives of ``want`` (for tests)."""
        base = max(1, want) * SHARE_TAKE
        with self._lock:
            return max(base, min(base * self._scale, SHARE_TAKE_MAX))

    def _look(self, look: KeylessLook, want: int, hint: int, now: int) -> list[Key] | None:
        """The shares taken; None when no keyless message was visible at all."""
        seen, looked = False, 0
        page = max(want, KEYLESS_PAGE)
        for bucket in look.buckets(now):
            if looked >= LANE_LOOK_BUCKETS:
                break
            ids, done = look.page(bucket, now, page)
            if not ids:
                continue
            seen, looked = True, looked + 1
            for _ in range(LANE_TRIES):
                owners = self._ownership.owned_in([bucket])  # read again after a lost race
                with self._lock:
                    mine = set(self._owned)

                # Shares someone holds: another consumer, or this handle still.
                held = {
                    self._share(k)[1]
                    for k, who in owners.items()
                    if k[1] >= SHARE_SLICES and (who != self.owner or self._share(k) in mine)
                }
                # Read on, in the shares nobody holds, while the free ones fall short.
                counts = _counts(ids, self.bucket_size)
                for gap in [] if done else self._gaps(bucket, ids[-1] + 1, held):
                    if sum(n for i, n in counts.items() if i not in held) >= want:
                        break
                    ids += look.ids_in(bucket, gap, now, page)
                    counts = _counts(ids, self.bucket_size)
                done = True  # the gaps are read: another try reads the owners only
                # A share whose row still names us (dropped, then a message came back)
                # is ours: take it up again (a renewal of our row, key by key).
                lapsed = [i for i in counts if i not in held and self._key((bucket, i)) in owners]
                if lapsed:
                    won = self._won(
                        self._ownership.take(
                            self.owner, [self._key((bucket, i)) for i in lapsed], self.period()
                        )
                    )
                    if won:
                        return won
                free = [i for i in counts if self._key((bucket, i)) not in owners]
                if not free:
                    break
                others = len({o for o in owners.values() if o != self.owner})
                spread = max(hint, min(1 + others, SHARE_SPREAD))
                start = self.rng.randrange(min(len(free), spread))
                run: list[int] = []
                for index in free[start:]:
                    run.append(index)
                    if sum(counts[i] for i in run) >= want:
                        break
                # All or nothing: a run lost to a faster consumer costs one batch and
                # a read of the owners, not a lightweight transaction per share.
                grant = self._ownership.take(
                    self.owner,
                    [self._key((bucket, i)) for i in run],
                    self.period(),
                    piecemeal=False,
                )
                won = self._won(grant)
                if won:
                    return won
        return [] if seen else None

    def _gaps(self, bucket: int, start: int, held: Collection[int]) -> Iterator[tuple[int, int]]:
        """Id ranges ``[start, end)`` of ``bucket`` from ``start`` on, over shares not ``held``."""
        base = bucket * self.bucket_size
        index, shares = share_of(start, self.bucket_size)[1], -(-self.bucket_size // SHARE_IDS)
        while index < shares:
            if index in held:
                index += 1
                continue
            first = index
            while index < shares and index not in held:
                index += 1
            yield (
                max(start, base + first * SHARE_IDS),
                min(base + index * SHARE_IDS, base + self.bucket_size),
            )

    def _won(self, grant: Grant) -> list[Key]:
        """Record the shares of ``grant`` as held; return them, oldest first."""
        won = sorted(self._share(k) for k in grant.keys)
        with self._lock:
            for share in won:
                self._owned[share] = grant.until
            if won and len(self._owned) == len(won):
                self._renew_at = time.monotonic() + self.period() / 3
        return won

    def wake(self) -> None:
        """Look at the next receive, without the pause a fruitless look set (a message is back)."""
        with self._lock:
            self._look_at = 0.0
            self._pause = LANE_LOOK_PAUSE

    def release_all(self) -> None:
        """Give every share up at once (the client closes): others take them without waiting."""
        with self._lock:
            shares = list(self._owned)
            self._owned.clear()
        if shares:
            self._ownership.release(self.owner, [self._key(s) for s in shares])
