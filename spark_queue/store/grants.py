"""Who may do what: the least Cassandra permissions of each part a role plays on a keyspace.

Every queue of a keyspace lives in the same tables (a queue is a ``queue_id``
in their partition keys), and Cassandra grants permissions on keyspaces and
tables, never on partitions. So the keyspace is the unit of isolation: a role
that may write ``messages`` may write every queue's messages. Inside a
keyspace, table permissions only separate what touches different tables:

- ``monitor``: reads every table (``bdq queue stats``, ``bdq top``, ``bdq
  metrics serve``, ``bdq queue describe``, ``bdq peek``) and writes only
  ``bucket_counts``, the shared cache of counts a look stores for the next one
  (a count a monitor got wrong is corrected by the next rescan; it never hides
  or loses a message);
- ``producer``: sends. Reads the queue's settings, pointers and id sequence,
  reserves ids (a conditional write on ``sequences``), writes ``messages`` and
  the send log of idempotent sends; never reads a message;
- ``consumer``: receives, acks, changes visibility, and runs a Spark source.
  Writes ``messages`` (leases and acks), the owner tables, the step journal,
  ``pointers`` (sealing and dropping buckets) and ``bucket_counts``; and
  ``sequences`` too, because moving a message past ``max_deliveries`` to its
  dead-letter queue is a send;
- ``operator``: everything in the keyspace: create, update, purge and delete
  queues, redrive dead letters (which receives and sends).

A producer and a consumer share ``messages`` (and, for dead letters,
``sequences``): Cassandra cannot stop a role that may write a table from
writing any row of it, so these parts keep honest clients apart, not hostile
ones. Put queues that must not trust each other's clients in keyspaces of
their own. Creating the keyspace and its tables (``bdq keyspace create``) is
no part of these: it needs CREATE (and ALTER for ``--exist-ok``) on all
keyspaces, a superuser's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spark_queue.errors import InvalidSetting
from spark_queue.store.driver_errors import translate_errors
from spark_queue.store.schema import TABLES
from spark_queue.store.session import Store

__all__ = ["PARTS", "Part", "grant", "grant_statements"]


@dataclass(frozen=True)
class Part:
    """The permissions of one part a role plays on a keyspace.

    Attributes:
        name: ``monitor``, ``producer``, ``consumer`` or ``operator``.
        does: What a role of this part may do, in the words of ``bdq``.
        select: Tables it reads; None: every table of the keyspace.
        modify: Tables it writes; None: every table of the keyspace.
    """

    name: str
    does: str
    select: Sequence[str] | None
    modify: Sequence[str] | None


#: Every part, by name (the flags of ``bdq keyspace grant``).
PARTS: Mapping[str, Part] = {
    part.name: part
    for part in (
        Part(
            "monitor",
            "Look: queue list/stats/describe, peek, top, metrics serve",
            None,
            ("bucket_counts",),
        ),
        Part(
            "producer",
            "Send (the client, bdq send, the Spark sink)",
            ("queues", "sequences", "pointers", "send_log"),
            ("sequences", "messages", "send_log"),
        ),
        Part(
            "consumer",
            "Receive, ack, change visibility (the client, bdq receive, the Spark source);"
            " dead letters",
            None,
            (
                "sequences",
                "pointers",
                "messages",
                "journal",
                "bucket_counts",
                "ownership",
                "lane_ownership",
            ),
        ),
        Part(
            "operator", "All of the above, and create, update, purge, delete, redrive", None, None
        ),
    )
}


def _quoted(identifier: str) -> str:
    """A CQL quoted identifier: case kept, any character allowed."""
    return '"' + identifier.replace('"', '""') + '"'


def grant_statements(part: str, role: str, keyspace: str) -> list[str]:
    """The GRANT statements that give ``role`` what ``part`` needs on ``keyspace``.

    Raises:
        InvalidSetting: An unknown part, or an empty role name.
    """
    if part not in PARTS:
        raise InvalidSetting(f"part {part!r}: must be one of {', '.join(PARTS)}")
    if not role:
        raise InvalidSetting("role '': must name a Cassandra role (CREATE ROLE makes one)")
    to = _quoted(role)
    ks = _quoted(keyspace)
    statements = []
    for permission, tables in (("SELECT", PARTS[part].select), ("MODIFY", PARTS[part].modify)):
        if tables is None:
            statements.append(f"GRANT {permission} ON KEYSPACE {ks} TO {to}")
        else:
            unknown = set(tables) - set(TABLES)
            assert not unknown, unknown  # a table renamed in schema.cql and not here
            statements += [f"GRANT {permission} ON TABLE {ks}.{t} TO {to}" for t in tables]
    return statements


def grant(store: Store, statements: Sequence[str]) -> None:
    """Run GRANT statements (the connected role needs AUTHORIZE on the keyspace, or superuser)."""
    for statement in statements:
        with translate_errors(f"running {statement!r}"):
            store.session.execute(statement, timeout=max(30.0, store.settings.request_timeout))
