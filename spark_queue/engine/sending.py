"""Sending: checked batches, id blocks, repair of late writes, and send-once.

* **Checked batches.** Every message of a batch is checked (payload type,
  headers, delay, and its size: payload, header names and values, and key, as
  UTF-8) before anything is written: one bad message rejects the batch with
  nothing sent.
* **All or nothing.** A batch Cassandra writes in one statement (one bucket,
  one chunk: the common case) is atomic by Cassandra. A larger one is written
  invisible, then released once every write landed; if any write fails, the
  copies that may have landed are acked (retired) and the send raises, so
  whatever Cassandra refuses, none of the batch is received.
* **Ids.** Ids come from blocks of the queue's monotonic sequence
  (``store/ids.py``); a message goes into bucket ``id // bucket_size`` with
  ``visible_at`` = now + delay.
* **Lanes.** Each message gets its lane (``lanes.py``): from its key when
  one is given, else none (``KEYLESS``: any consumer may receive it, ``shares.py``).
  The key itself is stored too, for receivers to see (null when none).
* **Idempotent.** A write that failed transiently (a timeout, a dropped
  connection) is repeated with the same ids and write timestamp for
  ``SEND_RETRY`` seconds (``store/retries.py``): a send retried that way is
  written once, as with Kafka's idempotent producer.
* **Repair.** A send that completes more than ``seal_delay`` after its ids
  were reserved reads the seal pointer; if its bucket was sealed in the
  meantime, it sends the message again under a new id. Because the sealer
  scans a bucket only after sealing it, either the sealer sees the late
  message (and keeps the bucket) or the writer sees the seal (and sends
  again): a message is never lost. Ids reserved and never written leave
  gaps that nobody waits for.
* **Send-once.** ``staging.py`` writes through ``write`` with a timestamp
  of its own choosing (``timestamp=``) and retires copies with ``retire``.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from spark_queue.config import QueueSettings, check_seconds
from spark_queue.defaults import MAX_BATCH
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.lanes import check_key, lane_for
from spark_queue.errors import InvalidMessage, MessageTooLarge, SparkQueueError
from spark_queue.store.buckets import Buckets
from spark_queue.store.ids import IdBlocks
from spark_queue.store.message_values import (
    LeaseWrite,
    NewMessage,
    header_bytes,
    now_ms,
    write_chunks,
)
from spark_queue.store.retries import now_us, repeated
from spark_queue.store.session import Store

log = logging.getLogger(__name__)

Payload = bytes | bytearray | memoryview | str
Headers = Mapping[str, str] | Sequence[Mapping[str, str] | None] | None
Keys = str | Sequence[str | None] | None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One checked message, ready to write: ``key`` is kept with it, ``lane`` comes from it."""

    payload: bytes
    headers: Mapping[str, str]
    delay_ms: int
    lane: int = 0
    key: str | None = None


