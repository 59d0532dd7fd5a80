"""The shared pieces of the ``bdq`` command line: connection flags, ``--json``, error reporting."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import click
import pytest
from click.testing import CliRunner

from spark_queue.cli import main
from spark_queue.cli.flags import CommandGroup, connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting

UNSET_ENV: dict[str, str | None] = {
    name: None
    for name in (
        "BDQ_CASSANDRA_HOSTS",
        "BDQ_KEYSPACE",
        "BDQ_CASSANDRA_USERNAME",
        "BDQ_CASSANDRA_PASSWORD",
        "BDQ_LOCAL_DC",
        "BDQ_CONSISTENCY",
    )
}


def make_cli(action: Callable[[ConnectionSettings], Any]) -> click.Group:
    """A throwaway group with one command that hands its settings to ``action``."""

    @click.group(cls=CommandGroup)
    def cli() -> None:
        pass

    @cli.command()
    @connection_options
    @json_option
    def show(settings: ConnectionSettings, as_json: bool) -> None:
        result = action(settings)
        if as_json:
            echo_json(result)

    return cli


def describe(settings: ConnectionSettings) -> dict[str, Any]:
    return {
        "hosts": [str(h) for h in settings.hosts],
        "keyspace": settings.keyspace,
        "username": settings.username,
        "local_dc": settings.local_dc,
        "consistency": settings.consistency,
    }


def run(args: list[str], env: dict[str, str | None] | None = None) -> dict[str, Any]:
    result = CliRunner().invoke(make_cli(describe), ["show", "--json", *args],
                                env={**UNSET_ENV, **(env or {})})  # fmt: skip
    assert result.exit_code == 0, result.output
    value: dict[str, Any] = json.loads(result.stdout)
    return value


def test_defaults_are_the_local_node() -> None:
    assert run([]) == {
        "hosts": ["127.0.0.1:9042"],
        "keyspace": "bdq",
        "username": None,
        "local_dc": None,
        "consistency": "LOCAL_QUORUM",
    }


def test_environment_fills_what_flags_do_not_give() -> None:
    # Given BDQ_* variables for every setting that has one
    env = {
        "BDQ_CASSANDRA_HOSTS": "10.0.0.1,10.0.0.2:9043",
        "BDQ_KEYSPACE": "from_env",
        "BDQ_CASSANDRA_USERNAME": "alice",
        "BDQ_CASSANDRA_PASSWORD": "secret",
        "BDQ_LOCAL_DC": "dc1",
    }
    # When only --keyspace and --consistency are given
    got = run(["--keyspace", "from_flag", "--consistency", "quorum"], env)
    # Then flags win, the environment fills the rest
    assert got == {
        "hosts": ["10.0.0.1:9042", "10.0.0.2:9043"],
        "keyspace": "from_flag",
        "username": "alice",
        "local_dc": "dc1",
        "consistency": "QUORUM",
    }


def test_flags_win_over_environment() -> None:
    got = run(["--hosts", "127.0.0.5:9100"], {"BDQ_CASSANDRA_HOSTS": "10.0.0.1"})
    assert got["hosts"] == ["127.0.0.5:9100"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hosts", "a:b:c"], "host 'a:b:c': must be host or host:port"),
        (["--keyspace", "9lives"], "keyspace '9lives': must start with a letter"),
        (["--consistency", "most"], "consistency 'most': must be one of ONE,"),
        (["--username", "bob"], "username and password: give both or neither"),
    ],
)
def test_bad_connection_flag_is_one_line_on_stderr_and_exit_1(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(make_cli(describe), ["show", *args], env=UNSET_ENV)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_spark_queue_errors_become_messages_other_errors_stay_bugs() -> None:
    # Given commands that raise a spark-queue error and a programming error
    def refuse(settings: ConnectionSettings) -> None:
        raise InvalidSetting("option 'x' = 'y': must be z")

    def crash(settings: ConnectionSettings) -> None:
        raise KeyError("bug")

    # When they run
    refused = CliRunner().invoke(make_cli(refuse), ["show"], env=UNSET_ENV)
    crashed = CliRunner().invoke(make_cli(crash), ["show"], env=UNSET_ENV)
    # Then the first is a message and exit status 1; the second is not swallowed
    assert (refused.exit_code, refused.stderr) == (1, "Error: option 'x' = 'y': must be z\n")
    assert isinstance(crashed.exception, KeyError)


def test_version_and_help() -> None:
    version = CliRunner().invoke(main, ["--version"])
    assert version.exit_code == 0
    assert version.stdout.startswith("bdq ")
    help_text = CliRunner().invoke(main, ["cassandra", "status", "--help"])
    assert "Exit status: 0 when every node listed is ready" in help_text.stdout


def test_unresolvable_hosts_are_one_line_naming_the_value() -> None:
    # When the contact point has no address
    result = CliRunner().invoke(main, ["queue", "list", "--hosts", "nosuch.invalid"], env=UNSET_ENV)
    # Then one line names it and the fix, with exit status 1
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: hosts 'nosuch.invalid:9042': no contact point resolves to an address; check the"
        " names (--hosts, BDQ_CASSANDRA_HOSTS) or give IP addresses\n"
    )
    assert "Traceback" not in result.output


def test_metrics_serve_where_it_cannot_listen_is_one_line(keyspace: ConnectionSettings) -> None:
    connection = ["--hosts", ",".join(map(str, keyspace.hosts)), "--keyspace", keyspace.keyspace]
    with socket.socket() as taken:
        # Given a port something else listens on
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for args, message in [
            (["--addr", "nosuch.invalid"], "--addr 'nosuch.invalid': not a name or address"),
            (["--port", port], f"--addr '127.0.0.1' --port {port}: already in use"),
        ]:
            # When the endpoint is asked to listen there
            result = CliRunner().invoke(
                main, ["metrics", "serve", *args, *connection], env=UNSET_ENV
            )
            # Then one line says why and what to do, with exit status 1
            assert result.exit_code == 1, result.output
            assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
            assert message in result.stderr
            assert "Traceback" not in result.output
