"""Message move tasks: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask.

A task is the dead-letter queue's redrive (``Queue.redrive``, docs/operations.md)
run on a thread of the server that started it, to the queues each message came
from or to ``DestinationArn``, at ``MaxNumberOfMessagesPerSecond`` if given. The
server keeps its tasks in memory, the last ``KEPT`` per queue: ListMessageMoveTasks
and CancelMessageMoveTask see the tasks of the server they reach, not those of
other servers. A cancel stops the task between two rounds of the redrive, once the
round's messages were sent and acked.

A task dies with its server. Nothing is lost or sent twice then: the messages the
redrive had leased come back in the dead-letter queue when their lease (30 s)
ends, and its sends are idempotent, keyed by each message's id, so a new task
started later only acks the ones already sent (with the same destination).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_queue.service.protocol import SqsError, integer, text
from spark_queue.service.queue_urls import Caller, bdq_name
from spark_queue.service.queues import QueueBook, sqs_errors
from spark_queue.service.redrive_policy import arn_queue, list_dead_letter_source_queues

#: Tasks kept per dead-letter queue (the newest), for ListMessageMoveTasks.
KEPT = 10
MAX_RATE = 500


class _Cancelled(Exception):
    """Raised from the redrive's progress callback to stop it between rounds."""


@dataclass
class MoveTask:
    """One task: what it moves, where, and how far it got (updated by its thread)."""

    handle: str
    source_arn: str
    destination_arn: str | None
    rate: int | None
    started_ms: int
    to_move: int
    moved: int = 0
    status: str = "RUNNING"
    failure: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def answer(self) -> dict[str, Any]:
        """Its entry of ListMessageMoveTasks."""
        entry: dict[str, Any] = {
            "Status": self.status,
            "SourceArn": self.source_arn,
            "ApproximateNumberOfMessagesMoved": self.moved,
            "ApproximateNumberOfMessagesToMove": self.to_move,
            "StartedTimestamp": self.started_ms,
        }
        if self.status == "RUNNING":
            entry["TaskHandle"] = self.handle
        if self.destination_arn is not None:
            entry["DestinationArn"] = self.destination_arn
        if self.rate is not None:
            entry["MaxNumberOfMessagesPerSecond"] = self.rate
        if self.failure is not None:
            entry["FailureReason"] = self.failure
        return entry


class MoveTasks:
    """The move tasks of one server, by dead-letter queue (bdq name), newest first."""

    def __init__(self) -> None:
        self._by_queue: dict[str, list[MoveTask]] = {}
        self._lock = threading.Lock()

    def add(self, queue: str, task: MoveTask) -> None:
        """Record a new task, unless one of ``queue`` is running (UnsupportedOperation)."""
        with self._lock:
            tasks = self._by_queue.setdefault(queue, [])
            if any(t.status in ("RUNNING", "CANCELLING") for t in tasks):
                raise SqsError(
                    "UnsupportedOperation",
                    f"A message move task is already running on {task.source_arn}.",
                )
            tasks.insert(0, task)
            del tasks[KEPT:]

    def of(self, queue: str) -> list[MoveTask]:
        """The tasks of ``queue``, newest first."""
        with self._lock:
            return list(self._by_queue.get(queue, []))

    def find(self, handle: str) -> MoveTask | None:
        """The task of a handle, if this server runs or ran it."""
        with self._lock:
            return next(
                (t for tasks in self._by_queue.values() for t in tasks if t.handle == handle), None
            )


_TASKS: weakref.WeakKeyDictionary[QueueBook, MoveTasks] = weakref.WeakKeyDictionary()
_TASKS_LOCK = threading.Lock()


def tasks_of(book: QueueBook) -> MoveTasks:
    """The move tasks of the server whose queues ``book`` holds."""
    with _TASKS_LOCK:
        found = _TASKS.get(book)
        if found is None:
            found = _TASKS[book] = MoveTasks()
        return found


def _queue_of_arn(book: QueueBook, caller: Caller, arn: object, name: str) -> str:
    """The bdq name of the existing queue ``arn`` names; ResourceNotFoundException if none."""
    if arn is None:
        raise SqsError("MissingParameter", f"The request must contain the parameter {name}.")
    queue = bdq_name(caller.account, arn_queue(arn, caller, name))
    try:
        book.open(queue, str(arn))
    except SqsError as e:
        if e.shape != "QueueDoesNotExist":
            raise
        raise SqsError("ResourceNotFoundException", f"The resource {arn} does not exist.") from e
    return queue


