"""Tables of the memory store: partitions of rows whose cells expire by TTL, as Cassandra's do.

A row holds a row marker (written by ``INSERT``, not by ``UPDATE``) and a cell
per column, each with its own expiry. A row exists while its marker or any
cell lives, exactly the rule that lets an ``UPDATE`` of a missing row create
one holding only the cells it set. Expiry follows Cassandra's arithmetic: a
write at wall time ``t`` with TTL ``n`` lives while ``int(time.time()) <
int(t) + n``, so a TTL of one second lasts from zero to one second.

Every cell, marker and deletion carries its write timestamp (microseconds: the
statement's ``USING TIMESTAMP``, else the store's clock), and the newest wins
whatever the order of arrival, as in Cassandra: a write older than the cell it
meets changes nothing, and one no newer than a deletion of its row or
partition is shadowed by it. At equal timestamps a deletion wins, then the
greater value.

``Table`` reads and writes one table for ``memory.py``; it checks each
statement against the schema as Cassandra would (the whole partition key by
equality, ``ALLOW FILTERING`` for other columns, no ``IN`` under a condition)
and raises ``SparkQueueError`` where Cassandra answers with an invalid request.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from spark_queue.store.memory_cql import (
    Bind,
    Delete,
    Insert,
    Literal,
    Refused,
    Relation,
    Select,
    Selector,
    Term,
    Update,
)
from spark_queue.store.memory_schema import TableSchema

#: The width of each integer type, which the driver refuses to overflow.
_INT_BITS = {"int": 32, "bigint": 64}
#: Cassandra's longest TTL: 20 years.
MAX_TTL = 20 * 365 * 24 * 3600
NEVER = math.inf

Key = tuple[Any, ...]
Params = Sequence[Any]


@dataclass(slots=True)
class Cell:
    """A column's value (None: deleted), when it expires and its write timestamp."""

    value: Any
    expiry: float
    timestamp: int

    def live(self, now: int) -> bool:
        return self.value is not None and now < self.expiry

    def loses_to(self, value: Any, timestamp: int) -> bool:
        """Whether a write of ``value`` at ``timestamp`` replaces this cell (Cassandra's rule)."""
        if timestamp != self.timestamp:
            return timestamp > self.timestamp
        if self.value is None or value is None:
            return value is None
        try:
            return bool(value > self.value)
        except TypeError:  # uncomparable values (maps): keep the one already there
            return False


@dataclass(slots=True)
class Row:
    """One row: its marker (None: no marker), its cells, and when it was last deleted."""

    marker: Cell | None = None
    cells: dict[str, Cell] = field(default_factory=dict)
    deleted_at: int = -1

    def live(self, now: int) -> bool:
        if self.marker is not None and now < self.marker.expiry:
            return True
        return any(cell.live(now) for cell in self.cells.values())

    def value(self, column: str, now: int) -> Any:
        cell = self.cells.get(column)
        return cell.value if cell is not None and cell.live(now) else None


@dataclass(frozen=True, slots=True)
class Clock:
    """One statement's time: ``ms`` for ``toTimestamp(now())``, ``seconds`` for TTLs,
    ``micros``, the write timestamp of statements without ``USING TIMESTAMP``, and
    ``ballot``, the store's own time in microseconds, which a lightweight transaction
    writes at whatever the writer's clock says (Cassandra stamps it with its Paxos ballot)."""

    ms: int
    seconds: int
    micros: int = 0
    ballot: int = 0


def bound(term: Term, params: Params, clock: Clock) -> Any:
    """The value of a term under ``params``."""
    if isinstance(term, Bind):
        return params[term.index]
    if isinstance(term, Literal):
        return term.value
    return clock.ms


def rejected(reason: str) -> Refused:
    """What Cassandra answers with an InvalidRequest (the store boundary adds what was done)."""
    return Refused(f"the memory store rejected the request: {reason}")


