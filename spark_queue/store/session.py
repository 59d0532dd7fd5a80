"""The Cassandra boundary: one session per process, prepared statements, error translation.

A ``Store`` wraps a driver ``Cluster``/``Session`` for one keyspace. ``Store.shared``
keeps one per process and settings, created lazily and rebuilt after a fork,
so Spark executors never receive a pickled session: they rebuild theirs from
the settings inside ``read()``/``write()``. Every driver exception that leaves
this module is a ``SparkQueueError`` with the driver's error as its cause.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any, ClassVar

from cassandra import (
    ConsistencyLevel,
    DriverException,
    InvalidRequest,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    NoHostAvailable,
    ResponseFuture,
    ResultSet,
    Session,
)
from cassandra.concurrent import execute_concurrent
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import BatchStatement, BatchType, PreparedStatement, tuple_factory

from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, SparkQueueError

log = logging.getLogger(__name__)

#: Execution profile for serial (LWT-consistent) reads.
SERIAL_READ = "bdq-serial-read"

Params = Sequence[Any]


class Store:
    """A session on one keyspace with the queue schema in place.

    Args:
        settings: Where and how to connect.
        create_schema: Create the keyspace (with ``settings.replication_factor``)
            and the tables when they are missing.
    """

    _shared: ClassVar[dict[tuple[int, ConnectionSettings], Store]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, settings: ConnectionSettings, *, create_schema: bool = True) -> None:
        self.settings = settings
        self.keyspace = settings.keyspace
        self._prepared: dict[str, PreparedStatement] = {}
        self._prepare_lock = threading.Lock()
        self.cluster = _make_cluster(settings)
        with translate_errors(f"connecting to Cassandra at {_hosts(settings)}"):
            self.session: Session = self.cluster.connect()
        if create_schema:
            self.ensure_schema()

    @classmethod
    def shared(cls, settings: ConnectionSettings) -> Store:
        """The process-wide store for ``settings``, created on first use (and after a fork)."""
        key = (os.getpid(), settings)
        with cls._shared_lock:
            store = cls._shared.get(key)
            if store is None or store.cluster.is_shutdown:
                store = cls(settings)
                cls._shared[key] = store
            return store

    def close(self) -> None:
        """Shut the driver's connections down."""
        with self._shared_lock:
            for key, store in list(self._shared.items()):
                if store is self:
                    del self._shared[key]
        self.cluster.shutdown()

    # -- schema ------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the keyspace and tables if any is missing (idempotent, cheap when present)."""
        metadata = self.cluster.metadata.keyspaces.get(self.keyspace)
        wanted = {
            "queues",
            "sequences",
            "pointers",
            "messages",
            "journal",
            "send_log",
            "bucket_counts",
        }
        if metadata is not None and wanted <= set(metadata.tables):
            return
        if metadata is None:
            self.execute_ddl(
                f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace}"
                f" WITH replication = {self.settings.replication()}"
            )
        for statement in schema_statements(self.keyspace):
            self.execute_ddl(statement)

    def execute_ddl(self, cql: str) -> None:
        """Run a schema statement and wait for schema agreement."""
        with translate_errors(f"changing the schema of keyspace {self.keyspace!r}"):
            self.session.execute(cql, timeout=max(60.0, self.settings.request_timeout))

    # -- statements ----------------------------------------------------------------

    def prepare(self, cql: str) -> PreparedStatement:
        """Prepare ``cql`` once per store; ``{ks}`` stands for the keyspace."""
        statement = self._prepared.get(cql)
        if statement is None:
            with self._prepare_lock, translate_errors("preparing a statement"):
                statement = self._prepared.get(cql)
                if statement is None:
                    statement = self.session.prepare(cql.format(ks=self.keyspace))
                    self._prepared[cql] = statement
        return statement

    def execute(
        self, cql: str, params: Params = (), *, serial: bool = False, what: str = "a query"
    ) -> ResultSet:
        """Execute a prepared statement; ``serial`` reads at the serial consistency."""
        profile = SERIAL_READ if serial else EXEC_PROFILE_DEFAULT
        with translate_errors(what):
            return self.session.execute(self.prepare(cql), params, execution_profile=profile)

    def rows(
        self, cql: str, params: Params = (), *, what: str = "a query"
    ) -> list[tuple[Any, ...]]:
        """Execute and return every row as a tuple (all pages)."""
        return list(self.execute(cql, params, what=what))

    def batch(
        self, cql: str, params_list: Iterable[Params], *, logged: bool = False
    ) -> BatchStatement:
        """A batch of one statement applied to several parameter sets."""
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        statement = self.prepare(cql)
        for params in params_list:
            batch.add(statement, params)
        return batch

    def execute_many(
        self, statements: Sequence[tuple[Any, Params]], *, what: str, concurrency: int = 32
    ) -> list[ResultSet]:
        """Run statements concurrently with the driver's helper; fail on the first error.

        Each item is ``(statement, params)``, where the statement is CQL text to
        prepare, a prepared statement or a batch.
        """
        if not statements:
            return []
        if len(statements) == 1:  # no need for the concurrent machinery
            statement, params = statements[0]
            if isinstance(statement, str):
                statement = self.prepare(statement)
            with translate_errors(what):
                return [self.session.execute(statement, tuple(params))]
        resolved = [(self.prepare(s) if isinstance(s, str) else s, tuple(p)) for s, p in statements]
        with translate_errors(what):
            results = execute_concurrent(
                self.session, resolved, concurrency=concurrency, raise_on_first_error=True
            )
        return [result for _, result in results]

    def execute_async(self, statement: Any, params: Params = (), *, what: str) -> ResponseFuture:
        """Start a statement without waiting; the caller adds callbacks to the driver's future.

        Errors raised while starting it are translated; errors delivered to the
        future's errback are the driver's own (translate them with ``translated``).
        """
        if isinstance(statement, str):
            statement = self.prepare(statement)
        with translate_errors(what):
            return self.session.execute_async(statement, tuple(params))


