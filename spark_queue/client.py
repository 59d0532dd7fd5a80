"""``QueueClient``: create a keyspace, connect to it, create, open, list and delete queues."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from types import TracebackType
from typing import Any

from spark_queue.config import ConnectionSettings, QueueSettings, check_queue_name
from spark_queue.engine.lifecycle import stored_range
from spark_queue.engine.settings_change import update_settings
from spark_queue.errors import InvalidSetting, QueueExists, QueueNotFound, SparkQueueError
from spark_queue.queue import Queue
from spark_queue.store.buckets import Buckets
from spark_queue.store.catalog import (
    FIXED,
    dead_letter_sources,
    queue_names,
    read_settings,
    register_queue,
    remove_sequence_and_pointers,
    unregister_queue,
)
from spark_queue.store.keyspace import KeyspaceReport, Replication, create_keyspace
from spark_queue.store.session import Store
from spark_queue.store.write_limits import check_max_message_bytes

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

    The keyspace and its tables must exist: a client never creates them, so
    that a look (``list_queues``) never changes the cluster. Create them once
    with :meth:`create_keyspace` or ``bdq keyspace create``. Use it as a
    context manager, or call ``close()``.

    Raises:
        KeyspaceNotFound: The keyspace, or a table of it, is missing; the
            message names the command that creates it.
        BackendUnavailable: No contact point answered.
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
                settings = _settings(hosts, keyspace, connection)
            self._store, self._owns_store = Store(settings), True
        self.settings = self._store.settings
        self._handles: dict[str, Queue] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, **connection: Any) -> QueueClient:
        """A client configured from the ``BDQ_*`` environment (keywords win)."""
        return cls(settings=ConnectionSettings.from_env(**connection))

    @classmethod
    def create_keyspace(
        cls,
        replication: int | Mapping[str, int] | Replication | None = None,
        *,
        exist_ok: bool = False,
        hosts: str | Iterable[str] | None = None,
        keyspace: str | None = None,
        settings: ConnectionSettings | None = None,
        **connection: Any,
    ) -> KeyspaceReport:
        """Create the keyspace and its queue tables, the one step that changes the schema.

        The keyspace is the one a client of the same arguments would use
        (``keyspace``, else ``BDQ_KEYSPACE``, else ``bdq``)::

            QueueClient.create_keyspace({"dc1": 3, "dc2": 3}, keyspace="orders")
            QueueClient.create_keyspace(1, exist_ok=True)        # a single local node

        A class method, since a client needs its keyspace to exist already.

        Args:
            replication: Replicas per data center (``NetworkTopologyStrategy``),
                or a whole number for ``SimpleStrategy`` (a local node), or a
                ``Replication``. May be None with ``exist_ok`` for a keyspace
                that exists.
            exist_ok: Accept an existing keyspace and create its missing tables
                and columns (the upgrade after a new spark-queue version); one of
                another replication than ``replication`` is still refused.
            hosts: As for the constructor.
            keyspace: As for the constructor.
            settings: As for the constructor.
            **connection: As for the constructor.

        Returns:
            What was found and made: replication, tables created, columns added.

        Raises:
            KeyspaceExists: It exists (without ``exist_ok``), or with another
                replication; nothing was changed.
            KeyspaceNotFound: It does not exist and ``replication`` is None.
            InvalidSetting: A replication factor or data center name breaks its rule.
        """
        wanted = None if replication is None else Replication.of(replication)
        if settings is None:
            settings = _settings(hosts, keyspace, connection)
        store = Store(settings, check_schema=False)
        try:
            return create_keyspace(
                store.session,
                settings.keyspace,
                wanted,
                exist_ok=exist_ok,
                timeout=max(60.0, settings.request_timeout),
            )
        finally:
            store.close()

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
        bucket_size: int | None = None,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        message_ttl: int | None = None,
        max_deliveries: int | None = None,
        dead_letter_queue: str | None = None,
        max_message_bytes: int | None = None,
        seal_delay: float | None = None,
        lanes: int | None = None,
        exist_ok: bool = False,
    ) -> Queue:
        """Create a queue and return a handle on it.

        See ``QueueSettings`` for the settings; one left at None gets its
        default there (no dead-letter queue for the last two). With ``exist_ok``
        an existing queue of that name is returned when every setting given
        (not None) equals its own, as SQS's CreateQueue does; settings left out
        are not compared, so an existing queue whose settings were changed since
        (``update_queue``) is still accepted by the code that created it.

        Raises:
            QueueExists: The name is taken and ``exist_ok`` is false, or the
                queue has other values of settings given here (its
                ``differences`` name each: ``{setting: (current, requested)}``).
            QueueNotFound: ``dead_letter_queue`` does not exist.
            InvalidSetting: A setting breaks its rule (``max_message_bytes`` over
                what one write of the cluster holds: ``store/write_limits.py``).
        """
        check_queue_name(name)
        given: dict[str, Any] = {
            key: value
            for key, value in (
                ("bucket_size", bucket_size),
                ("visibility_timeout", visibility_timeout),
                ("order_hint", order_hint),
                ("message_ttl", message_ttl),
                ("max_deliveries", max_deliveries),
                ("dead_letter_queue", dead_letter_queue),
                ("max_message_bytes", max_message_bytes),
                ("seal_delay", seal_delay),
                ("lanes", lanes),
            )
            if value is not None
        }
        settings = QueueSettings(**given)
        if exist_ok:
            try:
                # one read, not three LWTs and two tombstones
                return self._existing(name, settings, given)
            except QueueNotFound:
                pass
        if dead_letter_queue is not None:
            if dead_letter_queue == name:
                raise InvalidSetting(
                    f"dead_letter_queue {dead_letter_queue!r}: must be another queue than {name!r}"
                )
            self.queue(dead_letter_queue)  # QueueNotFound names it
        if max_message_bytes is not None:  # the default fits any cluster's writes
            check_max_message_bytes(self._store, settings.max_message_bytes)
        queue_id = uuid.uuid4()
        if not register_queue(self._store, name, queue_id, settings):
            if exist_ok:
                return self._existing(name, settings, given)
            raise QueueExists(
                f"queue {name!r}: already exists; pass exist_ok=True to use it, or delete it first"
            )
        return self._handle(name, queue_id, settings)

    def _existing(self, name: str, requested: QueueSettings, given: Iterable[str]) -> Queue:
        """The existing queue ``name``, unless a setting ``given`` differs from ``requested``."""
        queue = self.queue(name)
        current, wanted = asdict(queue.settings), asdict(requested)
        differences = {k: (current[k], wanted[k]) for k in given if current[k] != wanted[k]}
        if differences:
            listed = ", ".join(
                f"{k} {now!r} (requested {new!r})" for k, (now, new) in differences.items()
            )
            fixed = [k for k in differences if k in FIXED]
            fix = (
                f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} fixed at creation:"
                " delete the queue to create it anew"
                if fixed
                else "change them with update_queue"
            )
            raise QueueExists(
                f"queue {name!r}: exists with other settings: {listed}; nothing changed"
                f" ({fix}, or ask for the queue's own values)",
                differences=differences,
            )
        return queue

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
                an unknown setting, or a value that breaks its rule (a ``max_message_bytes``
                over what one write of the cluster holds); nothing changed.
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

    def dead_letter_sources(self, name: str) -> list[str]:
        """Names of the queues whose ``dead_letter_queue`` is ``name``, sorted.

        SQS's ListDeadLetterSourceQueues: empty when ``name`` is no queue's
        dead-letter queue (whether or not it exists).
        """
        return dead_letter_sources(self._store, check_queue_name(name))

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


def _settings(
    hosts: str | Iterable[str] | None, keyspace: str | None, connection: Mapping[str, Any]
) -> ConnectionSettings:
    listed = list(hosts) if hosts is not None and not isinstance(hosts, str) else hosts
    return ConnectionSettings.from_env(hosts=listed, keyspace=keyspace, **connection)
