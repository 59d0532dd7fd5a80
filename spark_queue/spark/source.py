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
  step N leased (a lease read and a write per bucket) on a thread of its own,
  overlapping step N+1 (``spark.commit_acks``). When no new message shows
  after a step that leased some, ``latestOffset`` acks that step itself
  (``_ack_last``): an idle stream never lets its processed messages' leases
  run out.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
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

from spark_queue.errors import QueueNotFound, SparkQueueError
from spark_queue.spark import admission, planning, slicing
from spark_queue.spark.incarnations import Incarnations, check_part
from spark_queue.spark.offsets import Offset, incarnations_of
from spark_queue.spark.options import DEFAULT_MAX_MESSAGES_PER_TRIGGER, SourceOptions
from spark_queue.spark.partitions import BucketPartition
from spark_queue.spark.reading import read_partition, read_slice
from spark_queue.spark.step_tracking import StepTrackingReader
from spark_queue.spark.worker_gc import settled
from spark_queue.spark.worker_handles import shared_client
from spark_queue.store.message_values import now_ms
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
        # Last, so positional users of the first seven columns are unaffected.
        StructField("key", StringType()),
    ]
)
#: Most buckets one micro-batch reads.
MAX_PARTITIONS = 64
#: Seconds an "all quiet" answer of latestOffset is reused (Spark polls every ~10 ms).
IDLE_POLL = 0.1
#: Seconds between two counts reported in the streaming progress.
REPORT_INTERVAL = 10.0
#: Plans made again without buckets other queries own, before a batch goes with what it has.
OWNERSHIP_ROUNDS = 3
#: Seconds between two matches of ``queuePattern`` against the keyspace's queues.
PATTERN_REFRESH = 5.0


# -- driver side ----------------------------------------------------------------------