def schema_statements(keyspace: str) -> list[str]:
    """The packaged ``schema.cql``, split into statements, for ``keyspace``."""
    text = resources.files("spark_queue.store").joinpath("schema.cql").read_text()
    lines = [line for line in text.splitlines() if not line.strip().startswith("--")]
    return [s.strip().format(keyspace=keyspace) for s in "\n".join(lines).split(";") if s.strip()]


def _hosts(settings: ConnectionSettings) -> str:
    return ",".join(str(h) for h in settings.hosts)


def _make_cluster(settings: ConnectionSettings) -> Cluster:
    policy = TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc))
    consistency = ConsistencyLevel.name_to_value[settings.consistency]
    serial = ConsistencyLevel.name_to_value[settings.serial_consistency]
    profiles = {
        EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=policy,
            consistency_level=consistency,
            serial_consistency_level=serial,
            request_timeout=settings.request_timeout,
            row_factory=tuple_factory,
        ),
        SERIAL_READ: ExecutionProfile(
            load_balancing_policy=policy,
            consistency_level=serial,
            serial_consistency_level=serial,
            request_timeout=settings.request_timeout,
            row_factory=tuple_factory,
        ),
    }
    ports = {h.port for h in settings.hosts}
    contact_points: list[Any]
    if len(ports) == 1:
        contact_points, port = [h.host for h in settings.hosts], ports.pop()
    else:
        contact_points, port = [(h.host, h.port) for h in settings.hosts], 9042
    auth = (
        PlainTextAuthProvider(settings.username, settings.password)
        if settings.username is not None
        else None
    )
    return Cluster(
        contact_points,
        port=port,
        # Requests over one 4 KiB write (a batch of messages) would otherwise
        # wait ~40 ms for the server's delayed ACK (Nagle's algorithm).
        sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        auth_provider=auth,
        execution_profiles=profiles,
        connect_timeout=settings.connect_timeout,
        control_connection_timeout=settings.connect_timeout,
        protocol_version=5,
    )


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn driver exceptions into SparkQueueErrors that say what was being done."""
    try:
        yield
    except SparkQueueError:
        raise
    except (NoHostAvailable, DriverException) as e:
        raise translated(e, what) from e


def translated(error: BaseException, what: str) -> SparkQueueError:
    """The SparkQueueError for an exception the driver raised or handed to a callback.

    For errors that reach code through the driver's asynchronous callbacks,
    where ``translate_errors`` cannot wrap the call. The result keeps
    ``error`` as its cause; anything that is no driver error is wrapped too,
    so a caller always gets a SparkQueueError.
    """
    result: SparkQueueError
    if isinstance(error, SparkQueueError):
        return error
    if isinstance(error, NoHostAvailable):
        result = BackendUnavailable(
            f"{what}: no Cassandra host answered ({_first_error(error)}); start a local node with"
            " 'bdq cassandra start' or point BDQ_CASSANDRA_HOSTS at your cluster"
        )
    elif isinstance(error, OperationTimedOut | ReadTimeout | WriteTimeout):
        result = BackendUnavailable(f"{what}: Cassandra did not answer in time ({error})")
    elif isinstance(error, Unavailable):
        result = BackendUnavailable(
            f"{what}: not enough live replicas for the consistency level ({error})"
        )
    elif isinstance(error, InvalidRequest):
        result = SparkQueueError(f"{what}: Cassandra rejected the request: {error}")
    elif isinstance(error, DriverException):
        result = BackendUnavailable(f"{what}: {type(error).__name__}: {error}")
    else:
        result = SparkQueueError(f"{what}: {type(error).__name__}: {error}")
    result.__cause__ = error
    return result


def _first_error(error: NoHostAvailable) -> str:
    errors = getattr(error, "errors", None) or {}
    for host, cause in errors.items():
        return f"{host}: {cause}"
    return str(error)
