"""Changing a queue's settings after creation, and how handles pick the change up.

``QueueClient.update_queue`` writes the new settings with one lightweight
transaction conditioned on every changeable setting still having the value it
read: two updates racing on different fields cannot overwrite each other with
stale values; the loser reads again, merges its change into the winner's, checks
the result and tries again. Rules that tie fields together (``max_deliveries``
needs ``dead_letter_queue``) are checked on the merged result, before anything
is written.

Every ``Queue`` handle re-reads its settings when they are older than
``SETTINGS_REFRESH`` seconds, on its next operation: an operation that starts
``SETTINGS_REFRESH`` seconds after ``update_queue`` returned uses the new
settings, in every process. ``bucket_size``, ``seal_delay`` and ``lanes`` are
fixed: the ids, buckets, lanes and the repair of late writes of existing
messages depend on them. The reads and the conditional write of a queue's
settings row are ``store/catalog.py``'s.
A new ``message_ttl`` applies to messages sent after the change; messages
already in the queue keep the expiry they were sent with.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from spark_queue.config import QueueSettings, check_queue_name
from spark_queue.errors import InvalidSetting, QueueNotFound, SparkQueueError
from spark_queue.store.catalog import CHANGEABLE, FIXED, read_settings, write_changes
from spark_queue.store.session import Store
from spark_queue.store.write_limits import check_max_message_bytes

#: Conditional writes tried before giving up on a queue whose settings keep changing.
UPDATE_ROUNDS = 20


def check_changes(changes: Mapping[str, Any]) -> None:
    """Refuse fixed, unknown or missing settings before anything is read or written."""
    if not changes:
        raise InvalidSetting(
            f"update_queue: no setting given; changeable settings are {', '.join(CHANGEABLE)}"
        )
    for key, value in changes.items():
        if key in FIXED:
            raise InvalidSetting(
                f"{key} {value!r}: cannot change after a queue is created (its messages are"
                f" stored by it); create a new queue with the {key} you want"
            )
        if key not in CHANGEABLE:
            raise InvalidSetting(
                f"setting {key!r}: unknown; changeable settings are {', '.join(CHANGEABLE)}"
            )


def update_settings(
    store: Store,
    name: str,
    changes: Mapping[str, Any],
    queue_exists: Callable[[str], object],
) -> tuple[uuid.UUID, QueueSettings]:
    """Apply ``changes`` to queue ``name``; return its incarnation and new settings.

    Args:
        store: The Cassandra session.
        name: The queue.
        changes: Setting name to new value (None clears ``max_deliveries`` and
            ``dead_letter_queue``).
        queue_exists: Raises QueueNotFound for a name that is not a queue.

    Raises:
        InvalidSetting: A fixed or unknown setting, or a value (or combination)
            that breaks a rule; nothing was changed.
        QueueNotFound: No such queue, or the dead-letter queue does not exist.
    """
    check_queue_name(name)
    check_changes(changes)
    what = f"updating queue {name!r}"
    for _ in range(UPDATE_ROUNDS):
        found = read_settings(store, name)
        if found is None:
            raise QueueNotFound(f"queue {name!r}: does not exist; nothing to update")
        queue_id, current = found
        updated = replace(current, **changes)  # QueueSettings checks every rule
        if "max_message_bytes" in changes:
            check_max_message_bytes(store, updated.max_message_bytes)
        dead_letters = changes.get("dead_letter_queue")
        if dead_letters is not None:
            if dead_letters == name:
                raise InvalidSetting(
                    f"dead_letter_queue {dead_letters!r}: must be another queue than {name!r}"
                )
            queue_exists(dead_letters)
        if write_changes(store, name, queue_id, updated, current):
            return queue_id, updated
        # Someone else changed the settings (or re-created the queue) meanwhile: read again.
    raise SparkQueueError(
        f"{what}: its settings changed under this update {UPDATE_ROUNDS} times in a row;"
        " nothing was changed, try again"
    )
