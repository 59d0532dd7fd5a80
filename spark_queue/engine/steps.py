"""A queue's replayable consumer steps: what the Spark source receives, renews and acks.

A step is one micro-batch of one consumer (a Spark query). Each of its parts
(a Spark partition) receives once and records what it leased in the step
journal (``step_journal.py``); any later attempt of the same part, a retried task or a
restarted query, replays exactly those messages instead of receiving new ones.
Named buckets (a partition's share, ``receive(..., buckets=...)``) are leased
under the part's own token (``step_journal.step_lease``), so a retry can take back
what an attempt that died leased. Renewals keep a slow step's leases alive;
the ack of a step acks all it received, then forgets the step.

``Queue.steps`` is this class for one queue handle.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from spark_queue.config import QueueSettings
from spark_queue.engine.counters import QueueCounters
from spark_queue.engine.deliveries import LeasedColumns
from spark_queue.engine.receiving import Receiver
from spark_queue.engine.step_journal import Steps, step_lease
from spark_queue.errors import InvalidSetting
from spark_queue.message import Delivery


class ReceivingQueue(Protocol):
    """What the steps need of their queue handle (``Queue`` is one)."""

    @property
    def queue_id(self) -> uuid.UUID: ...

    @property
    def settings(self) -> QueueSettings: ...

    def receive(
        self,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        wait: float = 0.0,
        *,
        buckets: Sequence[int] | None = None,
    ) -> list[Delivery]: ...

    def receive_args(
        self, max_messages: int, visibility_timeout: float | None, order_hint: int | None
    ) -> tuple[int, int, int]: ...


class QueueSteps:
    """The replayable consumer steps of one queue handle; safe to share between threads.

    Args:
        queue: The handle (its checks of receive arguments, its settings, its receive).
        steps: The step journal of the queue.
        receiver: The handle's receiver (named-bucket leases).
        counts: The handle's counters of received, acked and stale.
    """

    def __init__(
        self, queue: ReceivingQueue, steps: Steps, receiver: Receiver, counts: QueueCounters
    ) -> None:
        self._queue = queue
        self._steps = steps
        self._receiver = receiver
        self._counts = counts

    def receive(
        self,
        consumer: str,
        step: int,
        part: int,
        max_messages: int,
        *,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        buckets: Sequence[int] | None = None,
        fail_on_data_loss: bool = False,
        reclaim: bool = False,
    ) -> list[Delivery]:
        """Receive for one step of a replayable consumer, or replay it (see ``steps.py``).

        The first call for ``(consumer, step, part)`` receives as ``Queue.receive``
        does and records the deliveries in the journal before returning them.
        Any later call returns the same deliveries (same messages, same
        receipts) instead of receiving new ones. Named ``buckets`` are leased
        under the step part's own token (``step_journal.step_lease``).

        Args:
            reclaim: A retry of a part that may have died between its lease
                and its journal record (a restarted query, a retried task):
                first take back what the part leased then (named buckets only).

        Raises:
            DataLoss: With ``fail_on_data_loss``, a replay found messages gone.
        """
        if buckets is None:
            return self._steps.receive(
                consumer,
                step,
                part,
                lambda: self._queue.receive(max_messages, visibility_timeout, order_hint),
                fail_on_data_loss=fail_on_data_loss,
            )
        return self._receive_named(
            consumer, step, part, buckets, None, max_messages, visibility_timeout, order_hint,
            fail_on_data_loss=fail_on_data_loss, reclaim=reclaim,
        )  # fmt: skip

    def receive_leased(
        self,
        consumer: str,
        step: int,
        part: int,
        max_messages: int,
        *,
        buckets: Sequence[int],
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        fail_on_data_loss: bool = False,
        reclaim: bool = False,
        first_attempt: bool = False,
    ) -> LeasedColumns:
        """``receive`` in named buckets, as the leased messages' columns (no receipts).

        For a caller that hands out the messages' fields and acks the step as a
        whole (the Spark source): it skips a receipt per message and, for first
        deliveries, any object per message (``BucketReceiver.lease_columns``).
        Leased under the step part's own token, as ``receive`` does.
        ``first_attempt``: no attempt of this part ran before, so the journal
        holds nothing for it and is not read (see ``Steps.receive_leased``).

        Raises:
            DataLoss: With ``fail_on_data_loss``, a replay found messages gone.
        """
        count, timeout_ms, hint = self._queue.receive_args(
            max_messages, visibility_timeout, order_hint
        )
        token = step_lease(self._queue.queue_id, consumer, step, part)

        def lease() -> LeasedColumns:
            leased = self._receiver.named.lease_columns(
                buckets, count, timeout_ms, hint, token=token, reclaim=reclaim
            )
            self._counts.received.inc(len(leased))
            return leased

        return self._steps.receive_leased(
            consumer,
            step,
            part,
            lease,
            fail_on_data_loss=fail_on_data_loss,
            first_attempt=first_attempt,
        )

    def receive_slice(
        self,
        consumer: str,
        step: int,
        part: int,
        max_messages: int,
        *,
        bucket: int,
        ids: tuple[int, int],
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        fail_on_data_loss: bool = False,
        reclaim: bool = False,
    ) -> list[Delivery]:
        """``receive`` in one id slice of one bucket: ids ``ids[0] <= id < ids[1]``.

        For a step that split a bucket among several parts (the Spark source's
        ``minPartitions``); the caller owns the bucket for the step. Recorded
        and replayed as ``receive`` is.

        Raises:
            InvalidSetting: A bad count, timeout or order hint, or a slice
                outside ``bucket``.
            DataLoss: With ``fail_on_data_loss``, a replay found messages gone.
        """
        size = self._queue.settings.bucket_size
        if not bucket * size <= ids[0] < ids[1] <= (bucket + 1) * size:
            raise InvalidSetting(
                f"id slice {list(ids)}: must be a non-empty range of ids inside bucket {bucket}"
                f" ({bucket * size} to {(bucket + 1) * size})"
            )
        return self._receive_named(
            consumer, step, part, (bucket,), ids, max_messages, visibility_timeout, order_hint,
            fail_on_data_loss=fail_on_data_loss, reclaim=reclaim,
        )  # fmt: skip

    def _receive_named(
        self,
        consumer: str,
        step: int,
        part: int,
        buckets: Sequence[int],
        ids: tuple[int, int] | None,
        max_messages: int,
        visibility_timeout: float | None,
        order_hint: int | None,
        *,
        fail_on_data_loss: bool,
        reclaim: bool,
    ) -> list[Delivery]:
        count, timeout_ms, hint = self._queue.receive_args(
            max_messages, visibility_timeout, order_hint
        )
        token = step_lease(self._queue.queue_id, consumer, step, part)

        def receive() -> list[Delivery]:
            deliveries = self._receiver.named.receive(
                buckets, count, timeout_ms, hint, ids=ids, token=token, reclaim=reclaim
            )
            self._counts.received.inc(len(deliveries))
            return deliveries

        return self._steps.receive(
            consumer, step, part, receive, fail_on_data_loss=fail_on_data_loss
        )

    def renew(
        self, consumer: str, step: int, visibility_timeout: float | None = None
    ) -> tuple[int, int]:
        """Extend the leases of a consumer step by ``visibility_timeout`` from now.

        Costs one journal read and one conditional batch per bucket; a lease
        already lost is not revived.

        Returns:
            ``(renewed, lost)``.
        """
        timeout = (
            self._queue.settings.visibility_timeout
            if visibility_timeout is None
            else visibility_timeout
        )
        return self._steps.renew(consumer, step, round(timeout * 1000))

    def ack(self, consumer: str, step: int, *, held: bool = False) -> tuple[int, int]:
        """Ack everything a consumer step received, then forget the step.

        Idempotent: acking a step again finds nothing to do.

        Args:
            held: The caller knows the step's leases still hold (the Spark
                driver renewed them and acks well within the visibility
                timeout): the acks are written without reading each lease
                back first, one write per bucket instead of a read and a
                write. Marking a message the step processed acked never loses
                it; a lease lost all the same (another consumer's clock ran
                far ahead and it received the message) is acked here, not
                counted stale: that consumer's own ack finds it stale.

        Returns:
            ``(acked, stale)``: stale ones were received again by someone else
            after their lease ran out (a duplicate delivery) or acked already.
        """
        acked, stale, buckets = self._steps.ack(consumer, step, held=held)
        # A step that empties a bucket leaves its count, 0, for stats (drains.py).
        self._receiver.drains.acked(buckets)
        self._counts.acked.inc(acked)
        self._counts.stale_acks.inc(stale)
        return acked, stale
