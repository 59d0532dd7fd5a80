"""Real backends for the tests: a Cassandra cluster and a local SparkSession.

Cassandra comes from, in this order:

1. ``BDQ_CASSANDRA_HOSTS``, when set: your own cluster, used as it is;
2. a testcontainers Cassandra container, when a Docker daemon answers
   (``BDQ_TEST_DOCKER=0`` skips this step);
3. the project's local node (``bdq cassandra start``), started if nothing
   answers on 127.0.0.1:9042. It keeps running after the tests, for the next run;
   ``bdq cassandra stop`` (or ``make stop``) ends it.

When none is available the tests that need Cassandra are skipped locally and
fail under CI (``CI=true``). Each test gets its own keyspace (``keyspace``
fixture) and never touches one it did not create.

A test of the queue's semantics marked ``both_stores`` runs twice: on a
``MemoryStore`` (in milliseconds, in the fast tier) and on Cassandra (marked
``cassandra``). Its ``client`` and ``backend`` fixtures say where; without the
mark, they are Cassandra's.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, HostPort, hosts_from_env, parse_hosts
from spark_queue.errors import LocalNodeError, SparkQueueError
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster
from spark_queue.local.processes import find_java
from spark_queue.store.memory import MemoryStore
from spark_queue.store.session import Store

if TYPE_CHECKING:
    from cassandra.cluster import Session
    from pyspark.sql import SparkSession

CASSANDRA_IMAGE = "cassandra:5.0"
HOW_TO_START = (
    "start the local node with 'bdq cassandra start' (or 'make run'),"
    " or point BDQ_CASSANDRA_HOSTS at a running cluster"
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """Skip the test locally, fail it under CI: a missing backend must not pass CI silently."""
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: a missing backend fails the run)", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def _uncaptured(config: pytest.Config) -> Iterator[None]:
    """Let progress through pytest's output capture (a first node start can take minutes)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        yield
        return
    with capture.global_and_fixture_disabled():
        yield


def _docker_answers() -> bool:
    """True when a Docker daemon answers a ping within a few seconds."""
    if os.environ.get("BDQ_TEST_DOCKER", "").strip() == "0":
        return False
    docker_host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if docker_host.startswith("unix://") and not Path(docker_host[len("unix://") :]).exists():
        return False  # the usual case without Docker: no socket, nothing to ask
    try:
        import docker
    except ImportError:
        return False
    with warnings.catch_warnings():
        # A failed connection leaves the SDK's socket to the garbage collector; collect it
        # here, where its ResourceWarning is expected, not in some later test.
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env(timeout=3)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # refused, no permission, bad DOCKER_HOST: no Docker to use
            return False
        finally:
            gc.collect()


def _answering(settings: ConnectionSettings) -> list[HostPort]:
    return [h for h in settings.hosts if cql.release_version(settings, h)]


def _start_container(config: pytest.Config) -> Any:
    """A started testcontainers Cassandra, or None (with a note) when it cannot start."""
    from testcontainers.community.cassandra import CassandraContainer

    with _uncaptured(config):
        print(f"\n[tests] starting {CASSANDRA_IMAGE} with testcontainers...", file=sys.stderr)
        container = CassandraContainer(CASSANDRA_IMAGE)
        try:
            container.start()
        except Exception as e:  # image pull or start failed: the local node still works
            print(
                f"[tests] the container did not start ({e}); using the local node", file=sys.stderr
            )
            with contextlib.suppress(Exception):
                container.stop()
            return None
    return container


