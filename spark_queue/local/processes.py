"""Processes and ports of local nodes: Java, pids that may be zombies, CQL probes.

What ``node.LocalCluster`` needs from the operating system and the driver, kept
apart from the cluster's own logic: finding Java 17, telling whether a recorded
pid still runs (a JVM's zombie holds its ports until its last thread ends),
waiting for a launched node to exit, asking a node for its version over CQL, and
the timer slack a node is launched under.
A process's state and threads come from psutil (the ``local`` extra), not from
parsing ``/proc`` by hand.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from spark_queue.errors import LocalNodeError, MissingExtra
from spark_queue.local.node_conf import NodeSpec

#: Nodes this process launched, by pid (see ``LocalCluster._launch``): reaped here.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

#: Timer slack (us) of a local node's threads; Linux's default is 50 us. Cassandra's
#: idle request workers wait for work in parks of 10 us, so on a machine it shares
#: with its clients a node woke tens of thousands of times a second between
#: requests; at 500 us it used a third less CPU for the same work (docs/local-node.md).
NODE_TIMER_SLACK_US = 500
#: ``prctl`` options (linux/prctl.h).
_PR_SET_TIMERSLACK = 29
_PR_GET_TIMERSLACK = 30


@contextlib.contextmanager
def timer_slack(microseconds: int) -> Iterator[None]:
    """Run the block with this thread's timer slack at ``microseconds`` (0: leave it).

    A process started inside the block keeps the value, and so do its threads:
    Linux copies a thread's timer slack to the processes and threads it
    creates, and keeps it across ``exec``. Elsewhere than Linux, a no-op.
    """
    prctl = _prctl() if microseconds else None
    if prctl is None:
        yield
        return
    before = prctl(_PR_GET_TIMERSLACK, *_args(0))
    prctl(_PR_SET_TIMERSLACK, *_args(microseconds * 1000))
    try:
        yield
    finally:
        prctl(_PR_SET_TIMERSLACK, *_args(max(before, 0)))  # 0: the thread's default again


def _args(value: int) -> tuple[ctypes.c_ulong, ...]:
    """``prctl``'s four further arguments, each an unsigned long as the call reads them."""
    return (ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, from the symbols this process already has loaded (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    return prctl


def find_java() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be Java 11 or 17."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise LocalNodeError(
            "Java was not found (JAVA_HOME unset and no 'java' on PATH):"
            " Cassandra 5.0 needs Java 17"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    major = int(match[1]) if match else 0
    if major not in (11, 17):
        raise LocalNodeError(
            f"Java at {java} is version {major or 'unknown'}: Cassandra 5.0 runs on Java 17"
            " (or 11); set JAVA_HOME to a Java 17 installation"
        )
    return java


def live_pid(pid_file: Path) -> int | None:
    """The recorded pid if that process has not exited."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return None if exited(pid) else pid


def exited(pid: int) -> bool:
    """True once ``pid`` is gone: no such process, or a zombie whose threads have all ended.

    The main thread of a JVM turns zombie while its other threads are still exiting
    and holding the node's sockets; the ports are free only after the last one.
    """
    # Imported on first use, so that bdq itself runs without the local extra.
    try:
        import psutil
    except ImportError as e:
        raise MissingExtra("the local Cassandra node (bdq cassandra)", "local", e.name) from e
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            return False
        return process.num_threads() <= 1
    except psutil.NoSuchProcess:  # ZombieProcess too: its /proc entry is being torn down
        return True
    except psutil.AccessDenied:  # another user's process: it runs
        return False


def wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child = CHILDREN.get(pid)
        if child is not None:
            if child.poll() is not None:  # reaped: every thread has ended
                del CHILDREN[pid]
                return True
        else:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if we are its parent
            if exited(pid):
                return True
        time.sleep(0.2)
    return False


def port_open(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((address, port)) == 0


def check_ports_free(spec: NodeSpec) -> None:
    """Fail before launching when another process holds one of the node's ports."""
    for purpose, address, port in (
        ("CQL (native transport)", spec.address, spec.native_port),
        ("storage", spec.address, spec.storage_port),
        ("JMX", "127.0.0.1", spec.jmx_port),
    ):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # As the JVM's server sockets do: connections of a previous run lingering
            # in TIME_WAIT do not hold the port; another listener does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as e:
                reason = "is already in use" if e.errno == errno.EADDRINUSE else f"failed: {e}"
                raise LocalNodeError(
                    f"node{spec.index}: {purpose} port {address}:{port} {reason} by another"
                    " process; stop that process, or start with other ports"
                    " (bdq cassandra start --native-port/--storage-port/--jmx-port)"
                ) from e


@contextlib.contextmanager
def quiet_driver() -> Iterator[None]:
    """Silence the driver's connection warnings while probing a node that may be down."""
    logger = logging.getLogger("cassandra")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def probe_cql(
    address: str,
    port: int,
    timeout: float = 5.0,
    *,
    ssl_context: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> str | None:
    """``release_version`` of the node at ``address:port``, or None if it does not answer.

    ``ssl_context`` connects with TLS (a node that requires it answers nothing else),
    ``login`` as ``(username, password)`` (a node with roles answers no one without one).
    """
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    if not port_open(address, port):
        return None
    with quiet_driver():
        # An execution profile, not the legacy load_balancing_policy argument: that
        # one warns (DeprecationWarning), and the tests turn warnings into errors.
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([address]))
        cluster = Cluster(
            [address],
            port=port,
            connect_timeout=timeout,
            control_connection_timeout=timeout,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            protocol_version=5,  # local nodes run Cassandra 5.0: no negotiation needed
            ssl_context=ssl_context,
            auth_provider=PlainTextAuthProvider(*login) if login else None,
        )
        try:
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local", timeout=timeout).one()
            return str(row.release_version) if row else None
        except Exception:  # any failure here means "not ready yet"
            return None
        finally:
            cluster.shutdown()
