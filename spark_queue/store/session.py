"""The Cassandra boundary: one session per process, prepared statements, error translation.

A ``Store`` wraps a driver ``Cluster``/``Session`` for one keyspace. ``Store.shared``
keeps one per process and settings, created lazily and rebuilt after a fork,
so Spark executors never receive a pickled session: they rebuild theirs from
the settings inside ``read()``/``write()``. Every driver exception that leaves
this module is a ``SparkQueueError`` with the driver's error as its cause
(``driver_errors``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

from cassandra import (
    ConsistencyLevel,
    DriverException,
    ProtocolVersion,
    UnresolvableContactPoints,
)
from cassandra.auth import AuthProvider, PlainTextAuthProvider
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
from cassandra.policies import AddressTranslator, DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.query import BatchStatement, BatchType, PreparedStatement, tuple_factory
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential,
)

from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, KeyspaceNotFound
from spark_queue.store.binding import RowBinder, add_rows
from spark_queue.store.driver_errors import never_sent, translate_errors
from spark_queue.store.schema import missing_schema

log = logging.getLogger(__name__)

#: The driver's address translator of every cluster this process makes from now
#: on; None keeps the driver's identity. Only ``bdq bench faults`` sets it, to
#: route the driver through its fault-injecting proxies (see
#: :mod:`spark_queue.bench.faultproxy`), so it is no connection setting.
_address_translator: AddressTranslator | None = None


def use_address_translator(translator: AddressTranslator | None) -> None:
    """Route the clusters made from now on in this process through ``translator``."""
    global _address_translator
    _address_translator = translator


class _QuietNegotiation(logging.Filter):
    """Drops the driver's warning on each protocol downgrade while negotiating.

    Negotiating is what spark-queue wants unless the user pins a version (an
    option does), so the driver's advice to pin one is noise on every connect.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Downgrading core protocol version")


logging.getLogger("cassandra.cluster").addFilter(_QuietNegotiation())

#: First pause (seconds) before a request the driver refused unsent is offered
#: again; it doubles up to ``RESEND_MAX_PAUSE``, for up to the request timeout.
RESEND_FIRST_PAUSE = 0.005
RESEND_MAX_PAUSE = 0.2

#: Execution profile for serial (LWT-consistent) reads.
SERIAL_READ = "bdq-serial-read"

Params = Sequence[Any]
T = TypeVar("T")


#: Settings of the node that answers: Cassandra 4.0 and later (a virtual table).
NODE_SETTINGS = "SELECT name, value FROM system_views.settings WHERE name IN ?"


