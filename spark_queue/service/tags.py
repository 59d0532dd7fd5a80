"""Queue tags: TagQueue, UntagQueue, ListQueueTags, and the ``tags`` of CreateQueue.

Tags are kept in the ``tags`` map of the queue's ``sqs_queues`` row, one cell per
tag, so requests tagging a queue at once each keep theirs (``store/sqs_queues.py``).
SQS's limits: at most 50 tags a queue, keys of 1-128 characters, values of 0-256,
both letters, digits, spaces and ``_ . : / = + - @``; keys starting with ``aws:``
are AWS's own. The limit of 50 is checked against the row as read before the
write, so two requests racing to add the 50th tag may both succeed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from spark_queue.service.protocol import SqsError, invalid, required, string_list, text
from spark_queue.service.queue_urls import Caller
from spark_queue.service.queues import QueueBook, sqs_errors
from spark_queue.store.sqs_queues import add_tags, read_row, remove_tags

MAX_TAGS = 50
_KEY = re.compile(r"[\w\s.:/=+\-@]{1,128}")
_VALUE = re.compile(r"[\w\s.:/=+\-@]{0,256}")


def check_tags(tags: object, already: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags to set, checked against SQS's rules and, with ``already``, the queue's 50."""
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise invalid("Tags must map tag keys to string values.")
    for key, value in tags.items():
        if not _KEY.fullmatch(key) or key.lower().startswith("aws:"):
            raise invalid(
                f"Tag key {key!r} is invalid: 1 to 128 letters, digits, spaces and _ . : / = + -"
                " @, not starting with aws:."
            )
        if not _VALUE.fullmatch(value):
            raise invalid(
                f"Tag value {value[:40]!r} of key {key!r} is invalid: up to 256 letters,"
                " digits, spaces and _ . : / = + - @."
            )
    total = len({*tags, *(already or {})})
    if total > MAX_TAGS:
        raise invalid(f"Too many tags: a queue has at most {MAX_TAGS}, this would make {total}.")
    return dict(tags)


def tag_new_queue(book: QueueBook, queue_id: uuid.UUID, tags: Mapping[str, str]) -> None:
    """Set the tags CreateQueue gave (already checked) on the queue it made."""
    if tags:
        add_tags(book.store, queue_id, tags)


def tag_queue(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """TagQueue: add or overwrite tags."""
    url = text(params, "QueueUrl") or ""
    queue, _ = book.open_url(caller, url)
    given = required(params, "Tags")
    with sqs_errors(url):
        tags = check_tags(given, read_row(book.store, queue.queue_id).tags)
        if not tags:
            raise invalid("Tags must name at least one tag.")
        add_tags(book.store, queue.queue_id, tags)
    return {}


def untag_queue(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """UntagQueue: remove tags by key (a key not set is no error, as on SQS)."""
    url = text(params, "QueueUrl") or ""
    queue, _ = book.open_url(caller, url)
    required(params, "TagKeys")
    keys = string_list(params, "TagKeys")
    if not keys:
        raise SqsError("MissingParameter", "The request must contain the parameter TagKeys.")
    with sqs_errors(url):
        remove_tags(book.store, queue.queue_id, keys)
    return {}


def list_queue_tags(book: QueueBook, caller: Caller, params: Mapping[str, Any]) -> dict[str, Any]:
    """ListQueueTags: every tag of the queue."""
    url = text(params, "QueueUrl") or ""
    queue, _ = book.open_url(caller, url)
    with sqs_errors(url):
        tags = read_row(book.store, queue.queue_id).tags
    return {"Tags": dict(tags)} if tags else {}


#: The tag actions by name (each an ``Action`` of ``queue_actions.py``, which imports this).
TAG_ACTIONS: Mapping[str, Callable[[QueueBook, Caller, Mapping[str, Any]], dict[str, Any]]] = {
    "TagQueue": tag_queue,
    "UntagQueue": untag_queue,
    "ListQueueTags": list_queue_tags,
}
