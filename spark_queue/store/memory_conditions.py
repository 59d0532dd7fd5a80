"""Writes of the memory store, alone or batched; lightweight transactions answered as Paxos does.

A conditional statement (``IF NOT EXISTS``, ``IF EXISTS``, ``IF col = ? AND
...``) applies only if its conditions hold on the row as it is; a conditional
batch must stay in one partition and applies all its statements or none,
every condition judged on the rows as they were before the batch. The store
runs each under its one lock, so every such change is linearizable, as a
Paxos round makes it, and writes it at the store's own time, as Cassandra
writes it at its ballot's, whatever the writer's clock.

The answer has the driver's shape with the tuple row factory: ``(True,)`` when
applied; otherwise ``[applied]`` is False, followed, for each row concerned
that exists, by its columns: every column (``SELECT *`` order) for ``IF [NOT]
EXISTS``, else the conditions' columns in the order of the ``IF``, and in a
batch the primary key before them (to tell the rows apart). With no such row
the answer is ``(False,)`` alone. These shapes were checked against Cassandra
5.0 (tests/test_store_contract.py asserts them on both stores).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spark_queue.store.memory_cql import (
    Delete,
    Insert,
    Literal,
    Refused,
    Relation,
    Selector,
    Update,
)
from spark_queue.store.memory_tables import Clock, Key, Params, Table, bound, matches

#: ``(column names, rows)``: what a statement or batch answers.
Answer = tuple[list[str], list[tuple[Any, ...]]]
APPLIED = "[applied]"


@dataclass(frozen=True, slots=True)
class Change:
    """One write with its bound values, against its table."""

    table: Table
    statement: Insert | Update | Delete
    params: Params

    @property
    def conditional(self) -> bool:
        s = self.statement
        if isinstance(s, Insert):
            return s.if_not_exists
        return bool(s.conditions) or s.if_exists

    @property
    def exists_check(self) -> bool:
        """``IF NOT EXISTS`` or ``IF EXISTS``: a failure answers with the whole row."""
        s = self.statement
        return s.if_not_exists if isinstance(s, Insert) else s.if_exists

    @property
    def conditions(self) -> tuple[Relation, ...]:
        return () if isinstance(self.statement, Insert) else self.statement.conditions

    def keys(self, clock: Clock) -> tuple[Key, list[Key]]:
        """The partition and the clustering keys of the rows this write names."""
        s, table = self.statement, self.table
        if isinstance(s, Insert):
            values = {
                c: bound(t, self.params, clock) for c, t in zip(s.columns, s.values, strict=True)
            }
            where = [Relation(c, "=", Literal(values[c])) for c in table.schema.primary_key]
            return (
                table.partition_key(where, (), clock),
                table.clustering_keys(where, (), clock),
            )
        pk = table.partition_key(s.where, self.params, clock)
        restricted = {r.column for r in s.where}
        if not set(table.schema.clustering) <= restricted:
            return pk, []  # a partition or range delete: no single row to judge
        return pk, table.clustering_keys(s.where, self.params, clock)

    def holds(self, clock: Clock) -> bool:
        """Whether this write's conditions hold on its row as it is now."""
        pk, cks = self.keys(clock)
        row = self.table.row(pk, cks[0], clock.seconds) if cks else None
        s = self.statement
        if isinstance(s, Insert):
            return row is None
        if s.if_exists:
            return row is not None
        for condition in s.conditions:
            value = bound(condition.term, self.params, clock)
            if condition.op == "in":  # IF column IN (a, b): each one a value of the column
                wanted: Any = tuple(self.table.coerce(condition.column, v) for v in value)
            else:
                wanted = self.table.coerce(condition.column, value)
            current = None if row is None else row.value(condition.column, clock.seconds)
            if not matches(current, condition.op, wanted):
                return False
        return True

    def apply(self, clock: Clock) -> None:
        s = self.statement
        if isinstance(s, Insert):
            self.table.insert(s, self.params, clock)
        elif isinstance(s, Update):
            pk, cks = self.keys(clock)
            self.table.update(s, pk, cks, self.params, clock)
        else:
            pk, _ = self.keys(clock)
            self.table.delete(s, pk, self.params, clock)


def run(changes: Sequence[Change], clock: Clock, *, batch: bool) -> Answer:
    """Apply a write or a batch of writes; conditional ones as one lightweight transaction."""
    if not any(c.conditional for c in changes):
        for change in changes:
            change.apply(clock)
        return [], []
    partitions = {(id(c.table), c.keys(clock)[0]) for c in changes}
    if len(partitions) > 1:
        raise Refused(
            "the memory store rejected the request: Batch with conditions cannot span multiple"
            " partitions"
        )
    # Cassandra writes a lightweight transaction at its Paxos ballot, the server's clock,
    # and refuses USING TIMESTAMP on it: the writer's clock plays no part.
    clock = dataclasses.replace(clock, micros=clock.ballot or clock.micros)
    # Every condition is judged on the rows before any write of the batch.
    if all(c.holds(clock) for c in changes if c.conditional):
        for change in changes:
            change.apply(clock)
        return [APPLIED], [(True,)]
    return _refusal(changes, clock, batch=batch)


def _refusal(changes: Sequence[Change], clock: Clock, *, batch: bool) -> Answer:
    """``[applied]`` False and the current values of the rows the conditions concern."""
    conditional = [c for c in changes if c.conditional]
    table = conditional[0].table
    schema = table.schema
    columns: list[str]
    if any(c.exists_check for c in conditional):
        columns = list(schema.wildcard)
    else:
        columns = list(schema.primary_key) if batch else []
        for change in conditional:
            columns += [r.column for r in change.conditions if r.column not in columns]
    pk = conditional[0].keys(clock)[0]
    concerned = {ck for c in conditional for ck in c.keys(clock)[1]}
    rows = []
    for ck in sorted(concerned, key=table.order):
        row = table.row(pk, ck, clock.seconds)
        if row is not None:
            values = (table.value(pk, ck, row, column, clock.seconds) for column in columns)
            selected = (
                table.selected(Selector(c), v) for c, v in zip(columns, values, strict=True)
            )
            rows.append((False, *selected))
    if not rows:
        return [APPLIED], [(False,)]
    return [APPLIED, *columns], rows
