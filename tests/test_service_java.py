"""``bdq serve`` from a client that is not Python: the AWS SDK for Java v2, on the real node.

Maven resolves the SDK (with the url-connection HTTP client, not netty) from Maven
Central into ``~/.m2``, as it does cassandra-all, and compiles ``tests/java`` outside the
source tree; the class sends, receives with message attributes (the SDK checks both
MD5s), changes visibility and deletes, and exits non-zero on any failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from tests.conftest import unavailable
from tests.service_server import ROOT, Server, running_server

pytestmark = pytest.mark.cassandra

JAVA_PROJECT = ROOT / "tests" / "java"
#: A first run downloads about 5 MiB of jars; later runs compile one class.
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that runs the compiled client, built once per module."""
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if mvn is None or java is None:
        unavailable("the Java SDK test needs 'mvn' and 'java' on PATH")
    build = tmp_path_factory.mktemp("java-build")
    classpath = build / "classpath.txt"
    command = [
        mvn, "-q", "-B", "-f", str(JAVA_PROJECT / "pom.xml"), f"-Dbuild.dir={build}",
        "compile", "dependency:build-classpath",
        "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={classpath}",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jars = classpath.read_text().strip()
    return [java, "-cp", os.pathsep.join([str(build / "classes"), jars]), "bdq.SqsRoundTrip"]


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings) -> Iterator[Server]:
    with running_server(_module_keyspace) as running:
        yield running


def test_java_sdk_sends_receives_changes_visibility_and_deletes(
    server: Server, java_client: list[str]
) -> None:
    # Given the Java client and a running server
    key = server.acme

    # When it runs its round trip on a new queue
    done = subprocess.run(
        [*java_client, server.url, key.access_key_id, key.secret_access_key, "from-java"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )

    # Then every call passed the SDK's checks, and the queue holds nothing
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("OK")
    with QueueClient(settings=server.settings) as client:
        assert client.queue("acme.from-java").stats(exact=True).total == 0
