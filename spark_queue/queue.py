"""The queue as its users call it: send, receive, ack, change visibility, peek, stats, purge.

``Queue`` is a thin front over the engine (``spark_queue.engine``), one module per
idea. docs/architecture.md holds the module map, a message's life cycle, how acks
pick their path and how lanes keep competing consumers apart.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from spark_queue.config import QueueSettings, check_int, check_seconds
from spark_queue.defaults import MAX_BATCH, MAX_ORDER_HINT, SETTINGS_REFRESH
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.counters import QueueCounters
from spark_queue.engine.counting import QueueCounter
from spark_queue.engine.dead_letters import DeadLetters
from spark_queue.engine.deliveries import message_of
from spark_queue.engine.lanes import check_key
from spark_queue.engine.lifecycle import Maintenance
from spark_queue.engine.receipts import ReceiptActions
from spark_queue.engine.receiving import Receiver
from spark_queue.engine.redrive import RedriveResult, redrive
from spark_queue.engine.sending import Headers, Keys, Outgoing, Payload, Sender
from spark_queue.engine.staging import Staging
from spark_queue.engine.step_journal import Steps
from spark_queue.engine.steps import QueueSteps
from spark_queue.errors import QueueNotFound, SparkQueueError
from spark_queue.message import Delivery, Message, QueueStats
from spark_queue.producer import Producer
from spark_queue.store import catalog
from spark_queue.store.buckets import Buckets
from spark_queue.store.catalog import read_settings
from spark_queue.store.message_values import StoredMessage, now_ms
from spark_queue.store.session import Store

__all__ = ["Payload", "Queue"]

log = logging.getLogger(__name__)


class Queue:
    """A handle on one queue; safe to share between threads. Get it from ``QueueClient``.

    Attributes:
        name: The queue's name.
        queue_id: Its incarnation; a re-created queue gets a new one.
        settings: Its settings, re-read every ``SETTINGS_REFRESH`` s (see
            ``QueueClient.update_queue``).
        buckets: Its bucket store (the CQL of its messages, pointers and sequence).
        plain_acks: Acks as a read and a plain write while the lease surely holds
            (``store/acks.py``). Off: on one node the Paxos round is cheaper (measured).
        ack_own_leases: A receipt this handle leased itself is acked with a plain
            write and no read while ``ACK_PLAIN_MARGIN`` s of its lease are left.
            On; turn it off when one receipt goes through several handles.
        lanes: Its ownership of lanes (``engine/lanes.py``): ``owned()``, ``period``.
        shares: Its shares of keyless messages (``engine/shares.py``): ``owned()``.
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
        self._store = store
        self._settings = settings
        self._settings_due = time.monotonic() + SETTINGS_REFRESH
        self._open_queue = open_queue
        self.buckets = Buckets(store, queue_id, settings.bucket_size)
        self._deleted = threading.Event()
        self._bounds = Bounds(self.buckets)
        self._maintenance = Maintenance(self.buckets, self._bounds, name, settings)
        current = lambda: self.settings  # noqa: E731  (changeable settings are read per use)
        self._dead_letters = DeadLetters(self.buckets, name, current, open_queue)
        self._sending = Sender(store, self.buckets, self._bounds, name, current, self._check_alive)
        self.staging = Staging(store, self._sending, self.buckets, name, current)  # send-once
        self._receiving = Receiver(
            self.buckets, self._bounds, self._maintenance, self._dead_letters, current
        )
        self.lanes, self.shares = self._receiving.lanes, self._receiving.shares
        self._counter = QueueCounter(store, queue_id, settings.bucket_size)
        self._counts = QueueCounters.of(store.keyspace, name)  # this process's counters
        self.steps = QueueSteps(  # replayable consumer steps (the Spark source)
            self, Steps(store, self.buckets, name), self._receiving, self._counts
        )
        self._receipts = ReceiptActions(name, queue_id, self.buckets, self._receiving, self._counts)
        self._producer_lock = threading.Lock()
        self._producer: Producer | None = None  # send_async's, made on first use
        self.plain_acks = False  # opt-in: see store/acks.py for when it pays
        self.ack_own_leases = True  # see engine/lease_memory.py

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, queue_id={self.queue_id})"

    @property
    def settings(self) -> QueueSettings:
        """The queue's settings, read again when older than ``SETTINGS_REFRESH`` seconds."""
        if time.monotonic() >= self._settings_due:
            self._reload_settings()
        return self._settings

    def _reload_settings(self) -> None:
        # Push the deadline first: sibling threads keep the current settings meanwhile.
        self._settings_due = time.monotonic() + SETTINGS_REFRESH
        try:
            found = read_settings(self._store, self.name)
        except SparkQueueError:
            log.warning("queue %r: could not re-read its settings; keeping them", self.name)
            return
        if found is not None and found[0] == self.queue_id:
            self._settings = found[1]  # else deleted or re-created: this handle keeps its own

    def apply_settings(self, settings: QueueSettings) -> None:
        """Called by ``QueueClient.update_queue``: this process sees its own change at once."""
        self._settings = settings
        self._settings_due = time.monotonic() + SETTINGS_REFRESH

    def mark_deleted(self) -> None:
        """Called by ``QueueClient.delete_queue``: this handle must not write any more."""
        self._deleted.set()

    def _check_alive(self) -> None:
        if self._deleted.is_set():
            raise QueueNotFound(
                f"queue {self.name!r}: was deleted through this client; open the new queue"
                " with client.queue() after creating it again"
            )

    # -- send --------------------------------------------------------------------

    def send(
        self,
        payload: Payload,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        *,
        key: str | None = None,
    ) -> int:
        """Send one message; return its id once it is durable.

        Args:
            payload: bytes, or str (sent UTF-8 encoded).
            headers: String key/value pairs kept with the message.
            delay: Seconds before the message becomes visible.
            key: The unit of order: messages of one key go to one lane
                (``lanes.py``) and are received in order; stored, it comes back
                as ``Message.key``. Default: none; any consumer may receive it.
        """
        return self.send_batch([payload], headers=headers, delay=delay, key=check_key(key))[0]

    def send_async(
        self,
        payload: Payload,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        *,
        key: str | None = None,
    ) -> Future[int]:
        """Send one message in the background; return a future of its id.

        The message is checked now (bad input raises here and nothing is
        queued), then written in a batch with others by this handle's
        producer (default settings; ``producer()`` makes one with others).
        The future resolves once the message is durable, or fails with a
        SparkQueueError. ``flush()`` waits for every message sent so far;
        ``QueueClient.close()`` flushes too.

        Args:
            payload: bytes, or str (sent UTF-8 encoded).
            headers: String key/value pairs kept with the message.
            delay: Seconds before the message becomes visible.
            key: The unit of order (see ``send``).

        Raises:
            InvalidMessage: The message breaks a rule (nothing is queued).
            BackendUnavailable: The producer stayed full for its ``max_block``.
        """
        with self._producer_lock:
            producer = self._producer
            if producer is None:
                producer = self._producer = self.producer()
        return producer.send(payload, headers, delay, key=key)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message of ``send_async`` so far is durable (see ``Producer.flush``).

        Raises:
            SparkQueueError: A message failed since the last flush, or ``timeout`` passed.
        """
        with self._producer_lock:
            producer = self._producer
        if producer is not None:
            producer.flush(timeout)

    def producer(self, **settings: Any) -> Producer:
        """A producer of its own for this queue: single sends batched in the background.

        Args:
            **settings: ``linger``, ``batch_size``, ``max_requests``,
                ``max_bytes_in_flight``, ``max_block`` (see ``Producer``).

        Raises:
            InvalidSetting: A setting breaks its rule.
        """
        return Producer(self._sending, self.buckets, self.name, **settings)

    def send_batch(
        self,
        payloads: Sequence[Payload],
        headers: Headers = None,
        delay: float | Sequence[float] = 0.0,
        *,
        key: Keys = None,
    ) -> list[int]:
        """Send several messages; return their ids in order.

        Every message is checked before anything is written: one bad payload,
        header or delay rejects the whole batch with nothing sent. Whatever
        Cassandra refuses, the batch shows all its messages or none
        (``engine/sending.py``); if Cassandra stays unreachable,
        BackendUnavailable is raised and sending again may duplicate.

        Args:
            payloads: bytes or str bodies.
            headers: One mapping for every message, or one per message.
            delay: Seconds before visibility: one value, or one per message.
            key: The unit of order (see ``send``): one key, or one per message.
        """
        return self.send_checked(self._sending.check_batch(payloads, headers, delay, key))

    def check_batch(
        self,
        payloads: Sequence[Payload],
        headers: Headers = None,
        delay: float | Sequence[float] = 0.0,
        *,
        key: Keys = None,
        position: Callable[[int], str] | None = None,
    ) -> list[Outgoing]:
        """Check a batch as ``send_batch`` does, writing nothing; ``send_checked`` sends it.

        For a caller that checks all its batches before sending any (the sink).
        ``position`` names message ``i`` in the error (" (row 7 of partition 2)").
        """
        return self._sending.check_batch(payloads, headers, delay, key, position)

    def send_checked(
        self, outgoing: Sequence[Outgoing], once: tuple[str, int, int, int] | None = None
    ) -> list[int]:
        """Send ``check_batch``'s messages; with ``once``, once per (writer, step, part, chunk)."""
        if once is not None:
            return self.staging.send(once, outgoing)
        ids = self._sending.write(outgoing)
        self._counts.sent.inc(len(ids))
        return ids

    def send_batch_once(
        self,
        writer: str,
        step: int,
        part: int,
        payloads: Sequence[Payload],
        headers: Headers = None,
        delay: float | Sequence[float] = 0.0,
        *,
        chunk: int = 0,
        key: Keys = None,
    ) -> list[int]:
        """Send a batch once per ``(writer, step, part, chunk)``, however often it is retried.

        For a producer that may repeat itself (a Spark task retried, a
        micro-batch replayed after a crash; ``step`` is its batch id): the
        messages are written invisible under ids recorded in a send log, then
        released. A repeat of the same key finishes what the first attempt
        started with the same ids, and after a completed send it changes
        nothing and returns the same ids. The repeat must carry the same
        messages in the same order. ``key`` is the unit of order, as in
        ``send_batch`` (the Spark sink's ``key`` column).

        Raises:
            SparkQueueError: The repeat carries a different number of messages.
        """
        outgoing = self._sending.check_batch(payloads, headers, delay, key)
        return self.send_checked(outgoing, (writer, step, part, chunk))

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
        count, timeout_ms, hint = self.receive_args(max_messages, visibility_timeout, order_hint)
        seconds = check_seconds("wait", wait, allow_zero=True)
        deliveries = self._receiving.receive(count, timeout_ms, hint, seconds, buckets)
        self._counts.received.inc(len(deliveries))
        return deliveries

    def receive_args(
        self, max_messages: int, visibility_timeout: float | None, order_hint: int | None
    ) -> tuple[int, int, int]:
        """``(count, timeout_ms, hint)`` checked, the queue's defaults filled in."""
        count = check_int("max_messages", max_messages, 1, MAX_BATCH)
        timeout = check_seconds(
            "visibility_timeout",
            self.settings.visibility_timeout if visibility_timeout is None else visibility_timeout,
        )
        hint = check_int(
            "order_hint",
            self.settings.order_hint if order_hint is None else order_hint,
            1,
            MAX_ORDER_HINT,
        )
        self._check_alive()
        return count, int(timeout * 1000), hint

    def release_lanes(self) -> None:
        """Give up this handle's lanes and shares now, so others take them at once (on close)."""
        self.lanes.release_all()
        self.shares.release_all()

    def visible_buckets(
        self, max_buckets: int, below: int | None = None, *, leased_here: Collection[int] = ()
    ) -> list[int]:
        """Live buckets holding a visible message, oldest first; cheap to poll (idle ones skipped).

        Args:
            max_buckets: Most buckets to return.
            below: Only buckets holding ids below this one.
            leased_here: Buckets the caller's steps in flight lease in (skipped cheaper).
        """
        return self._receiving.named.visible_buckets(max_buckets, below, leased_here)

    def redrive(
        self,
        to: str | None = None,
        max_messages: int | None = None,
        rate: float | None = None,
        *,
        visibility_timeout: float = 30.0,
        progress: Callable[[int], None] | None = None,
    ) -> RedriveResult:
        """Move this dead-letter queue's messages back to their source queues, each at most once.

        See ``spark_queue.engine.redrive``: payload, key and headers go back, minus
        the dead-letter headers, plus ``bdq-redrive-count``; a run killed midway can
        simply be run again once its lease (``visibility_timeout``) has passed.

        Args:
            to: Send every message to this queue instead of its source.
            max_messages: Stop after moving this many.
            rate: Most messages moved per second.
            visibility_timeout: Seconds the messages being moved stay leased.
            progress: Called with the count moved so far after each round.
        """
        return redrive(
            self,
            self._open_queue,
            sources=lambda: catalog.dead_letter_sources(self._store, self.name),
            to=to,
            max_messages=max_messages,
            rate=rate,
            visibility_timeout=visibility_timeout,
            progress=progress,
            keyspace=self._store.keyspace,
        )

    # -- ack / visibility ----------------------------------------------------------------

    def ack(self, receipt: str) -> None:
        """Remove the message a receipt names. StaleReceipt if it names an old delivery."""
        self.ack_batch([receipt])

    def ack_batch(self, receipts: Sequence[str], *, strict: bool = True) -> list[str]:
        """Ack many receipts with one conditional write per bucket, or plain ones.

        The path each receipt takes (a plain write for a lease this handle
        wrote and surely holds, ``ack_own_leases``; a read and a plain write
        with ``plain_acks``; a conditional batch otherwise) is told in
        ``engine/receipts.py``. Every receipt that still names the current
        delivery is acked. Stale ones change nothing: with ``strict`` (the
        default) they raise StaleReceipt after the others were acked;
        otherwise they are returned.

        Returns:
            The stale receipts (empty when ``strict``).
        """
        return self._receipts.ack_batch(
            receipts, strict=strict, plain=self.plain_acks, own_leases=self.ack_own_leases
        )

    def change_visibility(self, receipt: str, seconds: float) -> str:
        """Make a received message visible again after ``seconds`` (0: now).

        Returns the new receipt (the old one is stale from now on). Raises StaleReceipt once
        the lease ran out; SparkQueueError (nothing changed) for a lease stamped over 5 s
        ahead of Cassandra's clock (``store/lease_changes.py``)."""
        return self._receipts.change_visibility(receipt, seconds)

    def reject(self, receipt: str, reason: str | None = None) -> int:
        """Move a received message to the dead-letter queue now (a share group's REJECT).

        Returns its id there; ``reason`` goes in header ``bdq-reject-reason``. Raises
        StaleReceipt unless its lease holds, as ``engine/receipts.py`` tells.
        """
        hold = self.settings.visibility_timeout
        return self._receipts.reject(receipt, reason, self._dead_letters, hold)

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
        now = now_ms()
        found: list[StoredMessage] = []
        for bucket in buckets:
            if len(found) >= count:
                break
            found.extend(self.buckets.scan_visible(bucket, now, count - len(found), after))
        return [message_of(m) for m in found]

    def stats(self, *, exact: bool = False) -> QueueStats:
        """Approximate counts at a bounded cost per call (see ``spark_queue.engine.counting``).

        Args:
            exact: Scan every live bucket (a cost that grows with the backlog).
        """
        self._bounds.refresh()
        return self._counter.stats(self._bounds.head, self._bounds.tail, exact=exact)

    def purge(self) -> int:
        """Remove every message now (visible, in flight or delayed); return how many."""
        now = now_ms()
        rows = [
            (bucket, message_id, expires_at)
            for bucket in self.live_buckets()
            for message_id, _, _, expires_at in self.buckets.unacked(bucket)
        ]
        self.buckets.mark_acked(rows, now)
        self._receiving.purged()
        self.maintain()
        return len(rows)

    def live_buckets(self) -> list[int]:
        """Buckets not dropped yet, from the head to the one of the newest id (fresh read)."""
        return self._bounds.live_buckets()

    @property
    def tail(self) -> int:
        """The next id the sequence will hand out, as last seen by this handle."""
        return self._bounds.tail

    # -- maintenance -----------------------------------------------------------------

    def maintain(self) -> tuple[int, int]:
        """Seal and drop buckets (receives do, about once a second); ``(sealed_upto, head)``."""
        return self._maintenance.run()