class Table:
    """The rows of one table, by partition key then clustering key."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.partitions: dict[Key, dict[Key, Row]] = {}
        #: When each partition was last deleted whole: older writes to it are shadowed.
        self.deleted: dict[Key, int] = {}

    # -- checks (once per prepared statement) ------------------------------------------

    def check(self, statement: Select | Insert | Update | Delete) -> None:
        """Refuse what Cassandra refuses when preparing ``statement``."""
        s = self.schema
        names: list[str] = []
        if isinstance(statement, Select):
            names += [sel.column for sel in statement.selectors or () if sel.column != "*"]
            names += [r.column for r in statement.where]
        elif isinstance(statement, Insert):
            names += statement.columns
            missing = [c for c in s.primary_key if c not in statement.columns]
            if missing:
                raise rejected(f"Some primary key parts are missing: {', '.join(missing)}")
        else:
            names += [r.column for r in statement.where + statement.conditions]
            if isinstance(statement, Update):
                names += [c for c, _ in statement.assignments]
                keys = [c for c, _ in statement.assignments if c in s.primary_key]
                if keys:
                    raise rejected(f"PRIMARY KEY part {keys[0]} found in SET part")
        unknown = [n for n in names if n not in s.columns]
        if unknown:
            raise rejected(f"Undefined column name {unknown[0]} in table {s.name}")
        conditional = (isinstance(statement, Insert) and statement.if_not_exists) or (
            isinstance(statement, Update) and bool(statement.conditions or statement.if_exists)
        )
        if conditional and isinstance(statement, Insert | Update) and statement.timestamp:
            raise rejected("Cannot provide custom timestamp for conditional updates")
        if isinstance(statement, Insert):
            return
        where = statement.where
        pk_given = [r.column for r in where if r.column in s.partition_key]
        if (
            isinstance(statement, Select)
            and not pk_given
            and (not where or statement.allow_filtering)
        ):
            return  # a full scan, filtered or not
        if sorted(pk_given) != sorted(s.partition_key) or any(
            r.op != "=" for r in where if r.column in s.partition_key
        ):
            raise rejected(f"the partition key ({', '.join(s.partition_key)}) needs = on each part")
        regular = [r.column for r in where if r.column not in s.primary_key]
        if isinstance(statement, Select):
            if regular and not statement.allow_filtering:
                raise rejected(
                    "Cannot execute this query as it might involve data filtering and thus may"
                    " have unpredictable performance. If you want to execute this query despite"
                    " the performance unpredictability, use ALLOW FILTERING"
                )
            return
        if regular:
            raise rejected(f"Non PRIMARY KEY columns found in where clause: {regular[0]}")
        clustering = [r for r in where if r.column in s.clustering]
        whole_row = sorted(r.column for r in clustering) == sorted(s.clustering) and all(
            r.op in ("=", "in") for r in clustering
        )
        if isinstance(statement, Update) and not whole_row:
            raise rejected(f"the clustering key ({', '.join(s.clustering)}) needs = on each part")
        if statement.conditions or statement.if_exists:
            if not whole_row:
                raise rejected("DELETE statements must restrict all PRIMARY KEY columns with IF")
            if any(r.op == "in" for r in clustering):
                raise rejected("IN on the clustering key columns is not supported with conditions")

    # -- values -------------------------------------------------------------------------

    def coerce(self, column: str, value: Any) -> Any:
        """``value`` as stored in ``column``: ints, floats, ms for timestamps, None for empty."""
        if value is None:
            return None
        kind = self.schema.columns[column]
        ok: bool
        if kind in _INT_BITS:
            bits = _INT_BITS[kind]  # what the driver can serialize into the column
            ok = isinstance(value, int) and not isinstance(value, bool)
            ok = ok and -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
        elif kind == "double":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        elif kind == "timestamp":
            if isinstance(value, datetime):
                moment = value if value.tzinfo else value.replace(tzinfo=UTC)
                value = int(moment.timestamp() * 1000)
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "boolean":
            ok = isinstance(value, bool)
        elif kind == "text":
            ok = isinstance(value, str)
        elif kind == "blob":
            ok = isinstance(value, bytes | bytearray | memoryview)
            value = bytes(value) if ok else value
        elif kind == "uuid":
            ok = isinstance(value, uuid.UUID)
        elif kind == "map<text, text>":
            ok = isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            )
            value = (dict(value) or None) if ok else value  # an empty collection is null
        else:
            raise rejected(f"column {column} of type {kind}: not a type the memory store knows")
        if not ok:
            raise rejected(
                f"column {column} ({kind}): cannot store {type(value).__name__} {value!r}"
            )
        return value

    def timestamp(self, term: Term | None, params: Params, clock: Clock) -> int:
        """The write timestamp of a statement: its ``USING TIMESTAMP``, else the clock's."""
        if term is None:
            return clock.micros
        stamp = bound(term, params, clock)
        if not isinstance(stamp, int) or isinstance(stamp, bool):
            raise rejected(f"timestamp {stamp!r}: must be a whole number of microseconds")
        return stamp

    def ttl(self, term: Term | None, params: Params, clock: Clock) -> float:
        """When cells written now expire (epoch seconds; ``NEVER`` without a TTL)."""
        ttl = self.schema.default_ttl if term is None else bound(term, params, clock)
        if not isinstance(ttl, int) or isinstance(ttl, bool):
            raise rejected(f"TTL {ttl!r}: must be a whole number of seconds")
        if ttl < 0:
            raise rejected(f"A TTL must be greater or equal to 0, but was {ttl}")
        if ttl > MAX_TTL:
            raise rejected(f"ttl is too large. requested ({ttl}) maximum ({MAX_TTL})")
        return clock.seconds + ttl if ttl else NEVER

    def partition_key(self, where: Iterable[Relation], params: Params, clock: Clock) -> Key:
        values = {r.column: bound(r.term, params, clock) for r in where}
        key = tuple(self.coerce(c, values[c]) for c in self.schema.partition_key)
        if any(v is None for v in key):
            raise rejected(f"Invalid null value for partition key of {self.schema.name}")
        return key

    def clustering_keys(self, where: Iterable[Relation], params: Params, clock: Clock) -> list[Key]:
        """The clustering keys an ``=``/``IN`` restriction names, in clustering order."""
        choices: dict[str, list[Any]] = {}
        for r in where:
            if r.column in self.schema.clustering:
                value = bound(r.term, params, clock)
                values = list(value) if r.op == "in" else [value]
                choices[r.column] = [self.coerce(r.column, v) for v in values]
        keys: list[Key] = [()]
        for column in self.schema.clustering:
            keys = [(*k, v) for k in keys for v in choices[column]]
        if any(v is None for k in keys for v in k):
            raise rejected(f"Invalid null value for clustering key of {self.schema.name}")
        return sorted(set(keys), key=self.order)

    def order(self, key: Key) -> tuple[Any, ...]:
        """A sort key of clustering keys that honours ``CLUSTERING ORDER BY ... DESC``."""
        return tuple(
            _Reversed(v) if c in self.schema.descending else v
            for c, v in zip(self.schema.clustering, key, strict=True)
        )

    # -- reads ---------------------------------------------------------------------------

    def rows(self, partition: Key | None, now: int) -> Iterator[tuple[Key, Key, Row]]:
        """Live rows of one partition (or all), in clustering order; expired ones go."""
        chosen = (
            list(self.partitions.items())
            if partition is None
            else [(partition, self.partitions.get(partition, {}))]
        )
        for pk, rows in chosen:
            for ck in sorted(rows, key=self.order):
                row = rows[ck]
                if row.live(now):
                    yield pk, ck, row
                elif row.deleted_at < 0:
                    del rows[ck]  # a row expires whole once nothing in it lives
            if not rows:
                self.partitions.pop(pk, None)

    def row(self, pk: Key, ck: Key, now: int) -> Row | None:
        row = self.partitions.get(pk, {}).get(ck)
        return row if row is not None and row.live(now) else None

    def value(self, pk: Key, ck: Key, row: Row, column: str, now: int) -> Any:
        s = self.schema
        if column in s.partition_key:
            return pk[s.partition_key.index(column)]
        if column in s.clustering:
            return ck[s.clustering.index(column)]
        return row.value(column, now)

    def select(
        self, statement: Select, params: Params, clock: Clock
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """``(column names, rows)`` of a ``SELECT``."""
        now = clock.seconds
        keyed = any(r.column in self.schema.partition_key for r in statement.where)
        pk = self.partition_key(statement.where, params, clock) if keyed else None
        filters = [
            (r, self.coerce(r.column, v) if r.op != "in" else {self.coerce(r.column, x) for x in v})
            for r in statement.where
            if r.column not in self.schema.partition_key
            for v in [bound(r.term, params, clock)]
        ]
        matched = [
            (p, c, row)
            for p, c, row in self.rows(pk, now)
            if all(matches(self.value(p, c, row, r.column, now), r.op, want) for r, want in filters)
        ]
        selectors = statement.selectors or tuple(Selector(c) for c in self.schema.wildcard)
        names = [s.name for s in selectors]
        if any(s.aggregate for s in selectors):
            result = [tuple(self.aggregate(s, matched, now) for s in selectors)]
        else:
            result = [
                tuple(self.selected(s, self.value(p, c, row, s.column, now)) for s in selectors)
                for p, c, row in matched
            ]
        if statement.limit is not None:
            limit = bound(statement.limit, params, clock)
            if not isinstance(limit, int) or limit <= 0:
                raise rejected("LIMIT must be strictly positive")
            result = result[:limit]
        return names, result

    def selected(self, selector: Selector, value: Any) -> Any:
        """A column's value as the driver returns it (``datetime`` for a bare timestamp)."""
        if "tounixtimestamp" in selector.functions:
            return value  # stored as ms already
        if value is not None and self.schema.columns.get(selector.column) == "timestamp":
            # the driver's naive UTC datetime, to the millisecond
            return datetime.fromtimestamp(value / 1000, UTC).replace(tzinfo=None)
        return dict(value) if isinstance(value, dict) else value

    def aggregate(self, selector: Selector, matched: list[tuple[Key, Key, Row]], now: int) -> Any:
        """One aggregate over the matched rows (min, max, count; null cells skipped)."""
        if selector.column == "*":
            return len(matched)
        values = [self.value(p, c, row, selector.column, now) for p, c, row in matched]
        present = [v for v in values if v is not None]
        if "count" in selector.functions:
            return len(present)
        folded = min(present, default=None) if "min" in selector.functions else None
        if "max" in selector.functions:
            folded = max(present, default=None)
        return self.selected(selector, folded)

    # -- writes ---------------------------------------------------------------------------

    def insert(self, statement: Insert, params: Params, clock: Clock) -> tuple[Key, Key]:
        """Write a row's marker and cells; a null value removes its cell."""
        values = {
            c: self.coerce(c, bound(t, params, clock))
            for c, t in zip(statement.columns, statement.values, strict=True)
        }
        pk = tuple(values[c] for c in self.schema.partition_key)
        ck = tuple(values[c] for c in self.schema.clustering)
        if any(v is None for v in pk + ck):
            raise rejected(f"Invalid null value in the primary key of {self.schema.name}")
        expiry = self.ttl(statement.ttl, params, clock)
        stamp = self.timestamp(statement.timestamp, params, clock)
        row = self.partitions.setdefault(pk, {}).setdefault(ck, Row())
        if stamp > max(row.deleted_at, self.deleted.get(pk, -1)) and (
            row.marker is None or row.marker.loses_to(True, stamp)
        ):
            row.marker = Cell(True, expiry, stamp)
        self._write(pk, row, values, expiry, stamp)
        return pk, ck

    def update(
        self, statement: Update, pk: Key, cks: list[Key], params: Params, clock: Clock
    ) -> None:
        """Write the ``SET`` cells on each row (no marker: an update of nothing creates cells)."""
        values = {c: self.coerce(c, bound(t, params, clock)) for c, t in statement.assignments}
        expiry = self.ttl(statement.ttl, params, clock)
        stamp = self.timestamp(statement.timestamp, params, clock)
        partition = self.partitions.setdefault(pk, {})
        for ck in cks:
            self._write(pk, partition.setdefault(ck, Row()), values, expiry, stamp)

    def _write(
        self, pk: Key, row: Row, values: Mapping[str, Any], expiry: float, stamp: int
    ) -> None:
        """Write cells at ``stamp``; each loses to a newer cell and to a newer deletion."""
        if stamp <= max(row.deleted_at, self.deleted.get(pk, -1)):
            return
        for column, value in values.items():
            if column in self.schema.primary_key:
                continue
            cell = row.cells.get(column)
            if cell is None or cell.loses_to(value, stamp):
                row.cells[column] = Cell(value, expiry, stamp)

    def delete(self, statement: Delete, pk: Key, params: Params, clock: Clock) -> None:
        """Delete the rows the clustering restrictions name, or the whole partition.

        The deletion is kept (its timestamp) so that an older write arriving
        later stays deleted, as a Cassandra tombstone does.
        """
        stamp = clock.micros
        partition = self.partitions.setdefault(pk, {})
        clustering = [r for r in statement.where if r.column in self.schema.clustering]
        if not clustering:
            self.deleted[pk] = max(stamp, self.deleted.get(pk, -1))
            rows = list(partition.values())
        elif len(clustering) == len(self.schema.clustering) and all(
            r.op in ("=", "in") for r in clustering
        ):
            keys = self.clustering_keys(statement.where, params, clock)
            rows = [partition.setdefault(ck, Row()) for ck in keys]
        else:
            restrictions = [
                (
                    r,
                    {self.coerce(r.column, x) for x in v}
                    if r.op == "in"
                    else self.coerce(r.column, v),
                )
                for r in clustering
                for v in [bound(r.term, params, clock)]
            ]
            index = self.schema.clustering.index
            rows = [
                row
                for ck, row in partition.items()
                if all(matches(ck[index(r.column)], r.op, want) for r, want in restrictions)
            ]
        for row in rows:
            row.deleted_at = max(stamp, row.deleted_at)
            if row.marker is not None and row.marker.timestamp <= stamp:
                row.marker = None
            row.cells = {c: cell for c, cell in row.cells.items() if cell.timestamp > stamp}


def matches(value: Any, op: str, wanted: Any) -> bool:
    """Whether ``value op wanted`` holds; null matches only ``= null``, as in CQL."""
    if op == "=":
        return bool(value == wanted)
    if op == "in":
        return value in wanted
    if value is None or wanted is None:
        return False
    if op == "<":
        return bool(value < wanted)
    if op == "<=":
        return bool(value <= wanted)
    if op == ">":
        return bool(value > wanted)
    return bool(value >= wanted)


@dataclass(frozen=True, slots=True)
class _Reversed:
    """A clustering value sorted backwards (``CLUSTERING ORDER BY (c DESC)``)."""

    value: Any

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.value < self.value)
