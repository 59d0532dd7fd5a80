"""The queue operations: send, receive, ack, change visibility, peek, stats, purge.

How a message moves (seed 000, BlueDove; seed 001, CassieQ):

* **Send.** Ids come from blocks of the queue's monotonic sequence; a message
  goes into bucket ``id // bucket_size`` with ``visible_at`` = now + delay.
* **Receive.** Scan live buckets from the head for unacked messages whose
  ``visible_at`` has passed, take the oldest ``K * n`` (K: the order hint)
  and pick ``n`` of them at random. Write each a fresh lease token,
  ``visible_at`` = now + visibility timeout and one more delivery, in one
  single-partition batch per bucket, then read the leases back and hand out
  only the messages whose lease is still ours. Cassandra's last-write-wins
  keeps one lease per message, so only one receipt can ack it; two consumers
  racing for a message can still both get it when each reads back before the
  other's write lands (a duplicate, which a larger K makes rarer).
* **Ack.** A conditional batch per bucket sets ``acked`` where the lease is
  still the receipt's: no tombstone per message.
* **Seal and drop.** Once every id of a bucket has been handed out and
  ``seal_delay`` has passed, the bucket is sealed (a pointer moves, by LWT).
  A sealed bucket whose messages are all acked is dropped as one partition
  and the head moves past it, so reads never wade through consumed messages.
* **Delayed writes.** A send that completes more than ``seal_delay`` after
  its ids were reserved reads the seal pointer; if its bucket was sealed in
  the meantime, it sends the message again under a new id. Because the
  sealer scans a bucket only after sealing it, either the sealer sees the
  late message (and keeps the bucket) or the writer sees the seal (and sends
  again): a message is never lost. Ids reserved and never written leave gaps
  that nobody waits for.
"""

from __future__ import annotations

import logging
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from spark_queue.config import QueueSettings, check_int, check_seconds
from spark_queue.errors import (
    InvalidMessage,
    MessageTooLarge,
    QueueNotFound,
    SparkQueueError,
    StaleReceipt,
)
from spark_queue.message import Delivery, Message, QueueStats, Receipt
from spark_queue.store.buckets import (
    Buckets,
    Candidate,
    LeaseCheck,
    LeaseWrite,
    NewMessage,
    StoredMessage,
)
from spark_queue.store.ids import IdBlocks
from spark_queue.store.journal import Journal, JournalEntry
from spark_queue.store.send_log import SendLog, SendState
from spark_queue.store.session import Store

log = logging.getLogger(__name__)

#: Most messages one receive, peek or batch send may handle.
MAX_BATCH = 10_000
#: Seconds between two maintenance passes (seal, drop) of one queue handle.
MAINTENANCE_INTERVAL = 1.0
#: Seconds a bucket found without visible messages is skipped by this process.
IDLE_RECHECK = 1.0
#: Seconds between two reads of the id sequence when receives come up short.
TAIL_REFRESH = 0.05
#: Most buckets dropped by one maintenance pass.
DROP_PER_PASS = 64

HEADER_SOURCE = "bdq-dead-letter-source"
HEADER_DELIVERIES = "bdq-delivery-count"
HEADER_ORIGINAL_ID = "bdq-original-id"

Payload = bytes | bytearray | memoryview | str


def _now_ms() -> int:
    return int(time.time() * 1000)


def _datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _new_lease() -> int:
    return secrets.randbits(63) or 1  # 0 is the "never delivered" lease


@dataclass(frozen=True, slots=True)
class _Outgoing:
    payload: bytes
    headers: Mapping[str, str]
    delay_ms: int


