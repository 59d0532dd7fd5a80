"""Receiving: candidate scans, leases and their read-back, what threads of one handle share.

How a receive works (seed 000, BlueDove):

1. **Scan** live buckets from the head for unacked messages whose
   ``visible_at`` has passed (ids and leases only, no payloads) and keep
   the oldest ``K * n`` (K: the order hint).
2. **Pick** ``n`` of them at random, skipping what sibling threads of this
   handle hold (``claims.py``).
3. **Lease** each pick: a fresh lease token, ``visible_at`` = now +
   visibility timeout and one more delivery, in one single-partition batch
   per bucket. Messages past ``max_deliveries`` move to the dead-letter
   queue instead (``dead_letters.py``).
4. **Read back** the picks, payloads and all, and hand out only those whose
   lease is still ours and that nobody acked meanwhile. Cassandra's
   last-write-wins keeps one lease per message, so only one receipt can ack
   it; two consumers racing can still both get a message when each reads
   back before the other's write lands (a duplicate, whose ack fails).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from spark_queue.bounds import Bounds
from spark_queue.claims import Claims, pick_oldest
from spark_queue.config import QueueSettings
from spark_queue.dead_letters import DeadLetters
from spark_queue.maintenance import Maintenance
from spark_queue.message import Delivery, Receipt, new_lease
from spark_queue.store.buckets import Buckets, Candidate, LeaseWrite, StoredMessage, now_ms


def as_datetime(ms: int) -> datetime:
    """A stored time (integer ms) as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


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
        """One scan, pick, lease and read-back (see module doc)."""
        now = now_ms()
        # A caller naming buckets has them to itself (a Spark partition): no
        # sibling thread to step around. Otherwise claimed rows show up only
        # while a sibling's lease write is in flight.
        claim = buckets is None
        claimed = len(self.claims) if claim else 0
        want = count * hint + min(claimed, 4 * count)
        if buckets is None:
            found = self._visible(want, now)
            chosen = self.claims.pick(found, count, hint, timeout_ms / 1000, time.monotonic())
        else:
            found = self._candidates_in(buckets, want, now)
            chosen = pick_oldest(found, count, hint, self.claims.rng)
        if not chosen:
            return []
        limit = self._dead_letters.limit()
        if limit is not None:
            dead = [m for m in chosen if m.delivery_count >= limit]
            if dead:
                self._dead_letters.move(dead, now)
                self.claims.drop((m.bucket, m.id) for m in dead)
                chosen = [m for m in chosen if m.delivery_count < limit]
        writes = [
            LeaseWrite(
                bucket=m.bucket,
                id=m.id,
                lease=new_lease(),
                visible_at=now + timeout_ms,
                delivery_count=m.delivery_count + 1,
                expires_at=m.expires_at,
            )
            for m in chosen
            if m.expires_at > now
        ]
        self._buckets.write_leases(writes, now)
        # Read the messages back, payloads and all: where a racing consumer's
        # lease won (last write wins), the message is theirs; handing it out
        # too would only be a duplicate whose ack must fail. Nothing is lost:
        # the winner holds it. Payloads are read only for what was chosen.
        stored = self._buckets.read_many([(w.bucket, w.id) for w in writes])
        deliveries, lost = [], []
        for w in writes:
            m = stored.get((w.bucket, w.id))
            # Acked between our scan and our lease write: finished, not ours.
            if m is not None and m.lease == w.lease and not m.acked:
                deliveries.append(delivery_of(self._buckets.queue_id, m, w))
            else:
                lost.append((w.bucket, w.id))
        self.claims.drop(lost)
        return deliveries

    def _visible(self, want: int, now: int) -> list[Candidate]:
        """Up to ``want`` visible messages from the live buckets, in id order."""
        found: list[Candidate] = []
        bucket, tail_refreshed = self._bounds.head, False
        while len(found) < want:
            if bucket > self._bounds.last_bucket():
                # Out of known buckets: the sequence may have moved since we looked.
                if tail_refreshed or not self._bounds.refresh_tail():
                    break
                tail_refreshed = True
                continue
            if not self._bounds.skipped(bucket, now):
                rows = self._buckets.scan_candidates(bucket, now, want - len(found))
                found.extend(rows)
                if not rows:
                    self._bounds.note_idle(bucket, now)
            bucket += 1
        return found

    def _candidates_in(self, buckets: Sequence[int], want: int, now: int) -> list[Candidate]:
        found: list[Candidate] = []
        for bucket in buckets:
            if len(found) >= want:
                break
            found.extend(self._buckets.scan_candidates(bucket, now, want - len(found)))
        return found

    def visible_buckets(self, max_buckets: int, below: int | None) -> list[int]:
        """Live buckets holding at least one visible message, oldest first."""
        self._maintenance.maybe()
        now = now_ms()
        self._bounds.refresh_tail()
        tail = self._bounds.tail if below is None else min(self._bounds.tail, below)
        found: list[int] = []
        if tail <= 0:
            return found
        for bucket in range(self._bounds.head, self._buckets.bucket_of(tail - 1) + 1):
            if len(found) >= max_buckets:
                break
            if self._bounds.skipped(bucket, now):
                continue
            if self._buckets.scan_candidates(bucket, now, 1):
                found.append(bucket)
            else:
                self._bounds.note_idle(bucket, now)
        return found
