"""The queue schema: its tables and columns, the packaged ``schema.cql``, and what a keyspace lacks.

``Store`` checks a keyspace against it on open; :mod:`spark_queue.store.keyspace`
creates or upgrades one from it; the in-memory store parses its statements.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cassandra.cluster import Session

#: The tables of ``schema.cql``, in its order.
TABLES = (
    "queues",
    "sequences",
    "pointers",
    "messages",
    "journal",
    "send_log",
    "bucket_counts",
    "ownership",
    "lane_ownership",
    "access_keys",
    "sqs_queues",
    "sqs_receipts",
)

#: ``(table, column, type)`` added to schema.cql after its first release: older
#: keyspaces get them by ALTER (``bdq keyspace create NAME --exist-ok``), and
#: their older rows hold none.
ADDED_COLUMNS = (
    ("messages", "payload_bytes", "int"),
    ("messages", "lane", "int"),
    ("queues", "lanes", "int"),
    ("send_log", "digests", "blob"),
    ("messages", "key", "text"),
    ("send_log", "expires_at", "timestamp"),
)


def missing_schema(session: Session, keyspace: str) -> tuple[list[str], list[str]] | None:
    """What ``keyspace`` lacks of ``schema.cql``: ``(tables, "table.column"s)``; None: no keyspace.

    Read from the coordinator's ``system_schema`` (the driver waits for schema
    agreement after each DDL statement), not from the driver's metadata.
    """
    # Unquoted names, as spark-queue writes them, are lower case in Cassandra.
    name = keyspace.lower()
    where = "WHERE keyspace_name = %s"
    if (
        session.execute(f"SELECT keyspace_name FROM system_schema.keyspaces {where}", (name,)).one()
        is None
    ):
        return None
    tables: dict[str, set[str]] = {}
    for row in session.execute(
        f"SELECT table_name, column_name FROM system_schema.columns {where}", (name,)
    ):
        tables.setdefault(row[0], set()).add(row[1])
    columns = [
        f"{table}.{column}"
        for table, column, _ in ADDED_COLUMNS
        if table in tables and column not in tables[table]
    ]
    return [t for t in TABLES if t not in tables], columns


def schema_statements(keyspace: str) -> list[str]:
    """The packaged ``schema.cql``, split into statements, for ``keyspace``."""
    text = resources.files("spark_queue.store").joinpath("schema.cql").read_text()
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    return [s.strip().format(keyspace=keyspace) for s in "\n".join(lines).split(";") if s.strip()]
