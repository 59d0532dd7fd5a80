"""Queues deleted and re-created under a running or restarted stream (``failOnDataLoss``).

A queue deleted and created again under the same name is a new incarnation
(a new ``queue_id``); the old one's messages are gone with it. Offsets record
which incarnation of each queue the stream planned from, so the driver tells
the two apart:

* planning the next step (``latestOffset``) finds a queue whose incarnation
  changed since the last step: the messages the stream's unacked steps leased
  from the old one are gone, and so is whatever it still held unread;
* a replayed step (after a restart) was planned from an old incarnation: the
  messages it leased are gone, so it cannot return them again;
* a task reads a step planned just before the queue was re-created.

With ``failOnDataLoss`` (the default) each raises ``DataLoss`` naming the
queue, the step and how many messages are gone; without it the loss is
logged once and the stream goes on with the new incarnation from its start.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from spark_queue.errors import DataLoss, QueueNotFound
from spark_queue.queue import Queue
from spark_queue.spark.offsets import Offset
from spark_queue.store.journal import Journal
from spark_queue.store.session import Store

log = logging.getLogger(__name__)

_ADVICE = (
    "; set option failOnDataLoss=false to log this and go on with the new queue from its start"
)


def leased_under(store: Store, old: str, stream: str, steps: Iterable[int]) -> int:
    """How many messages ``steps`` of ``stream`` leased from the queue incarnation ``old``.

    The old incarnation's journal outlives the queue (its rows expire by TTL),
    so this is exact for what the stream had leased and not acked.
    """
    journal = Journal(store, uuid.UUID(old))
    return sum(len(journal.step_entries(stream, step)) for step in steps)


class Incarnations:
    """The driver's check of queue incarnations (picklable: names and flags only).

    Args:
        fail_on_data_loss: Raise ``DataLoss`` (True) or log and go on.
    """

    def __init__(self, fail_on_data_loss: bool) -> None:
        self.fail_on_data_loss = fail_on_data_loss
        #: ``(queue, old queue_id)`` already logged, so a loss is logged once.
        self._reported: set[tuple[str, str]] = set()

    def changed(
        self,
        planned: Mapping[str, str],
        current: Mapping[str, str],
        store: Store,
        *,
        stream: str,
        step: int,
        unacked: Callable[[str], Iterable[int]],
        replay: bool,
    ) -> set[str]:
        """Queues whose incarnation in ``current`` differs from the ``planned`` one.

        Args:
            planned: ``queue_id`` (hex) per queue, as an offset recorded it.
            current: ``queue_id`` (hex) per queue, as just read.
            store: Where the journal lives.
            stream: The stream (the journal's consumer).
            step: The step being planned or replayed (named in the error).
            unacked: The steps of a queue whose leases count as lost.
            replay: True when ``step`` is replayed (it leased from the old
                incarnation), False when it is being planned.

        Raises:
            DataLoss: With ``failOnDataLoss``, for the first such queue.
        """
        result = set()
        for name, old in sorted(planned.items()):
            new = current.get(name)
            if new is None or new == old:
                continue  # not read now (deleted, or left the pattern), or the same queue
            result.add(name)
            if (name, old) in self._reported:
                continue
            self._reported.add((name, old))
            gone = leased_under(store, old, stream, unacked(name))
            if replay:
                what = (
                    f"step {step} of stream {stream!r} is replayed but was planned from the"
                    f" queue's old incarnation: {gone} message(s) it leased are gone"
                )
            else:
                what = (
                    f"step {step} of stream {stream!r} meets its new incarnation: {gone}"
                    " message(s) the stream leased and had not acked are gone, with any the"
                    " old queue still held unread"
                )
            message = f"queue {name!r} was deleted and re-created under the stream; {what}"
            if self.fail_on_data_loss:
                raise DataLoss(message + _ADVICE)
            log.warning("bdq source: %s (failOnDataLoss=false: going on)", message)
        return result

    def replayed(
        self,
        step: Offset,
        names: Iterable[str],
        open_queue: Callable[[str], Queue],
        store: Store,
        *,
        replay: bool,
    ) -> set[str]:
        """Queues of ``step`` re-created since it was planned (each raises, or is skipped)."""
        if not step.incarnations:
            return set()  # written by an older source: nothing to compare
        ids = {}
        for name in sorted(names):
            try:
                ids[name] = open_queue(name).queue_id.hex
            except QueueNotFound:
                continue  # deleted: reading its parts fails with QueueNotFound
        return self.changed(
            step.incarnation,
            ids,
            store,
            stream=step.stream,
            step=step.step,
            unacked=lambda name: [step.step],
            replay=replay,
        )


def check_part(
    store: Store,
    name: str,
    current: str,
    planned: str,
    *,
    stream: str,
    step: int,
    part: int,
    share: int,
    fail_on_data_loss: bool,
) -> bool:
    """In a task: True if the part may be read, False if it is skipped (its queue was re-created).

    The queue was deleted and re-created between planning the step and
    reading this part (``current`` differs from ``planned``): the part's
    messages are gone.

    Raises:
        DataLoss: With ``failOnDataLoss``.
    """
    if not planned or current == planned:
        return True
    recorded = Journal(store, uuid.UUID(planned)).recorded(stream, step, part)
    gone = (
        f"{len(recorded)} message(s) it leased are gone"
        if recorded is not None
        else f"the up to {share} message(s) it planned to lease are gone"
    )
    message = (
        f"queue {name!r} was deleted and re-created under the stream; step {step} (part"
        f" {part}) of stream {stream!r} was planned from its old incarnation: {gone}"
    )
    if fail_on_data_loss:
        raise DataLoss(message + _ADVICE)
    log.warning("bdq source: %s (failOnDataLoss=false: skipping the part)", message)
    return False
