"""Every error spark-queue raises on purpose derives from one root.

The tree::

    SparkQueueError
    ├── InvalidSetting        a setting, option, flag or argument breaks a rule (also a ValueError)
    │   └── InvalidMessage    a payload or its headers break a rule
    │       └── MessageTooLarge
    ├── QueueNotFound         the named queue does not exist
    ├── QueueExists           create_queue on a name that is taken (or exist_ok with other settings)
    ├── KeyspaceNotFound      the keyspace, or its queue tables, are missing: create them on purpose
    ├── KeyspaceExists        create_keyspace on a keyspace that exists (or exist_ok with another
    │                         replication)
    ├── StaleReceipt          ack / change_visibility with a receipt of an older delivery
    ├── BackendUnavailable    Cassandra could not be reached or did not answer in time
    ├── PermissionDenied      Cassandra refused a statement: the role lacks a permission
    ├── LocalNodeError        the local Cassandra node could not be started or stopped
    ├── DataLoss              a replayed Spark micro-batch found messages it had leased gone
    └── MissingExtra          a part of spark-queue needs an extra that is not installed
                              (also an ImportError)

Each message names the value, the rule it broke and, where there is one, the fix.
Driver exceptions are translated at the store boundary and kept as ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The optional parts of spark-queue: each extra of pyproject.toml and the modules it brings
#: (a test holds this to pyproject.toml's [project.optional-dependencies]).
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow", "pandas"),
    "local": ("yaml", "psutil", "cryptography"),
    "metrics": ("prometheus_client",),
    "serve": ("starlette", "uvicorn", "cryptography", "prometheus_client"),
    "bench": ("aiohttp", "botocore"),
}


class SparkQueueError(Exception):
    """Root of every error raised by spark-queue."""


class InvalidSetting(SparkQueueError, ValueError):
    """A setting, option, flag or argument has a value that breaks a rule."""


class InvalidMessage(InvalidSetting):
    """A message payload or its headers break a rule (type, encoding)."""


class MessageTooLarge(InvalidMessage):
    """A message (payload, headers and key) is larger than the queue's ``max_message_bytes``."""


class QueueNotFound(SparkQueueError, LookupError):
    """The named queue does not exist in the keyspace."""


class QueueExists(SparkQueueError):
    """``create_queue`` was asked for a name that already exists.

    With ``exist_ok``, raised when the queue has other values of the settings
    asked for; ``differences`` maps each such setting to ``(current, requested)``.
    """

    def __init__(
        self, message: str, *, differences: Mapping[str, tuple[object, object]] | None = None
    ) -> None:
        super().__init__(message)
        self.differences = dict(differences or {})


class KeyspaceNotFound(SparkQueueError, LookupError):
    """The keyspace does not exist, or lacks tables or columns of the queue schema.

    Opening a client never creates anything: the message names the command that
    does (``bdq keyspace create``, or ``QueueClient.create_keyspace``).
    """


class KeyspaceExists(SparkQueueError):
    """``create_keyspace`` found the keyspace already there.

    Raised without ``exist_ok``, and with it when the replication asked for is
    not the keyspace's (nothing is changed: altering replication is an operator's
    decision, followed by a repair).
    """


class StaleReceipt(SparkQueueError):
    """A receipt no longer names the current delivery of its message.

    The message was acked, its lease expired and another consumer received it,
    or its visibility was changed with a newer receipt. Nothing was changed.
    """


class BackendUnavailable(SparkQueueError):
    """Cassandra could not be reached, or did not answer within the timeout."""


class PermissionDenied(SparkQueueError):
    """Cassandra refused a statement because the role lacks a permission on a table.

    The message names the role, the permission and the table, and the command
    that prints the grants of each kind of role (``bdq keyspace grant``).
    ``permission``, ``resource`` and ``role`` hold them when Cassandra named them.
    """

    def __init__(
        self,
        message: str,
        *,
        permission: str | None = None,
        resource: str | None = None,
        role: str | None = None,
    ) -> None:
        super().__init__(message)
        self.permission = permission
        self.resource = resource
        self.role = role


class LocalNodeError(SparkQueueError):
    """The local Cassandra node could not be started, stopped or inspected."""


class DataLoss(SparkQueueError):
    """A replayed consumer step found messages it had leased gone (TTL, purge, re-created queue).

    The Spark source raises it when ``failOnDataLoss`` is true (the default).
    """


class MissingExtra(SparkQueueError, ImportError):
    """A part of spark-queue needs packages of an extra that is not installed.

    The core install (the client and the ``bdq`` command) leaves out Spark, the
    local node's libraries (YAML, processes, certificates) and the Prometheus
    exporter; the part that needs
    one of them raises this when it is first imported or used, naming the pip
    command that adds it.

    Args:
        needed_by: What needs the extra, as the user knows it (``"bdq bench spark"``).
        extra: The extra's name in pyproject.toml (a key of ``EXTRAS``).
        missing: The module that failed to import, when known.
    """

    def __init__(self, needed_by: str, extra: str, missing: str | None = None) -> None:
        if extra not in EXTRAS:
            raise ValueError(f"extra {extra!r}: must be one of {sorted(EXTRAS)}")
        what = f" ({missing} is not installed)" if missing else ""
        super().__init__(
            f"{needed_by} needs the {extra!r} extra{what}: pip install 'spark-queue[{extra}]'",
            name=missing,
        )
        self.extra = extra
