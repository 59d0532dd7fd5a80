"""SQS's message actions on the public queue: send, delete and change visibility, one or ten.

Each checks every parameter before it writes; a batch answers per entry, a bad
entry failing alone. ReceiveMessage, which waits, is ``long_poll.py``'s.

A receipt handle is the queue's receipt. A visibility change gives the message a
new receipt, which SQS's answer has no field for, so the handle the client holds
is recorded as naming the new one (``store/sqs_receipts.py``) and later changes and
deletes with that handle reach the message, as on SQS. DeleteMessage with a handle
that no longer names the current delivery (deleted already, or received again once
its lease ran out) fails with ReceiptHandleIsInvalid and deletes nothing, where SQS
answers success: the caller learns that the message will come back.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_queue.errors import InvalidSetting, StaleReceipt
from spark_queue.message import Receipt
from spark_queue.queue import Queue
from spark_queue.service.fifo import (
    DEDUP_HEADER,
    fifo_ids,
    refuse_fifo_ids,
    send_deduplicated,
)
from spark_queue.service.message_attributes import (
    SENDER_HEADER,
    Attribute,
    check_characters,
    md5_of_attributes,
    md5_of_body,
    parse_attributes,
)
from spark_queue.service.protocol import SqsError, integer, invalid, required, text
from spark_queue.service.queue_actions import Action
from spark_queue.service.queue_urls import Caller, is_fifo
from spark_queue.service.queues import QueueBook, sqs_errors
from spark_queue.store.sqs_queues import SqsQueueRow
from spark_queue.store.sqs_receipts import current_of, record_current

MAX_BATCH = 10
#: Most bytes of a batch's messages together (SQS's, since it raised the message limit).
MAX_BATCH_BYTES = 1_048_576
MAX_VISIBILITY = 43_200
MAX_DELAY = 900
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def message_id(queue: Queue, id_: int) -> str:
    """The MessageId of message ``id_``: a UUID derived from the queue's incarnation and id."""
    return str(uuid.uuid5(queue.queue_id, str(id_)))


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message checked for sending; ``fifo`` its (group, deduplication id) on a FIFO queue."""

    body: str
    attributes: list[Attribute]
    delay: int
    fifo: tuple[str, str] | None = None

    def headers(self, account: str) -> dict[str, str]:
        """The headers that keep its attributes, sender and deduplication id."""
        kept = dict(a.header() for a in self.attributes)
        kept[SENDER_HEADER] = account
        if self.fifo is not None:
            kept[DEDUP_HEADER] = self.fifo[1]
        return kept

    def size(self) -> int:
        """Its size as SQS counts it: the body and every attribute's name, type and value."""
        return len(self.body.encode()) + sum(a.size() for a in self.attributes)

    def answer(self, queue: Queue, id_: int) -> dict[str, Any]:
        """SendMessage's answer for it, once sent as ``id_``."""
        answer = {"MessageId": message_id(queue, id_), "MD5OfMessageBody": md5_of_body(self.body)}
        digest = md5_of_attributes(self.attributes)
        if digest is not None:
            answer["MD5OfMessageAttributes"] = digest
        if self.fifo is not None:
            answer["SequenceNumber"] = sequence_number(id_)
        return answer


def sequence_number(id_: int) -> str:
    """A FIFO message's SequenceNumber: its id, which grows with each send of a handle."""
    return str(id_)


def _outgoing(params: Mapping[str, Any], queue: Queue, row: SqsQueueRow) -> Outgoing:
    """A message of SendMessage or of a batch entry, checked against the queue's limits."""
    body = params.get("MessageBody")
    if body is None or body == "":
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    if not isinstance(body, str):
        raise invalid("MessageBody must be a string.")
    check_characters(body, "the message body")
    if params.get("MessageSystemAttributes"):
        raise invalid("MessageSystemAttributes are not supported by bdq serve yet.")
    delay = integer(params, "DelaySeconds", 0, MAX_DELAY)
    fifo = None
    if is_fifo(queue.name):
        if delay is not None:
            raise invalid(
                "Value for parameter DelaySeconds is invalid. Reason: The request include"
                " parameter that is not valid for this queue type (FIFO queues take the"
                " queue's DelaySeconds only)."
            )
        fifo = fifo_ids(params, body, row.content_dedup)
    else:
        refuse_fifo_ids(params)
    message = Outgoing(
        body,
        parse_attributes(params.get("MessageAttributes")),
        row.delay_seconds if delay is None else delay,
        fifo,
    )
    limit = queue.settings.max_message_bytes
    if message.size() > limit:
        raise invalid(
            f"One or more parameters are invalid. Reason: Message must be shorter than"
            f" {limit} bytes."
        )
    return message


