"""Send-once: messages written invisible under recorded ids, published later, on any clock.

A send is keyed by ``(writer, step, part, chunk)``. ``stage`` writes its
messages invisible and returns a ``Staged`` (picklable: a Spark task hands it
to the driver); ``publish`` makes staged sends visible and records them DONE;
``send`` does both. A repeat of a key finishes what an earlier attempt began,
and after DONE changes nothing. No step depends on the clocks of the hosts
that write:

- The first attempt reserves the record with a lightweight transaction, so
  attempts running at once (a speculative task, a zombie) agree on one set of
  ids and on one time ``T``: the first attempt's clock.
- Every attempt writes the invisible rows at write timestamp ``T`` and the
  release (their ``visible_at`` alone) at ``T + 1`` (microseconds), whatever
  its own clock says. The release therefore wins over any invisible copy,
  however late that copy arrives, and a repeated release loses to a
  consumer's lease or ack written after the first: nothing a consumer holds
  is reset.
- Copies a repair replaced, and discarded sends, are acked at ``T + 2``:
  no later copy of the rows at ``T`` revives them.
- Before the release, the record moves to RELEASING by a lightweight
  transaction (``SendLog.begin_release``). From then on no attempt writes the
  send again: a write after its bucket was sealed would be repaired under new
  ids, and every message would reach its consumers twice. Nor may an abort
  discard it: that would ack messages consumers hold. A discard moves the
  record to DISCARDED by the same kind of transaction, so of a release and a
  discard exactly one wins.
- DONE is a plain write, a shortcut for retries only: a retry that finds
  RELEASING releases the same ids again.
- The messages' expiry is fixed by the first attempt and recorded: a retry or
  a release after ``update_queue`` changed ``message_ttl`` keeps it, so no cell
  of a message expires before the others.

The remaining bound: a consumer (or, for its lightweight transactions, a
Cassandra node) whose clock is behind ``T`` by more than the time from
release to receive writes a lease or ack that loses to the release. The
message is then delivered again (a duplicate), never lost.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from spark_queue.config import QueueSettings
from spark_queue.engine import counters
from spark_queue.engine.send_order import lay_out, row_digest
from spark_queue.engine.sending import Outgoing, Sender
from spark_queue.errors import SparkQueueError
from spark_queue.message import SentOnce
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import LeaseWrite, now_ms
from spark_queue.store.send_log import SendKey, SendLog, SendRecord, SendState
from spark_queue.store.session import Store


def write_timestamp(record: SendRecord) -> int:
    """The write timestamp (microseconds) of a send's invisible rows; the release is one later.

    The first attempt's time, so that every attempt writes alike. A record of
    an earlier version (RESERVED, WRITTEN) had its rows written at their
    writer's clock: its retry writes at this host's, as those versions did
    (a release then may make a message visible again while a consumer holds
    it: another consumer may receive it before the holder acks, whose ack then
    counts stale: a duplicate at worst).
    """
    if record.state in (SendState.RESERVED, SendState.WRITTEN):
        return now_ms() * 1000
    return record.written_at * 1000


@dataclass(frozen=True, slots=True)
class Staged:
    """One send written invisible: what ``publish`` needs to release it, or ``discard`` to drop it.

    Attributes:
        key: ``(writer, step, part, chunk)``.
        ids: The recorded ids, one per message.
        delays_ms: Each message's delay, counted from its release.
        written_at: The first attempt's time (ms): the enqueue time of the messages.
        expires_at: The messages' expiry (ms), fixed by the first attempt.
        stamp: The write timestamp of the invisible rows (µs).
        replaced: Copies a repair replaced, retired once the new ones are visible.
        done: An earlier attempt published it: nothing left to do.
    """

    key: SendKey
    ids: tuple[int, ...]
    delays_ms: tuple[int, ...]
    written_at: int
    expires_at: int
    stamp: int
    replaced: tuple[int, ...] = ()
    done: bool = False


class Staging:
    """The send-once of one queue handle; safe to share between threads.

    Args:
        store: The Cassandra session.
        sender: The handle's writer of message rows.
        buckets: The queue's bucket store.
        name: The queue's name (for messages).
        settings: Returns the queue's current settings.
    """

    def __init__(
        self,
        store: Store,
        sender: Sender,
        buckets: Buckets,
        name: str,
        settings: Callable[[], QueueSettings],
    ) -> None:
        self._sender = sender
        self._buckets = buckets
        self._name = name
        self._settings = settings
        self._log = SendLog(store, buckets.queue_id)

    @property
    def queue_id(self) -> uuid.UUID:
        return self._buckets.queue_id

    def send(self, key: SendKey, outgoing: Sequence[Outgoing]) -> list[int]:
        """Stage and publish checked messages, once per ``key``; return their ids."""
        staged = self.stage(key, outgoing)
        self.publish([staged])
        return list(staged.ids)

    def record(self, key: SendKey) -> SentOnce | None:
        """What the log holds of ``key``: its ids, first attempt's time and whether released.

        For a producer that decides by the first send's age (the HTTP service's
        FIFO deduplication window); read at serial consistency, so a send that
        returned is seen.
        """
        found = self._log.read(*key)
        if found is None:
            return None
        return SentOnce(tuple(found.ids), found.written_at, found.state is SendState.DONE)

    def stage_part(
        self, writer: str, step: int, part: int, outgoing: Sequence[Outgoing], size: int
    ) -> list[Staged]:
        """Stage one part's messages in chunks of ``size``, laid out as its first attempt did.

        The part's records are read first, so that an attempt whose rows come in
        another order puts each under the id its first attempt recorded for it
        (``send_order.py``).
        """
        records = self._log.records_of_part(writer, step, part)
        recorded = {n: r.digests for n, r in records.items()}
        digests, plan = lay_out(outgoing, recorded, size)
        return [
            self.stage(
                (writer, step, part, number),
                [outgoing[i] for i in rows],
                [digests[i] for i in rows],
            )
            for number, rows in plan
        ]

    def stage(
        self, key: SendKey, outgoing: Sequence[Outgoing], digests: Sequence[bytes] | None = None
    ) -> Staged:
        """Write checked messages invisible under the ids recorded for ``key`` (see module doc).

        ``digests``: each message's ``row_digest``, computed here when not given.

        Raises:
            SparkQueueError: An earlier attempt of ``key`` carried other messages, or
                an abort discarded it.
        """
        digests = [row_digest(o) for o in outgoing] if digests is None else list(digests)
        fresh = self._sender.reserve(len(outgoing))
        now = now_ms()
        expires_at = now + self._settings().message_ttl * 1000
        record = self._log.reserve(*key, [i for i, _ in fresh], now, digests, expires_at)
        outgoing = self._as_recorded(key, outgoing, digests, record)
        delays = tuple(o.delay_ms for o in outgoing)
        stamp = write_timestamp(record)
        if record.expires_at is not None:  # else recorded by a version that kept none
            expires_at = record.expires_at
        recorded = Staged(key, tuple(record.ids), delays, record.written_at, expires_at, stamp)
        if record.state is SendState.DONE:
            return replace(recorded, done=True)
        if record.state is SendState.RELEASING:  # written whole; a publish finishes it
            return recorded
        if record.state is SendState.DISCARDED:
            writer, step, part, chunk = key
            raise SparkQueueError(
                f"send of writer {writer!r}, step {step}, part {part}, chunk {chunk} to queue"
                f" {self._name!r}: an abort of its write discarded it, so it cannot be sent"
                " again under that writer and step; send it under a new writer or step"
            )
        if record.ids != [i for i, _ in fresh]:  # an earlier attempt's: reserved long ago
            fresh = [(i, float("-inf")) for i in record.ids]
        ids = self._sender.write(
            outgoing,
            ids=fresh,
            pending=True,
            now=record.written_at,
            timestamp=stamp,
            expires_at=expires_at,
        )
        replaced: list[int] = []
        if ids != record.ids:  # repaired: late copies in sealed buckets were sent again
            held = self._log.move_ids(*key, record.ids, ids)
            if held == ids:
                replaced = [old for old, new in zip(record.ids, ids, strict=True) if old != new]
            else:  # an attempt running at once moved them first: its copies hold, not ours
                ours = [i for i in ids if i not in held]
                self._sender.retire(ours, expires_at, timestamp=stamp + 2)
                ids = held
        return replace(recorded, ids=tuple(ids), replaced=tuple(replaced))

    def _as_recorded(
        self,
        key: SendKey,
        outgoing: Sequence[Outgoing],
        digests: Sequence[bytes],
        record: SendRecord,
    ) -> list[Outgoing]:
        """``outgoing`` in the order ``record`` holds them (another attempt's, maybe)."""
        writer, step, part, chunk = key
        what = f"send of writer {writer!r}, step {step}, part {part}, chunk {chunk}"
        if len(record.ids) != len(outgoing):
            raise SparkQueueError(
                f"{what} to queue {self._name!r}: {len(outgoing)} messages now,"
                f" {len(record.ids)} when first sent; a repeated send must carry the same"
                " messages (is the input deterministic?)"
            )
        if record.digests is None or list(record.digests) == list(digests):
            return list(outgoing)  # as recorded (or recorded before digests were kept)
        try:  # the same messages in another order (or digested the older way)
            _, plan = lay_out(outgoing, {0: record.digests}, len(outgoing))
        except SparkQueueError as e:
            raise SparkQueueError(
                f"{what} to queue {self._name!r}: another attempt recorded other messages for"
                " it (an attempt running at once read its rows in another order, or the input"
                " is not deterministic); nothing was written: retry the task"
            ) from e
        return [outgoing[i] for i in plan[0][1]]

    def publish(self, staged: Sequence[Staged]) -> None:
        """Make staged sends visible (each message after its delay), then record them DONE.

        Idempotent, and safe from any host: the release is written at each
        send's ``stamp + 1`` (see the module doc). A send discarded meanwhile
        is not released.
        """
        todo = [s for s in staged if not s.done]
        held = self._log.begin_release([(s.key, s.ids) for s in todo])
        now = now_ms()
        # A release writes visible_at alone (Buckets.release_shared): these leases'
        # token and count are not written. Each send's at its stamp + 1.
        releases: dict[int, list[LeaseWrite]] = {}
        released: list[tuple[Staged, list[int]]] = []
        for s in todo:
            if s.key not in held:
                continue  # discarded
            ids = held[s.key]
            releases.setdefault(s.stamp + 1, []).extend(
                LeaseWrite(self._buckets.bucket_of(i), i, 0, now + d, 0, s.expires_at)
                for i, d in zip(ids, s.delays_ms, strict=True)
            )
            # a concurrent attempt's repair moved the ids before the release: ours go too
            moved = set(s.ids).difference(ids) if list(s.ids) != ids else set()
            released.append((s, [*s.replaced, *sorted(moved)]))
        self._buckets.release_shared(releases, now)
        for s, replaced in released:
            if replaced:  # only once the copies that replace them are visible
                self._sender.retire(replaced, s.expires_at, timestamp=s.stamp + 2)
        self._log.mark_done_many([s.key for s, _ in released])
        sent = counters.SENT.labels(keyspace=self._buckets.store.keyspace, queue=self._name)
        sent.inc(sum(len(s.ids) for s, _ in released))

    def discard(self, writer: str, step: int) -> int:
        """Drop every unpublished send of ``(writer, step)``; return the messages dropped.

        For a write abandoned for good (its writer is never used again): the
        invisible rows are acked at their ``stamp + 2``, which no later copy
        of them overrules, so even a zombie task cannot bring them back.
        """
        dropped = 0
        for record in self._log.discard(writer, step):
            expires_at = record.expires_at
            if expires_at is None:  # recorded by a version that kept none
                expires_at = record.written_at + self._settings().message_ttl * 1000
            stamp = write_timestamp(record)
            self._sender.retire(record.ids, expires_at, timestamp=stamp + 2)
            dropped += len(record.ids)
        return dropped
