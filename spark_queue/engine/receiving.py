"""Receiving: a consumer's lanes scanned, leased with plain writes; what threads share.

How a plain receive works (seed 000, BlueDove, received through lanes,
``lanes.py``):

1. **Own lanes and shares.** The handle renews its lanes (keyed messages) and
   shares (keyless ones, ``shares.py``) at a third of their period and lets
   idle ones go; a receive that comes up short takes a free lane with visible
   messages, else a run of free shares (one look each, up to ``LANE_TAKES``;
   ``head_look.py``: the lanes' look reads the head buckets once a receive,
   the shares' reads keyless ids from a floor).
2. **Scan** each owned lane from the head bucket for unacked messages whose
   ``visible_at`` has passed (``lane = ?`` filtered inside each bucket's
   partition, payloads and all) and keep the oldest ``K * n`` (K: the order
   hint, which now applies within a lane). Buckets found without a visible
   message of a lane are skipped for that lane until its next one becomes
   visible, at most ``IDLE_RECHECK`` seconds. A scan reads ahead up to
   ``PREFETCH`` receives' worth; the rest serve the handle's next receives for
   ``PREFETCH_HOLD_MS`` (``_lane_rows``). The shares held are scanned alike,
   keyless rows only, and read ahead alike (``_share_rows``).
3. **Pick** ``n`` of them at random, skipping what sibling threads of this
   handle hold (``claims.py``); messages past ``max_deliveries`` move to the
   dead-letter queue (``dead_letters.py``, a lightweight transaction each).
4. **Lease** each pick with a plain write (one ``UPDATE ... WHERE id IN``
   per bucket: the receive's fresh lease token, ``visible_at`` = now +
   visibility timeout, one more delivery), only in lanes and shares whose
   ownership is surely still held (``Grant.until``): nobody else leases in
   them, so no Paxos round is needed.
   A redelivered message (its earlier lease ran out) may have been acked by
   its late consumer between the scan and the write: those leases alone are
   read back, and a message acked meanwhile is not handed out.

Order, takeover and how acks check a receipt's lease: docs/architecture.md
("A message's life cycle"), ``lanes.py``, ``shares.py``, ``ownership.py``,
``lease_memory.py`` and ``store/acks.py``. A key's messages arrive in the
order sent; a consumer that stops loses its lanes and shares within
``ceil(period) + 1`` seconds, its deliveries at their visibility timeout.

A receive naming its buckets (a Spark partition, which has them to itself
for a step) ignores lanes: ``Receiver.named`` (``named_receive.py``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from spark_queue.config import QueueSettings
from spark_queue.defaults import IDLE_RECHECK
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.claims import Claims
from spark_queue.engine.dead_letters import DeadLetters
from spark_queue.engine.deliveries import delivery_of, fresh_lease, still_held
from spark_queue.engine.drains import Drains
from spark_queue.engine.head_look import HeadLook, KeylessLook
from spark_queue.engine.lanes import KEYLESS, LaneOwner, lane_period
from spark_queue.engine.lease_memory import OwnLeases
from spark_queue.engine.lifecycle import Maintenance
from spark_queue.engine.named_receive import BucketReceiver
from spark_queue.engine.shares import ShareOwner, share_of
from spark_queue.message import Delivery, new_lease
from spark_queue.store.buckets import Buckets
from spark_queue.store.lane_scans import lane_visible_at, scan_lane, scan_range
from spark_queue.store.message_values import Candidate, StoredMessage, now_ms
from spark_queue.store.owners import Key

#: Free lanes one receive may take while its own lanes come up short.
LANE_TAKES = 4
#: Idle (lane, bucket) notes kept before the stale ones are pruned.
IDLE_NOTES = 4096
#: A lane's scan reads up to this many receives' worth of rows; the rest wait for the next receives.
PREFETCH = 4
#: Most payload bytes one lane's read-ahead may hold, counting each row at the largest size allowed.
READ_AHEAD_BYTES = 8 * 1024 * 1024
#: Milliseconds rows read ahead are used before the lane is scanned again.
PREFETCH_HOLD_MS = 1000


def scan_limit(want: int, max_message_bytes: int) -> int:
    """Rows a lane's scan reads for a receive wanting ``want``: up to ``PREFETCH`` times more.

    The rows beyond ``want`` (read ahead) are bounded by ``READ_AHEAD_BYTES`` at
    the queue's largest message size, so a queue of large messages reads
    little or nothing ahead (Kafka bounds its fetches by bytes, too).
    """
    return want + min(want * (PREFETCH - 1), READ_AHEAD_BYTES // max_message_bytes)


M = TypeVar("M", Candidate, StoredMessage)


@dataclass(frozen=True, slots=True)
class ReadAhead:
    """Visible rows of a lane a scan read beyond its receive, usable until ``until`` (ms)."""

    rows: list[StoredMessage]
    until: int


@dataclass(frozen=True, slots=True)
class Floor:
    """Where a lane's next scan starts: past message ``id`` of ``bucket``, until ``until`` (ms)."""

    bucket: int
    id: int
    until: int