class BdqStreamReader(StepTrackingReader, SupportsTriggerAvailableNow):
    """Micro-batches of leased messages; see the module docstring.

    Planning and reading are here; what happens to a step once planned (lease
    renewal, the ack on commit, the stop) is ``StepTrackingReader``'s.
    """

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._idle_answer: tuple[str, float] | None = None
        self._available_now_tails: dict[str, int] | None = None
        self._report: dict[str, Any] | None = None
        self._report_started = -REPORT_INTERVAL
        # True while a count runs, so there is never a second one. Only Spark's
        # planning thread sets it and only the count clears it, so a plain flag
        # suffices (and the reader stays picklable, which Spark needs).
        self._counting = False
        self._matched: tuple[tuple[str, ...], float] | None = None
        self._last_batch = time.monotonic()
        self._incarnations = Incarnations(options.fail_on_data_loss)
        #: The last step latestOffset planned (any other one partitions sees is a replay).
        self._planned_step: int | None = None

    def queue_names(self) -> tuple[str, ...]:
        """The queues this source reads now: the ``queue`` list, or the pattern's matches.

        A pattern is matched again every PATTERN_REFRESH seconds (one read of
        the queue list), so queues created while the query runs join it.
        """
        if self.options.queue_pattern is None:
            return self.options.queues
        now = time.monotonic()
        if self._matched is None or now >= self._matched[1]:
            regex = re.compile(self.options.queue_pattern)
            names = shared_client(self.options.connection).list_queues()
            matched = tuple(n for n in names if regex.fullmatch(n))
            self._matched = (matched, now + PATTERN_REFRESH)
        return self._matched[0]

    def initialOffset(self) -> dict[str, Any]:
        # An unknown queue fails at query start, not at the first batch.
        ids = {name: self._queue(name).queue_id.hex for name in self.options.queues}
        return Offset(stream=uuid.uuid4().hex, step=0, incarnations=incarnations_of(ids)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        # pyspark 4.3 has no composite limit, so minMessagesPerTrigger and
        # maxTriggerDelay are applied in latestOffset (planning.wait_for_more).
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._acks.wait()  # ownership the last ack frees must not race this plan
        begin = Offset.from_dict(start)
        self._sharing.name_after(begin.stream)
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
        found = []
        ids: dict[str, str] = {}
        for name in self.queue_names():
            tails = self._available_now_tails
            if tails is not None and name not in tails:
                continue  # created after availableNow started: not part of this run
            try:
                queue = self._queue(name)
            except QueueNotFound:
                continue  # a matched queue deleted meanwhile
            ids[name] = queue.queue_id.hex
            size = queue.settings.bucket_size
            # Twice what the limit needs: buckets another query owns are left out.
            wanted = min(MAX_PARTITIONS, 2 * math.ceil(max_rows / size))
            below = None if tails is None else tails[name]
            held = self._sharing.held_in(name)
            visible = queue.visible_buckets(wanted, below=below, leased_here=held)
            found.append([(name, b, size) for b in visible])
        recreated = self._check_incarnations(begin, ids)
        incarnations = incarnations_of({**begin.incarnation, **ids})
        plan = planning.plan(found, max_rows, MAX_PARTITIONS)
        if plan and self._wait_for_more(plan):
            plan = []
        elif plan:
            plan = self._owned(found, max_rows)
            max_bytes = admission.byte_limit(self.options.max_bytes_per_trigger, limit)
            if max_bytes is not None:
                sizes = admission.visible_sizes_of(self._queue)
                owned, plan = plan, admission.cap_bytes(plan, max_bytes, sizes)
                kept = {(p.queue, p.bucket) for p in plan}
                left = [(p.queue, p.bucket) for p in owned if (p.queue, p.bucket) not in kept]
                self._sharing.release(left, self._queue)  # others may have them at once
        if plan:
            sliced = slicing.split_plan(plan, self.options.min_partitions, self._queue)
            plan = [p for p, _ in sliced]
            slices = tuple(s for _, s in sliced) if any(s for _, s in sliced) else ()
            end = Offset(
                begin.stream,
                begin.step + 1,
                tuple(p.bucket for p in plan),
                tuple(p.share for p in plan),
                tuple(p.queue for p in plan),
                incarnations,
                slices,
                () if slices else planning.group_buckets([(p.queue, p.share) for p in plan]),
            )
            self._planned_step = end.step
            self._last_batch = time.monotonic()
            self._track(end)
            return end.to_dict()
        if recreated:
            # A queue re-created (failOnDataLoss=false): an empty step records the
            # new incarnation (and Spark commits the last step while planning it).
            return Offset(begin.stream, begin.step + 1, incarnations=incarnations).to_dict()
        if begin.buckets:
            self._ack_last(begin, start)
        self._idle_answer = (key, time.monotonic() + IDLE_POLL)
        return start

    def _ack_last(self, begin: Offset, start: dict[str, Any]) -> None:
        """Nothing new after step ``begin``: ack it now and wait (docs/spark.md, "Acking").

        Spark asks for the offset after a batch only once its sink committed it and
        ``commits/N`` is written; its own ``commit`` would come with the next batch,
        never for ``availableNow``'s last. No empty step: 0.1-0.2 s of each drain.
        """
        if self._acked_step is None or begin.step > self._acked_step:
            self.commit(start)
            self._acks.wait()

    def _check_incarnations(self, begin: Offset, ids: dict[str, str]) -> set[str]:
        """Queues re-created since ``begin`` was planned (spark_queue.spark.incarnations)."""
        return self._incarnations.changed(
            begin.incarnation,
            ids,
            Store.shared(self.options.connection),
            stream=begin.stream,
            step=begin.step + 1,
            unacked=lambda name: [s for s, qs in self._step_queues.items() if name in qs],
            replay=False,
        )

    def _owned(self, found: list[list[tuple[str, int, int]]], max_rows: int) -> list[planning.Part]:
        """The plan over buckets this query owns now (spark_queue.spark.sharing).

        A bucket another query owns is left out and the plan made again
        without it, at most OWNERSHIP_ROUNDS times.
        """
        plan: list[planning.Part] = []
        for _ in range(OWNERSHIP_ROUNDS):
            plan = planning.plan(found, max_rows, MAX_PARTITIONS)
            refused: set[tuple[str, int]] = set()
            for name in sorted({p.queue for p in plan}):
                queue = self._queue(name)
                wanted = [p.bucket for p in plan if p.queue == name]
                granted = self._sharing.take(queue, wanted, self._ownership_period(queue))
                refused |= {(name, b) for b in wanted if b not in granted}
            if not refused:
                return plan
            found = [[f for f in fs if (f[0], f[1]) not in refused] for fs in found]
        return [p for p in plan if (p.queue, p.bucket) not in refused]

    def _wait_for_more(self, plan: Sequence[planning.Part]) -> bool:
        """True while fewer than minMessagesPerTrigger are visible and the delay has not passed.

        Counts at most ``minMessagesPerTrigger`` visible ids in the planned
        buckets (no payloads): the cost is bounded by that option, not by the backlog.
        """
        least = self.options.min_messages_per_trigger
        if least is None or self._available_now_tails is not None:
            return False  # availableNow drains what there is
        if time.monotonic() - self._last_batch >= self.options.max_trigger_delay:
            return False
        visible = 0
        for part in plan:
            if visible >= least:
                break
            queue = self._queue(part.queue)
            visible += len(queue.buckets.scan_candidates(part.bucket, now_ms(), least - visible))
        return visible < least

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._sharing.name_after(Offset.from_dict(end).stream)
        if self._acked_step is None and Offset.from_dict(start).step > 0:
            # A restarted query replaying its last batch: Spark committed ``start``'s
            # batch in the run before but calls ``commit`` for it only while planning
            # the next batch, so a crash between ``offsets/N+1`` and the ack of N
            # leaves N unacked; acking it here (idempotent) keeps its messages from
            # coming back after their lease as duplicates. Waited for: that ack
            # frees buckets, which must happen before the replay holds its own.
            self.commit(start)
            self._acks.wait()
        last = Offset.from_dict(end)
        if not last.buckets or last.step == Offset.from_dict(start).step:
            return []
        parts = last.parts(self.options.queues)
        replayed = last.step != self._planned_step
        gone = self._incarnations.replayed(
            last,
            {name for name, _, _ in parts},
            self._queue,
            Store.shared(self.options.connection),
            replay=replayed,
        )
        if replayed:
            self._own_again(parts)
        self._track(last, replayed=replayed)  # a replay is planned here, not in latestOffset
        planned = last.incarnation
        # The grouping is read from the offset, never computed again: a replay
        # (and its journal, keyed by partition) splits the step as the first run
        # did. Offsets without one (older, or sliced by minPartitions): one part each.
        partition_of = last.partition_of or tuple(range(len(parts)))
        grouped: dict[int, list[tuple[tuple[str, int, int], tuple[int, int] | None]]] = {}
        for index, part, ids in zip(partition_of, parts, last.part_slices(), strict=True):
            grouped.setdefault(index, []).append((part, ids))
        return [
            BucketPartition(
                dataclasses.replace(self.options, queue=name),
                tuple(bucket for (_, bucket, _), _ in members),
                sum(share for (_, _, share), _ in members),
                last.stream,
                last.step,
                index,
                incarnation=planned.get(name, ""),
                ids=members[0][1] if len(members) == 1 else None,
                replay=replayed,
            )
            for index, members in sorted(grouped.items())
            for name in [members[0][0][0]]
            if name not in gone  # re-created, failOnDataLoss=false: its parts are skipped
        ]

    def _own_again(self, parts: Sequence[tuple[str, int, int]]) -> None:
        """Own a replayed step's buckets before its parts read them.

        The run that planned the step released them when it stopped (or lost
        them with its driver); without taking them back, a part with no
        journal record would lease in a bucket another query may own now, and
        the renewals would keep nothing. A bucket another query took meanwhile
        is read all the same (the replay must return the step's messages): a
        warning says duplicates may follow.
        """
        by_queue: dict[str, list[int]] = {}
        for name, bucket, _ in parts:
            by_queue.setdefault(name, []).append(bucket)
        for name, buckets in sorted(by_queue.items()):
            queue = self._queue(name)
            granted = self._sharing.take(queue, buckets, self._ownership_period(queue))
            if refused := sorted(set(buckets) - granted):
                log.warning(
                    "bdq source: replayed step reads bucket(s) %s of %r that another query"
                    " owns now: messages both lease may be delivered twice",
                    refused,
                    name,
                )

    @settled
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketPartition)
        if partition.incarnation:
            queue = shared_client(partition.options.connection).queue(partition.options.queue)
            if not check_part(
                queue.buckets.store,
                queue.name,
                queue.queue_id.hex,
                partition.incarnation,
                stream=partition.stream,
                step=partition.step,
                part=partition.part,
                share=partition.max_messages,
                fail_on_data_loss=partition.options.fail_on_data_loss,
            ):
                return iter(())
        if partition.ids is not None:
            return read_slice(partition)
        return read_partition(partition)

    # -- progress -------------------------------------------------------------------------

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Counting costs a bounded number of bucket scans (spark_queue.engine.counting), still
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
            stats = [self._queue(name).stats() for name in self.queue_names()]
            self._report = {
                "visible": sum(s.visible for s in stats),
                "inFlight": sum(s.in_flight for s in stats),
                "delayed": sum(s.delayed for s in stats),
                "oldestAgeSeconds": max(
                    (s.oldest_age for s in stats if s.oldest_age is not None), default=None
                ),
                "queues": len(stats),
            }
        except SparkQueueError:
            log.warning("bdq source %r: counting the backlog failed", self.options.queue)
        finally:
            self._report_started = time.monotonic()  # the interval runs from the count's end
            self._counting = False

    def prepareForTriggerAvailableNow(self) -> None:
        tails = {}
        for name in self.queue_names():
            queue = self._queue(name)
            queue.live_buckets()  # refreshes the handle's view of the sequence
            tails[name] = queue.tail
        self._available_now_tails = tails


class BdqBatchReader(DataSourceReader):
    """``spark.read.format("bdq")``: every visible message, peeked (not received)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        client = shared_client(self.options.connection)
        names = self.options.queues
        if self.options.queue_pattern is not None:
            regex = re.compile(self.options.queue_pattern)
            names = tuple(n for n in client.list_queues() if regex.fullmatch(n))
        partitions: list[InputPartition] = []
        for name in names:
            queue = client.queue(name)
            options = dataclasses.replace(self.options, queue=name)
            size = queue.settings.bucket_size
            partitions += [
                BucketPartition(options, (b,), size, peek=True) for b in queue.live_buckets()
            ]
        return partitions

    @settled
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BucketPartition):
            # Planned no partition (no live bucket: a queue never sent to, or drained and
            # dropped): pyspark still reads one, an InputPartition(None). Nothing to peek.
            return iter(())
        return read_partition(partition)
