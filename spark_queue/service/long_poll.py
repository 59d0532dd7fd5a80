"""ReceiveMessage: parameters, long polling without a thread per waiter, and the answer.

The queue client receives synchronously, so each attempt runs in the thread pool
with no wait of its own (``wait=0``) and returns at once; between attempts the
request sleeps on the event loop, holding no thread. The pause between attempts
starts at ``FIRST_PAUSE`` and doubles up to ``LONGEST_PAUSE``, so a message sent
to an idle queue is found within that long, and an idle waiter costs a few
reads a second. A server shutting down ends its waits within a pause, empty.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool

from spark_queue.message import Delivery
from spark_queue.queue import Queue
from spark_queue.service.fifo import DEDUP_HEADER
from spark_queue.service.message_actions import MAX_VISIBILITY, message_id, sequence_number
from spark_queue.service.message_attributes import (
    SENDER_HEADER,
    from_headers,
    json_attributes,
    md5_of_attributes,
    md5_of_body,
    selected,
)
from spark_queue.service.protocol import integer, string_list, text
from spark_queue.service.queue_urls import Caller, is_fifo, parse_queue_url
from spark_queue.service.queues import QueueBook, sqs_errors

FIRST_PAUSE = 0.02
LONGEST_PAUSE = 0.2
#: System attributes a message answers (others asked for are left out, as unset;
#: ApproximateFirstReceiveTimestamp among them: no message row keeps that time).
SYSTEM_ATTRIBUTES = ("SenderId", "SentTimestamp", "ApproximateReceiveCount")
#: And a FIFO queue's messages.
FIFO_ATTRIBUTES = ("MessageGroupId", "MessageDeduplicationId", "SequenceNumber")


@dataclass(frozen=True, slots=True)
class ReceivePlan:
    """A ReceiveMessage request, checked."""

    queue: Queue
    url: str
    count: int
    visibility: float | None
    wait: float
    system: tuple[str, ...]
    attribute_names: tuple[str, ...]


def plan_receive(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> ReceivePlan:
    """Check the request and open its queue (in the thread pool: it may read the catalog)."""
    url = text(params, "QueueUrl") or ""
    name = parse_queue_url(url, caller.account)
    count = integer(params, "MaxNumberOfMessages", 1, 10) or 1
    visibility = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY)
    wait = integer(params, "WaitTimeSeconds", 0, 20)
    asked = string_list(params, "AttributeNames") + string_list(
        params, "MessageSystemAttributeNames"
    )
    known = SYSTEM_ATTRIBUTES + (FIFO_ATTRIBUTES if is_fifo(name) else ())
    system = known if "All" in asked else tuple(a for a in known if a in asked)
    names = tuple(string_list(params, "MessageAttributeNames"))
    queue, row = book.open(name, url)
    return ReceivePlan(
        queue,
        url,
        count,
        None if visibility is None else float(visibility or 0.001),  # 0: the shortest lease
        float(row.receive_wait_seconds if wait is None else wait),
        system,
        names,
    )


def attempt(plan: ReceivePlan) -> list[Delivery]:
    """One receive that does not wait (run in the thread pool)."""
    with sqs_errors(plan.url):
        return plan.queue.receive(plan.count, plan.visibility)


async def receive_message(
    book: QueueBook, caller: Caller, params: Mapping[str, Any], stopping: threading.Event
) -> dict[str, Any]:
    """ReceiveMessage, waiting up to WaitTimeSeconds for a message (see the module docstring)."""
    plan = await run_in_threadpool(plan_receive, book, caller, params)
    deadline = time.monotonic() + plan.wait
    pause = FIRST_PAUSE
    while True:
        deliveries = await run_in_threadpool(attempt, plan)
        left = deadline - time.monotonic()
        if deliveries or left <= 0 or stopping.is_set():
            break
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)
    messages = [answer_of(plan, d) for d in deliveries]
    return {"Messages": messages} if messages else {}


def answer_of(plan: ReceivePlan, delivery: Delivery) -> dict[str, Any]:
    """One message of the answer: id, receipt, body, its MD5s and the attributes asked for."""
    body = delivery.payload.decode("utf-8", errors="replace")
    message: dict[str, Any] = {
        "MessageId": message_id(plan.queue, delivery.id),
        "ReceiptHandle": delivery.receipt,
        "MD5OfBody": md5_of_body(body),
        "Body": body,
    }
    if plan.system:
        sent = delivery.enqueued_at
        if sent is not None and sent.tzinfo is None:
            sent = sent.replace(tzinfo=UTC)  # the driver's timestamps are naive UTC
        values = {
            "SenderId": delivery.headers.get(SENDER_HEADER, "bdq"),
            "SentTimestamp": str(int((sent or datetime.now(UTC)).timestamp() * 1000)),
            "ApproximateReceiveCount": str(delivery.delivery_count),
            "SequenceNumber": sequence_number(delivery.id),
        }
        if delivery.key is not None:
            values["MessageGroupId"] = delivery.key
        if DEDUP_HEADER in delivery.headers:
            values["MessageDeduplicationId"] = delivery.headers[DEDUP_HEADER]
        message["Attributes"] = {name: values[name] for name in plan.system if name in values}
    if plan.attribute_names:
        chosen = selected(from_headers(delivery.headers), plan.attribute_names)
        digest = md5_of_attributes(chosen)
        if digest is not None:
            message["MD5OfMessageAttributes"] = digest
            message["MessageAttributes"] = json_attributes(chosen)
    return message
