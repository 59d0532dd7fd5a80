"""The servers ``bdq bench sqs`` measures: ``bdq serve`` processes and ElasticMQ, on loopback.

``bdq_servers`` starts N ``bdq serve`` processes over the keyspace of the given
settings, each on its own free port, with a server key of the run's own and an
access key it revokes at the end. ``elasticmq`` resolves
``org.elasticmq:elasticmq-server_2.13`` with Maven from Maven Central (cached in
``~/.m2``, its class path under ``~/.bdq``), and runs it with java on a free port;
ElasticMQ keeps its queues in memory and checks no signature.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from spark_queue import defaults
from spark_queue.bench.spark_standalone import free_port
from spark_queue.bench.sqs_load import Target
from spark_queue.config import ConnectionSettings
from spark_queue.errors import SparkQueueError
from spark_queue.service.accounts import KEY_ENV, AccessKeys
from spark_queue.store.session import Store

ELASTICMQ_VERSION = defaults.ELASTICMQ_VERSION
HOST = "127.0.0.1"
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
ACCOUNT = "bench"


class TargetError(SparkQueueError):
    """A server of the benchmark did not start (the message says why and shows its output)."""


@contextmanager
def bdq_servers(settings: ConnectionSettings, count: int) -> Iterator[Target]:
    """``count`` ``bdq serve`` processes over ``settings``' keyspace, stopped at the end.

    Only the hosts, keyspace and (through the environment) the credentials of
    ``settings`` reach the servers.
    """
    from cryptography.fernet import Fernet

    server_key = Fernet.generate_key()
    store = Store(settings)
    keys = AccessKeys(store, Fernet(server_key))
    key = keys.create(ACCOUNT)
    env = {**os.environ, KEY_ENV: server_key.decode()}
    if settings.username:
        env["BDQ_CASSANDRA_USERNAME"] = settings.username
    if settings.password:
        env["BDQ_CASSANDRA_PASSWORD"] = settings.password
    hosts = ",".join(str(h) for h in settings.hosts)
    try:
        with ExitStack() as stack:
            urls = []
            for _ in range(count):
                port = free_port(HOST)
                command = [
                    sys.executable, "-m", "spark_queue.cli", "serve", "--host", HOST,
                    "--port", str(port), "--hosts", hosts, "--keyspace", settings.keyspace,
                ]  # fmt: skip
                stack.enter_context(_process(command, port, env, "bdq serve"))
                urls.append(f"http://{HOST}:{port}")
            yield Target(f"bdq-{count}", tuple(urls), key.access_key_id, key.secret_access_key)
    finally:
        try:
            keys.revoke(key.access_key_id)
        finally:
            store.close()


@contextmanager
def elasticmq(version: str = ELASTICMQ_VERSION, home: Path | None = None) -> Iterator[Target]:
    """An ElasticMQ server on a free loopback port, stopped at the end."""
    java = shutil.which("java")
    if java is None:
        raise TargetError("ElasticMQ needs 'java' on PATH (Java 17, as the local node)")
    classpath = elasticmq_classpath(version, home or Path.home() / ".bdq" / "elasticmq")
    port = free_port(HOST)
    with tempfile.TemporaryDirectory(prefix="bdq-elasticmq-") as folder:
        conf = Path(folder) / "elasticmq.conf"
        conf.write_text(
            'include classpath("application.conf")\n'
            f'node-address {{ protocol = http, host = "{HOST}", port = {port} }}\n'
            f'rest-sqs {{ enabled = true, bind-port = {port}, bind-hostname = "{HOST}" }}\n'
            "rest-stats { enabled = false }\n"
        )
        command = [
            java, "-Xmx1g", f"-Dconfig.file={conf}", "-cp", classpath,
            "org.elasticmq.server.Main",
        ]  # fmt: skip
        with _process(command, port, dict(os.environ), "ElasticMQ"):
            yield Target("elasticmq", (f"http://{HOST}:{port}",), "x", "x")


def elasticmq_pom(version: str) -> str:
    """A pom whose only dependency is ElasticMQ's server, to resolve its class path."""
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.sparkqueue.bench</groupId>
  <artifactId>elasticmq-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.elasticmq</groupId>
      <artifactId>elasticmq-server_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def elasticmq_classpath(version: str, home: Path) -> str:
    """ElasticMQ's runtime class path, resolved once with Maven and cached under ``home``."""
    cache = home / f"elasticmq-{version}.classpath"
    if cache.is_file():
        jars = cache.read_text().strip()
        if jars and all(Path(p).is_file() for p in jars.split(os.pathsep)):
            return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise TargetError("ElasticMQ is resolved with Maven: 'mvn' is not on PATH")
    home.mkdir(parents=True, exist_ok=True)
    pom = home / f"elasticmq-{version}.pom.xml"
    pom.write_text(elasticmq_pom(version))
    command = [
        mvn, "-q", "-B", "-f", str(pom), "dependency:build-classpath",
        "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={cache}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not cache.is_file():
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise TargetError(f"Maven could not resolve elasticmq-server_2.13 {version}:\n{tail}")
    return cache.read_text().strip()


@contextmanager
def _process(command: list[str], port: int, env: dict[str, str], what: str) -> Iterator[None]:
    # A file, not a pipe: a chatty server never blocks on a full pipe.
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            _wait_until_listening(process, port, output, what)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_listening(
    process: subprocess.Popen[bytes], port: int, output: IO[bytes], what: str
) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output.seek(0)
            said = output.read().decode(errors="replace")[-3000:]
            raise TargetError(f"{what} exited with {process.returncode}:\n{said}")
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TargetError(f"{what} did not listen on port {port} within {START_TIMEOUT:.0f} s")
