"""The CQL subset the memory store understands, parsed into plain statement values.

``MemoryStore`` (``memory.py``) runs exactly the statements spark-queue's store
modules issue, not CQL at large: ``SELECT`` of columns, ``*``, ``toUnixTimestamp``,
``min``, ``max`` and ``count(*)`` with ``WHERE`` relations (``=``, ``<``, ``<=``,
``>``, ``>=``, ``IN``), ``LIMIT`` and ``ALLOW FILTERING``; ``INSERT`` with ``IF
NOT EXISTS`` and ``USING TTL``/``TIMESTAMP``; ``UPDATE`` with the same ``USING``, ``SET col = term``
and ``IF`` conditions or ``IF EXISTS``; ``DELETE FROM`` of rows or partitions with
``IF`` (``CREATE TABLE`` is ``memory_schema.py``'s). A term is a bind marker, a
literal (number, string, ``true``, ``false``, ``null``, a parenthesized list) or
``toTimestamp(now())``. Anything else is refused with an error naming the
statement, never ignored. This module knows only the syntax;
what a statement means against the tables is ``memory_tables.py``'s business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from spark_queue.errors import SparkQueueError

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*|"[^"]+")
    | (?P<symbol><=|>=|!=|[?(),.=<>*;{}:\[\]])
    )""",
    re.VERBOSE,
)
#: The functions a selector may apply, lower-cased as CQL compares them.
FUNCTIONS = ("tounixtimestamp", "min", "max", "count")
AGGREGATES = ("min", "max", "count")
OPERATORS = ("=", "<", "<=", ">", ">=", "in")


