"""Who may do what (spark_queue.store.grants, ``bdq keyspace grant``), and refusals in one line.

The fast tests hold the GRANT statements and the translation of Cassandra's
refusal. The others run against a node of their own that asks for passwords
and checks permissions (PasswordAuthenticator, CassandraAuthorizer): one node
for the whole module, on 127.0.0.5 (JMX 7305), started once (about a minute)
and stopped at the end.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from cassandra import Unauthorized
from click.testing import CliRunner, Result

from spark_queue import ConnectionSettings, PermissionDenied, QueueClient
from spark_queue.cli import main
from spark_queue.config import parse_hosts
from spark_queue.errors import SparkQueueError
from spark_queue.local.node import LocalCluster
from spark_queue.local.node_conf import DEFAULT_SUPERUSER
from spark_queue.store.driver_errors import translated
from spark_queue.store.grants import PARTS, grant_statements

ADDRESS = "127.0.0.5"
JMX_PORT = 7305
PASSWORD = "pw-" + uuid.uuid4().hex[:8]


# -- the statements ------------------------------------------------------------------


def test_a_monitor_reads_the_keyspace_and_writes_only_the_counts() -> None:
    assert grant_statements("monitor", "grafana", "orders") == [
        'GRANT SELECT ON KEYSPACE "orders" TO "grafana"',
        'GRANT MODIFY ON TABLE "orders".bucket_counts TO "grafana"',
    ]


def test_an_operator_gets_the_whole_keyspace_and_names_are_quoted() -> None:
    assert grant_statements("operator", 'O"Brien', "orders") == [
        'GRANT SELECT ON KEYSPACE "orders" TO "O""Brien"',
        'GRANT MODIFY ON KEYSPACE "orders" TO "O""Brien"',
    ]


def test_a_producer_never_reads_messages_and_shares_their_table_with_consumers() -> None:
    producer, consumer = PARTS["producer"], PARTS["consumer"]

    assert producer.select is not None and "messages" not in producer.select
    assert producer.modify is not None and consumer.modify is not None
    assert "messages" in set(producer.modify) & set(consumer.modify)
    assert not {"ownership", "lane_ownership", "journal"} & set(producer.modify)


def test_bdq_keyspace_grant_prints_the_statements_without_connecting() -> None:
    result = CliRunner().invoke(
        main, ["keyspace", "grant", "grafana", "--monitor", "--keyspace", "orders", "--print"],
        env={"BDQ_CASSANDRA_HOSTS": "nosuch.invalid"},
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        'GRANT SELECT ON KEYSPACE "orders" TO "grafana";',
        'GRANT MODIFY ON TABLE "orders".bucket_counts TO "grafana";',
    ]


def test_bdq_keyspace_grant_needs_a_part() -> None:
    result = CliRunner().invoke(main, ["keyspace", "grant", "grafana", "--print"])

    assert result.exit_code == 2
    assert "--monitor, --producer, --consumer or --operator" in result.stderr


def test_a_refusal_names_the_role_the_permission_and_the_table() -> None:
    refusal = Unauthorized(
        'Error from server: code=2100 [Unauthorized] message="User mon has no MODIFY'
        ' permission on <table orders.messages> or any of its parents"'
    )

    error = translated(refusal, "purging messages")

    assert isinstance(error, PermissionDenied)
    assert error.__cause__ is refusal
    assert (error.role, error.permission, error.resource) == (
        "mon", "MODIFY", "table orders.messages",
    )  # fmt: skip
    assert str(error).startswith(
        "purging messages: role 'mon' has no MODIFY permission on table orders.messages;"
    )
    assert "bdq keyspace grant mon --monitor|--producer|--consumer|--operator" in str(error)
    assert "--keyspace orders" in str(error) and "\n" not in str(error)


# -- a node that checks permissions -----------------------------------------------------


@dataclass(frozen=True)
class AuthNode:
    """The node, its keyspace, the settings of its superuser, and what its start printed."""

    superuser: ConnectionSettings
    started: Result

    def as_role(self, role: str, password: str = PASSWORD) -> ConnectionSettings:
        return replace(self.superuser, username=role, password=password)

    def env(self, role: str, password: str = PASSWORD) -> dict[str, str]:
        """The BDQ_* variables of ``bdq`` run as ``role``."""
        return {
            "BDQ_CASSANDRA_HOSTS": f"{ADDRESS}:9042",
            "BDQ_KEYSPACE": self.superuser.keyspace,
            "BDQ_CASSANDRA_USERNAME": role,
            "BDQ_CASSANDRA_PASSWORD": password,
        }


@pytest.fixture(scope="module")
def auth_node(
    tmp_path_factory: pytest.TempPathFactory, classpath_cache: Path
) -> Iterator[AuthNode]:
    home = tmp_path_factory.mktemp("auth") / "bdq"
    shutil.copytree(classpath_cache, home / "lib")
    keyspace = f"g_{uuid.uuid4().hex[:8]}"
    args = ["cassandra", "start", "--home", str(home), "--address", ADDRESS,
            "--jmx-port", str(JMX_PORT), "--auth", "--keyspace", keyspace]  # fmt: skip
    try:
        # bdq cassandra start --auth makes the node, and the keyspace as the superuser
        started = CliRunner().invoke(main, args, env={"BDQ_CASSANDRA_HOSTS": None})
        assert started.exit_code == 0, f"{started.stdout}\n{started.stderr}"
        user, password = DEFAULT_SUPERUSER
        superuser = ConnectionSettings(
            hosts=parse_hosts([f"{ADDRESS}:9042"]),
            keyspace=keyspace,
            username=user,
            password=password,
        )
        with QueueClient(settings=superuser) as client:
            client.create_queue("orders").send_batch([b"a", b"b", b"c"])
        node = AuthNode(superuser, started)
        for role in ("mon", "prod", "cons", "nobody"):
            _cql(node, f"CREATE ROLE {role} WITH PASSWORD = '{PASSWORD}' AND LOGIN = true")
        yield node
    finally:
        LocalCluster(home).stop()


def test_start_with_auth_made_the_keyspace_and_says_how_to_log_in(auth_node: AuthNode) -> None:
    out = auth_node.started.stdout
    keyspace = auth_node.superuser.keyspace

    assert f"keyspace {keyspace} created" in out
    assert "Roles on (PasswordAuthenticator, CassandraAuthorizer)" in out
    assert "  export BDQ_CASSANDRA_USERNAME=cassandra\n" in out
    assert "  export BDQ_CASSANDRA_PASSWORD=cassandra\n" in out
    # Without a login the node answers nobody: the start really turned roles on
    anonymous = replace(auth_node.superuser, username=None, password=None, connect_timeout=5.0)
    with pytest.raises(SparkQueueError):
        QueueClient(settings=anonymous)


def _cql(node: AuthNode, statement: str) -> None:
    from spark_queue.store.session import Store

    store = Store(node.superuser)
    try:
        store.session.execute(statement)
    finally:
        store.close()


def _bdq(node: AuthNode, role: str, *args: str, password: str = PASSWORD) -> Result:
    return CliRunner().invoke(main, list(args), env=node.env(role, password))


def _one_line_error(result: Result) -> str:
    assert result.exit_code == 1, f"exit {result.exit_code}: {result.output}"
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    return line


@pytest.mark.cassandra
@pytest.mark.slow
def test_a_wrong_password_gets_one_line(auth_node: AuthNode) -> None:
    line = _one_line_error(_bdq(auth_node, "mon", "queue", "list", password="wrong"))

    assert f"{ADDRESS}:9042" in line
    assert "check the username and password" in line
    assert "wrong" not in line.replace("password", "")


@pytest.mark.cassandra
@pytest.mark.slow
def test_a_role_without_access_gets_one_line_naming_the_permission(auth_node: AuthNode) -> None:
    line = _one_line_error(_bdq(auth_node, "nobody", "queue", "list"))

    keyspace = auth_node.superuser.keyspace
    assert f"role 'nobody' has no SELECT permission on table {keyspace}.queues" in line
    assert "bdq keyspace grant nobody" in line


@pytest.mark.cassandra
@pytest.mark.slow
def test_a_monitor_looks_but_cannot_send_receive_or_purge(
    auth_node: AuthNode, tmp_path: Path
) -> None:
    # Given a role granted the monitor's part by `bdq keyspace grant`, run as the superuser
    user, password = DEFAULT_SUPERUSER
    granted = _bdq(auth_node, user, "keyspace", "grant", "mon", "--monitor", password=password)
    assert granted.exit_code == 0, granted.output
    assert "granted role 'mon' the monitor permissions" in granted.stdout

    # When it looks, it sees
    stats = _bdq(auth_node, "mon", "queue", "stats", "orders", "--json")
    top = _bdq(auth_node, "mon", "top", "--once", "--interval", "0.1")
    assert stats.exit_code == 0, stats.output
    assert '"visible": 3' in stats.stdout
    assert top.exit_code == 0, top.output
    assert "orders" in top.stdout
    scraped = _scrape_as(auth_node, "mon", tmp_path)
    keyspace = auth_node.superuser.keyspace
    assert f'bdq_visible_messages{{keyspace="{keyspace}",queue="orders"}} 3.0' in scraped

    # and when it sends, receives or purges, it is refused in one line naming what it lacks
    for args, refused in (
        (("send", "orders", "x"), f"MODIFY permission on table {keyspace}.sequences"),
        (("receive", "orders"), f"MODIFY permission on table {keyspace}."),
        (("queue", "purge", "orders", "--yes"), f"MODIFY permission on table {keyspace}.messages"),
    ):
        line = _one_line_error(_bdq(auth_node, "mon", *args))
        assert "role 'mon' has no " + refused in line, (args, line)
    with QueueClient(settings=auth_node.superuser) as client:
        assert client.queue("orders").stats().visible == 3


@pytest.mark.cassandra
@pytest.mark.slow
def test_a_producer_sends_and_a_consumer_receives_each_only_that(auth_node: AuthNode) -> None:
    user, password = DEFAULT_SUPERUSER
    for role, part in (("prod", "--producer"), ("cons", "--consumer")):
        granted = _bdq(auth_node, user, "keyspace", "grant", role, part, password=password)
        assert granted.exit_code == 0, granted.output
    with QueueClient(settings=auth_node.superuser) as client:
        client.create_queue("jobs")

    with QueueClient(settings=auth_node.as_role("prod")) as producer:
        producer.queue("jobs").send(b"job")
        with pytest.raises(PermissionDenied, match="role 'prod' has no SELECT permission"):
            producer.queue("jobs").receive(max_messages=1)
    with QueueClient(settings=auth_node.as_role("cons")) as consumer:
        jobs = consumer.queue("jobs")
        got = jobs.receive(max_messages=1, wait=5)
        jobs.ack_batch([d.receipt for d in got])
        with pytest.raises(PermissionDenied, match="role 'cons' has no MODIFY permission"):
            consumer.create_queue("mine")

    assert [d.payload for d in got] == [b"job"]


def _scrape_as(node: AuthNode, role: str, tmp_path: Path) -> str:
    """One scrape of `bdq metrics serve` run as ``role``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        serving = subprocess.Popen(
            [sys.executable, "-m", "spark_queue.cli", "metrics", "serve", "--port", str(port)],
            env={**os.environ, **node.env(role)},
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{port}/metrics"
                with urllib.request.urlopen(url, timeout=10) as response:
                    return bytes(response.read()).decode()
            except OSError as e:
                if time.monotonic() > deadline or serving.poll() is not None:
                    raise AssertionError(f"bdq metrics serve: {e}\n{log.read_text()}") from e
                time.sleep(0.5)
    finally:
        serving.send_signal(signal.SIGINT)
        serving.wait(30)