class Receiver:
    """Leases messages of one queue handle; safe to share between threads.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head, tail and idle buckets.
        maintenance: Run about once a second by receives that plan their own buckets.
        dead_letters: Where messages past ``max_deliveries`` go.
        settings: Returns the queue's current settings (they change: ``update_queue``).
    """

    def __init__(
        self,
        buckets: Buckets,
        bounds: Bounds,
        maintenance: Maintenance,
        dead_letters: DeadLetters,
        settings: Callable[[], QueueSettings],
    ) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._maintenance = maintenance
        self._dead_letters = dead_letters
        self._settings = settings
        self.claims = Claims()
        self.own_leases = OwnLeases()
        self._lanes_timeout = timeout = settings().visibility_timeout  # the period fits it
        lanes = settings().lanes  # fixed
        self.lanes = LaneOwner(buckets.store, buckets.queue_id, lanes, lane_period(timeout))
        self.shares = ShareOwner(
            buckets.store, buckets.queue_id, buckets.bucket_size, lambda: self.lanes.period
        )
        self._lane_idle: dict[tuple[int, int], int] = {}  # (lane, bucket) -> skip until (ms)
        self._lane_floor: dict[int, Floor] = {}
        self._read_ahead: dict[int, ReadAhead] = {}
        self._share_ahead: ReadAhead | None = None  # keyless rows read ahead in shares held
        self.keyless = KeylessLook(buckets, bounds)  # where looks for free shares start
        self.named = BucketReceiver(buckets, bounds, maintenance, self.claims, self._past_limit)
        self._stopped: dict[int, int] = {}  # lane -> bucket where its last scan hit its limit
        self.drains = Drains(buckets, bounds, settings, self.unfinished)  # zero counts of drains

    def receive(
        self, count: int, timeout_ms: int, hint: int, wait: float, buckets: Sequence[int] | None
    ) -> list[Delivery]:
        """Lease up to ``count`` messages, polling up to ``wait`` seconds (arguments checked)."""
        deadline = time.monotonic() + wait
        pause = 0.02
        while True:
            if buckets is None:  # a caller naming buckets has planned them (and maintains)
                self._maintenance.maybe()
            deliveries = self.receive_once(count, timeout_ms, hint, buckets)
            remaining = deadline - time.monotonic()
            if deliveries or remaining <= 0:
                return deliveries
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.5)

    def receive_once(
        self, count: int, timeout_ms: int, hint: int, buckets: Sequence[int] | None
    ) -> list[Delivery]:
        """One receive: from named buckets, or from this handle's lanes (see module doc)."""
        if buckets is not None:
            return self.named.receive(buckets, count, timeout_ms, hint)
        deliveries = self._receive_lanes(count, timeout_ms, hint)
        # Buckets acked in before, which this receive's scans found done (drains.py).
        self.drains.settle({self._buckets.bucket_of(d.id) for d in deliveries})
        return deliveries

    def _receive_lanes(self, count: int, timeout_ms: int, hint: int) -> list[Delivery]:
        """A plain consumer's receive: its lanes and shares, with plain leases (module doc)."""
        lanes, shares, now, clock = self.lanes, self.shares, now_ms(), time.monotonic()
        timeout = self._settings().visibility_timeout
        if timeout != self._lanes_timeout:  # update_queue changed it: renewals follow
            self._lanes_timeout, lanes.period = timeout, lane_period(timeout)
        look = HeadLook(self._buckets, self._bounds, now)
        lanes.keep(look.busy_lanes)
        shares.keep()
        # Claimed rows show up only while a sibling thread's lease is in flight.
        want = count * hint + min(len(self.claims), 4 * count)
        lane_of: dict[tuple[int, int], int] = {}
        share_of_id: dict[int, Key] = {}  # keyless rows: id -> share
        until_of: dict[int, int] = {}  # lane -> until when its rows may be read ahead (ms)
        found: list[StoredMessage] = []
        for lane in lanes.safe_lanes():
            rows, until_of[lane] = self._lane_rows(lane, want - len(found), now)
            lanes.note(lane, bool(rows))
            lane_of.update(((m.bucket, m.id), lane) for m in rows)
            found.extend(rows)
            if len(found) >= want:
                break
        scan_share = functools.partial(self._scan_share, now=now)
        limit_of = functools.partial(
            scan_limit, max_message_bytes=self._settings().max_message_bytes
        )
        share_until = now + PREFETCH_HOLD_MS  # until when keyless rows may be read ahead (ms)
        if len(found) < want:
            rows, ids, share_until = self._share_rows(want - len(found), now)
            share_of_id.update(ids)
            found.extend(rows)
        for _ in range(LANE_TAKES):
            if len(found) >= count:
                break
            # Short: take a free busy lane (ONE when we own none, so that idle
            # consumers each get one), else free shares of keyless messages.
            short = want - len(found)
            taken = lanes.look(look.busy_lanes)
            if taken is not None:
                rows = self._lane_visible(taken, short, now, limit=limit_of(short))
                lane_of.update(((m.bucket, m.id), taken) for m in rows)
            else:
                took = shares.look(self.keyless, count, hint)
                if not took:
                    break
                rows, ids = shares.rows(scan_share, short, only=took, limit=limit_of(short))
                share_of_id.update(ids)
            found.extend(rows)
            if not found:
                break
        chosen = self.claims.pick(found, count, hint, timeout_ms / 1000, time.monotonic())
        picked = {(m.bucket, m.id) for m in chosen}
        chosen = self._past_limit(chosen, now)
        live = [m for m in chosen if m.expires_at > now]
        # Lease only in lanes and shares still surely ours: past Grant.until another
        # consumer may own them (ownership.py's bound leaves a second or more).
        safe = {lane for lane in set(lane_of.values()) if lanes.holds(lane)}
        kept = {share for share in set(share_of_id.values()) if shares.holds(share)}
        late = [
            m
            for m in live
            if (m.id in share_of_id and share_of_id[m.id] not in kept)
            or (m.id not in share_of_id and lane_of[(m.bucket, m.id)] not in safe)
        ]
        late_keys = {(m.bucket, m.id) for m in late}
        self.claims.drop(late_keys)
        live = [m for m in live if (m.bucket, m.id) not in late_keys]
        in_lanes = [m for m in found if (m.bucket, m.id) in lane_of]
        passed = picked - late_keys
        self._advance_floors(in_lanes, lane_of, passed, timeout_ms)
        self._keep_ahead(in_lanes, lane_of, picked, safe, until_of, now, timeout_ms)
        if share_of_id:  # keep the keyless rows of shares still surely ours, not taken now
            rest = [m for m in found if m.id in share_of_id and (m.bucket, m.id) not in picked]
            rest = [m for m in rest if share_of_id[m.id] in kept]
            until = min(share_until, now + timeout_ms)
            self._share_ahead = ReadAhead(rest, until) if rest else None
        if not live:
            return []
        # One lease token for the receive: its leases agree on everything but the
        # id and go in one statement per bucket (binding a batch row per message
        # costs more, in Python, than the write). Plain: nobody else leases here.
        token = new_lease()
        writes = [fresh_lease(m, timeout_ms, now, token) for m in live]
        self._buckets.write_leases_shared(writes, now)
        held = still_held(self._buckets, writes)  # a redelivery's late ack (deliveries.py)
        won = [(m, w) for m, w, ok in zip(live, writes, held, strict=True) if ok]
        # Nobody else leases these before their visible_at (now + timeout, taken
        # before the scan): their acks need no read (own_leases.py).
        self.own_leases.record(((w.bucket, w.id, token) for _, w in won), clock + timeout_ms / 1000)
        return [delivery_of(self._buckets.queue_id, m, w) for m, w in won]

    def _lane_rows(self, lane: int, want: int, now: int) -> tuple[list[StoredMessage], int]:
        """``lane``'s visible messages for this receive, and until when the rest may be kept.

        The rows come from the lane's read-ahead, or from a scan now.

        A scan reads up to ``PREFETCH`` receives' worth of the lane
        (``scan_limit``; Kafka's consumer fetches more than one poll returns,
        too): one request instead of several, since what a scan costs is mostly
        per request. What this receive does not take is kept for
        ``PREFETCH_HOLD_MS`` and handed to the next receives of the handle.
        Rows read ahead stay good: they were visible, only the lane's owner
        leases in it (and leases only while it surely owns it), and a
        redelivered message acked meanwhile is caught by the lease read-back
        as any other. The rows of one scan are kept
        ``PREFETCH_HOLD_MS`` from that scan, however often they are passed on;
        short of ``want``, they are dropped and the lane scanned again from its
        floor (which stops before them).
        """
        ahead = self._read_ahead.pop(lane, None)
        if ahead is not None and ahead.until > now:
            # what sibling threads took from these rows meanwhile is theirs
            rows = self.claims.free(ahead.rows, time.monotonic())
            if len(rows) >= want:
                return rows, ahead.until
        limit = scan_limit(want, self._settings().max_message_bytes)
        return self._lane_visible(lane, want, now, limit=limit), now + PREFETCH_HOLD_MS

    def _share_rows(self, want: int, now: int) -> tuple[list[StoredMessage], dict[int, Key], int]:
        """Keyless rows of the shares held for this receive, their shares, and until when.

        As a lane's (``_lane_rows``): the rows a scan of the shares read ahead
        serve the next receives for ``PREFETCH_HOLD_MS``, while their shares
        are held; short of ``want``, the shares are scanned again (read ahead
        too). Nobody else leases in a share while its owner holds it, so rows
        read ahead stay good, and a redelivered message acked meanwhile is
        caught by the lease read-back as any other.
        """
        ahead, self._share_ahead = self._share_ahead, None
        if ahead is not None and ahead.until > now:
            # what sibling threads took meanwhile is theirs; a share lost or dropped is not ours
            rows = self.claims.free(ahead.rows, time.monotonic())
            ids = {m.id: share_of(m.id, self._buckets.bucket_size) for m in rows}
            rows = [m for m in rows if self.shares.holds(ids[m.id])]
            if len(rows) >= want:
                return rows, {m.id: ids[m.id] for m in rows}, ahead.until
        limit = scan_limit(want, self._settings().max_message_bytes)
        scan = functools.partial(self._scan_share, now=now)
        rows, ids = self.shares.rows(scan, want, limit=limit)
        return rows, ids, now + PREFETCH_HOLD_MS

    def _scan_share(
        self, bucket: int, ids: tuple[int, int], limit: int, now: int
    ) -> list[StoredMessage]:
        """The visible keyless rows of ``bucket`` in the id range of shares held."""
        return scan_range(self._buckets, bucket, ids, KEYLESS, now, limit)

    def unfinished(self) -> set[int]:
        """Buckets where lanes and shares this handle holds may hand out more (``drains.py``).

        The bucket where a lane's last scan stopped at its row limit, the
        buckets of the rows read ahead, and those of the shares held; an ack
        elsewhere may be a bucket's last.
        """
        now, held = now_ms(), set(self.lanes.owned())
        buckets = {b for lane, b in list(self._stopped.items()) if lane in held}
        buckets.update(bucket for bucket, _ in self.shares.owned())
        for lane, ahead in list(self._read_ahead.items()):
            if lane in held and ahead.until > now:
                buckets.update(m.bucket for m in ahead.rows)
        return buckets

    def _keep_ahead(
        self,
        found: Sequence[StoredMessage],
        lane_of: dict[tuple[int, int], int],
        picked: set[tuple[int, int]],
        safe: Collection[int],
        until_of: dict[int, int],
        now: int,
        timeout_ms: int,
    ) -> None:
        """Keep the rows of lanes still surely ours that this receive did not take.

        Until the first of: ``until_of[lane]``, the time its rows were read plus
        ``PREFETCH_HOLD_MS`` (a lane taken in this receive: read now); the time a
        lease this receive writes may run out; the end of the lane's floor
        (``_advance_floors``). Past any of them an older message of the lane
        may be visible again, and only a scan from the floor sees it first.
        """
        rest: dict[int, list[StoredMessage]] = {}
        for m in found:
            lane = lane_of[(m.bucket, m.id)]
            if lane in safe and (m.bucket, m.id) not in picked:
                rest.setdefault(lane, []).append(m)
        for lane, rows in rest.items():
            until = min(until_of.get(lane, now + PREFETCH_HOLD_MS), now + timeout_ms)
            floor = self._lane_floor.get(lane)
            if floor is not None:
                until = min(until, floor.until)
            self._read_ahead[lane] = ReadAhead(rows, until)

    def _lane_visible(
        self, lane: int, want: int, now: int, limit: int | None = None
    ) -> list[StoredMessage]:
        """Up to ``want`` visible messages (payloads too) of ``lane``, in id order.

        With ``limit``, a bucket's scan may read up to ``limit`` in all (read
        ahead), but the next bucket is scanned only while ``want`` is not met.

        A scan starts past the last message the previous one found (the
        lane's floor): below it, every message of the lane was invisible then
        (acked, in flight or delayed), so reading those rows again, acked
        ones above all, is wasted. A lease running out, a delay ending or a
        late write below the floor is seen at the next full scan, made every
        ``IDLE_RECHECK`` seconds.
        """
        found: list[StoredMessage] = []
        bucket, tail_refreshed = self._bounds.head, False
        stopped: int | None = None  # the bucket where the scan stopped at its row limit
        lanes = self.lanes.lanes
        floor = self._lane_floor.get(lane)
        if floor is not None and floor.until <= now:
            floor = None  # time for a full scan
        while len(found) < want:
            if bucket > self._bounds.last_bucket():
                # Out of known buckets: the sequence may have moved since we looked.
                if tail_refreshed or not self._bounds.refresh_tail():
                    break
                tail_refreshed = True
                continue
            below = floor is not None and bucket < floor.bucket
            if (
                not below
                and not self._bounds.skipped(bucket, now)
                and self._lane_idle.get((lane, bucket), 0) <= now
            ):
                after = floor.id if floor is not None and floor.bucket == bucket else None
                cap = (limit or want) - len(found)
                rows = scan_lane(self._buckets, bucket, lane, lanes, now, cap, after)
                found.extend(rows)
                if len(rows) >= cap:  # the lane may have more visible here: not done
                    stopped = bucket
                if not rows:
                    self._note_lane_idle(lane, bucket, now)
            bucket += 1
        if stopped is None:
            self._stopped.pop(lane, None)
        else:
            self._stopped[lane] = stopped
        return found

    def _advance_floors(
        self,
        found: Sequence[StoredMessage],
        lane_of: dict[tuple[int, int], int],
        passed: set[tuple[int, int]],
        timeout_ms: int,
    ) -> None:
        """Move each lane's floor past the found messages this receive took, up to the first not.

        A floor lasts until the first lease written below it may run out, and
        ``IDLE_RECHECK`` seconds at most: then a full scan sees what came back.
        """
        now = now_ms()
        stopped: set[int] = set()
        for m in found:  # lane by lane, each in id order
            lane = lane_of[(m.bucket, m.id)]
            if lane in stopped:
                continue
            if (m.bucket, m.id) not in passed:
                stopped.add(lane)
                continue
            floor = self._lane_floor.get(lane)
            fresh = floor is not None and floor.until > now
            until = floor.until if fresh and floor is not None else now + int(IDLE_RECHECK * 1000)
            self._lane_floor[lane] = Floor(m.bucket, m.id, min(until, now + timeout_ms))

    def _note_lane_idle(self, lane: int, bucket: int, now: int) -> None:
        """Skip ``bucket`` for ``lane`` for a while: it had no visible message of it."""
        if self.lanes.lanes == 1:
            self._bounds.note_idle(bucket, now)  # one lane: the whole bucket is idle
            return
        if (bucket + 1) * self._buckets.bucket_size > self._bounds.tail:
            return  # the tail bucket: new messages may land any moment
        if len(self._lane_idle) > IDLE_NOTES:
            head = self._bounds.head
            notes = list(self._lane_idle.items())  # a copy: sibling threads add meanwhile
            self._lane_idle = {k: t for k, t in notes if t > now and k[1] >= head}
        # Until the lane's next message there becomes visible (a lease runs out,
        # a delay ends), and no longer than IDLE_RECHECK.
        until = min([now + int(IDLE_RECHECK * 1000), *lane_visible_at(self._buckets, bucket, lane)])
        self._lane_idle[(lane, bucket)] = until

    def unskip(self, bucket: int) -> None:
        """Look at ``bucket`` again on the next receive (a message may be visible there now)."""
        self._bounds.unskip(bucket)
        self._lane_idle = {k: t for k, t in list(self._lane_idle.items()) if k[1] != bucket}
        self._lane_floor.clear()
        self._read_ahead.clear()  # an older message may be visible: scan again, in order
        self._share_ahead = None
        self.keyless.forget()
        self.shares.wake()  # and may lie in a share let go: look again at once

    def acked(self, keys: Sequence[tuple[int, int]]) -> None:
        """Acked (or stale): sibling threads skip them only while a read-ahead may list them."""
        self.claims.done(keys, time.monotonic(), PREFETCH_HOLD_MS / 1000)

    def purged(self) -> None:
        """Forget what this handle read ahead and the leases it wrote: the queue was purged."""
        self._read_ahead.clear()
        self._share_ahead = None
        self.own_leases.clear()

    def _past_limit(self, chosen: list[M], now: int) -> list[M]:
        """Move the picks past ``max_deliveries`` to the dead-letter queue; return the rest."""
        limit = self._dead_letters.limit()
        if limit is None:
            return chosen
        dead = [m for m in chosen if m.delivery_count >= limit]
        if dead:
            self._dead_letters.move(
                [Candidate(m.id, m.bucket, m.expires_at, m.delivery_count, m.lease) for m in dead],
                now,
            )
            self.claims.drop((m.bucket, m.id) for m in dead)
        return [m for m in chosen if m.delivery_count < limit]