class Store:
    """A session on one keyspace that holds the queue schema.

    Opening a store never changes the cluster: it checks that the keyspace and
    every table and column of ``schema.cql`` are there, and raises
    KeyspaceNotFound (naming the command that creates them) when any is missing.
    Only :mod:`spark_queue.store.keyspace` creates them, when asked to.

    Args:
        settings: Where and how to connect.
        check_schema: Check the keyspace and its tables (only the code that
            creates them opens a store without the check).

    Raises:
        KeyspaceNotFound: The keyspace, a table or a column is missing.
        BackendUnavailable: Cassandra could not be reached.
    """

    _shared: ClassVar[dict[tuple[int, ConnectionSettings], Store]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, settings: ConnectionSettings, *, check_schema: bool = True) -> None:
        self.settings = settings
        self.keyspace = settings.keyspace
        self._prepared: dict[str, PreparedStatement] = {}
        self._binders: dict[str, RowBinder] = {}
        self._prepare_lock = threading.Lock()
        self.cluster = _make_cluster(settings)
        with translate_errors(f"connecting to Cassandra at {_hosts(settings)}"):
            self.session: Session = self.cluster.connect()
            _load_replication(self.cluster, self.keyspace)
        if check_schema:
            try:
                check_schema_of(self.session, settings)
            except KeyspaceNotFound:
                self.cluster.shutdown()
                raise

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

    @classmethod
    def close_shared(cls) -> None:
        """Shut down this process's shared stores (``shared``); the next use opens one again.

        For a process about to exit: a cluster left open there may have the
        driver's scheduler thread submit a task after Python began to shut its
        executors down, which prints ``RuntimeError: cannot schedule new futures
        after shutdown`` (scylladb/python-driver#209).
        """
        with cls._shared_lock:
            mine = [k for k in cls._shared if k[0] == os.getpid()]
            stores = [cls._shared.pop(k) for k in mine]
        for store in stores:
            store.cluster.shutdown()

    def close(self) -> None:
        """Shut the driver's connections down."""
        with self._shared_lock:
            for key, store in list(self._shared.items()):
                if store is self:
                    del self._shared[key]
        self.cluster.shutdown()

    # -- schema ------------------------------------------------------------------

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
        statement = self.prepare(cql)
        with translate_errors(what):
            return self._resent(
                functools.partial(
                    self.session.execute, statement, params, execution_profile=profile
                )
            )

    def rows(
        self, cql: str, params: Params = (), *, what: str = "a query"
    ) -> list[tuple[Any, ...]]:
        """Execute and return every row as a tuple (all pages)."""
        return list(self.execute(cql, params, what=what))

    def node_settings(self, names: Sequence[str]) -> dict[str, str]:
        """The coordinator's values of Cassandra settings (``system_views.settings``) by name.

        Names the node does not know are left out (``store/write_limits.py`` reads them).
        """
        rows = self.rows(NODE_SETTINGS, (list(names),), what="reading the cluster's settings")
        return {name: value for name, value in rows if value is not None}

    def binder(self, cql: str) -> RowBinder:
        """The batch binder of ``cql``'s prepared statement (``binding.py``), one per store."""
        binder = self._binders.get(cql)
        if binder is None:
            binder = RowBinder(self.prepare(cql))
            self._binders[cql] = binder
        return binder

    def batch(
        self, cql: str, params_list: Iterable[Params], *, logged: bool = False
    ) -> BatchStatement:
        """A batch of one statement applied to several parameter sets."""
        return self.batch_of(((cql, params) for params in params_list), logged=logged)

    def batch_of(
        self, rows: Iterable[tuple[str, Params]], *, logged: bool = False
    ) -> BatchStatement:
        """A batch of ``(cql, params)`` rows, in order, each row of its own statement.

        Rows are serialized by the statements' binders (``binding.py``), not
        bound one ``BoundStatement`` at a time: the same bytes, at a fraction
        of the cost.
        """
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        return add_rows(batch, ((self.binder(cql), params) for cql, params in rows))

    def execute_many(
        self, statements: Sequence[tuple[Any, Params]], *, what: str, concurrency: int = 32
    ) -> list[ResultSet]:
        """Run statements concurrently with the driver's helper; raise the first error.

        Each item is ``(statement, params)``, where the statement is CQL text to
        prepare, a prepared statement or a batch. The results are in the
        statements' order. A statement the driver refused before sending it
        (``_resent``) is sent again; the others run once. Every statement is
        started, and the first error (in the statements' order) is raised once
        all have answered: the refused ones must be told from the rest.
        """
        if not statements:
            return []
        resolved = [(self.prepare(s) if isinstance(s, str) else s, tuple(p)) for s, p in statements]
        if len(resolved) == 1:  # no need for the concurrent machinery
            with translate_errors(what):
                return [self._resent(functools.partial(self.session.execute, *resolved[0]))]
        results: list[Any] = [None] * len(resolved)
        pending = list(range(len(resolved)))

        def run_pending() -> None:
            nonlocal pending
            outcomes = execute_concurrent(
                self.session,
                [resolved[i] for i in pending],
                concurrency=concurrency,
                raise_on_first_error=False,
            )
            refused: list[tuple[int, BaseException]] = []
            for i, (ok, result) in zip(pending, outcomes, strict=True):
                if ok:
                    results[i] = result
                elif never_sent(result):
                    refused.append((i, result))
                else:
                    raise result
            if refused:
                pending = [i for i, _ in refused]
                raise refused[0][1]

        with translate_errors(what):
            self._resent(run_pending)
        return results

    def _resent(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, repeated while the driver refuses its requests before sending them.

        The driver refuses a request when its connection's socket buffer is
        full (``ConnectionBusy``: the node reads requests more slowly than they
        are sent) and tries the next host; on one node, that is the end. Such a
        request never reached Cassandra, so it is offered again after a pause,
        for up to the request timeout: a conditional update too. Any other
        error is raised at once. The first attempt is a plain call: the
        retrying machinery costs about 10 us, paid only after a refusal.
        """
        try:
            return attempt()
        except NoHostAvailable as e:
            if not never_sent(e):
                raise
        log.debug("the driver refused a request unsent (busy connection): sending it again")
        time.sleep(RESEND_FIRST_PAUSE)
        retrying = Retrying(
            retry=retry_if_exception(never_sent),
            stop=stop_after_delay(self.settings.request_timeout),
            wait=wait_exponential(multiplier=RESEND_FIRST_PAUSE, max=RESEND_MAX_PAUSE),
            before_sleep=before_sleep_log(log, logging.DEBUG),
            reraise=True,
        )
        return retrying(attempt)

    def execute_async(self, statement: Any, params: Params = (), *, what: str) -> ResponseFuture:
        """Start a statement without waiting; the caller adds callbacks to the driver's future.

        Errors raised while starting it are translated; errors delivered to the
        future's errback are the driver's own (translate them with ``translated``).
        """
        if isinstance(statement, str):
            statement = self.prepare(statement)
        with translate_errors(what):
            return self.session.execute_async(statement, tuple(params))


def _load_replication(cluster: Cluster, keyspace: str) -> None:
    """Load ``keyspace``'s replication into the driver's metadata, for token-aware routing.

    A store's cluster fetches no schema on connect (``schema_metadata_enabled``
    off): on a node of ten keyspaces the whole cluster's schema made a driver's
    connect take 63-119 ms instead of 12-21, and opening a store 29-39 ms instead
    of 15-21, on the path of every Spark query's start and every ``bdq`` command.
    The replica map needs only this keyspace's replication row.
    """
    try:
        cluster.refresh_keyspace_metadata(keyspace.lower())
    except DriverException as e:
        log.warning(
            "keyspace %r: replication not loaded (%s); requests go round robin", keyspace, e
        )


def check_schema_of(session: Session, settings: ConnectionSettings) -> None:
    """Raise KeyspaceNotFound, naming the fix, unless the keyspace holds the whole schema."""
    keyspace = settings.keyspace
    missing = missing_schema(session, keyspace)
    if missing is None:
        raise KeyspaceNotFound(
            f"keyspace {keyspace!r} not found at {_hosts(settings)}: create it with"
            f" `bdq keyspace create {keyspace} --dc DC=N ...` (or `--simple 1` on a single local"
            " node)"
        )
    tables, columns = missing
    if tables:
        raise KeyspaceNotFound(
            f"keyspace {keyspace!r} lacks the queue tables {', '.join(tables)}: create them"
            f" with `bdq keyspace create {keyspace} --exist-ok`"
        )
    if columns:
        raise KeyspaceNotFound(
            f"keyspace {keyspace!r} holds the tables of an older spark-queue (no column"
            f" {', '.join(columns)}): upgrade them with `bdq keyspace create {keyspace} --exist-ok`"
        )


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
    return new_cluster(
        settings,
        contact_points,
        port=port,
        schema_metadata_enabled=False,  # see _load_replication
        # Requests over one 4 KiB write (a batch of messages) would otherwise
        # wait ~40 ms for the server's delayed ACK (Nagle's algorithm).
        sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        execution_profiles=profiles,
    )


def new_cluster(settings: ConnectionSettings, contact_points: list[Any], **options: Any) -> Cluster:
    """A driver ``Cluster`` with the security and protocol settings of ``settings``.

    Every connection spark-queue makes goes through here, so TLS, auth and
    protocol negotiation are the same for the queue, the CLI and the tests.
    """
    if settings.protocol_version is not None:
        options["protocol_version"] = settings.protocol_version
    if _address_translator is not None:
        options.setdefault("address_translator", _address_translator)
    try:
        cluster = Cluster(
            contact_points,
            auth_provider=_auth_provider(settings),
            ssl_context=_ssl_context(settings),
            connect_timeout=settings.connect_timeout,
            control_connection_timeout=settings.connect_timeout,
            **options,
        )
    except UnresolvableContactPoints:
        raise InvalidSetting(
            f"hosts {_hosts(settings)!r}: no contact point resolves to an address; check the"
            " names (--hosts, BDQ_CASSANDRA_HOSTS) or give IP addresses"
        ) from None
    if settings.protocol_version is None:
        # Not pinned, so the driver still negotiates down (4, 3) where v5 is
        # refused; starting at v5, the highest Apache Cassandra speaks, saves the
        # two refused attempts at the DataStax Enterprise versions on every connect.
        cluster.protocol_version = ProtocolVersion.V5
    return cluster


def _auth_provider(settings: ConnectionSettings) -> AuthProvider | None:
    """The plain-text provider for a username, or the driver provider the user named."""
    credentials: dict[str, str] = {}
    if settings.username is not None and settings.password is not None:
        credentials = {"username": settings.username, "password": settings.password}
    if settings.auth_provider is None:
        return PlainTextAuthProvider(**credentials) if credentials else None
    module_name, _, class_name = settings.auth_provider.rpartition(".")
    try:
        provider_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as e:
        raise InvalidSetting(
            f"auth_provider {settings.auth_provider!r}: cannot import it ({type(e).__name__})"
        ) from None
    try:
        provider = provider_class(**credentials)
    except TypeError as e:
        # The message of a TypeError from a constructor names parameters, never values.
        raise InvalidSetting(f"auth_provider {settings.auth_provider!r}: {e}") from None
    if not isinstance(provider, AuthProvider):
        raise InvalidSetting(
            f"auth_provider {settings.auth_provider!r}: not a cassandra.auth.AuthProvider"
        )
    return provider


def _ssl_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    """A TLS client context: the given CAs (else the system's), an optional client certificate."""
    if not settings.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=settings.tls_ca_file)
        if settings.tls_cert_file is not None:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as e:
        raise InvalidSetting(
            f"TLS files (tls_ca_file {settings.tls_ca_file!r}, tls_cert_file"
            f" {settings.tls_cert_file!r}, tls_key_file {settings.tls_key_file!r}):"
            f" not usable PEM ({e})"
        ) from None
    # The driver sends each node's address as the server name when this is on.
    context.check_hostname = settings.tls_check_hostname
    return context
