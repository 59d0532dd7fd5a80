"""The service's view of the queue client: handles kept briefly, and errors in SQS's words.

Every action opens its queue through :class:`QueueBook`, which keeps a handle and
the queue's ``sqs_queues`` row for ``REFRESH`` seconds, so a busy queue costs no
catalog read per request. A queue deleted through another server is therefore
still written to for up to that long, as SQS allows sends for a while after a
delete.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from spark_queue.client import QueueClient
from spark_queue.errors import (
    BackendUnavailable,
    InvalidSetting,
    QueueNotFound,
    SparkQueueError,
    StaleReceipt,
)
from spark_queue.queue import Queue
from spark_queue.service.protocol import SqsError
from spark_queue.service.queue_urls import Caller, parse_queue_url
from spark_queue.store.session import Store
from spark_queue.store.sqs_queues import SqsQueueRow, read_row

#: Seconds a queue handle and its row are used before they are read again.
REFRESH = 2.0


class QueueBook:
    """Queue handles and rows of one server, shared by its requests (thread-safe).

    Args:
        client: The server's queue client.
        store: Its store (the same session), for the service's own table.
    """

    def __init__(self, client: QueueClient, store: Store) -> None:
        self.client = client
        self.store = store
        self._handles: dict[str, tuple[float, Queue, SqsQueueRow]] = {}
        self._lock = threading.Lock()

    def open_url(self, caller: Caller, url: str | None) -> tuple[Queue, SqsQueueRow]:
        """The queue a request's ``QueueUrl`` names, if it is ``caller``'s (see ``open``)."""
        return self.open(parse_queue_url(url, caller.account), url or "")

    def open(self, name: str, url: str) -> tuple[Queue, SqsQueueRow]:
        """The queue ``name`` and its row; QueueDoesNotExist (naming ``url``) when it is gone."""
        now = time.monotonic()
        with self._lock:
            kept = self._handles.get(name)
        if kept is not None and kept[0] > now:
            return kept[1], kept[2]
        try:
            queue = self.client.queue(name)
        except QueueNotFound as e:
            self.forget(name)
            raise SqsError("QueueDoesNotExist", f"The specified queue does not exist: {url}") from e
        row = read_row(self.store, queue.queue_id)
        with self._lock:
            self._handles[name] = (now + REFRESH, queue, row)
        return queue, row

    def forget(self, name: str) -> None:
        """Drop what is kept of ``name`` (after this server changed or deleted it)."""
        with self._lock:
            self._handles.pop(name, None)


@contextmanager
def sqs_errors(url: str = "") -> Iterator[None]:
    """Translate the library's errors into SQS's: the one place the service does it."""
    try:
        yield
    except SqsError:
        raise
    except QueueNotFound as e:
        raise SqsError("QueueDoesNotExist", f"The specified queue does not exist: {url}") from e
    except StaleReceipt as e:
        raise SqsError("ReceiptHandleIsInvalid", str(e)) from e
    except InvalidSetting as e:
        raise SqsError("InvalidParameterValue", str(e)) from e
    except BackendUnavailable as e:
        # 503: SDKs retry it, on this server or another.
        raise SqsError("ServiceUnavailable", f"the queue's store did not answer: {e}") from e
    except SparkQueueError as e:
        raise SqsError("InternalError", str(e)) from e