class Sender:
    """Writes the messages of one queue handle; safe to share between threads.

    Args:
        store: The Cassandra session.
        buckets: The queue's bucket store.
        bounds: The handle's view of head and tail (sends move the tail).
        name: The queue's name (for messages).
        settings: Returns the queue's current settings (they may change: see
            ``settings_change``); ``bucket_size`` and ``seal_delay`` never do.
        check_alive: Raises when the handle must not write any more.
    """

    def __init__(
        self,
        store: Store,
        buckets: Buckets,
        bounds: Bounds,
        name: str,
        settings: Callable[[], QueueSettings],
        check_alive: Callable[[], None],
    ) -> None:
        self._store = store
        self._buckets = buckets
        self._bounds = bounds
        self._name = name
        self._settings = settings
        self._check_alive = check_alive
        self.ids = IdBlocks(
            store,
            buckets.queue_id,
            name,
            lifetime=settings().seal_delay / 2,
            bucket_size=settings().bucket_size,
        )

    @property
    def queue_id(self) -> uuid.UUID:
        return self._buckets.queue_id

    # -- checks --------------------------------------------------------------------

    def check_batch(
        self,
        payloads: Sequence[Payload],
        headers: Headers,
        delay: float | Sequence[float],
        key: Keys = None,
        position: Callable[[int], str] | None = None,
    ) -> list[Outgoing]:
        """Check every message of a batch before anything is written; give each its lane.

        ``position`` names message ``i`` in errors (" (row 7 of partition 2)");
        by default " (message i+1 of count)" in a batch of several.
        """
        if isinstance(payloads, str | bytes | bytearray | memoryview):
            raise InvalidMessage(
                f"payloads {payloads[:40]!r}: send_batch takes a list of payloads; use send()"
                " for one"
            )
        count = len(payloads)
        if not 1 <= count <= MAX_BATCH:
            raise InvalidMessage(f"payloads: {count} messages; a batch holds 1 to {MAX_BATCH}")
        where = position or (lambda i: f" (message {i + 1} of {count})" if count > 1 else "")
        header_list = _per_message("headers", headers, count)
        delay_list = _per_message("delay", delay, count)
        lanes = self._settings().lanes
        key_list: list[str | None]
        if key is None or isinstance(key, str):
            key_list = [key] * count
            lane_list = [lane_for(key, lanes)] * count
        else:
            key_list = _per_message("key", key, count)  # type: ignore[assignment]
            lane_list = [lane_for(k, lanes) for k in key_list]
        # One look at the settings and one check of a delay shared by the whole
        # batch: per message, these cost more than the write's own work (the sink
        # checks batches of a thousand).
        max_bytes = self._settings().max_message_bytes
        shared_delay = None
        if not isinstance(delay, Sequence):
            shared_delay = self._delay_ms(delay, lambda _: "", 0)
        checked = [
            Outgoing(
                self._payload_bytes(p, where, i, max_bytes),
                _check_headers(h, where, i),
                shared_delay if shared_delay is not None else self._delay_ms(d, where, i),
                lane,
                k,
            )
            for i, (p, h, d, lane, k) in enumerate(
                zip(payloads, header_list, delay_list, lane_list, key_list, strict=True)
            )
        ]
        for i, o in enumerate(checked):
            if o.headers or o.key is not None:  # the payload alone was checked above
                self._check_size(o, where, i, max_bytes)
        return checked

    def _payload_bytes(
        self, payload: object, position: Callable[[int], str], index: int, max_bytes: int
    ) -> bytes:
        if type(payload) is bytes and len(payload) <= max_bytes:
            return payload  # the common case, without the checks below
        where = position(index)
        if isinstance(payload, str):
            data = _utf8(payload, f"payload {payload[:40]!r}{where}")
        elif isinstance(payload, bytes | bytearray | memoryview):
            data = bytes(payload)
        else:
            raise InvalidMessage(
                f"payload {payload!r}{where}: must be bytes or str, not {type(payload).__name__}"
            )
        if len(data) > max_bytes:
            raise MessageTooLarge(
                f"payload of {len(data)} bytes{where}: over queue {self._name!r}'s"
                f" max_message_bytes of {max_bytes}"
            )
        return data

    def _check_size(
        self, o: Outgoing, position: Callable[[int], str], index: int, max_bytes: int
    ) -> None:
        """MessageTooLarge if payload, headers and key weigh more than ``max_bytes``.

        They are all in the message's row, and so in the write Cassandra may refuse.
        """
        parts = {
            "payload": len(o.payload),
            "headers": header_bytes(o.headers),
            "key": 0 if o.key is None else len(o.key.encode()),
        }
        total = sum(parts.values())
        if total > max_bytes:
            listed = ", ".join(f"{name} {size}" for name, size in parts.items() if size)
            raise MessageTooLarge(
                f"message of {total} bytes ({listed}){position(index)}: over queue"
                f" {self._name!r}'s max_message_bytes of {max_bytes} (payload, header names"
                " and values, and key count, as UTF-8)"
            )

    def _delay_ms(self, delay: object, position: Callable[[int], str], index: int) -> int:
        seconds = check_seconds("delay", delay, allow_zero=True)
        if seconds >= self._settings().message_ttl:
            raise InvalidMessage(
                f"delay {delay!r}{position(index)}: must be shorter than queue {self._name!r}'s"
                f" message_ttl of {self._settings().message_ttl} s"
            )
        return int(seconds * 1000)

    # -- writes --------------------------------------------------------------------

    def reserve(self, count: int) -> list[tuple[int, float]]:
        """``count`` fresh ids, each with the monotonic time its id block was requested."""
        return [(i, block.requested_at) for block in self.ids.take(count) for i in block.ids]

    def write(
        self,
        outgoing: Sequence[Outgoing],
        *,
        ids: Sequence[tuple[int, float]] | None = None,
        pending: bool = False,
        now: int | None = None,
        timestamp: int | None = None,
        expires_at: int | None = None,
    ) -> list[int]:
        """Write messages; return the ids they ended up under.

        Args:
            outgoing: Checked messages.
            ids: ``(id, requested_at)`` reserved earlier; fresh ids by default.
            pending: Keep the messages invisible until released (send-once, with
                ``timestamp``).
            now: Their enqueue time in ms (kept across a retry of the same send).
            timestamp: The write timestamp in microseconds (send-once); the
                driver's by default.
            expires_at: Their expiry in ms (send-once: the first attempt's); by
                default ``now`` plus the queue's TTL.
        """
        self._check_alive()
        if ids is None:
            ids = self.reserve(len(outgoing))
        now = now_ms() if now is None else now
        messages = self.new_messages(outgoing, ids, now, pending=pending, expires_at=expires_at)
        if timestamp is not None:  # send-once: its own protocol retries (staging.py)
            self._buckets.insert(messages, now_ms(), timestamp=timestamp)
            return self.landed(
                outgoing, ids, pending=pending, now=now, timestamp=timestamp, expires_at=expires_at
            )
        # Idempotent: repeated with the same ids and write time (store/retries.py).
        stamp = now_us()
        chunks = write_chunks(messages, self._buckets.bucket_size)
        if len(chunks) > 1 and not pending:
            return self._write_all_or_nothing(outgoing, ids, now, stamp)
        # One write (the common case): Cassandra applies it whole or not at all.
        repeated(lambda: self._buckets.insert(messages, now_ms(), timestamp=stamp, chunks=chunks))
        return self.landed(outgoing, ids, pending=pending, now=now)

    def _write_all_or_nothing(
        self, outgoing: Sequence[Outgoing], ids: Sequence[tuple[int, float]], now: int, stamp: int
    ) -> list[int]:
        """Write messages that take several writes so that they show all or none.

        The send-once's mechanism without its record (``staging.py``): every
        write puts its rows invisible at ``stamp`` (this host's clock, µs);
        once all landed (and late ones were repaired), one release per bucket
        moves ``visible_at`` alone at ``stamp + 1``. If any write or the
        release fails, every copy it wrote is acked at ``stamp + 2`` and the
        error is raised: a refused bucket leaves nothing to receive (a copy
        the ack missed, such as a failed repair's, stays invisible until it
        expires). The timestamps, not the order of arrival, decide: a repeated
        write arriving after the release or the ack loses to them.

        Clock skew: the release carries this host's clock. A consumer whose
        clock is behind it by more than the time from release to receive
        writes a lease whose ``visible_at`` loses to the release: the message
        is delivered again (a duplicate), never lost; a one-write send has
        the same bound with its insert. A release that failed part-way may
        have shown some messages before they were acked: their consumers'
        acks then count as stale, and the caller, told the send failed, sends
        them again (at-least-once).
        """
        hidden = self.new_messages(outgoing, ids, now, pending=True)
        expires_at = hidden[0].expires_at  # one for the batch
        written = [message_id for message_id, _ in ids]
        try:
            repeated(lambda: self._buckets.insert(hidden, now_ms(), timestamp=stamp))
            final = self.landed(
                outgoing, ids, pending=True, now=now, timestamp=stamp, expires_at=expires_at
            )
            known = set(written)
            written += [i for i in final if i not in known]
            releases = [
                LeaseWrite(self._buckets.bucket_of(i), i, 0, now + o.delay_ms, 0, m.expires_at)
                for i, o, m in zip(final, outgoing, hidden, strict=True)
            ]
            repeated(lambda: self._buckets.release_shared({stamp + 1: releases}, now_ms()))
        except BaseException:
            # Best effort: if this fails too, the copies stay invisible until they expire.
            with contextlib.suppress(SparkQueueError):
                self.retire(written, expires_at, timestamp=stamp + 2)
            raise
        replaced = [old for (old, _), new in zip(ids, final, strict=True) if old != new]
        if replaced:  # copies in sealed buckets, sent again by the repair
            self.retire(replaced, expires_at, timestamp=stamp + 2)
        return final

    def check_one(
        self,
        payload: Payload,
        headers: Mapping[str, str] | None,
        delay: float,
        key: str | None = None,
    ) -> Outgoing:
        """Check one message, and that the handle may still write (the producer's call)."""
        self._check_alive()
        if type(payload) is bytes and headers is None and key is None and type(delay) is float:
            # The common asynchronous send (bytes, no headers, key or delay), which
            # the producer takes thousands of times a second: the checks
            # ``check_batch`` would make, without building its lists.
            settings = self._settings()
            if delay == 0 and len(payload) <= settings.max_message_bytes:
                return Outgoing(payload, _NO_HEADERS, 0, lane_for(None, settings.lanes), None)
        return self.check_batch([payload], headers, delay, check_key(key))[0]

    def new_messages(
        self,
        outgoing: Sequence[Outgoing],
        ids: Sequence[tuple[int, float]],
        now: int,
        *,
        pending: bool = False,
        expires_at: int | None = None,
    ) -> list[NewMessage]:
        """The rows to write for checked messages under reserved ids, enqueued at ``now`` (ms).

        ``expires_at`` (ms): by default ``now`` plus the queue's TTL.
        """
        if expires_at is None:
            expires_at = now + self._settings().message_ttl * 1000
        return [
            NewMessage(
                id=message_id,
                payload=o.payload,
                headers=o.headers,
                enqueued_at=now,
                visible_at=expires_at if pending else now + o.delay_ms,
                expires_at=expires_at,
                lane=o.lane,
                key=o.key,
            )
            for (message_id, _), o in zip(ids, outgoing, strict=True)
        ]

    def landed(
        self,
        outgoing: Sequence[Outgoing],
        ids: Sequence[tuple[int, float]],
        *,
        pending: bool = False,
        now: int,
        timestamp: int | None = None,
        expires_at: int | None = None,
    ) -> list[int]:
        """After a write of ``outgoing`` under ``ids`` landed: repair it if late; return final ids.

        Whoever wrote the messages (``write``, or the producer's asynchronous
        batches) calls this once Cassandra acknowledged them.
        """
        self._bounds.note_tail(self.ids.high_water)
        done = time.monotonic()
        result = [message_id for message_id, _ in ids]
        late = [
            n
            for n, (_, requested_at) in enumerate(ids)
            if done - requested_at >= self._settings().seal_delay
        ]
        if late:
            self._repair(
                late,
                result,
                outgoing,
                pending=pending,
                now=now,
                timestamp=timestamp,
                expires_at=expires_at,
            )
        return result

    def _repair(
        self,
        late: list[int],
        ids: list[int],
        outgoing: Sequence[Outgoing],
        *,
        pending: bool,
        now: int,
        timestamp: int | None,
        expires_at: int | None,
    ) -> None:
        """Send again (in place in ``ids``) the late writes whose bucket was sealed meanwhile.

        The write took longer than the seal delay: its bucket may have been
        sealed and scanned before the message landed, so it may never be read.
        """
        _, sealed_upto = self._buckets.pointers(serial=True)
        again = [n for n in late if self._buckets.bucket_of(ids[n]) < sealed_upto]
        if not again:
            return
        log.warning(
            "queue %r: %d delayed write(s) landed in sealed buckets; sending them again",
            self._name,
            len(again),
        )
        # Invisible copies (pending) are retired by the caller, once the new ones are released.
        new_ids = self.write(
            [outgoing[n] for n in again],
            pending=pending,
            now=now,
            timestamp=timestamp,
            expires_at=expires_at,
        )
        for n, new_id in zip(again, new_ids, strict=True):
            ids[n] = new_id

    def retire(self, ids: Sequence[int], expires_at: int, *, timestamp: int | None) -> None:
        """Ack invisible copies nobody may receive (so their bucket can go); ``expires_at``: ms."""
        self._buckets.mark_acked(
            [(self._buckets.bucket_of(i), i, expires_at) for i in ids],
            now_ms(),
            timestamp=timestamp,
        )


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


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def _check_headers(
    headers: object, position: Callable[[int], str], index: int
) -> Mapping[str, str]:
    if headers is None or (type(headers) is dict and not headers):
        return _NO_HEADERS
    where = position(index)
    if not isinstance(headers, Mapping):
        raise InvalidMessage(f"headers {headers!r}{where}: must be a mapping of str to str")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidMessage(f"header {key!r}: {value!r}{where}: keys and values must be str")
        # Cassandra stores text as UTF-8: a lone surrogate would fail the write, not this check.
        _utf8(key, f"header {key!r}{where}")
        _utf8(value, f"header {key!r}: {value!r}{where}")
    return dict(headers)


def _utf8(text: str, what: str) -> bytes:
    """``text`` as UTF-8, or InvalidMessage naming ``what`` (a lone surrogate has no encoding)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidMessage(
            f"{what}: not valid Unicode text ({e.reason} at position {e.start});"
            " text must encode as UTF-8"
        ) from e
