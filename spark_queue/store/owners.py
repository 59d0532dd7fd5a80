"""The CQL of owner tables: conditional takes, renewals and releases of keys, batched per bucket.

An owner table (``ownership`` for buckets and slices, ``lane_ownership`` for
lanes) holds one row per owned key ``(bucket, slice)``, keyed by
``(queue_id, bucket)`` with ``slice`` as clustering column: every slice of a
bucket sits in one partition, so the changes of one call go in one conditional
batch per bucket. A row carries its owner and lives for its TTL; what a key
and a period mean is ``engine/ownership.py``'s business.

A batch whose conditions do not all hold is applied as a whole or not at all,
so on a conflict the keys of that bucket are tried again one by one: one key
held by someone else does not cost the others. A caller that reads the owners
again instead (shares take runs of many keys: a lightweight transaction per
key of a lost race costs more than a read) asks for the whole batch or nothing.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from spark_queue.store.session import Params, Store

#: ``(bucket, slice)``: one unit of ownership.
Key = tuple[int, int]

# ``{table}`` is the table's name, filled in per OwnerTable (``{{ks}}`` stays for the store).
TAKE = (
    "INSERT INTO {{ks}}.{table} (queue_id, bucket, slice, owner) VALUES (?, ?, ?, ?)"
    " IF NOT EXISTS USING TTL ?"
)
RENEW = (
    "UPDATE {{ks}}.{table} USING TTL ? SET owner = ? WHERE queue_id = ? AND bucket = ?"
    " AND slice = ? IF owner = ?"
)
RELEASE = "DELETE FROM {{ks}}.{table} WHERE queue_id = ? AND bucket = ? AND slice = ? IF owner = ?"
OWNERS = "SELECT slice, owner FROM {{ks}}.{table} WHERE queue_id = ? AND bucket = ?"


class OwnerTable:
    """The rows of one queue's owners in one owner table.

    Args:
        store: The Cassandra session.
        queue_id: The queue incarnation.
        table: ``ownership`` or ``lane_ownership``, both of the same columns.
    """

    def __init__(self, store: Store, queue_id: uuid.UUID, table: str) -> None:
        self._store = store
        self.queue_id = queue_id
        self._take, self._renew, self._release, self._owners = (
            cql.format(table=table) for cql in (TAKE, RENEW, RELEASE, OWNERS)
        )

    def insert_free(
        self, owner: str, keys: Iterable[Key], ttl: int, *, piecemeal: bool = True
    ) -> set[Key]:
        """Write ``owner`` on each key without a live row, for ``ttl`` seconds; return those won.

        Without ``piecemeal``, a bucket whose batch did not apply wins nothing
        (its keys are not tried one by one).
        """
        return self._apply(
            self._take,
            {k: (self.queue_id, k[0], k[1], owner, ttl) for k in keys},
            what="taking",
            piecemeal=piecemeal,
        )

    def extend(self, owner: str, keys: Iterable[Key], ttl: int) -> set[Key]:
        """Give ``owner``'s rows of ``keys`` a fresh ``ttl``; return the keys it still had."""
        return self._apply(
            self._renew,
            {k: (ttl, owner, self.queue_id, k[0], k[1], owner) for k in keys},
            what="renewing",
        )

    def delete_own(self, owner: str, keys: Iterable[Key]) -> set[Key]:
        """Delete ``owner``'s rows of ``keys``; return the keys deleted."""
        return self._apply(
            self._release, {k: (self.queue_id, k[0], k[1], owner) for k in keys}, what="releasing"
        )

    def live_owners(self, buckets: Iterable[int]) -> dict[Key, str]:
        """Every live owner of a slice of ``buckets`` (one query per bucket, in bucket order)."""
        wanted = sorted(set(buckets))
        results = self._store.execute_many(
            [(self._owners, (self.queue_id, b)) for b in wanted], what="reading ownership"
        )
        return {
            (bucket, piece): who
            for bucket, result in zip(wanted, results, strict=True)
            for piece, who in result
            if who
        }

    def _apply(
        self, cql: str, params: Mapping[Key, Params], *, what: str, piecemeal: bool = True
    ) -> set[Key]:
        """Run a conditional statement per key, batched per bucket; return the keys applied.

        A batch applies only when every condition in it holds; a bucket whose
        batch did not apply is tried again key by key (with ``piecemeal``), so
        that one key held by someone else does not cost the others.
        """
        by_bucket: dict[int, dict[Key, Params]] = defaultdict(dict)
        for key, row in params.items():
            by_bucket[key[0]][key] = row
        applied: set[Key] = set()
        retry: list[Key] = []
        buckets = sorted(by_bucket)
        results = self._run([list(by_bucket[b].values()) for b in buckets], cql, what)
        for bucket, result in zip(buckets, results, strict=True):
            if _applied(result):
                applied.update(by_bucket[bucket])
            elif piecemeal and len(by_bucket[bucket]) > 1:
                retry.extend(by_bucket[bucket])
        if retry:
            singles = self._run([[params[k]] for k in retry], cql, what)
            applied.update(k for k, result in zip(retry, singles, strict=True) if _applied(result))
        return applied

    def _run(self, groups: list[list[Params]], cql: str, what: str) -> list[Any]:
        statements: list[tuple[Any, Params]] = [
            (self._store.prepare(cql), rows[0])
            if len(rows) == 1
            else (self._store.batch(cql, rows), ())
            for rows in groups
        ]
        return self._store.execute_many(statements, what=f"{what} ownership of buckets")


def _applied(result: Any) -> bool:
    row = result.one()
    return bool(row and row[0])
