"""The memory store's schema: ``CREATE TABLE`` read into a table's columns, key and default TTL.

``MemoryStore`` builds its tables from the packaged ``schema.cql``, as
``Store.ensure_schema`` does on Cassandra: columns and their types, the
partition key, the clustering columns and their order, and
``default_time_to_live``. Other table options (``gc_grace_seconds``,
compaction) change nothing in memory and are read past. ``CREATE KEYSPACE``
is accepted for the store's own keyspace; any other schema change is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_queue.store.memory_cql import Parser, unsupported


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table of ``CREATE TABLE``: columns and types in order, its key, its default TTL."""

    keyspace: str | None
    name: str
    columns: dict[str, str]
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...]
    descending: frozenset[str] = field(default_factory=frozenset)
    default_ttl: int = 0
    if_not_exists: bool = False

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self.partition_key + self.clustering

    @property
    def wildcard(self) -> tuple[str, ...]:
        """``SELECT *`` order: partition key, clustering columns, then the rest by name."""
        key = set(self.primary_key)
        return self.primary_key + tuple(sorted(c for c in self.columns if c not in key))


@dataclass(frozen=True, slots=True)
class CreateKeyspace:
    """``CREATE KEYSPACE [IF NOT EXISTS] name WITH ...`` (the options do not matter here)."""

    name: str


class SchemaParser(Parser):
    """The statement parser, taught ``CREATE TABLE``."""

    def create_table(self) -> TableSchema:
        if_not_exists = self.accept("if", "not", "exists")
        keyspace, name = self.table()
        self.expect("(")
        columns: dict[str, str] = {}
        partition: tuple[str, ...] = ()
        clustering: tuple[str, ...] = ()
        while True:
            if self.accept("primary", "key"):
                partition, clustering = self.primary_key()
            else:
                column = self.name()
                columns[column] = self.column_type()
                if self.accept("primary", "key"):
                    partition = (column,)
            if not self.accept(","):
                break
        self.expect(")")
        descending: set[str] = set()
        default_ttl = 0
        if self.accept("with"):
            while True:
                if self.accept("clustering", "order", "by", "("):
                    while True:
                        column = self.name()
                        if self.accept("desc"):
                            descending.add(column)
                        else:
                            self.expect("asc")
                        if not self.accept(","):
                            break
                    self.expect(")")
                else:
                    option = self.name()
                    self.expect("=")
                    value = self.option_value()
                    if option == "default_time_to_live":
                        default_ttl = int(value)
                if not self.accept("and"):
                    break
        if not partition:
            raise unsupported(self.cql, "a table needs a PRIMARY KEY")
        return TableSchema(
            keyspace,
            name,
            columns,
            partition,
            clustering,
            frozenset(descending),
            default_ttl,
            if_not_exists,
        )

    def primary_key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        self.expect("(")
        if self.accept("("):
            partition = [self.name()]
            while self.accept(","):
                partition.append(self.name())
            self.expect(")")
        else:
            partition = [self.name()]
        clustering = []
        while self.accept(","):
            clustering.append(self.name())
        self.expect(")")
        return tuple(partition), tuple(clustering)

    def column_type(self) -> str:
        kind = self.name()
        if self.accept("<"):
            inner = [self.column_type()]
            while self.accept(","):
                inner.append(self.column_type())
            self.expect(">")
            kind = f"{kind}<{', '.join(inner)}>"
        return kind

    def option_value(self) -> Any:
        """An option's value; a ``{...}`` map (compaction, caching) is skipped whole."""
        if self.accept("{"):
            depth = 1
            while depth and self.position < len(self.tokens):
                depth += {"{": 1, "}": -1}.get(self.peek(), 0)
                self.position += 1
            return None
        return self.literal()


def parse_ddl(cql: str) -> TableSchema | CreateKeyspace:
    """A ``CREATE TABLE`` or ``CREATE KEYSPACE`` statement (``Store.execute_ddl``)."""
    parser = SchemaParser(cql)
    if parser.accept("create", "table"):
        schema = parser.create_table()
        parser.done()
        return schema
    if parser.accept("create", "keyspace"):
        parser.accept("if", "not", "exists")
        return CreateKeyspace(parser.name())  # its replication options do not matter here
    raise unsupported(cql, "only CREATE TABLE and CREATE KEYSPACE change this schema")
