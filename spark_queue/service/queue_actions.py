"""SQS's queue actions on the public client: create, find, list, delete, attributes, purge.

Each action takes the caller (its account, the region it signed for, the URL it
reached) and the request's parameters, checks every parameter before it changes
anything, and returns the answer's JSON object. They are synchronous (the client
is) and run in the server's thread pool.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from spark_queue.errors import QueueExists
from spark_queue.queue import Queue
from spark_queue.service import queue_attributes as qa
from spark_queue.service.protocol import SqsError, integer, invalid, required, string_list, text
from spark_queue.service.queue_urls import (
    Caller,
    bdq_name,
    check_sqs_name,
    is_fifo,
    parse_queue_url,
    sqs_name,
)
from spark_queue.service.queues import QueueBook, sqs_errors
from spark_queue.service.redrive_policy import describe_redrive, redrive_settings
from spark_queue.service.tags import check_tags, tag_new_queue
from spark_queue.store.sqs_queues import SqsQueueRow, delete_row, read_row, write_row

#: What every action is: the server's queues, the caller, the parameters -> the answer.
Action = Callable[[QueueBook, Caller, Mapping[str, Any]], dict[str, Any]]


def create_queue(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """CreateQueue: make the queue, or return an existing one whose given attributes match."""
    name = check_sqs_name(text(params, "QueueName"))
    tags = check_tags(params.get("tags") or {})
    fifo = is_fifo(name)
    wanted = qa.parse_wanted(params.get("Attributes"), fifo=fifo, creating=True)
    full = bdq_name(caller.account, name)
    url = caller.url(name)
    with sqs_errors(url):
        redrive = _redrive_changes(book, caller, name, wanted)
        try:
            queue, row = book.open(full, url)
        except SqsError as e:
            if e.shape != "QueueDoesNotExist":
                raise
        else:
            _same_or_refuse(name, wanted, queue, row, redrive)  # its tags stay, as on SQS
            return {"QueueUrl": url}
        new = wanted.with_defaults()
        # A FIFO group is a key: its lane hands out the oldest message first (K = 1).
        settings = {**new.settings(), **redrive}
        if fifo:
            settings["order_hint"] = 1
        try:
            queue = book.client.create_queue(full, **settings)
        except QueueExists:  # made meanwhile by another request
            queue, row = book.open(full, url)
            _same_or_refuse(name, wanted, queue, row, redrive)
            return {"QueueUrl": url}
        now = datetime.now(UTC)
        write_row(
            book.store,
            queue.queue_id,
            SqsQueueRow(
                new.delay or 0,
                new.receive_wait or 0,
                now,
                now,
                bool(new.content_dedup),
                redrive_allow=new.redrive_allow or None,
            ),
        )
        tag_new_queue(book, queue.queue_id, tags)
        book.forget(full)
    return {"QueueUrl": url}


def _redrive_changes(
    book: QueueBook, caller: Caller, name: str, wanted: qa.Wanted
) -> dict[str, Any]:
    """The settings a given RedrivePolicy sets, checked; none when it was not given."""
    if not wanted.redrive_given:
        return {}
    return redrive_settings(book, caller, name, wanted.redrive)


def _same_or_refuse(
    name: str, wanted: qa.Wanted, queue: Queue, row: SqsQueueRow, redrive: Mapping[str, Any]
) -> None:
    differ = wanted.differences(queue.settings, row)
    if any(getattr(queue.settings, k) != v for k, v in redrive.items()):
        differ.append("RedrivePolicy")
    if differ:
        raise SqsError(
            "QueueNameExists",
            f"A queue already exists with the same name ({name}) and a different value for"
            f" attribute(s) {', '.join(differ)}",
        )


def get_queue_url(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """GetQueueUrl: the URL of an existing queue of the caller's account."""
    name = check_sqs_name(text(params, "QueueName"))
    owner = text(params, "QueueOwnerAWSAccountId", optional=True)
    url = caller.url(name)
    if owner is not None and owner != caller.account:
        raise SqsError("QueueDoesNotExist", f"The specified queue does not exist: {name}")
    book.open(bdq_name(caller.account, name), url)
    return {"QueueUrl": url}


