"""The queue catalog: the ``queues`` table, and each queue's sequence and pointers rows.

A queue is a row of ``queues`` keyed by its name, holding its incarnation id
(``queue_id``, new each time the name is created) and its settings. Creating a
queue writes its ``sequences`` and ``pointers`` rows first, then claims the name
with a lightweight transaction; deleting it removes the name (conditional on the
incarnation) before the two rows. A settings change is one conditional update
of the changeable columns (see ``engine/settings_change.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict

from spark_queue.config import QueueSettings
from spark_queue.store.session import Store

#: Settings a queue's row may change after creation, in the order ``UPDATE`` binds them.
CHANGEABLE = (
    "visibility_timeout",
    "order_hint",
    "message_ttl",
    "max_deliveries",
    "dead_letter_queue",
    "max_message_bytes",
)
#: Settings fixed at creation: its ids, buckets and lanes depend on them.
FIXED = ("bucket_size", "seal_delay", "lanes")
#: Every settings column of a queue's row, in the order ``CREATE`` and ``READ`` use.
SETTINGS_COLUMNS = (
    "bucket_size",
    "visibility_timeout",
    "order_hint",
    "message_ttl",
    "max_deliveries",
    "dead_letter_queue",
    "max_message_bytes",
    "seal_delay",
    "lanes",
)

_COLUMN_LIST = ", ".join(SETTINGS_COLUMNS)
CREATE = (
    f"INSERT INTO {{ks}}.queues (name, queue_id, {_COLUMN_LIST}, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, toTimestamp(now())) IF NOT EXISTS"
)
INIT_SEQUENCE = "INSERT INTO {ks}.sequences (queue_id, next_id) VALUES (?, 0) IF NOT EXISTS"
INIT_POINTERS = (
    "INSERT INTO {ks}.pointers (queue_id, head, sealed_upto) VALUES (?, 0, 0) IF NOT EXISTS"
)
READ = f"SELECT queue_id, {_COLUMN_LIST} FROM {{ks}}.queues WHERE name = ?"
LIST = "SELECT name FROM {ks}.queues"
DEAD_LETTER_QUEUES = "SELECT name, dead_letter_queue FROM {ks}.queues"
DELETE = "DELETE FROM {ks}.queues WHERE name = ? IF queue_id = ?"
DELETE_SEQUENCE = "DELETE FROM {ks}.sequences WHERE queue_id = ?"
DELETE_POINTERS = "DELETE FROM {ks}.pointers WHERE queue_id = ?"
UPDATE = (
    f"UPDATE {{ks}}.queues SET {', '.join(f'{c} = ?' for c in CHANGEABLE)} WHERE name = ?"
    f" IF queue_id = ? AND {' AND '.join(f'{c} = ?' for c in CHANGEABLE)}"
)


def read_settings(
    store: Store, name: str, *, what: str | None = None
) -> tuple[uuid.UUID, QueueSettings] | None:
    """The incarnation and settings of queue ``name``, or None if there is none.

    Args:
        store: The Cassandra session.
        name: The queue.
        what: What the caller is doing, for error messages; by default reading
            the queue's settings.
    """
    what = what or f"reading the settings of queue {name!r}"
    row = store.execute(READ, (name,), what=what).one()
    if row is None or row[0] is None:
        return None
    return row[0], QueueSettings(**dict(zip(SETTINGS_COLUMNS, row[1:], strict=True)))


def queue_names(store: Store) -> list[str]:
    """The name of every queue in the keyspace, in the table's order."""
    return [row[0] for row in store.rows(LIST, what="listing queues")]


def dead_letter_sources(store: Store, name: str) -> list[str]:
    """The queues whose ``dead_letter_queue`` is ``name``, sorted (a read of the whole catalog)."""
    rows = store.rows(DEAD_LETTER_QUEUES, (), what=f"finding the queues that feed {name!r}")
    return sorted(source for source, dead_letter_queue in rows if dead_letter_queue == name)


def register_queue(store: Store, name: str, queue_id: uuid.UUID, settings: QueueSettings) -> bool:
    """Create incarnation ``queue_id`` of queue ``name``; False if the name is taken.

    The sequence and pointers rows come first, so a name is never visible
    without them; when the name turns out taken they are removed again.
    """
    what = f"creating queue {name!r}"
    store.execute(INIT_SEQUENCE, (queue_id,), what=what)
    store.execute(INIT_POINTERS, (queue_id,), what=what)
    values = asdict(settings)
    row = store.execute(
        CREATE, (name, queue_id, *(values[c] for c in SETTINGS_COLUMNS)), what=what
    ).one()
    if row[0]:
        return True
    store.execute(DELETE_SEQUENCE, (queue_id,), what=what)
    store.execute(DELETE_POINTERS, (queue_id,), what=what)
    return False


def unregister_queue(store: Store, name: str, queue_id: uuid.UUID) -> bool:
    """Remove the name of incarnation ``queue_id``; False if the name is another's by now."""
    row = store.execute(DELETE, (name, queue_id), what=f"deleting queue {name!r}").one()
    return bool(row[0])


def remove_sequence_and_pointers(store: Store, name: str, queue_id: uuid.UUID) -> None:
    """Delete the id sequence, then the pointers, of a deleted queue's incarnation.

    The sequence goes first so that writers holding a handle fail on their next block.
    """
    what = f"deleting queue {name!r}"
    store.execute(DELETE_SEQUENCE, (queue_id,), what=what)
    store.execute(DELETE_POINTERS, (queue_id,), what=what)


def write_changes(
    store: Store, name: str, queue_id: uuid.UUID, new: QueueSettings, old: QueueSettings
) -> bool:
    """Write ``new``'s changeable settings if incarnation and settings are still ``old``'s.

    Returns:
        Whether the write applied: False if someone else changed the settings
        (or re-created the queue) since ``old`` was read.
    """
    after, before = asdict(new), asdict(old)
    row = store.execute(
        UPDATE,
        (*(after[c] for c in CHANGEABLE), name, queue_id, *(before[c] for c in CHANGEABLE)),
        what=f"updating queue {name!r}",
    ).one()
    return bool(row[0])
