"""Receiving: candidate scans, leases by compare-and-set, what threads of one handle share.

How a receive works (seed 000, BlueDove, with one change: see "Ownership"):

1. **Scan** live buckets from the head for unacked messages whose
   ``visible_at`` has passed, payloads and all, and keep the oldest
   ``K * n`` (K: the order hint).
2. **Pick** ``n`` of them at random, skipping what sibling threads of this
   handle hold (``claims.py``).
3. **Lease** each pick: a fresh lease token, ``visible_at`` = now +
   visibility timeout and one more delivery, written in one conditional
   batch per bucket, ``IF lease = <the lease the scan saw> AND acked =
   false``. Messages past ``max_deliveries`` move to the dead-letter queue
   instead (``dead_letters.py``).
4. **Hand out** the messages whose conditional lease applied. Two round
   trips in all: the conditional batch answers the question a read-back of
   plain lease writes would ask (did my lease win? is it still unacked?).

Ownership. The consumer whose conditional lease applies owns that delivery
until its visibility timeout ends; Paxos on the bucket's partition lets
exactly one of several racing consumers win each message, and the losers
learn it from the answer (no read-back, no duplicate delivery). A loser
drops those picks and scans again at once, which lands it on the next
messages of the head: racing consumers fall into step behind each other and
keep the queue's order at K = 1. A consumer that dies (crash, SIGKILL, lost
network) owns nothing but its in-flight deliveries; each is taken over, by
whoever receives next, when its visibility timeout ends.

Why not own whole buckets or slices of them for a while: consumers owning
different parts of the queue deliver them side by side, so at K = 1 the
messages of one producer arrive interleaved from several places (out of
order), while owning the head's next messages one receive at a time is what
the conditional lease already does. K now only spreads consumers over the
oldest ``K * n`` messages, so fewer of their conditional batches collide
(each collision costs a Paxos round and a scan), at the cost of order.

A receive naming its buckets (a Spark partition, which has them to itself
for a step) scans them with payloads, writes plain leases and reads the
leases (not the payloads) back instead.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TypeVar

from spark_queue.bounds import Bounds
from spark_queue.claims import Claims, pick_oldest
from spark_queue.config import QueueSettings
from spark_queue.dead_letters import DeadLetters
from spark_queue.maintenance import Maintenance
from spark_queue.message import Delivery, Receipt, new_lease
from spark_queue.store.buckets import Buckets, Candidate, LeaseWrite, StoredMessage, now_ms

#: A message with the lease a receive wrote on it (its delivery, before any receipt).
Leased = tuple[StoredMessage, LeaseWrite]

#: Scans a receive makes at once after other consumers took all of its picks.
RACE_RETRIES = 4
#: Fewest buckets ``visible_buckets`` probes at once.
PROBE_WINDOW = 8


def as_datetime(ms: int) -> datetime:
    """A stored time (integer ms) as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


M = TypeVar("M", Candidate, StoredMessage)


def _lease(m: Candidate | StoredMessage, timeout_ms: int, now: int) -> LeaseWrite:
    """A fresh lease on ``m`` until ``now + timeout_ms``: its next delivery."""
    return LeaseWrite(
        bucket=m.bucket,
        id=m.id,
        lease=new_lease(),
        visible_at=now + timeout_ms,
        delivery_count=m.delivery_count + 1,
        expires_at=m.expires_at,
    )


def delivery_of(queue_id: uuid.UUID, m: StoredMessage, w: LeaseWrite) -> Delivery:
    """The delivery of message ``m`` under lease ``w``, with its receipt."""
    receipt = Receipt(queue_id, m.bucket, m.id, w.lease, m.expires_at).encode()
    return Delivery(
        id=m.id,
        bucket=m.bucket,
        payload=m.payload,
        headers=m.headers,
        enqueued_at=as_datetime(m.enqueued_at),
        delivery_count=w.delivery_count,
        receipt=receipt,
        visible_at=as_datetime(w.visible_at),
    )


