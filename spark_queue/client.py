"""``QueueClient``: connect to a keyspace, create, open, list and delete queues."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from spark_queue import defaults
from spark_queue.config import ConnectionSettings, QueueSettings, check_queue_name
from spark_queue.engine.lifecycle import stored_range
from spark_queue.engine.settings_change import update_settings
from spark_queue.errors import InvalidSetting, QueueExists, QueueNotFound, SparkQueueError
from spark_queue.queue import Queue
from spark_queue.store.buckets import Buckets
from spark_queue.store.catalog import (
    queue_names,
    read_settings,
    register_queue,
    remove_sequence_and_pointers,
    unregister_queue,
)
from spark_queue.store.session import Store

log = logging.getLogger(__name__)


class QueueClient:
    """Entry point of the Python API: one per process is plenty.

    Args:
        hosts: Contact points, as a list or a comma string of ``host[:port]``;
            default ``BDQ_CASSANDRA_HOSTS``, else ``127.0.0.1:9042``.
        keyspace: Keyspace of the queue tables; default ``BDQ_KEYSPACE``, else ``bdq``.
        settings: Complete connection settings (instead of the keywords).
        store: An existing store to use (not closed by this client).
        **connection: Other ``ConnectionSettings`` fields (``username``,
            ``password``, ``local_dc``, ``consistency``, ...).

    The keyspace and tables are created when missing. Use it as a context
    manager, or call ``close()``.
    """

    def __init__(
        self,
        hosts: str | Iterable[str] | None = None,
        keyspace: str | None = None,
        *,
        settings: ConnectionSettings | None = None,
        store: Store | None = None,
        **connection: Any,
    ) -> None:
        if store is not None:
            self._store, self._owns_store = store, False
        else:
            if settings is None:
                settings = ConnectionSettings.from_env(
                    hosts=list(hosts)
                    if hosts is not None and not isinstance(hosts, str)
                    else hosts,
                    keyspace=keyspace,
                    **connection,
                )
            self._store, self._owns_store = Store(settings), True
        self.settings = self._store.settings
        self._handles: dict[str, Queue] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, **connection: Any) -> QueueClient:
        """A client configured from the ``BDQ_*`` environment (keywords win)."""
        return cls(settings=ConnectionSettings.from_env(**connection))

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Send what ``send_async`` still holds, give up owned lanes, release the connection.

        The connection is released only if this client opened it.

        Raises:
            SparkQueueError: A message of ``send_async`` failed since the last flush
                (every handle is flushed and the connection released all the same).
        """
        with self._lock:
            handles = list(self._handles.values())
        failure: SparkQueueError | None = None
        for handle in handles:
            for step in (handle.flush, handle.release_lanes):
                try:
                    step()
                except SparkQueueError as e:
                    failure = failure or e
        if self._owns_store:
            self._store.close()
        if failure is not None:
            raise failure

    # -- queues ----------------------------------------------------------------

    def create_queue(
        self,
        name: str,
        *,
        bucket_size: int = defaults.BUCKET_SIZE,
        visibility_timeout: float = defaults.VISIBILITY_TIMEOUT,
        order_hint: int = defaults.ORDER_HINT,
        message_ttl: int = defaults.MESSAGE_TTL,
        max_deliveries: int | None = None,
        dead_letter_queue: str | None = None,
        max_message_bytes: int = defaults.MAX_MESSAGE_BYTES,
        seal_delay: float = defaults.SEAL_DELAY,
        lanes: int = defaults.LANES,
        exist_ok: bool = False,
    ) -> Queue:
        """Create a queue and return a handle on it.

        See ``QueueSettings`` for the settings. With ``exist_ok`` an existing
        queue of that name is returned as it is (its own settings kept).

        Raises:
            QueueExists: The name is taken and ``exist_ok`` is false.
            QueueNotFound: ``dead_letter_queue`` does not exist.
            InvalidSetting: A setting breaks its rule.
        """
        check_queue_name(name)
        settings = QueueSettings(
            bucket_size=bucket_size,
            visibility_timeout=visibility_timeout,
            order_hint=order_hint,
            message_ttl=message_ttl,
            max_deliveries=max_deliveries,
            dead_letter_queue=dead_letter_queue,
            max_message_bytes=max_message_bytes,
            seal_delay=seal_delay,
            lanes=lanes,
        )
        if exist_ok:
            try:
                return self.queue(name)  # one read, not three LWTs and two tombstones
            except QueueNotFound:
                pass
        if dead_letter_queue is not None:
            if dead_letter_queue == name:
                raise InvalidSetting(
                    f"dead_letter_queue {dead_letter_queue!r}: must be another queue than {name!r}"
                )
            self.queue(dead_letter_queue)  # QueueNotFound names it
        queue_id = uuid.uuid4()
        if not register_queue(self._store, name, queue_id, settings):
            if exist_ok:
                return self.queue(name)
            raise QueueExists(
                f"queue {name!r}: already exists; pass exist_ok=True to use it, or delete it first"
            )
        return self._handle(name, queue_id, settings)

    def queue(self, name: str) -> Queue:
        """A handle on an existing queue. QueueNotFound if there is none of that name."""
        check_queue_name(name)
        found = read_settings(self._store, name, what=f"opening queue {name!r}")
        if found is None:
            raise QueueNotFound(
                f"queue {name!r}: does not exist in keyspace {self.settings.keyspace!r}"
                " (create it with create_queue or 'bdq queue create')"
            )
        return self._handle(name, *found)

    def _handle(self, name: str, queue_id: uuid.UUID, settings: QueueSettings) -> Queue:
        # One handle per incarnation, so its id block and caches are shared.
        with self._lock:
            handle = self._handles.get(name)
            if handle is None or handle.queue_id != queue_id:
                handle = Queue(self._store, name, queue_id, settings, self.queue)
                self._handles[name] = handle
            else:
                handle.apply_settings(settings)  # just read: at least as fresh as the handle's
            return handle

    def update_queue(self, name: str, **changes: Any) -> QueueSettings:
        """Change settings of an existing queue; return its new settings.

        Every handle, in every process, uses the new settings from its first
        operation that starts ``SETTINGS_REFRESH`` (2) seconds after this returns;
        handles of this client at once. A new ``message_ttl`` applies to messages
        sent after the change. Concurrent updates of different settings both
        take effect (see ``spark_queue.engine.settings_change``).

        Args:
            name: The queue.
            **changes: Any of ``visibility_timeout``, ``order_hint``,
                ``message_ttl``, ``max_deliveries``, ``dead_letter_queue``,
                ``max_message_bytes``. Clear the dead-letter queue with
                ``max_deliveries=None, dead_letter_queue=None``.

        Raises:
            InvalidSetting: ``bucket_size``, ``seal_delay`` or ``lanes`` (fixed at creation),
                an unknown setting, or a value that breaks its rule; nothing changed.
            QueueNotFound: No such queue, or no such dead-letter queue.
        """
        queue_id, settings = update_settings(self._store, name, changes, self.queue)
        with self._lock:
            handle = self._handles.get(name)
        if handle is not None and handle.queue_id == queue_id:
            handle.apply_settings(settings)
        return settings

    def list_queues(self) -> list[str]:
        """Names of every queue in the keyspace, sorted."""
        return sorted(queue_names(self._store))

    def delete_queue(self, name: str, *, missing_ok: bool = False) -> None:
        """Delete a queue and its messages.

        A queue created later under the same name starts empty: its data lives
        under a new incarnation id. Handles from this client fail with
        QueueNotFound afterwards. A handle in another process may still send
        into the deleted queue for up to ``seal_delay / 2`` seconds (the life of
        its id block), as SQS allows sends for a while after a delete.
        """
        try:
            queue = self.queue(name)
        except QueueNotFound:
            if missing_ok:
                return
            raise
        if not unregister_queue(self._store, name, queue.queue_id):
            raise QueueNotFound(
                f"queue {name!r}: was deleted or re-created by someone else meanwhile"
            )
        buckets = Buckets(self._store, queue.queue_id, queue.settings.bucket_size)
        doomed = stored_range(buckets)  # read before its pointers go
        remove_sequence_and_pointers(self._store, name, queue.queue_id)
        try:
            buckets.drop(doomed)
        except SparkQueueError:
            # Unreachable under the new incarnation either way; only disk is at stake.
            log.warning("queue %r: some buckets of the deleted queue were not dropped", name)
        queue.mark_deleted()
        with self._lock:
            self._handles.pop(name, None)
