"""Creating a queue keyspace on purpose: its replication, its tables, and what was made.

Opening a store only checks the schema (see :class:`~spark_queue.store.session.Store`);
this module is the one place that changes it, for ``bdq keyspace create``,
``QueueClient.create_keyspace``, ``bdq cassandra start`` (the local node's
keyspace) and the tests' fixtures. Every statement is idempotent
(``IF NOT EXISTS``), so two creators racing each other both succeed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_queue.config import ConnectionSettings, check_keyspace
from spark_queue.errors import InvalidSetting, KeyspaceExists, KeyspaceNotFound
from spark_queue.store.driver_errors import translate_errors
from spark_queue.store.schema import (
    ADDED_COLUMNS,
    TABLES,
    missing_schema,
    schema_statements,
)

if TYPE_CHECKING:
    from cassandra.cluster import Session

SIMPLE = "SimpleStrategy"
NETWORK = "NetworkTopologyStrategy"
_DC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def _factor(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidSetting(
            f"replication factor of {where} {value!r}: must be a whole number >= 1"
        )
    return value


@dataclass(frozen=True)
class Replication:
    """How a keyspace is replicated: SimpleStrategy with one factor, or one per data center.

    Build it with :meth:`simple` (a local node or a single data center without
    names) or :meth:`network` (``{"dc1": 3, "dc2": 3}``, what production wants).

    Attributes:
        strategy: ``SimpleStrategy`` or ``NetworkTopologyStrategy`` (or another
            class Cassandra reported for an existing keyspace).
        factors: ``(name, replicas)`` sorted by name: the data centers, or
            ``replication_factor`` for SimpleStrategy.
    """

    strategy: str
    factors: tuple[tuple[str, int], ...]

    @classmethod
    def simple(cls, factor: int) -> Replication:
        """SimpleStrategy with ``factor`` replicas, placed without regard to data centers."""
        return cls(SIMPLE, (("replication_factor", _factor("SimpleStrategy", factor)),))

    @classmethod
    def network(cls, factors: Mapping[str, int]) -> Replication:
        """NetworkTopologyStrategy with ``factors[dc]`` replicas in each data center named."""
        if not factors:
            raise InvalidSetting(
                "replication: name at least one data center and its replicas, such as dc1=3"
            )
        for dc in factors:
            if not isinstance(dc, str) or not _DC_RE.fullmatch(dc):
                raise InvalidSetting(
                    f"data center {dc!r}: must be letters, digits, '_', '.' or '-', as"
                    " `nodetool status` names it"
                )
        return cls(NETWORK, tuple(sorted((dc, _factor(dc, n)) for dc, n in factors.items())))

    @classmethod
    def of(cls, value: int | Mapping[str, int] | Replication) -> Replication:
        """A Replication from a whole number (SimpleStrategy) or a map of data centers."""
        if isinstance(value, Replication):
            return value
        if isinstance(value, Mapping):
            return cls.network(value)
        return cls.simple(value)

    @classmethod
    def from_map(cls, replication: Mapping[str, str]) -> Replication:
        """The replication of ``system_schema.keyspaces`` (class and factors as text)."""
        strategy = str(replication.get("class", "")).rsplit(".", 1)[-1]
        factors = tuple(
            sorted((k, int(v)) for k, v in replication.items() if k != "class" and v.isdigit())
        )
        return cls(strategy, factors)

    def cql(self) -> str:
        """The CQL replication map, as ``CREATE KEYSPACE ... WITH replication =`` takes it."""
        entries = [f"'class': '{self.strategy}'"] + [f"'{k}': {n}" for k, n in self.factors]
        return "{" + ", ".join(entries) + "}"

    def as_dict(self) -> dict[str, Any]:
        """``{"class": strategy, name: replicas, ...}``, for JSON output."""
        return {"class": self.strategy, **dict(self.factors)}

    def __str__(self) -> str:
        if self.strategy == SIMPLE and len(self.factors) == 1:
            return f"{SIMPLE}, replication factor {self.factors[0][1]}"
        return f"{self.strategy}, " + ", ".join(f"{k}={n}" for k, n in self.factors)


def local_replication(settings: ConnectionSettings) -> Replication:
    """The replication of ``settings``: ``replication_factor`` in ``local_dc``, else SimpleStrategy.

    What the local node and the tests' keyspaces get.
    """
    if settings.local_dc:
        return Replication.network({settings.local_dc: settings.replication_factor})
    return Replication.simple(settings.replication_factor)


@dataclass(frozen=True)
class KeyspaceReport:
    """What :func:`create_keyspace` found and made.

    Attributes:
        keyspace: The keyspace.
        replication: Its replication, as Cassandra reports it.
        created: True if this call created the keyspace.
        tables_created: Tables this call created (all of them for a new keyspace).
        columns_added: ``table.column`` this call added to tables of an older version.
    """

    keyspace: str
    replication: Replication
    created: bool
    tables_created: tuple[str, ...]
    columns_added: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The report as ``bdq keyspace create --json`` prints it."""
        return {
            "keyspace": self.keyspace,
            "created": self.created,
            "replication": self.replication.as_dict(),
            "tables_created": list(self.tables_created),
            "columns_added": list(self.columns_added),
        }

    def summary(self) -> str:
        """One line saying what was made, or that nothing was needed."""
        if self.created:
            head = f"keyspace {self.keyspace} created ({self.replication})"
        else:
            head = f"keyspace {self.keyspace} exists ({self.replication})"
        made = []
        if self.tables_created:
            made.append(f"tables created: {', '.join(self.tables_created)}")
        if self.columns_added:
            made.append(f"columns added: {', '.join(self.columns_added)}")
        return f"{head}; {'; '.join(made) if made else 'every queue table in place'}"