class Queue:
    """A handle on one queue; safe to share between threads. Get it from ``QueueClient``.

    Attributes:
        name: The queue's name.
        queue_id: Its incarnation; a re-created queue gets a new one.
        settings: Its settings, fixed at creation.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        queue_id: uuid.UUID,
        settings: QueueSettings,
        open_queue: Callable[[str], Queue],
    ) -> None:
        self.name = name
        self.queue_id = queue_id
        self.settings = settings
        self._store = store
        self._open_queue = open_queue
        self.buckets = Buckets(store, queue_id, settings.bucket_size)
        self._ids = IdBlocks(
            store,
            queue_id,
            name,
            lifetime=settings.seal_delay / 2,
            bucket_size=settings.bucket_size,
        )
        self._journal = Journal(store, queue_id)
        self._lock = threading.Lock()
        self._maintenance_lock = threading.Lock()
        self._head = 0
        self._tail = 0
        self._tail_read_at = 0.0
        self._maintained_at = 0.0
        self._skip_until: dict[int, int] = {}  # bucket -> wall ms until which it is skipped
        self._full_since: dict[
            int, float
        ] = {}  # bucket -> monotonic time first seen fully allocated
        self._deleted = False
        # (bucket, id) -> monotonic time its lease by this handle ends: threads
        # sharing the handle skip what a sibling holds instead of racing for it.
        self._claims: dict[tuple[int, int], float] = {}
        self._claims_pruned_at = 0.0

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, queue_id={self.queue_id})"

    def _mark_deleted(self) -> None:
        """Called by ``QueueClient.delete_queue``: this handle must not write any more."""
        self._deleted = True

    def _check_alive(self) -> None:
        if self._deleted:
            raise QueueNotFound(
                f"queue {self.name!r}: was deleted through this client; open the new queue"
                " with client.queue() after creating it again"
            )

    # -- send --------------------------------------------------------------------

    def send(
        self, payload: Payload, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> int:
        """Send one message; return its id once it is durable.

        Args:
            payload: bytes, or str (sent UTF-8 encoded).
            headers: String key/value pairs kept with the message.
            delay: Seconds before the message becomes visible.
        """
        return self.send_batch([payload], headers=headers, delay=delay)[0]

    def send_batch(
        self,
        payloads: Sequence[Payload],
        headers: Mapping[str, str] | Sequence[Mapping[str, str] | None] | None = None,
        delay: float | Sequence[float] = 0.0,
    ) -> list[int]:
        """Send several messages; return their ids in order.

        Every message is checked before anything is written: one bad payload,
        header or delay rejects the whole batch with nothing sent. Messages
        of one bucket are written in one atomic batch. If Cassandra fails
        part-way, BackendUnavailable is raised and sending again may
        duplicate the messages that were written (at-least-once).

        Args:
            payloads: bytes or str bodies.
            headers: One mapping for every message, or one per message.
            delay: Seconds before visibility: one value, or one per message.
        """
        return self._write(self._check_batch(payloads, headers, delay))

    def _check_batch(
        self,
        payloads: Sequence[Payload],
        headers: Mapping[str, str] | Sequence[Mapping[str, str] | None] | None,
        delay: float | Sequence[float],
    ) -> list[_Outgoing]:
        """Check every message of a batch before anything is written."""
        if isinstance(payloads, str | bytes | bytearray | memoryview):
            raise InvalidMessage(
                f"payloads {payloads[:40]!r}: send_batch takes a list of payloads; use send()"
                " for one"
            )
        count = len(payloads)
        if not 1 <= count <= MAX_BATCH:
            raise InvalidMessage(f"payloads: {count} messages; a batch holds 1 to {MAX_BATCH}")
        header_list = _per_message("headers", headers, count)
        delay_list = _per_message("delay", delay, count)
        outgoing = [
            _Outgoing(
                self._payload_bytes(p, i, count),
                _check_headers(h, i, count),
                self._delay_ms(d, i, count),
            )
            for i, (p, h, d) in enumerate(zip(payloads, header_list, delay_list, strict=True))
        ]
        return outgoing

    def _write(
        self,
        outgoing: Sequence[_Outgoing],
        *,
        ids: Sequence[tuple[int, float]] | None = None,
        pending: bool = False,
        now: int | None = None,
    ) -> list[int]:
        """Write messages; return the ids they ended up under.

        Args:
            outgoing: Checked messages.
            ids: ``(id, requested_at)`` reserved earlier; fresh ids by default.
            pending: Keep the messages invisible until ``_release`` (idempotent sends).
            now: Their enqueue time in ms (kept across a retry of the same send).
        """
        self._check_alive()
        if ids is None:
            ids = [
                (i, lease.requested_at)
                for lease in self._ids.take(len(outgoing))
                for i in lease.ids
            ]
        now = _now_ms() if now is None else now
        expires_at = now + self.settings.message_ttl * 1000
        messages = [
            NewMessage(
                id=message_id,
                payload=o.payload,
                headers=o.headers,
                enqueued_at=now,
                visible_at=expires_at if pending else now + o.delay_ms,
                expires_at=expires_at,
            )
            for (message_id, _), o in zip(ids, outgoing, strict=True)
        ]
        self.buckets.insert(messages, _now_ms())
        self._note_tail(self._ids.high_water)
        done = time.monotonic()
        result = [message_id for message_id, _ in ids]
        late = [
            n
            for n, (_, requested_at) in enumerate(ids)
            if done - requested_at >= self.settings.seal_delay
        ]
        if late:
            self._resend_if_sealed(late, result, outgoing, pending=pending, now=now)
        return result

    def _resend_if_sealed(
        self,
        late: list[int],
        ids: list[int],
        outgoing: Sequence[_Outgoing],
        *,
        pending: bool,
        now: int,
    ) -> None:
        """Send again (in place in ``ids``) the late writes whose bucket was sealed meanwhile.

        The write took longer than the seal delay: its bucket may have been
        sealed and scanned before the message landed, so it may never be read.
        """
        _, sealed_upto = self.buckets.pointers(serial=True)
        again = [n for n in late if self.buckets.bucket_of(ids[n]) < sealed_upto]
        if not again:
            return
        log.warning(
            "queue %r: %d delayed write(s) landed in sealed buckets; sending them again",
            self.name,
            len(again),
        )
        if pending:
            # Nobody saw these invisible copies: ack them so their bucket can go.
            expires_at = now + self.settings.message_ttl * 1000
            self.buckets.mark_acked(
                [(self.buckets.bucket_of(ids[n]), ids[n], expires_at) for n in again], _now_ms()
            )
        new_ids = self._write([outgoing[n] for n in again], pending=pending, now=now)
        for n, new_id in zip(again, new_ids, strict=True):
            ids[n] = new_id

    def send_batch_once(
        self,
        writer: str,
        batch: int,
        part: int,
        payloads: Sequence[Payload],
        headers: Mapping[str, str] | Sequence[Mapping[str, str] | None] | None = None,
        delay: float | Sequence[float] = 0.0,
        *,
        chunk: int = 0,
    ) -> list[int]:
        """Send a batch once per ``(writer, batch, part, chunk)``, however often it is retried.

        For a producer that may repeat itself (a Spark task retried, a
        micro-batch replayed after a crash): the messages are written
        invisible under ids recorded in a send log, then released. A repeat
        of the same key finishes what the first attempt started with the same
        ids, and after a completed send it changes nothing and returns the
        same ids. The repeat must carry the same messages in the same order.

        Raises:
            SparkQueueError: The repeat carries a different number of messages.
        """
        outgoing = self._check_batch(payloads, headers, delay)
        send_log = SendLog(self._store, self.queue_id)
        key = (writer, batch, part, chunk)
        record = send_log.read(*key)
        if record is None:
            now = _now_ms()
            reserved = [
                (i, lease.requested_at)
                for lease in self._ids.take(len(outgoing))
                for i in lease.ids
            ]
            state = SendState.RESERVED
            send_log.write(*key, state, [i for i, _ in reserved], now)
        else:
            state, previous, now = record
            if len(previous) != len(outgoing):
                raise SparkQueueError(
                    f"send of writer {writer!r}, batch {batch}, part {part}, chunk {chunk} to queue"
                    f" {self.name!r}:"
                    f" {len(outgoing)} messages now, {len(previous)} when first sent; a repeated"
                    " send must carry the same messages (is the input deterministic?)"
                )
            reserved = [(i, float("-inf")) for i in previous]  # reserved long ago: always check
        ids = [i for i, _ in reserved]
        if state is SendState.RESERVED:
            ids = self._write(outgoing, ids=reserved, pending=True, now=now)
            send_log.write(*key, SendState.WRITTEN, ids, now)
        if state is not SendState.DONE:
            self._release(ids, outgoing, now)
            send_log.write(*key, SendState.DONE, ids, now)
        return ids

    def _release(self, ids: Sequence[int], outgoing: Sequence[_Outgoing], written_at: int) -> None:
        """Make pending messages visible (after their delay), as fresh, never-delivered ones."""
        now = _now_ms()
        expires_at = written_at + self.settings.message_ttl * 1000
        self.buckets.write_leases(
            [
                LeaseWrite(self.buckets.bucket_of(i), i, 0, now + o.delay_ms, 0, expires_at)
                for i, o in zip(ids, outgoing, strict=True)
            ],
            now,
        )

    def _payload_bytes(self, payload: object, index: int, count: int) -> bytes:
        where = f" (message {index + 1} of {count})" if count > 1 else ""
        if isinstance(payload, str):
            data = payload.encode("utf-8")
        elif isinstance(payload, bytes | bytearray | memoryview):
            data = bytes(payload)
        else:
            raise InvalidMessage(
                f"payload {payload!r}{where}: must be bytes or str, not {type(payload).__name__}"
            )
        if len(data) > self.settings.max_message_bytes:
            raise MessageTooLarge(
                f"payload of {len(data)} bytes{where}: over queue {self.name!r}'s"
                f" max_message_bytes of {self.settings.max_message_bytes}"
            )
        return data

    def _delay_ms(self, delay: object, index: int, count: int) -> int:
        seconds = check_seconds("delay", delay, allow_zero=True)
        if seconds >= self.settings.message_ttl:
            where = f" (message {index + 1} of {count})" if count > 1 else ""
            raise InvalidMessage(
                f"delay {delay!r}{where}: must be shorter than queue {self.name!r}'s"
                f" message_ttl of {self.settings.message_ttl} s"
            )
        return int(seconds * 1000)

    # -- receive -------------------------------------------------------------------

    def receive(
        self,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        wait: float = 0.0,
        *,
        buckets: Sequence[int] | None = None,
    ) -> list[Delivery]:
        """Lease up to ``max_messages`` visible messages, oldest first (almost).

        Args:
            max_messages: Most messages to return (1 to 10000).
            visibility_timeout: Seconds the messages stay invisible to other
                receivers; default the queue's.
            order_hint: K for this call; default the queue's.
            wait: Seconds to keep polling while the queue is empty (long poll).
            buckets: Receive only from these buckets (a Spark partition's share).

        Returns:
            Deliveries in id order, each with its receipt. Empty if nothing was
            visible within ``wait``.
        """
        count = check_int("max_messages", max_messages, 1, MAX_BATCH)
        timeout = check_seconds(
            "visibility_timeout",
            self.settings.visibility_timeout if visibility_timeout is None else visibility_timeout,
        )
        hint = check_int(
            "order_hint", self.settings.order_hint if order_hint is None else order_hint, 1, 1000
        )
        deadline = time.monotonic() + check_seconds("wait", wait, allow_zero=True)
        self._check_alive()
        pause = 0.02
        while True:
            if buckets is None:  # a caller naming buckets has planned them (and maintains)
                self._maybe_maintain()
            deliveries = self._receive_once(count, int(timeout * 1000), hint, buckets)
            remaining = deadline - time.monotonic()
            if deliveries or remaining <= 0:
                return deliveries
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, 0.5)

    def _receive_once(
        self, count: int, timeout_ms: int, hint: int, buckets: Sequence[int] | None
    ) -> list[Delivery]:
        now = _now_ms()
        # A caller naming buckets has them to itself (a Spark partition): no
        # sibling thread to step around. Otherwise claimed rows show up only
        # while a sibling's lease write is in flight.
        claim = buckets is None
        with self._lock:
            claimed = len(self._claims) if claim else 0
        want = count * hint + min(claimed, 4 * count)
        if buckets is None:
            found = self._visible(want, now)
        else:
            found = self._candidates_in(buckets, want, now)
        chosen = self._claim(found, count, hint, timeout_ms, claim=claim)
        if not chosen:
            return []
        limit = self.settings.max_deliveries
        if limit is not None:
            dead = [m for m in chosen if m.delivery_count >= limit]
            if dead:
                self._move_to_dead_letters(dead, now)
                chosen = [m for m in chosen if m.delivery_count < limit]
        writes = [
            LeaseWrite(
                bucket=m.bucket,
                id=m.id,
                lease=_new_lease(),
                visible_at=now + timeout_ms,
                delivery_count=m.delivery_count + 1,
                expires_at=m.expires_at,
            )
            for m in chosen
            if m.expires_at > now
        ]
        self.buckets.write_leases(writes, now)
        # Read the messages back, payloads and all: where a racing consumer's
        # lease won (last write wins), the message is theirs; handing it out
        # too would only be a duplicate whose ack must fail. Nothing is lost:
        # the winner holds it. Payloads are read only for what was chosen.
        stored = self.buckets.read_many([(w.bucket, w.id) for w in writes])
        deliveries = []
        with self._lock:
            for w in writes:
                m = stored.get((w.bucket, w.id))
                if m is not None and m.lease == w.lease:
                    deliveries.append(self._delivery(m, w))
                else:
                    self._claims.pop((w.bucket, w.id), None)
        return deliveries

    def _claim(
        self, found: list[Candidate], count: int, hint: int, timeout_ms: int, *, claim: bool
    ) -> list[Candidate]:
        """Pick ``count`` among the oldest ``count * hint`` not held by a sibling thread."""
        if not claim:
            window = found[: count * hint]
            chosen = window if len(window) <= count else random.sample(window, count)
            return sorted(chosen, key=lambda m: m.id)
        clock = time.monotonic()
        with self._lock:
            if self._claims and clock >= self._claims_pruned_at + 1.0:
                # Leases that ran out unacked; at most once a second, not per receive.
                self._claims = {k: t for k, t in self._claims.items() if t > clock}
                self._claims_pruned_at = clock
            free = [m for m in found if self._claims.get((m.bucket, m.id), 0.0) <= clock][
                : count * hint
            ]
            chosen = free if len(free) <= count else random.sample(free, count)
            for m in chosen:
                self._claims[(m.bucket, m.id)] = clock + timeout_ms / 1000
        chosen.sort(key=lambda m: m.id)
        return chosen

    def _delivery(self, m: StoredMessage, w: LeaseWrite) -> Delivery:
        receipt = Receipt(self.queue_id, m.bucket, m.id, w.lease, m.expires_at).encode()
        return Delivery(
            id=m.id,
            bucket=m.bucket,
            payload=m.payload,
            headers=m.headers,
            enqueued_at=_datetime(m.enqueued_at),
            delivery_count=w.delivery_count,
            receipt=receipt,
            visible_at=_datetime(w.visible_at),
        )

    def _visible(self, want: int, now: int) -> list[Candidate]:
        """Up to ``want`` visible messages from the live buckets, in id order."""
        found: list[Candidate] = []
        bucket, tail_refreshed = self._head, False
        while len(found) < want:
            last = self.buckets.bucket_of(max(self._tail - 1, 0))
            if bucket > last:
                # Out of known buckets: the sequence may have moved since we looked.
                if tail_refreshed or not self._refresh_tail():
                    break
                tail_refreshed = True
                continue
            if self._skip_until.get(bucket, 0) <= now:
                rows = self.buckets.scan_candidates(bucket, now, want - len(found))
                found.extend(rows)
                if not rows:
                    self._note_idle(bucket, now)
            bucket += 1
        return found

    def _candidates_in(self, buckets: Sequence[int], want: int, now: int) -> list[Candidate]:
        found: list[Candidate] = []
        for bucket in buckets:
            if len(found) >= want:
                break
            found.extend(self.buckets.scan_candidates(bucket, now, want - len(found)))
        return found

    def visible_buckets(self, max_buckets: int, below: int | None = None) -> list[int]:
        """Live buckets holding at least one visible message, oldest first.

        Cheap enough to poll: buckets found idle are skipped for a while.

        Args:
            max_buckets: Most buckets to return.
            below: Only buckets holding ids below this one.
        """
        self._maybe_maintain()
        now = _now_ms()
        self._refresh_tail()
        tail = self._tail if below is None else min(self._tail, below)
        found: list[int] = []
        if tail <= 0:
            return found
        for bucket in range(self._head, self.buckets.bucket_of(tail - 1) + 1):
            if len(found) >= max_buckets:
                break
            if self._skip_until.get(bucket, 0) > now:
                continue
            if self.buckets.scan_candidates(bucket, now, 1):
                found.append(bucket)
            else:
                self._note_idle(bucket, now)
        return found

    @property
    def tail(self) -> int:
        """The next id the sequence will hand out, as last seen by this handle."""
        return self._tail

    def _note_idle(self, bucket: int, now: int) -> None:
        """Skip a fully allocated bucket without visible messages for a while."""
        if (bucket + 1) * self.settings.bucket_size > self._tail:
            return  # the tail bucket: new messages may land any moment
        until = now + int(IDLE_RECHECK * 1000)
        for _, visible_at, _, _ in self.buckets.unacked(bucket):
            until = min(until, visible_at)
        with self._lock:
            self._skip_until[bucket] = until

    def _refresh_tail(self) -> bool:
        """Re-read the sequence (at most every TAIL_REFRESH s); True if it moved."""
        if time.monotonic() - self._tail_read_at < TAIL_REFRESH:
            return False
        before = self._tail
        self._note_tail(self.buckets.tail())
        self._tail_read_at = time.monotonic()
        return self._tail > before

    def _note_tail(self, tail: int) -> None:
        with self._lock:
            self._tail = max(self._tail, tail)

    def _move_to_dead_letters(self, candidates: Sequence[Candidate], now: int) -> None:
        """Send messages past max_deliveries to the dead-letter queue, then ack them here.

        Sent first, acked second: a crash in between leaves a duplicate in the
        dead-letter queue, never a lost message.
        """
        name = self.settings.dead_letter_queue
        assert name is not None  # QueueSettings ties it to max_deliveries
        stored = self.buckets.read_many([(c.bucket, c.id) for c in candidates])
        messages = [stored[(c.bucket, c.id)] for c in candidates if (c.bucket, c.id) in stored]
        try:
            dead_letters = self._open_queue(name)
            dead_letters.send_batch(
                [m.payload for m in messages],
                headers=[
                    {
                        **m.headers,
                        HEADER_SOURCE: self.name,
                        HEADER_DELIVERIES: str(m.delivery_count),
                        HEADER_ORIGINAL_ID: str(m.id),
                    }
                    for m in messages
                ],
            )
        except SparkQueueError:
            log.exception(
                "queue %r: could not move %d message(s) to dead-letter queue %r; they stay here",
                self.name,
                len(messages),
                name,
            )
            return
        self.buckets.ack([LeaseCheck(m.bucket, m.id, m.lease, m.expires_at) for m in messages], now)

    # -- ack / visibility ----------------------------------------------------------------

    def ack(self, receipt: str) -> None:
        """Remove the message a receipt names. StaleReceipt if it names an old delivery."""
        self.ack_batch([receipt])

    def ack_batch(self, receipts: Sequence[str], *, strict: bool = True) -> list[str]:
        """Ack many receipts with one conditional write per bucket.

        Every receipt that still names the current delivery is acked. Stale ones
        change nothing: with ``strict`` (the default) they raise StaleReceipt
        after the others were acked; otherwise they are returned.

        Returns:
            The stale receipts (empty when ``strict``).
        """
        if isinstance(receipts, str):
            raise InvalidMessage(f"receipts {receipts[:40]!r}: ack_batch takes a list; use ack()")
        decoded = [(text, Receipt.decode(text)) for text in receipts]
        foreign = [text for text, r in decoded if r.queue_id != self.queue_id]
        mine = [(text, r) for text, r in decoded if r.queue_id == self.queue_id]
        stale_keys = self.buckets.ack(
            [LeaseCheck(r.bucket, r.id, r.lease, r.expires_at_ms) for _, r in mine], _now_ms()
        )
        with self._lock:  # acked (or someone else's by now): no sibling needs to skip them
            for _, r in mine:
                self._claims.pop((r.bucket, r.id), None)
        stale = foreign + [text for text, r in mine if (r.bucket, r.id) in stale_keys]
        if stale and strict:
            raise StaleReceipt(
                f"{len(stale)} of {len(receipts)} receipt(s) for queue {self.name!r} no longer"
                " name the current delivery (acked already, received again after the"
                " visibility timeout, or from another queue); nothing was changed for them",
            )
        return stale

    def change_visibility(self, receipt: str, seconds: float) -> str:
        """Make a received message visible again after ``seconds`` (0: now).

        Returns:
            The new receipt; the old one is stale from now on.
        """
        delay = check_seconds("seconds", seconds, allow_zero=True)
        r = Receipt.decode(receipt)
        now = _now_ms()
        new_lease = _new_lease()
        check = LeaseCheck(r.bucket, r.id, r.lease, r.expires_at_ms)
        if r.queue_id != self.queue_id or not self.buckets.change_visibility(
            check, new_lease, now + int(delay * 1000), now
        ):
            raise StaleReceipt(
                f"receipt for message {r.id} of queue {self.name!r}: no longer names the current"
                " delivery; its visibility was not changed"
            )
        with self._lock:
            self._skip_until.pop(r.bucket, None)
            self._claims.pop((r.bucket, r.id), None)
        return Receipt(self.queue_id, r.bucket, r.id, new_lease, r.expires_at_ms).encode()

    # -- replayable consumer steps (the Spark source) -------------------------------------

    def receive_step(
        self,
        consumer: str,
        step: int,
        part: int,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        buckets: Sequence[int] | None = None,
    ) -> list[Delivery]:
        """Receive for one step of a replayable consumer, or replay it.

        The first call for ``(consumer, step, part)`` receives as ``receive``
        does and records the deliveries in the journal before returning them.
        Any later call returns the same deliveries (same messages, same
        receipts) instead of receiving new ones.
        """
        recorded = self._journal.recorded(consumer, step, part)
        if recorded is not None:
            return self._redeliver(recorded)
        deliveries = self.receive(max_messages, visibility_timeout, order_hint, buckets=buckets)
        self._journal.record(
            consumer,
            step,
            part,
            [
                JournalEntry(d.bucket, d.id, r.lease, r.expires_at_ms, d.delivery_count)
                for d in deliveries
                for r in [Receipt.decode(d.receipt)]
            ],
        )
        return deliveries

    def ack_step(self, consumer: str, step: int) -> tuple[int, int]:
        """Ack everything a consumer step received, then forget the step.

        Idempotent: acking a step again finds nothing to do.

        Returns:
            ``(acked, stale)``: stale ones were received again by someone else
            after their lease ran out (a duplicate delivery) or acked already.
        """
        entries = self._journal.step_entries(consumer, step)
        if not entries:
            return 0, 0  # nothing recorded, or acked already: no tombstone to write
        stale = self.buckets.ack(
            [LeaseCheck(e.bucket, e.id, e.lease, e.expires_at) for e in entries], _now_ms()
        )
        self._journal.forget(consumer, step)
        return len(entries) - len(stale), len(stale)

    def _redeliver(self, entries: Sequence[JournalEntry]) -> list[Delivery]:
        by_bucket: dict[int, list[int]] = {}
        for e in entries:
            by_bucket.setdefault(e.bucket, []).append(e.id)
        stored = {
            (m.bucket, m.id): m
            for bucket, ids in by_bucket.items()
            for m, _ in self.buckets.read(bucket, ids)
        }
        deliveries = []
        for e in entries:
            m = stored.get((e.bucket, e.id))
            if m is None:
                log.warning("queue %r: replayed message %d is gone (expired?)", self.name, e.id)
                continue
            write = LeaseWrite(
                e.bucket, e.id, e.lease, m.visible_at, e.delivery_count, e.expires_at
            )
            deliveries.append(self._delivery(m, write))
        return deliveries

    # -- inspection ------------------------------------------------------------------

    def peek(
        self,
        max_messages: int = 10,
        *,
        buckets: Sequence[int] | None = None,
        after: int | None = None,
    ) -> list[Message]:
        """Visible messages, oldest first, without leasing them.

        Args:
            max_messages: Most messages to return.
            buckets: Look only in these buckets (a Spark partition's share).
            after: Only ids above this one: the next page after a peek's last id.
        """
        count = check_int("max_messages", max_messages, 1, MAX_BATCH)
        if buckets is None:
            buckets = self.live_buckets()
        now = _now_ms()
        found: list[StoredMessage] = []
        for bucket in buckets:
            if len(found) >= count:
                break
            found.extend(self.buckets.scan_visible(bucket, now, count - len(found), after))
        return [
            Message(
                id=m.id,
                bucket=m.bucket,
                payload=m.payload,
                headers=m.headers,
                enqueued_at=_datetime(m.enqueued_at),
                delivery_count=m.delivery_count,
            )
            for m in found
        ]

    def stats(self) -> QueueStats:
        """Approximate counts from one scan of every live bucket (no payloads read)."""
        now = _now_ms()
        visible = in_flight = delayed = 0
        buckets = self.live_buckets()
        for bucket in buckets:
            for _, visible_at, deliveries, _ in self.buckets.unacked(bucket):
                if visible_at <= now:
                    visible += 1
                elif deliveries > 0:
                    in_flight += 1
                else:
                    delayed += 1
        return QueueStats(
            visible=visible, in_flight=in_flight, delayed=delayed, buckets=len(buckets)
        )

    def purge(self) -> int:
        """Remove every message in the queue now (visible, in flight or delayed).

        Returns:
            How many messages were removed.
        """
        now = _now_ms()
        rows = [
            (bucket, message_id, expires_at)
            for bucket in self.live_buckets()
            for message_id, _, _, expires_at in self.buckets.unacked(bucket)
        ]
        self.buckets.mark_acked(rows, now)
        self.maintain()
        return len(rows)

    def live_buckets(self) -> list[int]:
        """Buckets not dropped yet, from the head to the one of the newest id (fresh read)."""
        self._refresh_bounds()
        last = self.buckets.bucket_of(max(self._tail - 1, 0))
        return list(range(self._head, last + 1)) if self._tail > 0 else []

    def _refresh_bounds(self) -> None:
        head, _ = self.buckets.pointers()
        tail = self.buckets.tail()
        with self._lock:
            self._head = max(self._head, head)
            self._tail = max(self._tail, tail)
            self._tail_read_at = time.monotonic()

    # -- maintenance: seal and drop --------------------------------------------------------

    def _maybe_maintain(self) -> None:
        if time.monotonic() - self._maintained_at < MAINTENANCE_INTERVAL:
            return
        if not self._maintenance_lock.acquire(blocking=False):
            return  # another thread of this process is on it
        try:
            self._maintain_locked()
        except SparkQueueError:
            log.warning("queue %r: maintenance pass failed; will retry", self.name, exc_info=True)
        finally:
            self._maintenance_lock.release()

    def maintain(self) -> tuple[int, int]:
        """Seal buckets whose ids were all handed out ``seal_delay`` ago, drop fully acked ones.

        Receives call this about once a second; it is public for tools and tests.

        Returns:
            ``(sealed_upto, head)`` after the pass.
        """
        with self._maintenance_lock:
            return self._maintain_locked()

    def _maintain_locked(self) -> tuple[int, int]:
        self._maintained_at = time.monotonic()
        # Serial read: a seal we act on must be complete at a quorum (see module doc).
        head, sealed_upto = self.buckets.pointers(serial=True)
        tail = self.buckets.tail()
        self._note_tail(tail)
        sealed_upto = self._seal(sealed_upto, tail)
        head = self._drop(head, sealed_upto)
        with self._lock:
            self._head = max(self._head, head)
            self._skip_until = {b: t for b, t in self._skip_until.items() if b >= self._head}
        return sealed_upto, head

    def _seal(self, sealed_upto: int, tail: int) -> int:
        now = time.monotonic()
        size = self.settings.bucket_size
        full_below = tail // size  # buckets below this have had every id handed out
        for bucket in range(sealed_upto, full_below):
            self._full_since.setdefault(bucket, now)
        ready = sealed_upto
        while ready < full_below and now - self._full_since[ready] >= self.settings.seal_delay:
            ready += 1
        if ready > sealed_upto:
            if self.buckets.seal(sealed_upto, ready):
                sealed_upto = ready
            else:  # another process sealed first: take its word
                sealed_upto = max(sealed_upto, self.buckets.pointers(serial=True)[1])
        self._full_since = {b: t for b, t in self._full_since.items() if b >= sealed_upto}
        return sealed_upto

    def _drop(self, head: int, sealed_upto: int) -> int:
        droppable = []
        for bucket in range(head, min(sealed_upto, head + DROP_PER_PASS)):
            if self.buckets.has_unacked(bucket):
                # Possibly a write that landed just before the seal: look again now
                # rather than when this process's idle-skip of the bucket ends.
                with self._lock:
                    self._skip_until.pop(bucket, None)
                break
            droppable.append(bucket)
        if not droppable:
            return head
        # Drop first, then move the head: a crash in between leaves the head on
        # an empty partition, which the next pass drops again.
        self.buckets.drop(droppable)
        new_head = droppable[-1] + 1
        if self.buckets.advance_head(head, new_head):
            return new_head
        return max(head, self.buckets.pointers(serial=True)[0])


def _per_message(name: str, value: object, count: int) -> list[object]:
    """Expand one value (or check one per message) for a batch."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if len(value) != count:
            raise InvalidMessage(
                f"{name}: {len(value)} values for {count} payloads;"
                " give one value or one per payload"
            )
        return list(value)
    return [value] * count


def _check_headers(headers: object, index: int, count: int) -> Mapping[str, str]:
    if headers is None:
        return {}
    where = f" (message {index + 1} of {count})" if count > 1 else ""
    if not isinstance(headers, Mapping):
        raise InvalidMessage(f"headers {headers!r}{where}: must be a mapping of str to str")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidMessage(f"header {key!r}: {value!r}{where}: keys and values must be str")
    return dict(headers)
