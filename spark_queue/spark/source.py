"""The streaming source: queue buckets as input partitions, leases in executors, acks on commit.

How a micro-batch maps onto the queue:

* **Offsets** are steps of one stream: ``{"stream", "step", "buckets", "shares"}``.
  ``stream`` is made once by ``initialOffset`` and kept in the checkpoint, so
  it names this query across restarts. A step lists the buckets that held
  visible messages when Spark asked (``latestOffset``), oldest first, and how
  many messages each may lease: up to a bucket's worth, until the batch's
  limit is spent.
* **Partitions**: one per listed bucket, with its share.
  ``read`` runs in an executor: it receives from its bucket under the
  visibility timeout and records what it leased in the queue's journal
  before returning it, so a replay of the step returns the same messages.
* **Commit**: Spark commits step N while planning N+1; the source acks what
  step N leased (one conditional write per bucket). When no new message
  shows after a step that leased some, the source answers with one empty
  step so that Spark commits the last one: an idle stream never lets its
  processed messages' leases run out.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.defaults import MAX_BATCH
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.message import Message
from spark_queue.queue import Queue
from spark_queue.spark.options import DEFAULT_MAX_MESSAGES_PER_TRIGGER, SourceOptions
from spark_queue.spark.renewal import LeaseRenewal, renewal_period
from spark_queue.store.session import Store

log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("queue", StringType()),
        StructField("id", LongType()),
        StructField("bucket", LongType()),
        StructField("payload", BinaryType()),
        StructField("headers", MapType(StringType(), StringType())),
        StructField("enqueued_at", TimestampType()),
        StructField("delivery_count", IntegerType()),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        ("queue", pa.string()),
        ("id", pa.int64()),
        ("bucket", pa.int64()),
        ("payload", pa.binary()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("delivery_count", pa.int32()),
    ]
)

#: Most input partitions (buckets) one micro-batch reads.
MAX_PARTITIONS = 64
#: Seconds an "all quiet" answer of latestOffset is reused (Spark polls every ~10 ms).
IDLE_POLL = 0.1
#: Seconds between two counts reported in the streaming progress.
REPORT_INTERVAL = 10.0


@dataclass(frozen=True)
class Offset:
    """One step of the stream, as Spark stores it in the checkpoint.

    ``buckets`` and ``shares`` (messages each bucket's partition may lease)
    are fixed when the step is planned, so a replay splits the same way.
    """

    stream: str
    step: int
    buckets: tuple[int, ...] = ()
    shares: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "step": self.step,
            "buckets": list(self.buckets),
            "shares": list(self.shares),
        }

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Offset:
        try:
            offset = cls(
                str(value["stream"]),
                int(value["step"]),
                tuple(int(b) for b in value.get("buckets", ())),
                tuple(int(n) for n in value.get("shares", ())),
            )
        except (KeyError, TypeError, ValueError) as e:
            offset = None
            cause: Exception | None = e
        else:
            cause = None
        if offset is None or len(offset.shares) != len(offset.buckets):
            raise InvalidSetting(
                f"offset {json.dumps(value)}: not a bdq offset"
                " (was the checkpoint written by another source?)"
            ) from cause
        return offset


@dataclass(frozen=True)
class BucketPartition(InputPartition):
    """What one task needs to read its share: everything travels in here (no driver state)."""

    options: SourceOptions
    buckets: tuple[int, ...]
    max_messages: int
    stream: str = ""
    step: int = 0
    part: int = 0
    peek: bool = False
    value: Any = field(default=None, repr=False)  # InputPartition's own attribute


# -- executor side ------------------------------------------------------------------

_clients: dict[tuple[int, ConnectionSettings], QueueClient] = {}
_clients_lock = threading.Lock()


def shared_client(settings: ConnectionSettings) -> QueueClient:
    """One client per Python worker process and settings, made after the fork."""
    key = (os.getpid(), settings)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = QueueClient(store=Store.shared(settings))
        return client


def read_partition(partition: BucketPartition) -> Iterator[pa.RecordBatch]:
    """Receive (or peek) one partition's messages as one Arrow batch."""
    options = partition.options
    queue = shared_client(options.connection).queue(options.queue)
    if partition.peek:
        yield from _peek_pages(queue, partition)
        return
    messages = queue.receive_step(
        partition.stream,
        partition.step,
        partition.part,
        partition.max_messages,
        visibility_timeout=options.visibility_timeout,
        order_hint=options.order_hint,
        buckets=partition.buckets,
    )
    if messages:
        yield to_record_batch(queue.name, messages)


def _peek_pages(queue: Queue, partition: BucketPartition) -> Iterator[pa.RecordBatch]:
    """Every visible message of the partition's buckets, a page (one receive's limit) at a time.

    A bucket may hold more messages than one peek returns (MAX_BATCH), so a
    batch read pages through it by id instead of asking for a whole bucket.
    """
    remaining, after = partition.max_messages, None
    while remaining > 0:
        page = queue.peek(min(remaining, MAX_BATCH), buckets=partition.buckets, after=after)
        if page:
            yield to_record_batch(queue.name, page)
        if len(page) < min(remaining, MAX_BATCH):
            return
        remaining -= len(page)
        after = page[-1].id


def to_record_batch(queue: str, messages: Sequence[Message]) -> pa.RecordBatch:
    """Messages as an Arrow batch of exactly the source schema."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([queue] * len(messages), pa.string()),
            pa.array([m.id for m in messages], pa.int64()),
            pa.array([m.bucket for m in messages], pa.int64()),
            pa.array([m.payload for m in messages], pa.binary()),
            pa.array(
                [list(m.headers.items()) for m in messages], pa.map_(pa.string(), pa.string())
            ),
            pa.array([m.enqueued_at for m in messages], pa.timestamp("us", tz="UTC")),
            pa.array([m.delivery_count for m in messages], pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )


def shares(limit: int, buckets: int, bucket_size: int) -> list[int]:
    """Each bucket's share of a batch: up to a bucket's worth each, oldest first.

    One receive returns at most MAX_BATCH messages, so no share is larger.
    """
    result = []
    for _ in range(buckets):
        share = min(bucket_size, limit, MAX_BATCH)
        if share <= 0:
            break
        result.append(share)
        limit -= share
    return result


# -- driver side ----------------------------------------------------------------------


class BdqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of leased messages; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._idle_answer: tuple[str, float] | None = None
        self._available_now_tail: int | None = None
        self._acked_step: int | None = None
        self._report: dict[str, Any] | None = None
        self._report_started = -REPORT_INTERVAL
        # True while a count runs, so there is never a second one. Only Spark's
        # planning thread sets it and only the count clears it, so a plain flag
        # suffices (and the reader stays picklable, which Spark needs).
        self._counting = False
        self._renewal: LeaseRenewal | None = None
        self._stream = ""
        #: Acks of this query that found the lease lost (each a duplicate downstream).
        self.stale_acks = 0

    def __getstate__(self) -> dict[str, Any]:
        # A thread does not pickle; a copy of the reader starts its own renewal.
        state = dict(self.__dict__)
        state["_renewal"] = None
        return state

    def _queue(self) -> Queue:
        return shared_client(self.options.connection).queue(self.options.queue)

    def initialOffset(self) -> dict[str, Any]:
        self._queue()  # an unknown queue fails at query start, not at the first batch
        return Offset(stream=uuid.uuid4().hex, step=0).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = Offset.from_dict(start)
        key = json.dumps(start, sort_keys=True)
        if (
            self._idle_answer
            and self._idle_answer[0] == key
            and time.monotonic() < self._idle_answer[1]
        ):
            return start
        max_rows = (
            limit.max_rows if isinstance(limit, ReadMaxRows) else DEFAULT_MAX_MESSAGES_PER_TRIGGER
        )
        queue = self._queue()
        wanted = min(MAX_PARTITIONS, math.ceil(max_rows / queue.settings.bucket_size))
        buckets = queue.visible_buckets(wanted, below=self._available_now_tail)
        if buckets:
            split = shares(max_rows, len(buckets), queue.settings.bucket_size)
            end = Offset(begin.stream, begin.step + 1, tuple(buckets[: len(split)]), tuple(split))
            self._track(end)
            return end.to_dict()
        if begin.buckets:
            # Nothing new, but the last step leased messages: an empty step
            # makes Spark commit it now instead of after the next message.
            return Offset(begin.stream, begin.step + 1).to_dict()
        self._idle_answer = (key, time.monotonic() + IDLE_POLL)
        return start

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        last = Offset.from_dict(end)
        if not last.buckets or last.step == Offset.from_dict(start).step:
            return []
        self._track(last)  # a replay after a restart is planned here, not in latestOffset
        return [
            BucketPartition(self.options, (bucket,), share, last.stream, last.step, part)
            for part, (bucket, share) in enumerate(zip(last.buckets, last.shares, strict=True))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketPartition)
        return read_partition(partition)

    def commit(self, end: dict[str, Any]) -> None:
        last = Offset.from_dict(end)
        first = last.step if self._acked_step is None else self._acked_step + 1
        queue = self._queue()
        for step in range(first, last.step + 1):
            acked, stale = queue.ack_step(last.stream, step)
            self.stale_acks += stale
            if stale:
                log.warning(
                    "bdq source %r: step %d: %d message(s) were redelivered elsewhere before the"
                    " commit (lease ran out): duplicates downstream",
                    self.options.queue,
                    step,
                    stale,
                )
            log.debug("bdq source %r: step %d acked %d message(s)", self.options.queue, step, acked)
        self._acked_step = max(last.step, self._acked_step or 0)
        if self._renewal is not None:
            self._renewal.done(self._acked_step)

    # -- lease renewal (spark_queue.spark.renewal) ----------------------------------------

    def _track(self, step: Offset) -> None:
        """Keep ``step``'s leases alive until it is acked."""
        if self._renewal is None:
            timeout = self.options.visibility_timeout or self._queue().settings.visibility_timeout
            self._renewal = LeaseRenewal(
                self._renew, renewal_period(timeout), ",".join([self.options.queue])
            )
        self._renewal.track(step.step, [self.options.queue])
        self._stream = step.stream

    def _renew(self, queue: str, step: int) -> tuple[int, int]:
        handle = shared_client(self.options.connection).queue(queue)
        return handle.renew_step(self._stream, step, self.options.visibility_timeout)

    def stop(self) -> None:
        """The query stops: renewal stops, so unacked leases run out one timeout later."""
        if self._renewal is not None:
            self._renewal.stop()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Counting costs a bounded number of bucket scans (spark_queue.counting), still
        # a few round trips: do it beside the stream, not on Spark's planning path,
        # and report the last count. One count at a time: a slow count delays the
        # next one instead of piling threads up behind it.
        now = time.monotonic()
        if not self._counting and now - self._report_started >= REPORT_INTERVAL:
            self._counting = True
            self._report_started = now
            try:
                threading.Thread(
                    target=self._count_backlog, name="bdq-backlog-count", daemon=True
                ).start()
            except BaseException:
                self._counting = False
                raise
        if self._report is None:
            return None
        return {**self._report, "staleAcks": self.stale_acks}

    def _count_backlog(self) -> None:
        try:
            stats = self._queue().stats()
            self._report = {
                "visible": stats.visible,
                "inFlight": stats.in_flight,
                "delayed": stats.delayed,
                "oldestAgeSeconds": stats.oldest_age,
            }
        except SparkQueueError:
            log.warning("bdq source %r: counting the backlog failed", self.options.queue)
        finally:
            self._report_started = time.monotonic()  # the interval runs from the count's end
            self._counting = False

    def prepareForTriggerAvailableNow(self) -> None:
        queue = self._queue()
        queue.live_buckets()  # refreshes the handle's view of the sequence
        self._available_now_tail = queue.tail


class BdqBatchReader(DataSourceReader):
    """``spark.read.format("bdq")``: every visible message, peeked (not received)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        queue = shared_client(self.options.connection).queue(self.options.queue)
        size = queue.settings.bucket_size
        return [BucketPartition(self.options, (b,), size, peek=True) for b in queue.live_buckets()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketPartition)
        return read_partition(partition)