def list_queues(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """ListQueues: the account's queues by name, filtered by prefix, in pages."""
    prefix = text(params, "QueueNamePrefix", optional=True) or ""
    limit = integer(params, "MaxResults", 1, 1000)
    token = text(params, "NextToken", optional=True)
    after = _decode_token(token) if token else None
    with sqs_errors():
        names = sorted(
            n
            for n in (sqs_name(caller.account, q) for q in book.client.list_queues())
            if n is not None and n.startswith(prefix)
        )
    if after is not None:
        names = [n for n in names if n > after]
    answer: dict[str, Any] = {}
    page = names[: limit or 1000]
    if page:
        answer["QueueUrls"] = [caller.url(n) for n in page]
    if limit is not None and len(names) > limit:
        answer["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    return answer


def _decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise invalid(f"Invalid NextToken {token!r}: pass the NextToken of the last answer.") from e


def delete_queue(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """DeleteQueue: delete the queue and its messages."""
    url = text(params, "QueueUrl")
    name = parse_queue_url(url, caller.account)
    queue, _ = book.open(name, url or "")
    with sqs_errors(url or ""):
        book.client.delete_queue(name)
        delete_row(book.store, queue.queue_id)
    book.forget(name)
    return {}


def get_queue_attributes(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """GetQueueAttributes: the attributes asked for (``All`` for every one)."""
    url = text(params, "QueueUrl")
    name = parse_queue_url(url, caller.account)
    names = qa.asked_names(string_list(params, "AttributeNames"), fifo=is_fifo(name))
    queue, row = book.open(name, url or "")
    with sqs_errors(url or ""):
        stats = queue.stats() if qa.needs_stats(names) else None
        row = read_row(book.store, queue.queue_id) if names else row  # fresh timestamps
        arn = caller.arn(name.split(".", 1)[1])
        redrive = describe_redrive(queue.settings, caller)
        found = qa.describe(names, queue.settings, row, arn, stats, redrive)
    return {"Attributes": found} if found else {}


def set_queue_attributes(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """SetQueueAttributes: change the settable attributes, all checked before any change."""
    url = text(params, "QueueUrl")
    name = parse_queue_url(url, caller.account)
    wanted = qa.parse_wanted(required(params, "Attributes"), fifo=is_fifo(name), creating=False)
    queue, _ = book.open(name, url or "")
    with sqs_errors(url or ""):
        changes = {
            **wanted.settings(),
            **_redrive_changes(book, caller, name.split(".", 1)[1], wanted),
        }
        if changes:
            book.client.update_queue(name, **changes)
        row = read_row(book.store, queue.queue_id)
        write_row(
            book.store,
            queue.queue_id,
            SqsQueueRow(
                row.delay_seconds if wanted.delay is None else wanted.delay,
                row.receive_wait_seconds if wanted.receive_wait is None else wanted.receive_wait,
                row.created_at,
                datetime.now(UTC),
                row.content_dedup if wanted.content_dedup is None else wanted.content_dedup,
                redrive_allow=(
                    row.redrive_allow if wanted.redrive_allow is None else wanted.redrive_allow
                )
                or None,
            ),
        )
    book.forget(name)
    return {}


def purge_queue(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """PurgeQueue: remove every message now."""
    url = text(params, "QueueUrl")
    queue, _ = book.open_url(caller, url)
    with sqs_errors(url or ""):
        queue.purge()
    return {}


#: The queue actions by name.
QUEUE_ACTIONS: Mapping[str, Action] = {
    "CreateQueue": create_queue,
    "GetQueueUrl": get_queue_url,
    "ListQueues": list_queues,
    "DeleteQueue": delete_queue,
    "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes,
    "PurgeQueue": purge_queue,
}
