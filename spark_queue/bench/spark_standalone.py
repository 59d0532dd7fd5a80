"""A Spark standalone cluster on loopback: a master and one worker per address, each a host.

Spark never places a speculative copy of a task on a host that already runs an
attempt of it, and the executors of ``local-cluster`` mode share one host: no
copy ever starts there. Here each worker (and so each executor) binds an
address of its own in 127.0.0.0/8 (``--host`` and ``SPARK_LOCAL_IP``), which
Spark takes for separate hosts. The processes come from the pip installation of
pyspark (``spark-class``), each in its own process group, so that ``stop``
ends them with their executors and Python workers. A relay joins with
``--master`` :attr:`StandaloneCluster.url`; its executors run the driver's
interpreter and import spark_queue from where this process imported it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import spark_queue
from spark_queue.errors import SparkQueueError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: The master's (and the driver's) address; the workers' two hosts.
MASTER_HOST = "127.0.0.1"
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")
#: Each worker's memory; an executor asks for EXECUTOR_MEMORY of it.
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
#: A master and a worker started in 10 to 20 s each on a busy 2-core host.
START_TIMEOUT = 180.0
STOP_TIMEOUT = 30.0
#: The daemons need little: a small heap, the client compiler, the serial collector.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class SparkClusterError(SparkQueueError):
    """The standalone Spark cluster could not be started (the message names its log)."""


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spark_class() -> Path:
    """``spark-class`` of the pyspark this interpreter imports."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


class StandaloneCluster:
    """A master on :data:`MASTER_HOST` and a 1-core worker on each of ``hosts``.

    Args:
        folder: Logs (``master.log``, ``worker-<host>.log``) and the workers' work dirs.
        hosts: One worker per address, all in 127.0.0.0/8.
        memory: Each worker's memory (``--memory``).
        timeout: Seconds each process may take to come up.
        echo: Where a line per process started goes.
    """

    def __init__(
        self,
        folder: Path,
        hosts: Sequence[str] = WORKER_HOSTS,
        *,
        memory: str = WORKER_MEMORY,
        timeout: float = START_TIMEOUT,
        echo: Callable[[str], None] = print,
    ) -> None:
        for host in (MASTER_HOST, *hosts):
            if not host.startswith("127."):
                raise SparkClusterError(f"host {host!r}: the cluster stays on 127.0.0.0/8")
        self.folder = folder
        self.hosts = tuple(hosts)
        self.memory = memory
        self.timeout = timeout
        self.echo = echo
        self.url = ""
        self.processes: list[subprocess.Popen[bytes]] = []

    def _env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        # Executors inherit the worker's environment: the interpreter and the code of
        # this process, whatever PYTHONPATH says (a checkout before an installed copy).
        code = str(Path(spark_queue.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (code, env.get("PYTHONPATH")) if p)
        env.update(
            SPARK_LOCAL_IP=host,
            PYSPARK_PYTHON=sys.executable,
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTS,
            SPARK_NO_DAEMONIZE="1",
        )
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        env.pop("SPARK_HOME", None)  # spark-class finds the pip installation itself
        return env

    def _launch(self, name: str, host: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.folder / f"{name}.log").open("wb") as out:
            process = subprocess.Popen(
                [str(spark_class()), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(host),
                cwd=self.folder,
                start_new_session=True,  # its own group: stopping it stops its executors
            )
        self.processes.append(process)
        return process

    def _await(self, name: str, text: str, process: subprocess.Popen[bytes]) -> None:
        log = self.folder / f"{name}.log"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if text in log.read_text(errors="replace"):
                return
            if process.poll() is not None:
                break
            time.sleep(0.25)
        tail = log.read_text(errors="replace")[-2000:]
        raise SparkClusterError(
            f"{name} did not log {text!r} in {self.timeout:.0f}s ({log}):\n{tail}"
        )

    def start(self) -> str:
        """Start the master, then the workers; the master's ``spark://`` URL."""
        self.folder.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        try:
            port = free_port(MASTER_HOST)
            self.url = f"spark://{MASTER_HOST}:{port}"
            master = self._launch(
                "master", MASTER_HOST, MASTER_CLASS, "--host", MASTER_HOST, "--port", str(port),
                "--webui-port", str(free_port(MASTER_HOST)),
            )  # fmt: skip
            self._await("master", "I have been elected leader", master)
            for host in self.hosts:
                name = f"worker-{host}"
                worker = self._launch(
                    name, host, WORKER_CLASS, self.url, "--host", host, "--cores", "1",
                    "--memory", self.memory, "--webui-port", str(free_port(host)),
                    "--work-dir", str(self.folder / name),
                )  # fmt: skip
                self._await(name, "Successfully registered with master", worker)
        except BaseException:
            self.stop()
            raise
        self.echo(
            f"  standalone Spark: master {self.url}, workers on {', '.join(self.hosts)}"
            f" (1 core each), up in {time.monotonic() - began:.0f}s"
        )
        return self.url

    def stop(self) -> None:
        """SIGTERM each process group (workers first), SIGKILL what outlives STOP_TIMEOUT."""
        for process in reversed(self.processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            # executors (same group) may outlive their worker by a moment
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()

    def relay_conf(self) -> list[str]:
        """The relay's ``--master`` and ``--conf`` flags for this cluster."""
        settings = (
            f"spark.executor.memory={EXECUTOR_MEMORY}",
            f"spark.cores.max={len(self.hosts)}",
            # a task starts at once on any free executor: no wait for its preferred host
            "spark.locality.wait=0s",
        )
        return ["--master", self.url, *(a for s in settings for a in ("--conf", s))]

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