def _send(queue: Queue, caller: Caller, messages: list[Outgoing]) -> list[int]:
    """Send checked messages: a standard queue's together, a FIFO queue's each once."""
    if is_fifo(queue.name):
        return [_send_fifo(queue, caller, m) for m in messages]
    return queue.send_batch(
        [m.body.encode() for m in messages],
        headers=[m.headers(caller.account) for m in messages],
        delay=[float(m.delay) for m in messages],
    )


def _send_fifo(queue: Queue, caller: Caller, message: Outgoing) -> int:
    assert message.fifo is not None
    group, dedup = message.fifo
    return send_deduplicated(
        queue, message.body.encode(), message.headers(caller.account), message.delay, group, dedup
    )


def send_message(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """SendMessage: one message, with its attributes and delay."""
    url = text(params, "QueueUrl")
    queue, row = book.open_url(caller, url)
    message = _outgoing(params, queue, row)
    with sqs_errors(url or ""):
        [sent] = _send(queue, caller, [message])
    return message.answer(queue, sent)


def batch_entries(params: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """A batch's entries, checked as SQS checks the batch as a whole (size, distinct ids)."""
    entries = required(params, key)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid(f"{key} must be a list of entries.")
    if not entries:
        raise SqsError("EmptyBatchRequest", "There should be at least one entry in the request.")
    if len(entries) > MAX_BATCH:
        raise SqsError(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
        )
    ids = [e.get("Id") for e in entries]
    for id_ in ids:
        if not isinstance(id_, str) or not _ENTRY_ID.fullmatch(id_):
            raise SqsError(
                "InvalidBatchEntryId",
                f"A batch entry id {id_!r} can only contain alphanumeric characters, hyphens and"
                " underscores. It can be at most 80 letters long.",
            )
    if len(set(ids)) != len(ids):
        raise SqsError("BatchEntryIdsNotDistinct", "Two or more batch entries have the same Id.")
    return entries


def _failed(entry_id: str, error: SqsError) -> dict[str, Any]:
    return {
        "Id": entry_id,
        "SenderFault": error.status < 500,
        "Code": error.query_code,
        "Message": error.message,
    }


def send_message_batch(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """SendMessageBatch: up to 10 messages; each bad entry fails alone, the rest are sent."""
    url = text(params, "QueueUrl")
    queue, row = book.open_url(caller, url)
    entries = batch_entries(params, "Entries")
    good: list[tuple[str, Outgoing]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            good.append((entry["Id"], _outgoing(entry, queue, row)))
        except SqsError as e:
            failed.append(_failed(entry["Id"], e))
    total = sum(m.size() for _, m in good)
    if total > MAX_BATCH_BYTES:
        raise SqsError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent"
            f" {total} bytes.",
        )
    successful = []
    if good and is_fifo(queue.name):  # each entry on its own, in order
        for id_, m in good:
            try:
                with sqs_errors(url or ""):
                    successful.append({"Id": id_, **m.answer(queue, _send_fifo(queue, caller, m))})
            except SqsError as e:
                failed.append(_failed(id_, e))
    elif good:
        with sqs_errors(url or ""):
            sent = _send(queue, caller, [m for _, m in good])
        successful = [
            {"Id": id_, **m.answer(queue, s)} for (id_, m), s in zip(good, sent, strict=True)
        ]
    return {"Successful": successful, "Failed": failed}


def _receipt(value: object) -> str:
    if value is None or value == "":
        raise SqsError("MissingParameter", "The request must contain the parameter ReceiptHandle.")
    try:
        if not isinstance(value, str):
            raise InvalidSetting("not a string")
        Receipt.decode(value)
    except InvalidSetting as e:
        raise SqsError(
            "ReceiptHandleIsInvalid", f"The input receipt handle {str(value)[:80]!r} is invalid."
        ) from e
    return value


def _stale_delete(receipt: str) -> SqsError:
    return SqsError(
        "ReceiptHandleIsInvalid",
        f"The receipt handle {receipt[:40]}... no longer names the message's current delivery"
        " (deleted already, or received again after its visibility timeout): nothing was"
        " deleted",
    )


def delete_message(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """DeleteMessage: ack the receipt; a stale one is refused (see the module docstring)."""
    url = text(params, "QueueUrl")
    queue, _ = book.open_url(caller, url)
    receipt = _receipt(params.get("ReceiptHandle"))
    with sqs_errors(url or ""):
        if _ack_handles(book, queue, [receipt]):
            raise _stale_delete(receipt)
    return {}


def _ack_handles(book: QueueBook, queue: Queue, handles: list[str]) -> set[str]:
    """Ack what each handle names now (see the module docstring); return those still stale."""
    stale = set(queue.ack_batch(handles, strict=False))
    moved = {h: c for h in stale if (c := current_of(book.store, h)) is not None}
    if moved:
        still = set(queue.ack_batch(list(moved.values()), strict=False))
        stale -= {h for h, current in moved.items() if current not in still}
    return stale


def delete_message_batch(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """DeleteMessageBatch: ack up to 10 receipts; each bad or stale one fails alone."""
    url = text(params, "QueueUrl")
    queue, _ = book.open_url(caller, url)
    entries = batch_entries(params, "Entries")
    good: dict[str, str] = {}
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            good[entry["Id"]] = _receipt(entry.get("ReceiptHandle"))
        except SqsError as e:
            failed.append(_failed(entry["Id"], e))
    stale: set[str] = set()
    if good:
        with sqs_errors(url or ""):
            stale = _ack_handles(book, queue, list(good.values()))
    successful = []
    for id_, receipt in good.items():
        if receipt in stale:
            failed.append(_failed(id_, _stale_delete(receipt)))
        else:
            successful.append({"Id": id_})
    return {"Successful": successful, "Failed": failed}


def _change(book: QueueBook, queue: Queue, handle: str, seconds: int, url: str) -> None:
    """Change the visibility of what ``handle`` names now, and record the new receipt."""
    with sqs_errors(url):
        try:
            new = queue.change_visibility(handle, float(seconds))
        except StaleReceipt as e:
            new = _change_current(book, queue, handle, seconds, e)
        record_current(book.store, handle, new, seconds)


def _change_current(
    book: QueueBook, queue: Queue, handle: str, seconds: int, stale: StaleReceipt
) -> str:
    current = current_of(book.store, handle)
    try:
        if current is None:
            raise stale
        return queue.change_visibility(current, float(seconds))
    except StaleReceipt as e:
        raise SqsError(
            "MessageNotInflight",
            f"The receipt handle {handle[:40]}... names no message in flight under it"
            " (deleted, or received again after its visibility timeout).",
        ) from e


def _visibility(params: Mapping[str, Any]) -> int:
    required(params, "VisibilityTimeout")
    seconds = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY)
    assert seconds is not None
    return seconds


def change_message_visibility(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """ChangeMessageVisibility: the message becomes visible again after VisibilityTimeout s."""
    url = text(params, "QueueUrl")
    queue, _ = book.open_url(caller, url)
    receipt = _receipt(params.get("ReceiptHandle"))
    _change(book, queue, receipt, _visibility(params), url or "")
    return {}


def change_message_visibility_batch(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """ChangeMessageVisibilityBatch: up to 10 changes, each answered on its own."""
    url = text(params, "QueueUrl")
    queue, _ = book.open_url(caller, url)
    entries = batch_entries(params, "Entries")
    checked: list[tuple[str, str | SqsError, int]] = []
    for entry in entries:
        try:
            checked.append((entry["Id"], _receipt(entry.get("ReceiptHandle")), _visibility(entry)))
        except SqsError as e:
            checked.append((entry["Id"], e, 0))
    successful, failed = [], []
    for id_, receipt, seconds in checked:
        try:
            if isinstance(receipt, SqsError):
                raise receipt
            _change(book, queue, receipt, seconds, url or "")
            successful.append({"Id": id_})
        except SqsError as e:
            if e.status >= 500:
                raise
            failed.append(_failed(id_, e))
    return {"Successful": successful, "Failed": failed}


#: The message actions answered in the thread pool, by name.
MESSAGE_ACTIONS: Mapping[str, Action] = {
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