@dataclass(frozen=True, slots=True)
class Bind:
    """The ``index``-th bind marker (``?``) of a statement."""

    index: int


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant written in the statement."""

    value: Any


@dataclass(frozen=True, slots=True)
class Now:
    """``toTimestamp(now())``: the time the statement runs."""


Term = Bind | Literal | Now


@dataclass(frozen=True, slots=True)
class Relation:
    """``column op term``, of a ``WHERE`` clause or an ``IF`` condition."""

    column: str
    op: str
    term: Term


@dataclass(frozen=True, slots=True)
class Selector:
    """One selected column, inside ``functions`` (outermost first); column ``*`` is count's."""

    column: str
    functions: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The column name Cassandra gives the result (``system.f(...)`` for a function)."""
        text = self.column
        for function in reversed(self.functions):
            text = f"system.{function}({text})"
        return text

    @property
    def aggregate(self) -> bool:
        return any(f in AGGREGATES for f in self.functions)


@dataclass(frozen=True, slots=True)
class Select:
    """``SELECT selectors FROM table [WHERE ...] [LIMIT n] [ALLOW FILTERING]``."""

    keyspace: str | None
    table: str
    selectors: tuple[Selector, ...] | None  # None: ``*``
    where: tuple[Relation, ...]
    limit: Term | None
    allow_filtering: bool


@dataclass(frozen=True, slots=True)
class Insert:
    """``INSERT INTO table (columns) VALUES (terms) [IF NOT EXISTS] [USING ...]``.

    ``USING`` takes ``TTL t``, ``TIMESTAMP u`` or both joined by ``AND``.
    """

    keyspace: str | None
    table: str
    columns: tuple[str, ...]
    values: tuple[Term, ...]
    if_not_exists: bool
    ttl: Term | None
    timestamp: Term | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """``UPDATE table [USING TTL t AND TIMESTAMP u] SET col = term, ... WHERE ... [IF ...]``."""

    keyspace: str | None
    table: str
    assignments: tuple[tuple[str, Term], ...]
    where: tuple[Relation, ...]
    conditions: tuple[Relation, ...]
    if_exists: bool
    ttl: Term | None
    timestamp: Term | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """``DELETE FROM table WHERE ... [IF ...]``: rows, or a whole partition."""

    keyspace: str | None
    table: str
    where: tuple[Relation, ...]
    conditions: tuple[Relation, ...]
    if_exists: bool


Statement = Select | Insert | Update | Delete


class Refused(SparkQueueError):
    """A statement the memory store will not run; ``memory.py`` says what was being done.

    It leaves the store as a plain ``SparkQueueError``, as Cassandra's invalid
    requests leave ``Store``.
    """


def unsupported(cql: str, reason: str) -> Refused:
    """The error of a statement outside the subset: names the statement and why."""
    return Refused(f"the memory store does not support {' '.join(cql.split())!r}: {reason}")


class Parser:
    """A recursive-descent reader over one statement's tokens."""

    def __init__(self, cql: str) -> None:
        self.cql = cql
        self.tokens: list[tuple[str, str]] = []
        position, text = 0, cql.rstrip().rstrip(";")
        while position < len(text):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise unsupported(cql, f"cannot read it at {text[position : position + 20]!r}")
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.position = 0
        self.binds = 0

    # -- tokens ---------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> str:
        index = self.position + ahead
        return self.tokens[index][1] if index < len(self.tokens) else ""

    def at(self, *words: str) -> bool:
        """Whether the next tokens are ``words`` (keywords compare case-insensitively)."""
        return all(self.peek(i).lower() == w.lower() for i, w in enumerate(words))

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.position += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            found = self.peek() or "the end"
            raise unsupported(self.cql, f"expected {' '.join(words)!r}, found {found!r}")

    def fail(self, what: str) -> Refused:
        return unsupported(self.cql, f"expected {what}, found {self.peek() or 'the end'!r}")

    def name(self) -> str:
        if self.position >= len(self.tokens) or self.tokens[self.position][0] != "name":
            raise self.fail("a name")
        text = self.tokens[self.position][1]
        self.position += 1
        return text[1:-1] if text.startswith('"') else text.lower()

    def done(self) -> None:
        if self.position != len(self.tokens):
            raise unsupported(self.cql, f"unexpected {self.peek()!r}")

    # -- pieces ---------------------------------------------------------------------

    def table(self) -> tuple[str | None, str]:
        first = self.name()
        if self.accept("."):
            return first, self.name()
        return None, first

    def term(self) -> Term:
        if self.accept("?"):
            self.binds += 1
            return Bind(self.binds - 1)
        if self.accept("totimestamp", "(", "now", "(", ")", ")"):
            return Now()
        if self.accept("("):
            values = [self.literal()]
            while self.accept(","):
                values.append(self.literal())
            self.expect(")")
            return Literal(tuple(values))
        return Literal(self.literal())

    def literal(self) -> Any:
        kind, text = self.tokens[self.position] if self.position < len(self.tokens) else ("", "")
        if kind == "number":
            self.position += 1
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "string":
            self.position += 1
            return text[1:-1].replace("''", "'")
        for word, value in (("true", True), ("false", False), ("null", None)):
            if self.accept(word):
                return value
        raise self.fail("a bind marker or a literal")

    def relations(self) -> tuple[Relation, ...]:
        found = [self.relation()]
        while self.accept("and"):
            found.append(self.relation())
        return tuple(found)

    def relation(self) -> Relation:
        column = self.name()
        op = self.peek().lower()
        if op not in OPERATORS:
            raise self.fail("one of = < <= > >= IN")
        self.position += 1
        return Relation(column, op, self.term())

    def using(self) -> tuple[Term | None, Term | None]:
        """``USING TTL t``, ``USING TIMESTAMP u``, or both joined by ``AND``: ``(t, u)``."""
        self.expect("using")
        found: dict[str, Term] = {}
        while True:
            option = self.peek().lower()
            if option not in ("ttl", "timestamp") or option in found:
                raise self.fail("TTL or TIMESTAMP")
            self.position += 1
            found[option] = self.term()
            if not self.accept("and"):
                return found.get("ttl"), found.get("timestamp")

    def conditions(self) -> tuple[tuple[Relation, ...], bool]:
        """``IF EXISTS`` (then True), ``IF cond AND ...``, or nothing."""
        if not self.accept("if"):
            return (), False
        if self.accept("exists"):
            return (), True
        return self.relations(), False

    def selector(self) -> Selector:
        if self.accept("*"):
            return Selector("*")
        name = self.name()
        if not self.accept("("):
            return Selector(name)
        if name not in FUNCTIONS:
            raise unsupported(self.cql, f"function {name!r} (known: {', '.join(FUNCTIONS)})")
        inner = self.selector()
        self.expect(")")
        if inner.column == "*" and name != "count":
            raise self.fail("a column")
        return Selector(inner.column, (name, *inner.functions))

    # -- statements -----------------------------------------------------------------

    def select(self) -> Select:
        selectors: tuple[Selector, ...] | None = None
        if not (self.at("*", "from")):
            found = [self.selector()]
            while self.accept(","):
                found.append(self.selector())
            selectors = tuple(found)
        else:
            self.expect("*")
        self.expect("from")
        keyspace, table = self.table()
        where = self.relations() if self.accept("where") else ()
        limit = self.term() if self.accept("limit") else None
        allow_filtering = self.accept("allow", "filtering")
        return Select(keyspace, table, selectors, where, limit, allow_filtering)

    def insert(self) -> Insert:
        self.expect("into")
        keyspace, table = self.table()
        self.expect("(")
        columns = [self.name()]
        while self.accept(","):
            columns.append(self.name())
        self.expect(")")
        self.expect("values", "(")
        values = [self.term()]
        while self.accept(","):
            values.append(self.term())
        self.expect(")")
        if len(values) != len(columns):
            raise unsupported(self.cql, f"{len(columns)} columns but {len(values)} values")
        # Cassandra takes IF NOT EXISTS before or after USING.
        if_not_exists = self.accept("if", "not", "exists")
        ttl, timestamp = self.using() if self.at("using") else (None, None)
        if_not_exists = self.accept("if", "not", "exists") or if_not_exists
        return Insert(keyspace, table, tuple(columns), tuple(values), if_not_exists, ttl, timestamp)

    def update(self) -> Update:
        keyspace, table = self.table()
        ttl, timestamp = self.using() if self.at("using") else (None, None)
        self.expect("set")
        assignments = [self.assignment()]
        while self.accept(","):
            assignments.append(self.assignment())
        self.expect("where")
        where = self.relations()
        conditions, if_exists = self.conditions()
        return Update(
            keyspace, table, tuple(assignments), where, conditions, if_exists, ttl, timestamp
        )

    def assignment(self) -> tuple[str, Term]:
        column = self.name()
        self.expect("=")
        return column, self.term()

    def delete(self) -> Delete:
        if not self.accept("from"):
            raise unsupported(self.cql, "only whole rows are deleted here (DELETE FROM ...)")
        keyspace, table = self.table()
        self.expect("where")
        where = self.relations()
        conditions, if_exists = self.conditions()
        return Delete(keyspace, table, where, conditions, if_exists)


def parse(cql: str) -> tuple[Statement, int]:
    """A statement of the subset and its number of bind markers.

    Raises:
        SparkQueueError: The statement is outside the subset; the message names it.
    """
    parser = Parser(cql)
    statement: Statement
    if parser.accept("select"):
        statement = parser.select()
    elif parser.accept("insert"):
        statement = parser.insert()
    elif parser.accept("update"):
        statement = parser.update()
    elif parser.accept("delete"):
        statement = parser.delete()
    else:
        raise unsupported(cql, "only SELECT, INSERT, UPDATE and DELETE run as statements")
    parser.done()
    return statement, parser.binds
