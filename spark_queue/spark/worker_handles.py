"""Per-process clients and queue handles, shared by the tasks and plans of one Python worker.

Each Python worker process keeps one client per connection settings and
reuses its queue handles for ``QUEUE_REFRESH`` seconds, so a task costs no
connection set-up and no read of the queue's row. Keys hold the process id:
a forked worker never reuses its parent's connections.
"""

from __future__ import annotations

import os
import threading
import time

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.queue import Queue
from spark_queue.store.session import Store

#: Seconds a process reuses a queue handle before it reads the queue's row again.
QUEUE_REFRESH = 2.0

_clients: dict[tuple[int, ConnectionSettings], QueueClient] = {}
_clients_lock = threading.Lock()


def shared_client(settings: ConnectionSettings) -> QueueClient:
    """One client per Python worker process and settings, made after the fork."""
    key = (os.getpid(), settings)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = QueueClient(store=Store.shared(settings))
        return client


_handles: dict[tuple[int, ConnectionSettings, str], tuple[Queue, float]] = {}


def open_queue(settings: ConnectionSettings, name: str) -> Queue:
    """The process's handle on queue ``name``, looked up again after ``QUEUE_REFRESH`` s.

    Every task and every planning step opens its queues: reading the queue's
    row each time cost a round trip per task. A queue deleted and re-created
    is seen within ``QUEUE_REFRESH`` seconds (a handle re-reads its settings
    as often, see ``Queue.settings``); until then, and for as long as the
    queue stays the same incarnation, tasks share one handle.

    Raises:
        QueueNotFound: No queue of that name (checked at each look-up).
    """
    key = (os.getpid(), settings, name)
    now = time.monotonic()
    with _clients_lock:
        found = _handles.get(key)
    if found is not None and now < found[1]:
        return found[0]
    queue = shared_client(settings).queue(name)
    if found is not None and found[0].queue_id == queue.queue_id:
        # The same incarnation: keep the handle, with its id block (a new one
        # would reserve ids again) and what it remembers of the queue.
        queue = found[0]
    with _clients_lock:
        _handles[key] = (queue, now + QUEUE_REFRESH)
    return queue
