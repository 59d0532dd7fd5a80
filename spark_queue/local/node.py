"""A real Apache Cassandra node (or a small cluster) on loopback, for development and tests.

The node runs from the official ``org.apache.cassandra:cassandra-all`` artifacts:
Maven resolves them from Maven Central into its cache (``~/.m2``), and the
launcher starts ``CassandraDaemon`` on Java 17 with the flags Cassandra's own
``bin/cassandra`` and ``conf/jvm17-server.options`` would pass: the JPMS
exports/opens, the jamm agent, a logback configuration, a local JMX port and a
storage directory. Each node keeps its configuration, data and logs in
``<home>/node<i>/``; node ``i`` listens on the ``i``-th loopback address
(127.0.0.1, 127.0.0.2, ...) with the same ports, the first node is the seed.

This module runs the nodes' life cycle (start, stop, status); their folders,
``cassandra.yaml`` and JVM flags come from ``node_conf``. Nothing here is used
when ``BDQ_CASSANDRA_HOSTS`` points at a cluster.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from spark_queue.errors import LocalNodeError
from spark_queue.local.node_conf import (
    AUTH_SETTINGS,
    DEFAULT_SUPERUSER,
    NodeSpec,
    default_conf_dir,
    default_home,
    jvm_command,
    write_config,
)
from spark_queue.local.processes import (
    CHILDREN,
    NODE_TIMER_SLACK_US,
    check_ports_free,
    find_java,
    live_pid,
    port_open,
    probe_cql,
    timer_slack,
    wait_exit,
)
from spark_queue.local.tls import TlsFiles

log = logging.getLogger(__name__)

CASSANDRA_VERSION = "5.0.9"
DEFAULT_HEAP = "1G"
START_TIMEOUT = 240.0
STOP_TIMEOUT = 90.0
#: Largest timer slack a node may be given (10 ms): past it, timed waits would stretch.
MAX_TIMER_SLACK_US = 10_000
LOG_TAIL_LINES = 40
#: Most nodes of a local cluster, each on the next loopback address from node 1's.
MAX_NODES = 9


@dataclass(frozen=True)
class NodeStatus:
    """What ``status`` reports about one node."""

    index: int
    address: str
    native_port: int
    running: bool
    pid: int | None
    version: str | None

    @property
    def ready(self) -> bool:
        """True when the node answers CQL."""
        return self.version is not None

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.native_port}"


class LocalCluster:
    """One or more Cassandra nodes on loopback addresses, managed from a home folder.

    Args:
        home: Folder for node data, logs and the resolved classpath.
        address: Address of the first node; node ``i`` gets this address plus ``i - 1``.
        native_port: CQL port of every node.
        storage_port: Inter-node port of every node.
        jmx_port: Local JMX port of the first node; node ``i`` uses ``jmx_port + i - 1``
            (JMX binds the shared 127.0.0.1, so the ports must differ).
        version: ``cassandra-all`` version to run.
        heap: JVM heap size (``-Xms``/``-Xmx``).
        timer_slack_us: Timer slack of the nodes' threads (Linux; 0: the system's
            default), see ``processes.NODE_TIMER_SLACK_US``.
        conf_dir: Folder holding ``cassandra.yaml``, ``logback.xml`` and ``pom.xml`` templates.
    """

    def __init__(
        self,
        home: Path | None = None,
        *,
        address: str = "127.0.0.1",
        native_port: int = 9042,
        storage_port: int = 7000,
        jmx_port: int = 7199,
        version: str = CASSANDRA_VERSION,
        heap: str = DEFAULT_HEAP,
        timer_slack_us: int = NODE_TIMER_SLACK_US,
        conf_dir: Path | None = None,
    ) -> None:
        try:
            first = ipaddress.IPv4Address(address)
        except ValueError as e:
            raise LocalNodeError(f"address {address!r}: must be an IPv4 address") from e
        if not first.is_loopback:
            raise LocalNodeError(
                f"address {address!r}: local nodes listen on loopback only (127.0.0.0/8)"
            )
        for name, port in (("native", native_port), ("storage", storage_port), ("jmx", jmx_port)):
            if not 0 < port < 65536:
                raise LocalNodeError(f"{name} port {port}: must be between 1 and 65535")
        if not re.fullmatch(r"\d+[MG]", heap):
            raise LocalNodeError(f"heap {heap!r}: must be a size such as '1G' or '768M'")
        if not 0 <= timer_slack_us <= MAX_TIMER_SLACK_US:
            raise LocalNodeError(
                f"timer slack {timer_slack_us} us: must be 0 (the system's default)"
                f" to {MAX_TIMER_SLACK_US} us"
            )
        self.home = (home or default_home()).resolve()
        self._first = first
        self.native_port = native_port
        self.storage_port = storage_port
        self.jmx_port = jmx_port
        self.version = version
        self.heap = heap
        self.timer_slack_us = timer_slack_us
        self._conf_dir = conf_dir

    # -- layout ------------------------------------------------------------

    @property
    def conf_dir(self) -> Path:
        return self._conf_dir or default_conf_dir()

    def node(self, index: int) -> NodeSpec:
        """The spec of node ``index`` (1-based)."""
        return NodeSpec(
            index=index,
            address=str(self._first + index - 1),
            native_port=self.native_port,
            storage_port=self.storage_port,
            jmx_port=self.jmx_port + index - 1,
            folder=self.home / f"node{index}",
        )

    def known_nodes(self) -> list[NodeSpec]:
        """Nodes that have a folder under home, in index order."""
        if not self.home.is_dir():
            return []
        indexes = sorted(
            int(m[1]) for p in self.home.iterdir() if (m := re.fullmatch(r"node(\d+)", p.name))
        )
        return [self._recorded(i) for i in indexes]

    def nodes_to_start(self, nodes: int | None = None) -> int:
        """How many nodes a start brings up: ``nodes``, or by default all this home holds (or 1).

        Node 1 alone of a cluster of N would leave keyspaces replicated on the others
        without a quorum (``Cannot achieve consistency level LOCAL_SERIAL``).

        Raises:
            LocalNodeError: ``nodes`` is out of range, or fewer than the home holds.
        """
        recorded = max((spec.index for spec in self.known_nodes()), default=0)
        if nodes is None:
            return max(recorded, 1)
        if not 1 <= nodes <= MAX_NODES:
            raise LocalNodeError(f"nodes {nodes}: must be between 1 and {MAX_NODES}")
        if nodes < recorded:
            raise LocalNodeError(
                f"nodes {nodes}: must be at least the {recorded} nodes of the local cluster"
                f" under {self.home}, or its keyspaces lose their quorum; start them all"
                f" with 'bdq cassandra start' (no --nodes), or for a smaller cluster run"
                f" 'bdq cassandra stop' and delete {self.home} (its data goes with it)"
            )
        return nodes

    def has_roles(self) -> bool:
        """Whether node 1 was last started with ``auth=True`` (it asks for a password)."""
        return self._recorded(1).auth

    def _recorded(self, index: int) -> NodeSpec:
        """The spec a node was last started with (ports and address are recorded on start)."""
        spec = self.node(index)
        meta = spec.folder / "node.json"
        if meta.is_file():
            saved = json.loads(meta.read_text())
            return NodeSpec(
                index=index,
                address=saved["address"],
                native_port=saved["native_port"],
                storage_port=saved["storage_port"],
                jmx_port=saved["jmx_port"],
                folder=spec.folder,
                tls=saved.get("tls"),
                auth=saved.get("auth", False),
            )
        return spec

    @property
    def tls_files(self) -> TlsFiles:
        """Where ``start(tls=...)`` keeps the CA, node and client certificates (PEM)."""
        return TlsFiles(self.home / "tls")

    def client_tls(self) -> ssl.SSLContext:
        """A client context that trusts this home's CA and shows its client certificate."""
        files = self.tls_files
        context = ssl.create_default_context(cafile=str(files.ca))
        context.load_cert_chain(str(files.client_cert), str(files.client_key))
        return context

    def _probe_tls(self, spec: NodeSpec) -> ssl.SSLContext | None:
        return self.client_tls() if spec.tls and self.tls_files.exist() else None

    @staticmethod
    def _probe_login(spec: NodeSpec) -> tuple[str, str] | None:
        # A node with roles answers no one without a login: probe as its default superuser.
        return DEFAULT_SUPERUSER if spec.auth else None

    # -- start ---------------------------------------------------------------

    def start(
        self,
        nodes: int | None = None,
        *,
        settings: Mapping[str, object] | None = None,
        tls: str | None = None,
        auth: bool = False,
        timeout: float = START_TIMEOUT,
        echo: Callable[[str], None] = log.info,
    ) -> list[NodeStatus]:
        """Start nodes 1..``nodes`` one after another; running ones are left alone.

        Args:
            nodes: How many nodes; None for all of this home's (``nodes_to_start``).
                Fewer starts only those (the fault tests bring back one of several).
            settings: Extra top-level ``cassandra.yaml`` settings.
            tls: None for plain text; ``"optional"`` serves TLS and plain text on
                the CQL port, ``"required"`` TLS only. TLS clients must show the
                client certificate made beside the CA under ``<home>/tls/``.
            auth: Ask clients for a password and check their permissions
                (PasswordAuthenticator, CassandraAuthorizer); the node makes
                Cassandra's default superuser ``cassandra`` (password ``cassandra``).
            timeout: Seconds each node may take to answer CQL.
            echo: Where progress lines go.

        Returns when every node answers CQL. Raises LocalNodeError, with the end of
        the node's log, when a node cannot start.
        """
        if nodes is None:
            nodes = self.nodes_to_start()
        if not 1 <= nodes <= MAX_NODES:
            raise LocalNodeError(f"nodes {nodes}: must be between 1 and {MAX_NODES}")
        if tls not in (None, "optional", "required"):
            raise LocalNodeError(f"tls {tls!r}: must be 'optional', 'required' or None")
        extra: dict[str, object] = dict(settings or {})
        if auth:
            extra.update(AUTH_SETTINGS)
        if tls is not None:
            # Only TLS needs cryptography: imported here, so a plain start goes without it
            # (and bdq itself, which imports this module, runs with the core install).
            from spark_queue.local.certificates import make_certificates

            files = make_certificates(self.tls_files.folder, str(self._first))
            extra.update(files.node_settings(required=tls == "required"))
        java = find_java()
        classpath = self.classpath(echo)
        agent = next((p for p in classpath if p.name.startswith("jamm-")), None)
        for index in range(1, nodes + 1):
            spec = self.node(index)
            pid = live_pid(spec.pid_file)
            if pid is not None:
                recorded = self._recorded(index)
                version = _wait_for_cql(
                    recorded, pid, timeout, self._probe_tls(recorded), self._probe_login(recorded)
                )
                echo(
                    f"node{index} already running at {recorded.address}:{recorded.native_port}"
                    f" (pid {pid}, Cassandra {version})"
                )
                if recorded.auth != auth:
                    echo(
                        f"node{index} keeps running {'with' if recorded.auth else 'without'}"
                        f" roles: auth={auth} applies after bdq cassandra stop"
                    )
                continue
            foreign = probe_cql(spec.address, spec.native_port)
            if foreign is not None:
                # A node started elsewhere (another checkout, your own) answers
                # there: use it rather than fail on its ports.
                echo(
                    f"node{index}: Cassandra {foreign} already answers at {spec.address}:"
                    f"{spec.native_port} (not started from {self.home}); using it"
                )
                continue
            check_ports_free(spec)
            spec = replace(spec, tls=tls, auth=auth)
            self._write_config(spec, auto_bootstrap=index > 1, settings=extra)
            pid = self._launch(spec, java, classpath, agent)
            echo(
                f"node{index} starting at {spec.address}:{spec.native_port} (pid {pid}),"
                f" log {spec.log_file}"
            )
            version = _wait_for_cql(
                spec, pid, timeout, self._probe_tls(spec), self._probe_login(spec)
            )
            echo(f"node{index} ready: Cassandra {version} at {spec.address}:{spec.native_port}")
        return self.status()

    def classpath(self, echo: Callable[[str], None] = log.info) -> list[Path]:
        """The node's runtime jars, resolved once with Maven and cached under home."""
        cache = self.home / "lib" / f"cassandra-{self.version}.classpath"
        if cache.is_file():
            jars = [Path(p) for p in cache.read_text().strip().split(os.pathsep) if p]
            if jars and all(p.is_file() for p in jars):
                return jars
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LocalNodeError(
                "Maven ('mvn') is not on PATH: it fetches cassandra-all from Maven Central;"
                " install it (for example 'apt-get install maven') or set BDQ_CASSANDRA_HOSTS"
            )
        cache.parent.mkdir(parents=True, exist_ok=True)
        echo(
            f"resolving org.apache.cassandra:cassandra-all:{self.version} with Maven"
            " (first run only)..."
        )
        command = [
            mvn, "-q", "-B", "-f", str(self.conf_dir / "pom.xml"),
            f"-Dcassandra.version={self.version}",
            "dependency:build-classpath",
            "-Dmdep.includeScope=runtime",
            f"-Dmdep.outputFile={cache}",
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not cache.is_file():
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise LocalNodeError(
                f"Maven could not resolve cassandra-all {self.version} (exit {result.returncode}):"
                f"\n{tail}"
            )
        return [Path(p) for p in cache.read_text().strip().split(os.pathsep) if p]

    def _write_config(
        self, spec: NodeSpec, *, auto_bootstrap: bool, settings: Mapping[str, object]
    ) -> None:
        spec.make_folders()
        write_config(
            spec,
            self.conf_dir,
            seed=self.node(1),
            auto_bootstrap=auto_bootstrap,
            settings=settings,
        )

    def _launch(
        self, spec: NodeSpec, java: str, classpath: Sequence[Path], agent: Path | None
    ) -> int:
        command = jvm_command(spec, java, self.heap, classpath, agent)
        with open(spec.console_file, "ab") as console, timer_slack(self.timer_slack_us):
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=spec.folder,
                start_new_session=True,  # outlives the CLI that started it
            )
        spec.pid_file.write_text(f"{process.pid}\n")
        # Keep the Popen object: dropping it while the node runs makes Python warn
        # (ResourceWarning), which pytest's filterwarnings=error turns into a failure.
        CHILDREN[process.pid] = process
        return process.pid

    # -- stop / status -------------------------------------------------------

    def stop(self, *, timeout: float = STOP_TIMEOUT, echo: Callable[[str], None] = log.info) -> int:
        """Stop every node this home started (highest index first); return how many stopped."""
        stopped = 0
        for spec in reversed(self.known_nodes()):
            pid = live_pid(spec.pid_file)
            if pid is None:
                spec.pid_file.unlink(missing_ok=True)
                continue
            echo(f"stopping node{spec.index} at {spec.address} (pid {pid})...")
            os.kill(pid, signal.SIGTERM)
            if not wait_exit(pid, timeout):
                echo(f"node{spec.index} did not exit in {timeout:.0f}s; killing it")
                os.kill(pid, signal.SIGKILL)
                wait_exit(pid, 10.0)
            spec.pid_file.unlink(missing_ok=True)
            stopped += 1
        return stopped

    def kill(self, index: int) -> None:
        """SIGKILL one node, as a crash would (for fault tests)."""
        spec = self._recorded(index)
        pid = live_pid(spec.pid_file)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            wait_exit(pid, 10.0)
        spec.pid_file.unlink(missing_ok=True)

    def status(self) -> list[NodeStatus]:
        """Running or not, with version and address, for every known node."""
        result = []
        for spec in self.known_nodes():
            pid = live_pid(spec.pid_file)
            version = (
                probe_cql(
                    spec.address,
                    spec.native_port,
                    ssl_context=self._probe_tls(spec),
                    login=self._probe_login(spec),
                )
                if pid is not None
                else None
            )
            running = pid is not None
            result.append(
                NodeStatus(spec.index, spec.address, spec.native_port, running, pid, version)
            )
        return result


# -- helpers -----------------------------------------------------------------


def _log_tail(spec: NodeSpec, lines: int = LOG_TAIL_LINES) -> str:
    parts = []
    for path in (spec.console_file, spec.log_file):
        if path.is_file():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- last lines of {path} ---\n" + "\n".join(text))
    return "\n".join(parts) or "(the node wrote no log)"


def _wait_for_cql(
    spec: NodeSpec,
    pid: int,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if live_pid(spec.pid_file) is None:
            child = CHILDREN.pop(pid, None)
            if child is not None:
                child.poll()  # reaps it
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            raise LocalNodeError(
                f"node{spec.index} at {spec.address}:{spec.native_port} exited during start"
                f" (pid {pid}).\n{_log_tail(spec)}"
            )
        if port_open(spec.address, spec.native_port):
            version = probe_cql(
                spec.address, spec.native_port, ssl_context=ssl_context, login=login
            )
            if version:
                return version
        time.sleep(0.5)
    raise LocalNodeError(
        f"node{spec.index} at {spec.address}:{spec.native_port} did not answer CQL within"
        f" {timeout:.0f}s (pid {pid} still running).\n{_log_tail(spec)}"
    )
