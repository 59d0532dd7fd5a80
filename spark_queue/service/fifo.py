"""FIFO queues: a message group is a key, and a deduplication id a send-once key.

**Order.** ``MessageGroupId`` is sent as the message's key. A key's messages share a
lane, and a lane is received in id order by one consumer at a time (the handle
that owns it); a FIFO queue is made with order hint 1, so that owner always gets
the lane's oldest visible message first. docs/service.md says what this
guarantees to SDK clients, and what it does not.

**Deduplication** is the queue's idempotent send (``Queue.send_batch_once``), with
no table of its own; ``queue.staging.record`` (the send-once handle the Spark sink
uses too) reads what it recorded. A send with deduplication id ``d`` (``MessageDeduplicationId``,
or the body's SHA-256 under ``ContentBasedDeduplication``) is the send-once key
``("sqs-dedup:" + d, window, 0, 0)``, where ``window`` numbers the 5-minute
windows of the server's clock. A send first reads the previous window's record:
if its first attempt began less than 5 minutes ago, the send is a repeat of that
one; otherwise it is keyed by the current window, whose record, if any, began
less than 5 minutes ago by construction. So a repeat within 5 minutes of the
first send is one send, and one 5 minutes or more later is a new message, as on
SQS (give or take the skew between the first server's clock and this one's).

A repeat of a send already released answers the first send's id, whatever its
body, as SQS does. A repeat of one not yet released (in flight elsewhere, or cut
short by a crash) finishes it, under the ids recorded before anything was
written: a crash between recording and sending loses nothing, since the SDK's
retry completes the send. Such a repeat with another body cannot finish it and
answers InternalError, which SDKs retry; by then the first send has usually
completed, and the retry is answered as a repeat.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping

from spark_queue.message import SentOnce
from spark_queue.queue import Queue
from spark_queue.service.protocol import SqsError, invalid

#: SQS's deduplication interval.
DEDUP_WINDOW_MS = 5 * 60 * 1000
#: The header that keeps a message's deduplication id (SQS's system attribute).
DEDUP_HEADER = "sqs-dedup-id"
_WRITER = "sqs-dedup:"
#: Group and deduplication ids: 1-128 letters, digits and punctuation, as SQS's.
_TOKEN = re.compile(r"[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}")


def fifo_ids(params: Mapping[str, object], body: str, content_dedup: bool) -> tuple[str, str]:
    """A FIFO send's ``(MessageGroupId, deduplication id)``, checked."""
    group = params.get("MessageGroupId")
    if group is None:
        raise SqsError("MissingParameter", "The request must contain the parameter MessageGroupId.")
    dedup = params.get("MessageDeduplicationId")
    if dedup is None:
        if not content_dedup:
            raise invalid(
                "The queue should either have ContentBasedDeduplication enabled or"
                " MessageDeduplicationId provided explicitly"
            )
        dedup = hashlib.sha256(body.encode()).hexdigest()
    for name, value in (("MessageGroupId", group), ("MessageDeduplicationId", dedup)):
        if not isinstance(value, str) or not _TOKEN.fullmatch(value):
            raise invalid(
                f"Value {value!r} for parameter {name} is invalid. Reason: 1 to 128 letters,"
                " digits and punctuation marks."
            )
    assert isinstance(group, str) and isinstance(dedup, str)
    return group, dedup


def refuse_fifo_ids(params: Mapping[str, object]) -> None:
    """A standard queue's send: FIFO's parameters are refused, as SQS refuses them."""
    for name in ("MessageGroupId", "MessageDeduplicationId"):
        if params.get(name) is not None:
            raise invalid(
                f"The request includes parameter {name}, which is not valid for this queue type"
                " (a standard queue; FIFO queues' names end with .fifo)."
            )


def send_deduplicated(
    queue: Queue, body: bytes, headers: Mapping[str, str], delay: int, group: str, dedup: str
) -> int:
    """Send one FIFO message once per deduplication window (see the module docstring)."""
    writer = _WRITER + dedup
    now = time.time_ns() // 1_000_000  # this server's clock: see the module docstring
    window = now // DEDUP_WINDOW_MS
    earlier = queue.staging.record((writer, window - 1, 0, 0))
    found: SentOnce | None
    if earlier is not None and now - earlier.first_sent_ms < DEDUP_WINDOW_MS:
        step, found = window - 1, earlier
    else:
        step, found = window, queue.staging.record((writer, window, 0, 0))
    if _released(found):
        assert found is not None
        return found.ids[0]
    [sent] = queue.send_batch_once(
        writer, step, 0, [body], headers=[dict(headers)], delay=float(delay), key=group
    )
    return sent


def _released(found: SentOnce | None) -> bool:
    return found is not None and found.done and len(found.ids) == 1
