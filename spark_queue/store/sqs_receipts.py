"""The ``sqs_receipts`` table: which receipt a client's receipt handle names after a change.

SQS keeps a receipt handle valid across ChangeMessageVisibility; the queue gives the
message a new receipt instead. ``bdq serve`` therefore records, for the handle the
client received, the receipt now current, with a TTL a minute past the new lease, so
that a later change or delete with the same handle reaches the message. A handle is
written only by the visibility changes made with it, so the last writer is the last
change.
"""

from __future__ import annotations

from spark_queue.store.session import Store

WRITE = "INSERT INTO {ks}.sqs_receipts (handle, current) VALUES (?, ?) USING TTL ?"
READ = "SELECT current FROM {ks}.sqs_receipts WHERE handle = ?"
#: Seconds a record outlives the lease it names: after that the receipt is stale anyway.
MARGIN = 60


def record_current(store: Store, handle: str, current: str, lease_seconds: float) -> None:
    """Record that ``handle`` names ``current`` for the next ``lease_seconds`` (and a margin)."""
    store.execute(
        WRITE,
        (handle, current, int(lease_seconds) + MARGIN),
        what="recording a receipt handle's current receipt",
    )


def current_of(store: Store, handle: str) -> str | None:
    """The receipt ``handle`` names now, if a visibility change made with it recorded one."""
    row = store.execute(READ, (handle,), what="reading a receipt handle's current receipt").one()
    return None if row is None else str(row[0])