class Receiver:
    """Leases messages of one queue handle; safe to share between threads.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head, tail and idle buckets.
        maintenance: Run about once a second by receives that plan their own buckets.
        dead_letters: Where messages past ``max_deliveries`` go.
        settings: The queue's settings.
    """

    def __init__(
        self,
        buckets: Buckets,
        bounds: Bounds,
        maintenance: Maintenance,
        dead_letters: DeadLetters,
        settings: QueueSettings,
    ) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._maintenance = maintenance
        self._dead_letters = dead_letters
        self._settings = settings
        self.claims = Claims()

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
        """One scan, pick and lease (see module doc); a lost race scans again at once."""
        for _ in range(RACE_RETRIES):
            deliveries, raced = self._attempt(count, timeout_ms, hint, buckets)
            if deliveries or not raced:
                return deliveries
        return []

    def _attempt(
        self, count: int, timeout_ms: int, hint: int, buckets: Sequence[int] | None
    ) -> tuple[list[Delivery], bool]:
        """``(deliveries, raced)``: raced when other consumers took every pick first."""
        if buckets is not None:
            return self.receive_named(buckets, count, timeout_ms, hint), False
        now = now_ms()
        # Claimed rows show up only while a sibling thread's lease is in flight.
        want = count * hint + min(len(self.claims), 4 * count)
        found = self._visible(want, now)
        chosen = self.claims.pick(found, count, hint, timeout_ms / 1000, time.monotonic())
        chosen = self._past_limit(chosen, now)
        live = [m for m in chosen if m.expires_at > now]
        if not live:
            return [], False
        writes = [_lease(m, timeout_ms, now) for m in live]
        # Compare-and-set on the lease the scan saw: a message goes to one
        # consumer only, and a loser knows at once (module doc, step 3).
        missed = self._buckets.take_leases(writes, {(m.bucket, m.id): m.lease for m in live}, now)
        self.claims.drop(missed)
        deliveries = [
            delivery_of(self._buckets.queue_id, m, w)
            for m, w in zip(live, writes, strict=True)
            if (w.bucket, w.id) not in missed
        ]
        return deliveries, not deliveries

    def receive_named(
        self,
        buckets: Sequence[int],
        count: int,
        timeout_ms: int,
        hint: int,
        *,
        ids: tuple[int, int] | None = None,
        token: int | None = None,
        reclaim: bool = False,
    ) -> list[Delivery]:
        """``lease_named``'s messages as deliveries, each with its receipt."""
        queue_id = self._buckets.queue_id
        leased = self.lease_named(
            buckets, count, timeout_ms, hint, ids=ids, token=token, reclaim=reclaim
        )
        return [delivery_of(queue_id, m, w) for m, w in leased]

    def lease_named(
        self,
        buckets: Sequence[int],
        count: int,
        timeout_ms: int,
        hint: int,
        *,
        ids: tuple[int, int] | None = None,
        token: int | None = None,
        reclaim: bool = False,
    ) -> list[Leased]:
        """A receive in buckets the caller has to itself (a Spark partition): plain leases.

        Three round trips: the scan reads payloads at once (the caller takes
        nearly all it finds); the leases are plain writes sharing one token
        (fresh, or the replayable step's own), so each bucket's go in one
        statement; and a read-back of the leases alone (no payloads) checks
        that each won (last write wins) and that the message was not acked
        between the scan and the lease write.

        Args:
            buckets: The buckets to read, in order.
            count: Most messages to return.
            timeout_ms: The visibility timeout of the leases.
            hint: K, the order hint.
            ids: Only this id slice ``ids[0] <= id < ids[1]`` of the one bucket
                (a step that split a busy bucket among several tasks).
            token: The lease token to write (a replayable step part's, see
                ``steps.step_lease``); default a fresh one.
            reclaim: First take back the unacked messages already holding
                ``token``: an earlier attempt of the same step part leased them
                and died before recording them, so nobody else can see them
                until their lease runs out.

        Returns:
            Each message won with the lease written, in id order, no receipt:
            a caller that hands out rows (the Spark source) skips encoding one.
        """
        now = now_ms()
        token = token or new_lease()
        mine = self._held_by(buckets, token, ids) if reclaim else []
        taken = {(m.bucket, m.id) for m in mine}
        want = max(count - len(mine), 0)
        if not want:
            found = []
        elif ids is None:
            found = self._visible_in(buckets, want * hint, now)
        else:
            (bucket,) = buckets
            # The scan starts at the slice's first id and reads in id order, so rows
            # past the slice come only after every visible one inside it.
            scanned = self._buckets.scan_visible(bucket, now, want * hint, after=ids[0] - 1)
            found = [m for m in scanned if m.id < ids[1]]
        found = [m for m in found if (m.bucket, m.id) not in taken]
        picked = pick_oldest(found, want, hint, self.claims.rng)
        fresh = [m for m in self._past_limit(picked, now) if m.expires_at > now]
        leased = [(m, replace(_lease(m, timeout_ms, now), lease=token)) for m in fresh]
        # Taken back: the dead attempt counted their delivery already.
        leased += [
            (m, LeaseWrite(m.bucket, m.id, token, now + timeout_ms, m.delivery_count, m.expires_at))
            for m in mine
        ]
        self._buckets.write_leases_shared([w for _, w in leased], now)
        held = self._buckets.leases_of([(w.bucket, w.id) for _, w in leased])
        won = (token, False)
        return sorted(
            ((m, w) for m, w in leased if held.get((w.bucket, w.id)) == won),
            key=lambda mw: mw[1].id,
        )

    def _held_by(
        self, buckets: Sequence[int], token: int, ids: tuple[int, int] | None
    ) -> list[StoredMessage]:
        """The unacked messages of ``buckets`` (or of the slice ``ids``) leased under ``token``."""
        return [
            m
            for bucket in buckets
            for m in self._buckets.leased_under(bucket, token)
            if ids is None or ids[0] <= m.id < ids[1]
        ]

    def _visible_in(self, buckets: Sequence[int], want: int, now: int) -> list[StoredMessage]:
        """Up to ``want`` visible messages (payloads too) of ``buckets``, in their order."""
        if len(buckets) > 1 and not self._buckets.tracing:
            # Several buckets (a Spark partition over a run of them): scanned at once,
            # each up to a bucket's worth, rather than one round trip after another.
            limit = min(want, self._buckets.bucket_size)
            return self._buckets.scan_visible_many(buckets, now, limit)[:want]
        found: list[StoredMessage] = []
        for bucket in buckets:
            if len(found) >= want:
                break
            found.extend(self._buckets.scan_visible(bucket, now, want - len(found)))
        return found

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

    def _visible(self, want: int, now: int) -> list[StoredMessage]:
        """Up to ``want`` visible messages (payloads too) from the live buckets, in id order."""
        found: list[StoredMessage] = []
        bucket, tail_refreshed = self._bounds.head, False
        while len(found) < want:
            if bucket > self._bounds.last_bucket():
                # Out of known buckets: the sequence may have moved since we looked.
                if tail_refreshed or not self._bounds.refresh_tail():
                    break
                tail_refreshed = True
                continue
            if not self._bounds.skipped(bucket, now):
                rows = self._buckets.scan_visible(bucket, now, want - len(found))
                found.extend(rows)
                if not rows:
                    self._bounds.note_idle(bucket, now)
            bucket += 1
        return found

    def visible_buckets(self, max_buckets: int, below: int | None) -> list[int]:
        """Live buckets holding at least one visible message, oldest first.

        The buckets not known idle are probed ``max_buckets`` (at least
        ``PROBE_WINDOW``) at a time, each window's probes at once: a drained
        stretch of buckets not dropped yet costs a round trip per window, not
        one per bucket (the Spark source asks on every trigger).
        """
        self._maintenance.maybe()
        now = now_ms()
        self._bounds.refresh_tail()
        tail = self._bounds.tail if below is None else min(self._bounds.tail, below)
        found: list[int] = []
        if tail <= 0:
            return found
        live = range(self._bounds.head, self._buckets.bucket_of(tail - 1) + 1)
        candidates = [b for b in live if not self._bounds.skipped(b, now)]
        window = max(max_buckets, PROBE_WINDOW)
        for start in range(0, len(candidates), window):
            probed = candidates[start : start + window]
            visible = self._buckets.probe_visible(probed, now)
            found += [b for b, v in zip(probed, visible, strict=True) if v]
            self._bounds.note_idle_many(
                [b for b, v in zip(probed, visible, strict=True) if not v], now
            )
            if len(found) >= max_buckets:
                break
        return found[:max_buckets]