def create_keyspace(
    session: Session,
    keyspace: str,
    replication: Replication | None,
    *,
    exist_ok: bool = False,
    compare_replication: bool = True,
    timeout: float = 60.0,
) -> KeyspaceReport:
    """Create ``keyspace`` with ``replication`` and the queue tables; report what was made.

    Args:
        session: A driver session on the cluster (any keyspace).
        keyspace: The keyspace to create.
        replication: Its replication; may be None only for an existing keyspace.
        exist_ok: An existing keyspace is not refused: its missing tables and
            columns are created (the schema upgrade).
        compare_replication: With ``exist_ok``, refuse an existing keyspace whose
            replication is not ``replication``. False keeps whatever it has.
        timeout: Seconds each schema statement may take (with schema agreement).

    Raises:
        KeyspaceExists: It exists and ``exist_ok`` is false, or it has another
            replication than asked for; nothing was changed.
        KeyspaceNotFound: It does not exist and no replication was given.
        BackendUnavailable: Cassandra could not be reached.
    """
    check_keyspace(keyspace)
    with translate_errors(f"creating keyspace {keyspace!r}"):
        current = current_replication(session, keyspace)
        created = current is None
        if current is None:
            if replication is None:
                raise KeyspaceNotFound(
                    f"keyspace {keyspace!r} not found: creating it needs its replication"
                    " (--dc DC=N per data center, or --simple N for a local node)"
                )
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {replication.cql()}",
                timeout=timeout,
            )
            current = current_replication(session, keyspace) or replication
        elif not exist_ok:
            raise KeyspaceExists(
                f"keyspace {keyspace!r}: already exists ({current}); pass --exist-ok"
                " (exist_ok=True) to keep it and create only its missing tables"
            )
        elif compare_replication and replication is not None and replication != current:
            raise KeyspaceExists(
                f"keyspace {keyspace!r}: exists with replication {current}, not the requested"
                f" {replication}; nothing changed (leave the replication out to keep the"
                " keyspace's, or change it with ALTER KEYSPACE and a repair)"
            )
        missing = missing_schema(session, keyspace)
        tables, columns = missing if missing is not None else (list(TABLES), [])
        if tables:
            for statement in schema_statements(keyspace):
                session.execute(statement, timeout=timeout)
        for table, column, kind in ADDED_COLUMNS:
            if f"{table}.{column}" in columns:
                session.execute(
                    f"ALTER TABLE {keyspace}.{table} ADD IF NOT EXISTS {column} {kind}",
                    timeout=timeout,
                )
    return KeyspaceReport(keyspace, current, created, tuple(tables), tuple(columns))


def current_replication(session: Session, keyspace: str) -> Replication | None:
    """The replication of ``keyspace`` read from ``system_schema``, or None if it does not exist."""
    row = session.execute(
        "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
        (keyspace.lower(),),
    ).one()
    return None if row is None else Replication.from_map(row[0])
