"""The source's executor side: a partition's receive and its rows as Arrow.

A task of the streaming source receives its partition's share of a step
(``Queue.steps.receive_leased``: leases and the journal, see ``steps.py``) and
returns the messages as one Arrow batch built a column at a time; a batch read
(``spark.read``) peeks instead. Queues are opened through the worker's shared
handles (``spark.worker_handles``), so a task costs no connection set-up and no
read of the queue's row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark import TaskContext

from spark_queue.defaults import MAX_BATCH
from spark_queue.engine.deliveries import LeasedColumns
from spark_queue.message import Message
from spark_queue.queue import Queue
from spark_queue.spark import slicing
from spark_queue.spark.partitions import BucketPartition
from spark_queue.spark.worker_handles import open_queue

ARROW_SCHEMA = pa.schema(
    [
        ("queue", pa.string()),
        ("id", pa.int64()),
        ("bucket", pa.int64()),
        ("payload", pa.binary()),
        ("headers", pa.map_(pa.string(), pa.string())),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("delivery_count", pa.int32()),
        ("key", pa.string()),
    ]
)


def read_partition(partition: BucketPartition) -> Iterator[pa.RecordBatch]:
    """Receive (or peek) one partition's messages as one Arrow batch."""
    options = partition.options
    queue = open_queue(options.connection, options.queue)
    if partition.peek:
        yield from _peek_pages(queue, partition)
        return
    # Neither a replay nor a retried task: no attempt of this part ran before.
    reclaim = may_reclaim(partition)
    leased = queue.steps.receive_leased(
        partition.stream,
        partition.step,
        partition.part,
        partition.max_messages,
        visibility_timeout=options.visibility_timeout,
        order_hint=options.order_hint,
        buckets=partition.buckets,
        fail_on_data_loss=options.fail_on_data_loss,
        reclaim=reclaim,
        first_attempt=not reclaim,
    )
    if leased:
        yield leased_record_batch(queue.name, leased)


def read_slice(partition: BucketPartition) -> Iterator[pa.RecordBatch]:
    """Receive one id slice of a bucket (``minPartitions``; see spark.slicing)."""
    queue = open_queue(partition.options.connection, partition.options.queue)
    messages = slicing.receive_slice(queue, partition, reclaim=may_reclaim(partition))
    if messages:
        yield to_record_batch(queue.name, messages)


def may_reclaim(partition: BucketPartition) -> bool:
    """Whether an earlier attempt of this part may have leased messages it never recorded.

    A replayed step (the query restarted) or a retried task (its first attempt
    died): the receive then first takes back what holds the part's lease token.
    """
    context = TaskContext.get()
    return partition.replay or (context is not None and context.attemptNumber() > 0)


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
            pa.array([m.key for m in messages], pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )


def leased_record_batch(queue: str, leased: LeasedColumns) -> pa.RecordBatch:
    """Leased messages as an Arrow batch of the source schema, from their columns.

    Stored times are integer milliseconds, so ``enqueued_at`` is one vectorised
    multiply instead of a datetime per row; headers (usually none) become a
    map column from flat keys, values and offsets.
    """
    # Imported here: the source runner imports this module but reads nothing, and
    # pyarrow.compute is 30 ms of its start (python -X importtime).
    import pyarrow.compute as pc

    rows = len(leased)
    offsets: list[int] = [0]
    keys: list[str] = []
    values: list[str] = []
    for headers in leased.headers:
        if headers:
            keys.extend(headers.keys())
            values.extend(headers.values())
        offsets.append(len(keys))
    enqueued_ms = pa.array(leased.enqueued_at, pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(queue, rows) if rows else pa.array([], pa.string()),
            pa.array(leased.ids, pa.int64()),
            pa.array(leased.buckets, pa.int64()),
            pa.array(leased.payloads, pa.binary()),
            pa.MapArray.from_arrays(
                pa.array(offsets, pa.int32()),
                pa.array(keys, pa.string()),
                pa.array(values, pa.string()),
            ),
            pc.multiply(enqueued_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.array(leased.delivery_counts, pa.int32()),
            pa.array(leased.keys, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )
