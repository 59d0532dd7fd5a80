"""The producer: single-message sends that travel in batches (Kafka's producer, for one queue).

A synchronous ``send`` waits for its own round trip. ``Producer.send`` (get a
producer from ``Queue.producer()``; ``Queue.send_async`` uses one per queue
handle) checks the message at once, as ``sending.Sender`` does, puts it in a
buffer and returns a ``Future`` of its id. One background thread per producer
empties the buffer:

* **Batches.** It waits up to ``linger`` seconds after the oldest buffered
  message for ``batch_size`` messages, reserves their ids from the queue's id
  blocks in buffer order (so one thread's messages keep their order), and
  writes them as one single-partition batch per bucket.
* **In flight.** Each bucket batch goes out through the driver's asynchronous
  execution; up to ``max_requests`` of them are in flight at once, and while
  they are the buffer fills, so batches grow with the load.
* **Durable, then resolved.** A future gets its id only once Cassandra
  acknowledged the write at the configured consistency, and, for a write that
  completed more than the queue's ``seal_delay`` after its ids were reserved,
  once the sender's delayed-write repair checked the seal (and sent the
  message again under a new id if its bucket was sealed meanwhile). A write
  that failed transiently (a timeout, a dropped connection) is repeated as it
  is, same ids and write time, for ``SEND_RETRY`` seconds: written once
  (``store/retries.py``). A write that still fails fails each of its futures
  with a ``SparkQueueError`` (``BackendUnavailable`` and so on); nothing is
  dropped silently. It may still have landed: sending again may duplicate.
* **Bounded.** Accepted messages count against ``max_bytes_in_flight`` until
  their future resolves; ``send`` blocks while the bound is reached and raises
  ``BackendUnavailable`` after ``max_block`` seconds instead of growing memory
  without end.

``flush()`` sends what is buffered at once and waits until every message
accepted before it is resolved; ``close()`` flushes and stops the producer.
Futures resolve on the producer's thread: done-callbacks must be short and
must not wait for another future of the same producer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_queue.config import check_int, check_seconds
from spark_queue.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LINGER,
    DEFAULT_MAX_BLOCK,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_REQUESTS,
    IDLE_EXIT,
    SEND_RETRY,
)
from spark_queue.engine.counters import QueueCounters
from spark_queue.engine.producer_buffer import Accepted, Batch, BucketWrite, Landed
from spark_queue.errors import BackendUnavailable, SparkQueueError
from spark_queue.store.buckets import Buckets
from spark_queue.store.driver_errors import translated
from spark_queue.store.message_values import BATCH_BYTES, BATCH_ROWS, now_ms
from spark_queue.store.retries import now_us, pause_before, transient

if TYPE_CHECKING:
    from spark_queue.engine.sending import Payload, Sender

log = logging.getLogger(__name__)


class Producer:
    """Sends single messages to one queue in batches, in the background.

    Get one from ``Queue.producer()``. Use it as a context manager, or call
    ``close()``. Safe to share between threads.

    Args:
        sender: The queue handle's sender (checks, ids, repair).
        buckets: The queue's bucket store (the writes).
        name: The queue's name (for messages).
        linger: Seconds to wait after the oldest buffered message for a full
            batch (0: send what is there at once).
        batch_size: Most messages per batch (1 to 2000).
        max_requests: Bucket batches in flight at once.
        max_bytes_in_flight: Payload and header bytes accepted and not yet
            durable; ``send`` blocks beyond it.
        max_block: Seconds ``send`` may block on a full producer before it
            raises ``BackendUnavailable``.

    Raises:
        InvalidSetting: A setting breaks its rule.
    """

    def __init__(
        self,
        sender: Sender,
        buckets: Buckets,
        name: str,
        *,
        linger: float = DEFAULT_LINGER,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_requests: int = DEFAULT_MAX_REQUESTS,
        max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT,
        max_block: float = DEFAULT_MAX_BLOCK,
    ) -> None:
        self.name = name
        self._counts = QueueCounters.of(buckets.store.keyspace, name)  # this process's counters
        self._sender = sender
        self._buckets = buckets
        self.linger = check_seconds("linger", linger, allow_zero=True)
        self.batch_size = check_int("batch_size", batch_size, 1, BATCH_ROWS)
        self.max_requests = check_int("max_requests", max_requests, 1, 1024)
        self.max_bytes_in_flight = check_int("max_bytes_in_flight", max_bytes_in_flight, 1, 2**40)
        self.max_block = check_seconds("max_block", max_block, allow_zero=True)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the background thread
        self._room = threading.Condition(self._lock)  # senders blocked on the bound
        self._settled = threading.Condition(self._lock)  # flushes
        self._buffer: deque[Accepted] = deque()
        self._landed: list[Landed] = []
        self._open: dict[int, Batch] = {}  # first seq -> batch taken and not resolved
        self._accepted = 0  # seq of the next accepted message
        self._bytes = 0
        self._requests = 0
        self._flushers = 0
        self._closed = False
        self._failed = 0
        self._first_failure: SparkQueueError | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, linger={self.linger}, batch_size={self.batch_size})"

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the caller's side -------------------------------------------------------------

    def send(
        self,
        payload: Payload,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        *,
        key: str | None = None,
    ) -> Future[int]:
        """Accept one message; return a future of its id, resolved once it is durable.

        The message is checked here, as ``Queue.send`` checks it: bad input
        raises at once and nothing is buffered. Cancelling the future before
        its batch is taken keeps the message from being sent.

        Args:
            payload: bytes, or str (sent UTF-8 encoded).
            headers: String key/value pairs kept with the message.
            delay: Seconds before the message becomes visible.
            key: The unit of order (``Queue.send``); default the calling
                thread's lane.

        Raises:
            InvalidMessage: The payload, headers or delay break a rule
                (``MessageTooLarge`` over the queue's ``max_message_bytes``).
            BackendUnavailable: The producer stayed full for ``max_block`` seconds.
            SparkQueueError: The producer is closed.
        """
        outgoing = self._sender.check_one(payload, headers, delay, key)
        size = len(outgoing.payload) + sum(len(k) + len(v) for k, v in outgoing.headers.items())
        future: Future[int] = Future()
        with self._lock:
            self._wait_for_room(size)
            item = Accepted(self._accepted, outgoing, size, time.monotonic(), future)
            self._accepted += 1
            self._bytes += size
            self._buffer.append(item)
            if self._thread is None:
                self._start()
            elif len(self._buffer) == 1 or len(self._buffer) >= self.batch_size:
                self._wake.notify()  # a linger clock starts, or a batch is full
        return future

    def _wait_for_room(self, size: int) -> None:
        """Block (lock held) while the bytes in flight would pass the bound."""
        deadline: float | None = None
        while True:
            if self._closed:
                raise SparkQueueError(
                    f"producer for queue {self.name!r}: closed; create a new one to send"
                )
            # A message larger than the whole bound still goes, alone.
            if self._bytes == 0 or self._bytes + size <= self.max_bytes_in_flight:
                return
            if threading.current_thread() is self._thread:
                raise SparkQueueError(
                    f"send to queue {self.name!r} from a future's callback: the producer is"
                    " full and its own thread would wait for itself; send from another thread"
                )
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.max_block
            if now >= deadline:
                raise BackendUnavailable(
                    f"send to queue {self.name!r}: {self._bytes} bytes accepted and not yet"
                    f" durable for {self.max_block:g} s, at max_bytes_in_flight ="
                    f" {self.max_bytes_in_flight}; Cassandra is not keeping up (nothing of this"
                    " message was sent): send again later, or raise max_block"
                )
            self._room.wait(deadline - now)

    def flush(self, timeout: float | None = None) -> None:
        """Send what is buffered now and wait until every message accepted so far is resolved.

        Args:
            timeout: Most seconds to wait (default: as long as it takes).

        Raises:
            BackendUnavailable: Some messages were still not durable after ``timeout``
                (their futures stay pending and resolve later).
            SparkQueueError: Messages failed since the last flush (the first
                failure, with the count); their futures hold each error. A
                producer used fire-and-forget learns of failures this way.
        """
        wait = None if timeout is None else check_seconds("timeout", timeout, allow_zero=True)
        with self._lock:
            if threading.current_thread() is self._thread:
                raise SparkQueueError(
                    f"flush of queue {self.name!r} from a future's callback would wait for"
                    " itself; flush from another thread"
                )
            target = self._accepted
            self._flushers += 1
            self._wake.notify()
            try:
                deadline = None if wait is None else time.monotonic() + wait
                while self._earliest_unresolved() < target:
                    if self._thread is None:
                        self._start()
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise BackendUnavailable(
                            f"flush of queue {self.name!r}: {self._unresolved()} message(s)"
                            f" still not durable after {wait:g} s; their futures resolve when"
                            " Cassandra answers"
                        )
                    self._settled.wait(remaining)
            finally:
                self._flushers -= 1
            failed, first = self._failed, self._first_failure
            self._failed, self._first_failure = 0, None
        if first is not None:
            error = type(first)(
                f"{failed} message(s) to queue {self.name!r} failed since the last flush;"
                f" their futures hold the errors; the first: {first}"
            )
            raise error from first

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop: later sends raise. Closing again does nothing more.

        Args:
            timeout: Most seconds to wait for the flush (default: as long as it takes).

        Raises:
            BackendUnavailable, SparkQueueError: As ``flush``.
        """
        with self._lock:
            self._closed = True
            self._room.notify_all()  # senders blocked on the bound raise
            self._wake.notify()
        self.flush(timeout)
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _earliest_unresolved(self) -> int:
        earliest = self._buffer[0].seq if self._buffer else self._accepted
        return min(earliest, *self._open) if self._open else earliest

    def _unresolved(self) -> int:
        return len(self._buffer) + sum(b.remaining for b in self._open.values())

    def _start(self) -> None:
        # Not a daemon: an interpreter exiting with messages buffered sends them
        # first (the driver's own exit hook runs after non-daemon threads end).
        self._thread = threading.Thread(
            target=self._run, name=f"bdq-producer-{self.name}", daemon=False
        )
        self._thread.start()

    # -- the background thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    work = self._next_work()
                    if work is None:
                        self._thread = None
                        return
                landed, taken = work
                if landed:
                    self._settle(landed)
                if taken:
                    self._dispatch(*taken)
        except BaseException:
            # Every call above that can fail is caught where it happens; should a
            # bug slip through, the next send or flush starts a new thread, which
            # picks up what this one left (buffer, landed writes).
            log.exception("producer for queue %r: background thread failed", self.name)
            with self._lock:
                self._thread = None
            raise

    def _next_work(self) -> tuple[list[Landed], tuple[Batch, list[Accepted]] | None] | None:
        """Wait (lock held) for landed writes or a batch to send; None when it is time to exit."""
        idle_since: float | None = None
        while True:
            now = time.monotonic()
            taken = self._take_batch(now)
            if self._landed or taken is not None:
                landed, self._landed = self._landed, []
                return landed, taken
            timeout: float | None = None
            if not self._buffer and not self._requests:
                if self._closed:
                    return None
                idle_since = now if idle_since is None else idle_since
                if now - idle_since >= IDLE_EXIT:
                    return None
                timeout = IDLE_EXIT - (now - idle_since)
            elif self._buffer and self._requests < self.max_requests:
                timeout = max(0.0, self._buffer[0].at + self.linger - now)
            self._wake.wait(timeout)  # None: until a write lands

    def _take_batch(self, now: float) -> tuple[Batch, list[Accepted]] | None:
        """Take the next batch from the buffer (lock held) if one is due and a request is free."""
        buffer = self._buffer
        if not buffer or self._requests >= self.max_requests:
            return None
        due = (
            len(buffer) >= self.batch_size
            or now >= buffer[0].at + self.linger
            or self._flushers > 0
            or self._closed
        )
        if not due:
            return None
        items: list[Accepted] = []
        first = buffer[0].seq
        while buffer and len(items) < self.batch_size:
            item = buffer.popleft()
            if item.future.set_running_or_notify_cancel():
                items.append(item)
            else:  # cancelled by its sender before it was taken: never sent
                self._bytes -= item.size
                self._room.notify_all()
        if not items:
            self._settled.notify_all()
            return None
        batch = Batch(first, len(items))
        self._open[first] = batch
        # Reserved here, before the first write of the batch goes out: once
        # issued, a write may land (and be settled) before the next is issued.
        self._requests += 1
        return batch, items

    def _dispatch(self, batch: Batch, items: list[Accepted]) -> None:
        """Reserve ids for a batch (in buffer order) and issue one write per bucket chunk."""
        what = f"sending {len(items)} message(s) to queue {self.name!r}"
        try:
            reserved = self._sender.reserve(len(items))
            enqueued_at = now_ms()
            writes = self._split(batch, items, reserved, enqueued_at)
        except Exception as e:
            with self._lock:
                self._requests -= 1
            self._resolve(BucketWrite(batch, items, [], 0), None, translated(e, what))
            return
        with self._lock:
            self._requests += len(writes) - 1  # one was reserved when the batch was taken
        for w in writes:
            try:
                outgoing = [item.outgoing for item in w.items]
                messages = self._sender.new_messages(outgoing, w.ids, enqueued_at)
                # One write time for every attempt: a repeat changes nothing (store/retries.py).
                w.statement, w.params = self._buckets.insert_statement(
                    messages, enqueued_at, now_us()
                )
            except Exception as e:
                self._on_landed(e, w)
                continue
            w.first_try = time.monotonic()
            self._issue(w)

    def _issue(self, w: BucketWrite) -> None:
        """Start (or repeat) a bucket write; its outcome lands through the driver's callbacks."""
        w.attempts, what = w.attempts + 1, f"sending {len(w.items)} message(s) to {self.name!r}"
        try:
            future = self._buckets.store.execute_async(w.statement, w.params, what=what)
        except Exception as e:
            self._on_landed(e, w)
            return
        future.add_callbacks(
            self._on_written, self._on_landed, callback_args=(w,), errback_args=(w,)
        )

    def _split(
        self,
        batch: Batch,
        items: list[Accepted],
        reserved: list[tuple[int, float]],
        enqueued_at: int,
    ) -> list[BucketWrite]:
        """One write per bucket, cut where a batch would pass the store's row or byte limits."""
        bucket_of = self._buckets.bucket_of
        writes: list[BucketWrite] = []
        current: BucketWrite | None = None
        bucket, size = -1, 0
        for item, entry in zip(items, reserved, strict=True):
            b = bucket_of(entry[0])
            if (
                current is None
                or b != bucket
                or len(current.items) >= BATCH_ROWS
                or size + item.size > BATCH_BYTES
            ):
                current = BucketWrite(batch, [], [], enqueued_at)
                writes.append(current)
                bucket, size = b, 0
            current.items.append(item)
            current.ids.append(entry)
            size += item.size
        return writes

    def _on_written(self, _rows: Any, w: BucketWrite) -> None:
        """Driver callback (on its I/O thread): hand the write to the producer's thread."""
        self._on_landed(None, w)

    def _on_landed(self, error: BaseException | None, w: BucketWrite) -> None:
        with self._lock:
            self._landed.append((w, error))
            self._wake.notify()

    def _settle(self, landed: Sequence[Landed]) -> None:
        """Repair late writes, then resolve each write's futures."""
        for w, error in landed:
            ids: list[int] | None = None
            failure = None
            if error is not None:
                failure = translated(
                    error, f"sending {len(w.items)} message(s) to queue {self.name!r}"
                )
                pause = pause_before(w.attempts)
                if transient(failure) and time.monotonic() + pause - w.first_try < SEND_RETRY:
                    threading.Timer(pause, self._issue, args=(w,)).start()  # still in flight
                    continue
            else:
                try:  # the sender's delayed-write repair: may send again under new ids
                    outgoing = [item.outgoing for item in w.items]
                    ids = self._sender.landed(outgoing, w.ids, now=w.enqueued_at)
                except Exception as e:
                    failure = translated(e, f"repairing a delayed write to {self.name!r}")
            with self._lock:
                self._requests -= 1
            self._resolve(w, ids, failure)

    def _resolve(
        self, w: BucketWrite, ids: list[int] | None, failure: SparkQueueError | None
    ) -> None:
        """Resolve a write's futures, then release their bytes."""
        for n, item in enumerate(w.items):
            if failure is not None:
                item.future.set_exception(failure)
            else:
                assert ids is not None
                item.future.set_result(ids[n])
        if failure is None:
            self._counts.sent.inc(len(w.items))
        with self._lock:
            self._bytes -= sum(item.size for item in w.items)
            w.batch.remaining -= len(w.items)
            if w.batch.remaining == 0:
                del self._open[w.batch.first_seq]
            if failure is not None:
                self._failed += len(w.items)
                if self._first_failure is None:
                    self._first_failure = failure
                log.warning("producer for queue %r: %s", self.name, failure)
            self._room.notify_all()
            self._settled.notify_all()