def start_message_move_task(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """StartMessageMoveTask: redrive a dead-letter queue in the background of this server."""
    source_arn = text(params, "SourceArn")
    source = _queue_of_arn(book, caller, source_arn, "SourceArn")
    destination_arn = text(params, "DestinationArn", optional=True)
    destination = (
        None
        if destination_arn is None
        else _queue_of_arn(book, caller, destination_arn, "DestinationArn")
    )
    rate = integer(params, "MaxNumberOfMessagesPerSecond", 1, MAX_RATE)
    with sqs_errors(source_arn or ""):
        if not book.client.dead_letter_sources(source):
            raise SqsError(
                "UnsupportedOperation",
                f"Source queue {source_arn} must be configured as a dead-letter queue (no queue"
                " names it in its RedrivePolicy).",
            )
        queue, _ = book.open(source, source_arn or "")
        to_move = queue.stats().visible
    handle = base64.b64encode(
        json.dumps({"taskId": str(uuid.uuid4()), "sourceArn": source_arn}).encode()
    ).decode()
    task = MoveTask(
        handle, source_arn or "", destination_arn, rate, int(time.time() * 1000), to_move
    )
    tasks_of(book).add(source, task)
    threading.Thread(
        target=_run, args=(book, source, destination, task), name="bdq-move-task", daemon=True
    ).start()
    return {"TaskHandle": handle}


def _run(book: QueueBook, source: str, destination: str | None, task: MoveTask) -> None:
    """The task's thread: the redrive, its progress and how it ended."""

    def progress(moved: int) -> None:
        task.moved = moved
        if task.cancel.is_set():
            raise _Cancelled

    try:
        result = book.client.queue(source).redrive(
            to=destination, rate=None if task.rate is None else float(task.rate), progress=progress
        )
    except _Cancelled:
        task.status = "CANCELLED"
    except Exception as e:  # reported by ListMessageMoveTasks, as SQS reports a failed task
        task.status, task.failure = "FAILED", str(e)[:500]
    else:
        task.moved = result.moved
        task.status = "COMPLETED"


def list_message_move_tasks(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """ListMessageMoveTasks: this server's tasks of a dead-letter queue, newest first."""
    source_arn = text(params, "SourceArn")
    source = _queue_of_arn(book, caller, source_arn, "SourceArn")
    limit = integer(params, "MaxResults", 1, 10) or 1
    return {"Results": [t.answer() for t in tasks_of(book).of(source)[:limit]]}


def cancel_message_move_task(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """CancelMessageMoveTask: stop a running task after its current round."""
    handle = text(params, "TaskHandle") or ""
    try:
        source_arn = json.loads(base64.b64decode(handle, validate=True))["sourceArn"]
    except (binascii.Error, ValueError, KeyError, TypeError) as e:
        raise SqsError("ResourceNotFoundException", f"Task {handle[:80]!r} does not exist.") from e
    try:
        arn_queue(source_arn, caller, "TaskHandle")
    except SqsError as e:  # another account's task: not found, as any other
        raise SqsError("ResourceNotFoundException", f"Task {handle[:80]!r} does not exist.") from e
    task = tasks_of(book).find(handle)
    if task is None:
        raise SqsError(
            "ResourceNotFoundException",
            f"Task {handle[:80]!r} does not exist on this server (tasks are kept by the server"
            " that started them).",
        )
    if task.status != "RUNNING":
        raise SqsError("UnsupportedOperation", f"Task {handle[:80]!r} is {task.status}.")
    task.status = "CANCELLING"
    task.cancel.set()
    return {"ApproximateNumberOfMessagesMoved": task.moved}


#: The dead-letter actions by name.
DEAD_LETTER_ACTIONS: Mapping[str, Any] = {
    "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
    "StartMessageMoveTask": start_message_move_task,
    "ListMessageMoveTasks": list_message_move_tasks,
    "CancelMessageMoveTask": cancel_message_move_task,
}
