"""``bdq serve --tls-cert --tls-key``: HTTPS with a certificate of a test CA, driven by boto3."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import trustme
from botocore.config import Config
from botocore.exceptions import SSLError
from click.testing import CliRunner

from spark_queue.cli import main
from spark_queue.config import ConnectionSettings
from tests.service_server import Server, running_server


@dataclass(frozen=True)
class Files:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    folder = tmp_path_factory.mktemp("serve-tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    found = Files(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")
    ca.cert_pem.write_to_path(str(found.ca))
    for pem in issued.cert_chain_pems:
        pem.write_to_path(str(found.cert), append=True)
    issued.private_key_pem.write_to_path(str(found.key))
    return found


@pytest.fixture(scope="module")
def server(_module_keyspace: ConnectionSettings, files: Files) -> Iterator[Server]:
    with running_server(_module_keyspace, tls=(files.cert, files.key)) as running:
        yield running


def _sqs(server: Server, verify: str | bool) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=server.acme.access_key_id,
        aws_secret_access_key=server.acme.secret_access_key,
        verify=verify,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.mark.cassandra
def test_a_client_trusting_the_ca_sends_receives_and_deletes_over_https(
    server: Server, files: Files
) -> None:
    # Given a server with a certificate of the test CA, and a client that trusts the CA
    sqs = _sqs(server, str(files.ca))

    # When it goes through a queue's life over HTTPS
    url = sqs.create_queue(QueueName="secure")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="over tls")
    [message] = sqs.receive_message(QueueUrl=url)["Messages"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    # Then the queue's URL is an https one and the message came through
    assert server.url.startswith("https://")
    assert url == f"{server.url}/acme/secure"
    assert message["Body"] == "over tls"


@pytest.mark.cassandra
def test_a_client_not_trusting_the_ca_is_refused_by_its_own_check(server: Server) -> None:
    with pytest.raises(SSLError):
        _sqs(server, True).list_queues()  # the system's CAs do not include the test CA


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tls-cert", "cert.pem"], "--tls-cert 'cert.pem': needs --tls-key too"),
        (["--tls-key", "key.pem"], "--tls-key 'key.pem': needs --tls-cert too"),
        (["--tls-cert", "key.pem", "--tls-key", "key.pem"], "must be a PEM certificate"),
    ],
)
def test_bad_tls_flags_are_refused_in_one_line(
    files: Files, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    monkeypatch.chdir(files.ca.parent)

    result = CliRunner().invoke(main, ["serve", "--port", "1", *args])

    assert result.exit_code != 0
    assert said in result.output
    assert "Traceback" not in result.output
