"""The ``access_keys`` table: the keys of ``bdq serve``, each an account's, its secret encrypted.

One row per key, keyed by its id; the service reads one row per key it has not
seen lately, the CLI lists the whole (small) table. The secret arrives here
already encrypted (``spark_queue.service.accounts``): this module never sees it
in clear.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from spark_queue.store.session import Store

INSERT = (
    "INSERT INTO {ks}.access_keys (access_key_id, account, secret, created_at)"
    " VALUES (?, ?, ?, toTimestamp(now())) IF NOT EXISTS"
)
READ = "SELECT account, secret FROM {ks}.access_keys WHERE access_key_id = ?"
LIST = "SELECT access_key_id, account, created_at FROM {ks}.access_keys"
DELETE = "DELETE FROM {ks}.access_keys WHERE access_key_id = ? IF EXISTS"


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A row of ``access_keys``; the encrypted secret stays out of the repr."""

    access_key_id: str
    account: str
    encrypted_secret: bytes = field(repr=False)


def insert_key(store: Store, access_key_id: str, account: str, encrypted_secret: bytes) -> bool:
    """Write a new key; False when its id is taken (a conditional write)."""
    row = store.execute(
        INSERT, (access_key_id, account, encrypted_secret), what="creating an access key"
    ).one()
    return bool(row[0])


def read_key(store: Store, access_key_id: str) -> StoredKey | None:
    """The key ``access_key_id``, or None when there is none (never made, or revoked)."""
    row = store.execute(READ, (access_key_id,), what="reading an access key").one()
    return None if row is None else StoredKey(access_key_id, row[0], row[1])


def list_keys(store: Store) -> list[tuple[str, str, datetime | None]]:
    """``(access_key_id, account, created_at)`` of every key, by account then id."""
    rows = store.rows(LIST, what="listing access keys")
    return sorted(((r[0], r[1], r[2]) for r in rows), key=lambda r: (r[1], r[0]))


def delete_key(store: Store, access_key_id: str) -> bool:
    """Remove a key; False when there was none of that id."""
    row = store.execute(DELETE, (access_key_id,), what="revoking an access key").one()
    return bool(row[0])