def pytest_configure(config: pytest.Config) -> None:
    # bdq's profiles: no test reads the config file of the user who runs the suite
    os.environ["BDQ_CONFIG"] = os.devnull
    os.environ.pop("BDQ_PROFILE", None)
    config.addinivalue_line(
        "markers", "both_stores: runs on a MemoryStore and on Cassandra (the backend fixture)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the ``both_stores`` tests once per store; the Cassandra run alone is ``cassandra``."""
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_stores"):
        metafunc.parametrize(
            "backend",
            ["memory", pytest.param("cassandra", marks=pytest.mark.cassandra)],
            indirect=True,
        )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by the backends their fixtures use, so ``-m 'not cassandra'`` works."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "cassandra" in names or "local_node_tools" in names:
            item.add_marker(pytest.mark.cassandra)
        if "backend" in names and _store_of(item) != "memory":
            item.add_marker(pytest.mark.cassandra)  # it asks for the keyspace when it runs
        if "spark" in names:
            item.add_marker(pytest.mark.spark)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Shut down the process-wide stores the Spark source's calls opened in this process.

    Left open until Python exits, the driver's scheduler may print ``RuntimeError:
    cannot schedule new futures after shutdown`` after the last test (``Store.close_shared``).
    """
    Store.close_shared()


def _store_of(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return str(callspec.params.get("backend", "cassandra")) if callspec else "cassandra"


@pytest.fixture(scope="session")
def cassandra(pytestconfig: pytest.Config) -> Iterator[ConnectionSettings]:
    """Connection settings of a reachable Cassandra cluster (see the module docstring)."""
    if hosts_from_env():
        settings = ConnectionSettings.from_env()
        if not _answering(settings):
            unavailable(
                f"BDQ_CASSANDRA_HOSTS={os.environ['BDQ_CASSANDRA_HOSTS']}: no host answers CQL;"
                " start that cluster, or unset BDQ_CASSANDRA_HOSTS to use the local node"
            )
        yield settings
        return

    if _docker_answers():
        container = _start_container(pytestconfig)
        if container is not None:
            try:
                host, port = container.get_contact_points()[0]
                yield ConnectionSettings(
                    hosts=parse_hosts([f"{host}:{port}"]),
                    local_dc=container.get_local_datacenter(),
                )
            finally:
                container.stop()
            return

    cluster = LocalCluster()
    known = cluster.known_nodes()  # a node started earlier keeps the ports it was started with
    node = known[0] if known else cluster.node(1)
    settings = ConnectionSettings(hosts=parse_hosts([f"{node.address}:{node.native_port}"]))
    if not _answering(settings):
        with _uncaptured(pytestconfig):
            print(f"\n[tests] no Cassandra at {node.address}:{node.native_port};", file=sys.stderr)
            try:
                cluster.start(echo=lambda line: print(f"[tests] {line}", file=sys.stderr))
            except LocalNodeError as e:
                unavailable(f"the local Cassandra node did not start: {e}\n{HOW_TO_START}")
    yield settings


@pytest.fixture(scope="session")
def _cql_session(cassandra: ConnectionSettings) -> Iterator[Session]:
    """One driver session for creating and dropping test keyspaces."""
    try:
        with cql.connect(cassandra) as session:
            yield session
    except SparkQueueError as e:
        unavailable(f"{e}\n{HOW_TO_START}")


@pytest.fixture
def fresh_keyspace(
    cassandra: ConnectionSettings, _cql_session: Session
) -> Iterator[ConnectionSettings]:
    """Settings pointing at a fresh keyspace ``t_<8 hex>`` (replication factor 1), dropped after.

    The keyspace and its queue tables are created here, on purpose, as a user
    does with ``bdq keyspace create``: clients never create them. For a test
    that alters the keyspace's schema or drops it; most take ``keyspace``.
    """
    with _made_keyspace(cassandra, _cql_session) as settings:
        yield settings


@pytest.fixture(scope="module")
def _module_keyspace(
    cassandra: ConnectionSettings, _cql_session: Session
) -> Iterator[ConnectionSettings]:
    with _made_keyspace(cassandra, _cql_session) as settings:
        yield settings


@contextlib.contextmanager
def _made_keyspace(cassandra: ConnectionSettings, session: Session) -> Iterator[ConnectionSettings]:
    """A keyspace ``t_<8 hex>`` and its queue tables, made on entry and dropped on exit."""
    settings = cassandra.with_keyspace(f"t_{uuid.uuid4().hex[:8]}")
    cql.ensure_keyspace(settings, session=session)
    try:
        yield settings
    finally:
        cql.drop_keyspace(settings, session=session)


@pytest.fixture
def shared_keyspace(_module_keyspace: ConnectionSettings) -> Iterator[ConnectionSettings]:
    """One keyspace for a module's tests, emptied of queues after each test.

    Every table but the catalog is keyed by a queue's incarnation id, so a queue
    deleted and created again under the same name starts empty, as it does for
    a user. Creating a keyspace and its tables costs the node 1-3 s of CPU, and
    the suite asks for a keyspace about 270 times.
    """
    from spark_queue.client import QueueClient

    yield _module_keyspace
    with QueueClient(settings=_module_keyspace) as client:
        for name in client.list_queues():
            client.delete_queue(name, missing_ok=True)


@pytest.fixture
def keyspace(request: pytest.FixtureRequest, cassandra: ConnectionSettings) -> ConnectionSettings:
    """A test's keyspace: ``shared_keyspace``, or for a connector test ``fresh_keyspace``.

    A test of the Spark connector gets a fresh one: the connector keeps queue
    handles by connection settings and name for ``worker_handles.QUEUE_REFRESH``
    seconds (in Spark's Python workers and in the test's own process), so a
    queue the next test creates again under the same name in the same keyspace
    could be reached through the last test's handle. (Asking for ``cassandra``
    marks the test as one that needs the node.)
    """
    if _uses_the_connector(request.node):
        return request.getfixturevalue("fresh_keyspace")
    return request.getfixturevalue("shared_keyspace")


def _uses_the_connector(item: pytest.Item) -> bool:
    """A Spark test, or one whose module imports from ``spark_queue.spark``."""
    if item.get_closest_marker("spark") is not None:
        return True
    module = getattr(item, "module", None)
    return module is not None and any(
        str(getattr(value, "__module__", None) or getattr(value, "__name__", "")).startswith(
            "spark_queue.spark"
        )
        for value in vars(module).values()
    )


class Backend:
    """Where a test's queues live: a Cassandra keyspace, or one ``MemoryStore`` for the test.

    ``client()`` opens another client on the same data, as another process
    would: its own handles, lanes and leases (close it, or use it as a context).
    """

    def __init__(self, name: str, settings: ConnectionSettings, store: MemoryStore | None) -> None:
        self.name = name
        self.settings = settings
        self.store = store

    def client(self) -> QueueClient:
        if self.store is not None:
            return QueueClient(store=self.store)
        return QueueClient(settings=self.settings)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """Cassandra (the test's ``keyspace``), or a fresh ``MemoryStore`` under ``both_stores``."""
    if getattr(request, "param", "cassandra") == "memory":
        store = MemoryStore()
        return Backend("memory", store.settings, store)
    # Asked for here, not as a parameter: the memory run never touches Cassandra.
    return Backend("cassandra", request.getfixturevalue("keyspace"), None)


@pytest.fixture
def client(backend: Backend) -> Iterator[QueueClient]:
    """A client of the test's backend, closed after the test."""
    with backend.client() as c:
        yield c


@pytest.fixture(scope="session")
def local_node_tools() -> None:
    """Java 17 and Maven, which tests that start their own local nodes need."""
    try:
        find_java()
    except LocalNodeError as e:
        unavailable(str(e))
    if shutil.which("mvn") is None:
        unavailable("Maven ('mvn') is not on PATH: the local node fetches cassandra-all with it")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local SparkSession (2 cores, UI off, 2 shuffle partitions); workers run this Python."""
    from pyspark.sql import SparkSession

    with pytest.MonkeyPatch.context() as env:
        # Workers must import spark_queue: run them on the interpreter that has it.
        env.setenv("PYSPARK_PYTHON", sys.executable)
        env.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        session = (
            SparkSession.builder.master("local[2]")
            .appName("spark-queue-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            # Python workers (a stream's source runner) get 15 s to connect back by
            # default, too little on a loaded 2-core machine.
            .config("spark.python.authenticate.socketTimeout", "120s")
            .getOrCreate()
        )
        try:
            yield session
        finally:
            session.stop()


@pytest.fixture(scope="session")
def classpath_cache(tmp_path_factory: pytest.TempPathFactory, local_node_tools: None) -> Path:
    """A home whose ``lib/`` holds the resolved node classpath, to seed test homes from."""
    home = tmp_path_factory.mktemp("bdq-lib")
    LocalCluster(home).classpath()
    return home / "lib"


@pytest.fixture
def node_home(tmp_path: Path, classpath_cache: Path) -> Path:
    """An empty home for a test's own local nodes, with the classpath already resolved."""
    home = tmp_path / "bdq"
    shutil.copytree(classpath_cache, home / "lib")
    return home


def pytest_report_header(config: pytest.Config) -> str:
    """Say where Cassandra will come from, before anything runs."""
    hosts = os.environ.get("BDQ_CASSANDRA_HOSTS")
    source = (
        f"BDQ_CASSANDRA_HOSTS={hosts}" if hosts else "Docker if it answers, else the local node"
    )
    return f"spark-queue: Cassandra from {source}; CI={'yes' if _in_ci() else 'no'}"
