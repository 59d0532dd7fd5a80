"""``bdq serve`` from the AWS CLI, and ``bdq access-key``: real processes on the real node."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from spark_queue.config import ConnectionSettings
from tests.service_server import Server, running_server

pytestmark = pytest.mark.cassandra


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings) -> Iterator[Server]:
    with running_server(_module_keyspace) as running:
        yield running


def _aws(server: Server, key_id: str, secret: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **server.env,
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }
    return subprocess.run(
        [sys.executable, "-m", "awscli", "--endpoint-url", server.url, "--output", "json", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _bdq(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    hosts = ",".join(str(h) for h in server.settings.hosts)
    return subprocess.run(
        [
            *(sys.executable, "-m", "spark_queue.cli", *args),
            *("--hosts", hosts, "--keyspace", server.settings.keyspace),
        ],
        env=server.env,
        capture_output=True,
        text=True,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_the_aws_cli_sends_receives_and_deletes(server: Server) -> None:
    key = (server.acme.access_key_id, server.acme.secret_access_key)
    url = _ok(_aws(server, *key, "sqs", "create-queue", "--queue-name", "cli"))["QueueUrl"]

    sent = _ok(
        _aws(server, *key, "sqs", "send-message", "--queue-url", url, "--message-body", "hi")
    )
    got = _ok(_aws(server, *key, "sqs", "receive-message", "--queue-url", url))
    [message] = got["Messages"]
    _ok(
        _aws(
            server, *key, "sqs", "delete-message", "--queue-url", url,
            "--receipt-handle", message["ReceiptHandle"],
        )
    )  # fmt: skip
    after = _ok(_aws(server, *key, "sqs", "receive-message", "--queue-url", url))

    assert url == f"{server.url}/acme/cli"
    assert message["Body"] == "hi"
    assert message["MessageId"] == sent["MessageId"]
    assert after is None or "Messages" not in after


def test_access_keys_are_made_listed_and_revoked(server: Server) -> None:
    made = _ok(_bdq(server, "access-key", "create", "initech", "--json"))
    listed = _bdq(server, "access-key", "list")

    assert sorted(made) == ["access_key_id", "secret_access_key"]
    assert made["access_key_id"] in listed.stdout
    assert made["secret_access_key"] not in listed.stdout
    queues = _ok(
        _aws(server, made["access_key_id"], made["secret_access_key"], "sqs", "list-queues")
    )
    assert queues is None or "QueueUrls" not in queues  # a new account has no queue

    revoked = _bdq(server, "access-key", "revoke", made["access_key_id"])
    again = _bdq(server, "access-key", "revoke", made["access_key_id"])

    assert revoked.returncode == 0, revoked.stderr
    assert again.returncode == 1
    assert made["access_key_id"] not in _bdq(server, "access-key", "list").stdout


def test_a_revoked_key_is_refused(server: Server) -> None:
    made = _ok(_bdq(server, "access-key", "create", "initech", "--json"))
    _bdq(server, "access-key", "revoke", made["access_key_id"])

    refused = _aws(server, made["access_key_id"], made["secret_access_key"], "sqs", "list-queues")

    assert refused.returncode != 0
    assert "InvalidClientTokenId" in refused.stderr


def test_a_bad_account_name_is_refused_in_one_line(server: Server) -> None:
    done = _bdq(server, "access-key", "create", "no.dots")

    assert done.returncode == 1
    assert done.stderr.startswith("Error: account 'no.dots'")


def test_sigterm_ends_long_polls_empty_and_the_server_exits_cleanly(
    _module_keyspace: ConnectionSettings,
) -> None:
    with running_server(_module_keyspace) as own:
        key = (own.acme.access_key_id, own.acme.secret_access_key)
        url = _ok(_aws(own, *key, "sqs", "create-queue", "--queue-name", "stop"))["QueueUrl"]
        answers: list[subprocess.CompletedProcess[str]] = []
        args = ("sqs", "receive-message", "--queue-url", url, "--wait-time-seconds", "20")
        waiting = threading.Thread(target=lambda: answers.append(_aws(own, *key, *args)))
        waiting.start()
        _ok(_aws(own, *key, "sqs", "list-queues"))  # the server answers while the poll waits

        own.process.terminate()
        waiting.join()
        code = own.process.wait()

    assert answers[0].returncode == 0, answers[0].stderr  # an empty answer, not an error
    assert "Messages" not in answers[0].stdout
    # uvicorn raises the signal again once it shut down gracefully: killed by it, no error
    assert code in (0, -signal.SIGTERM)


def test_serve_on_a_missing_keyspace_fails_in_one_line(server: Server) -> None:
    hosts = ",".join(str(h) for h in server.settings.hosts)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "spark_queue.cli", "serve", "--hosts", hosts),
            *("--keyspace", "t_nosuchkeyspace", "--port", "1"),
        ],
        env=server.env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 1
    assert done.stderr.startswith("Error: keyspace 't_nosuchkeyspace' not found")
