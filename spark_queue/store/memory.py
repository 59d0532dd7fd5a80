"""``MemoryStore``: the queue's tables in this process's memory, behind the ``Store`` interface.

For tests, yours and ours, in milliseconds and without a Cassandra node, in
the spirit of dramatiq's ``StubBroker`` and httpx's ``MockTransport``::

    from spark_queue import QueueClient
    from spark_queue.store.memory import MemoryStore

    with QueueClient(store=MemoryStore()) as client:
        queue = client.create_queue("orders")
        queue.send(b"order 1")
        (delivery,) = queue.receive(1)
        queue.ack(delivery.receipt)

Several clients on one ``MemoryStore`` behave as processes sharing one
keyspace: their handles, lanes and leases are their own, the rows are shared.
Each ``MemoryStore`` is a keyspace of its own, built from ``schema.cql``.

It runs the very CQL the store modules issue (``memory_cql.py`` lists the
subset), on tables whose cells expire by TTL on the wall clock
(``memory_tables.py``), with lightweight transactions and batches answered as
Cassandra answers them (``memory_conditions.py``); a statement outside the
subset raises ``SparkQueueError`` naming it. tests/test_store_contract.py runs
the same assertions against this store and against Cassandra. What only
Cassandra shows is not here: what tombstones cost to read, Paxos under contention across
replicas, consistency levels, node faults, tracing (``Buckets.traced_scans``). A
mutation of a partition over ``max_mutation_bytes`` (Cassandra's default, 16 MiB, unless
given) is refused as Cassandra refuses it, and ``node_settings`` reports that limit.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from spark_queue.config import DEFAULT_KEYSPACE, ConnectionSettings
from spark_queue.errors import BackendUnavailable, SparkQueueError
from spark_queue.store.memory_conditions import APPLIED, Change, run
from spark_queue.store.memory_cql import Refused, Select, Statement, parse
from spark_queue.store.memory_schema import CreateKeyspace, parse_ddl
from spark_queue.store.memory_tables import Clock, Table
from spark_queue.store.schema import schema_statements
from spark_queue.store.session import Params, Store
from spark_queue.store.write_limits import DEFAULT_LIMIT

__all__ = ["MemoryBatch", "MemoryFuture", "MemoryResult", "MemoryStatement", "MemoryStore"]


class MemoryResult:
    """What a statement answered: its rows as tuples (the driver's ``tuple_factory``).

    The subset of the driver's ``ResultSet`` the store modules use: iteration,
    ``one()``, ``all()``, ``current_rows``, ``column_names`` and ``was_applied``.
    """

    def __init__(self, column_names: Sequence[str] = (), rows: Sequence[tuple[Any, ...]] = ()):
        self.column_names = list(column_names)
        self.current_rows = list(rows)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.current_rows)

    def __repr__(self) -> str:
        return f"MemoryResult({self.column_names!r}, {self.current_rows!r})"

    def one(self) -> tuple[Any, ...] | None:
        """The first row, or None when there is none."""
        return self.current_rows[0] if self.current_rows else None

    def all(self) -> list[tuple[Any, ...]]:
        return list(self.current_rows)

    @property
    def was_applied(self) -> bool:
        """Whether a lightweight transaction applied (as the driver's ``was_applied``)."""
        if not self.column_names or self.column_names[0] != APPLIED:
            raise RuntimeError("was_applied: not the result of a conditional statement")
        return bool(self.current_rows[0][0])

    def get_query_trace(self, *_: Any, **__: Any) -> NoReturn:
        raise SparkQueueError("the memory store keeps no query traces (tracing needs Cassandra)")


class MemoryFuture:
    """A statement started with ``execute_async``, already finished when handed out.

    The driver's ``ResponseFuture`` calls a callback added after the answer
    came at once, on the adding thread; so does this one, so the producer's
    callbacks (which take its lock, never held while it issues writes) run as
    they do against a fast node.
    """

    def __init__(self, result: MemoryResult | None, error: BaseException | None) -> None:
        self._result = result
        self._error = error

    def result(self, timeout: float | None = None) -> MemoryResult:
        """The answer, or the statement's error raised."""
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if self._error is None:
            assert self._result is not None
            fn(self._result.current_rows, *args, **kwargs)

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if self._error is not None:
            fn(self._error, *args, **kwargs)

    def add_callbacks(
        self,
        callback: Callable[..., Any],
        errback: Callable[..., Any],
        callback_args: Sequence[Any] = (),
        callback_kwargs: dict[str, Any] | None = None,
        errback_args: Sequence[Any] = (),
        errback_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.add_callback(callback, *callback_args, **(callback_kwargs or {}))
        self.add_errback(errback, *errback_args, **(errback_kwargs or {}))


@dataclass(frozen=True, slots=True)
class MemoryStatement:
    """A statement prepared by ``MemoryStore.prepare``: parsed and checked once."""

    cql: str
    statement: Statement
    binds: int
    table: Table


class MemoryBatch:
    """A batch of prepared statements (the driver's ``BatchStatement``, for this store).

    Logged or not, it applies under the store's lock as one change; with
    conditions it follows Cassandra's rules (one partition, all or nothing).
    """

    def __init__(self, *, logged: bool = False) -> None:
        self.logged = logged
        self.entries: list[tuple[MemoryStatement, Params]] = []

    def add(self, statement: MemoryStatement, parameters: Params = ()) -> None:
        if not isinstance(statement, MemoryStatement):
            raise SparkQueueError(
                f"a batch of the memory store takes MemoryStore.prepare()'s statements,"
                f" not {type(statement).__name__}"
            )
        self.entries.append((statement, tuple(parameters)))


class _NoDriver:
    """Stands in for the driver's cluster and session, which a memory store has none of."""

    def __getattr__(self, name: str) -> NoReturn:
        raise SparkQueueError(
            f"the memory store has no Cassandra driver session (asked for {name!r}): tracing,"
            " raw driver calls and benchmarks need a real Store"
        )


class MemoryStore(Store):
    """The keyspace's tables in memory, for tests: ``QueueClient(store=MemoryStore())``.

    Thread-safe: one lock orders every statement, so each is atomic and every
    conditional one linearizable. Nothing survives the process.

    Args:
        keyspace: The keyspace name the statements address (``{ks}``).
        settings: Connection settings to report as ``store.settings`` (their
            keyspace wins over ``keyspace``); nothing connects anywhere.
        max_mutation_bytes: The largest write of one partition accepted (the
            values it binds), as Cassandra's ``max_mutation_size``.
    """

    def __init__(
        self,
        keyspace: str = DEFAULT_KEYSPACE,
        *,
        settings: ConnectionSettings | None = None,
        max_mutation_bytes: int = DEFAULT_LIMIT,
    ) -> None:
        # Store.__init__ connects to Cassandra: everything it sets is set here instead.
        self.max_mutation_bytes = max_mutation_bytes
        self.settings = settings or ConnectionSettings(keyspace=keyspace)
        self.keyspace = self.settings.keyspace
        self.cluster = self.session = _NoDriver()
        self._lock = threading.RLock()
        self._statements: dict[str, MemoryStatement] = {}
        self._tables: dict[str, Table] = {}
        self._closed = False
        self._micros = 0  # the last write timestamp handed out
        self._offset_micros = 0
        self.ensure_schema()

    def __repr__(self) -> str:
        return f"MemoryStore(keyspace={self.keyspace!r}, tables={sorted(self._tables)})"

    def close(self) -> None:
        """Refuse statements from now on, as a shut-down driver does."""
        self._closed = True

    def with_clock_offset(self, seconds: float) -> MemoryStore:
        """This keyspace, seen from a host whose clock is ``seconds`` ahead (behind if < 0).

        Statements through the returned store write with timestamps shifted by
        ``seconds``, as a driver's timestamp generator on that host would;
        TTLs, ``toTimestamp(now())`` and the timestamps of lightweight
        transactions (Paxos ballots) stay the server's. For tests of what
        clock skew between writers does.
        """
        skewed = copy.copy(self)
        skewed._offset_micros = self._offset_micros + int(seconds * 1_000_000)
        return skewed

    # -- schema ----------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the tables of ``schema.cql`` that are missing (idempotent)."""
        for statement in schema_statements(self.keyspace):
            self.execute_ddl(statement)

    def execute_ddl(self, cql: str) -> None:
        """Run ``CREATE TABLE`` or ``CREATE KEYSPACE`` (of this store's keyspace)."""
        with self._answering(f"changing the schema of keyspace {self.keyspace!r}"):
            ddl = parse_ddl(cql)
            if isinstance(ddl, CreateKeyspace):
                self._own_keyspace(ddl.name, cql)
                return
            self._own_keyspace(ddl.keyspace, cql)
            with self._lock:
                if ddl.name in self._tables:
                    if not ddl.if_not_exists:
                        raise Refused(f"Table {self.keyspace}.{ddl.name} already exists")
                    return
                self._tables[ddl.name] = Table(ddl)

    def _own_keyspace(self, keyspace: str | None, cql: str) -> None:
        if keyspace is not None and keyspace != self.keyspace:
            raise Refused(
                f"{' '.join(cql.split())!r} addresses keyspace {keyspace!r}; this memory store"
                f" holds keyspace {self.keyspace!r} (make another MemoryStore for another)"
            )

    # -- statements ------------------------------------------------------------------

    def prepare(self, cql: str) -> MemoryStatement:
        """Parse and check ``cql`` once per store; ``{ks}`` stands for the keyspace."""
        statement = self._statements.get(cql)
        if statement is None:
            with self._lock, self._answering("preparing a statement"):
                text = cql.format(ks=self.keyspace)
                parsed, binds = parse(text)
                self._own_keyspace(parsed.keyspace, text)
                table = self._tables.get(parsed.table)
                if table is None:
                    raise Refused(f"unconfigured table {parsed.table} in {text!r}")
                table.check(parsed)
                statement = MemoryStatement(text, parsed, binds, table)
                self._statements[cql] = statement
        return statement

    def execute(
        self, cql: str, params: Params = (), *, serial: bool = False, what: str = "a query"
    ) -> MemoryResult:
        """Run one statement; ``serial`` changes nothing here (every read is linearizable)."""
        return self._run(cql, params, what)

    def batch(
        self, cql: str, params_list: Iterable[Params], *, logged: bool = False
    ) -> MemoryBatch:
        """A batch of one statement applied to several parameter sets."""
        return self.batch_of(((cql, params) for params in params_list), logged=logged)

    def batch_of(self, rows: Iterable[tuple[str, Params]], *, logged: bool = False) -> MemoryBatch:
        """A batch of ``(cql, params)`` rows, in order, each row of its own statement."""
        batch = MemoryBatch(logged=logged)
        for cql, params in rows:
            batch.add(self.prepare(cql), params)
        return batch

    def node_settings(self, names: Sequence[str]) -> dict[str, str]:
        """The one limit this store keeps, shown as a node would (``Store.node_settings``)."""
        shown = {"max_mutation_size": f"{self.max_mutation_bytes}B"}
        return {name: value for name, value in shown.items() if name in names}

    def execute_many(
        self, statements: Sequence[tuple[Any, Params]], *, what: str, concurrency: int = 32
    ) -> list[MemoryResult]:
        """Run statements one after the other; the first error is raised, as the driver's is."""
        return [self._run(statement, params, what) for statement, params in statements]

    def execute_async(self, statement: Any, params: Params = (), *, what: str) -> MemoryFuture:
        """Run a statement now; its answer or error waits in the future for the callbacks.

        Errors of preparing it are raised here, as ``Store`` raises them.
        """
        if isinstance(statement, str):
            statement = self.prepare(statement)
        try:
            return MemoryFuture(self._run(statement, params, what), None)
        except SparkQueueError as e:
            return MemoryFuture(None, e)

    def _run(self, statement: Any, params: Params, what: str) -> MemoryResult:
        if self._closed:
            raise BackendUnavailable(f"{what}: this memory store was closed")
        if isinstance(statement, str):
            statement = self.prepare(statement)
        with self._lock, self._answering(what):
            now = time.time()
            # Unique and increasing, as the driver's timestamp generator makes them.
            self._micros = max(self._micros + 1, int(now * 1_000_000))
            clock = Clock(
                int(now * 1000), int(now), self._micros + self._offset_micros, self._micros
            )
            if isinstance(statement, MemoryBatch):
                if params:
                    raise Refused("a batch takes its values from its statements, not params")
                changes = [self._change(s, p) for s, p in statement.entries]
                self._check_size(changes, clock)
                return MemoryResult(*run(changes, clock, batch=True))
            if not isinstance(statement, MemoryStatement):
                raise Refused(
                    f"cannot execute a {type(statement).__name__}: the memory store runs CQL"
                    " text, its prepare()'s statements and its batch()'s batches"
                )
            if isinstance(statement.statement, Select):
                self._check_binds(statement, params)
                return MemoryResult(*statement.table.select(statement.statement, params, clock))
            change = self._change(statement, params)
            self._check_size([change], clock)
            return MemoryResult(*run([change], clock, batch=False))

    def _change(self, statement: MemoryStatement, params: Params) -> Change:
        if isinstance(statement.statement, Select):
            raise Refused(f"a batch holds writes only, not {statement.cql!r}")
        self._check_binds(statement, params)
        return Change(statement.table, statement.statement, tuple(params))

    def _check_size(self, changes: Sequence[Change], clock: Clock) -> None:
        """Refuse a write of a partition over ``max_mutation_bytes``, as Cassandra does."""
        sizes = [sum(_value_bytes(v) for v in c.params) for c in changes]
        if sum(sizes) <= self.max_mutation_bytes:
            return  # no partition can be over (the common case: no keys computed)
        by_partition: dict[tuple[int, Any], int] = {}
        for change, size in zip(changes, sizes, strict=True):
            key = (id(change.table), change.keys(clock)[0])
            by_partition[key] = by_partition.get(key, 0) + size
        largest = max(by_partition.values())
        if largest > self.max_mutation_bytes:
            raise Refused(
                f"Rejected an oversized mutation ({largest}/{self.max_mutation_bytes}) for"
                f" keyspace: {self.keyspace}"
            )

    @staticmethod
    def _check_binds(statement: MemoryStatement, params: Params) -> None:
        if len(params) != statement.binds:
            raise Refused(
                f"{len(params)} values bound to the {statement.binds} markers of {statement.cql!r}"
            )

    @contextlib.contextmanager
    def _answering(self, what: str) -> Iterator[None]:
        """Say what was being done, as ``translate_errors`` does for the driver's errors."""
        try:
            yield
        except Refused as e:
            raise SparkQueueError(f"{what}: {e}") from e


def _value_bytes(value: object) -> int:
    """About what a bound value weighs in a mutation: its bytes, its text, 8 for the rest."""
    if isinstance(value, bytes | bytearray | memoryview | str):
        return len(value)
    if isinstance(value, dict):
        return sum(_value_bytes(k) + _value_bytes(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return sum(_value_bytes(v) for v in value)
    return 8
