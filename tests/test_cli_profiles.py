"""Where ``bdq`` takes its connection from: group flags, ``BDQ_*``, profiles, the password."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from spark_queue import ConnectionSettings
from spark_queue.cli import main
from spark_queue.cli.flags import CommandGroup, connection_options, group_connection_options
from spark_queue.cli.profiles import profile_option

BAD_HOST = "nosuch.invalid"
CLEAN_ENV: dict[str, str | None] = {
    "BDQ_CASSANDRA_HOSTS": None,
    "BDQ_KEYSPACE": None,
    "BDQ_CONSISTENCY": None,
    "BDQ_CASSANDRA_USERNAME": None,
    "BDQ_CASSANDRA_PASSWORD": None,
    "BDQ_CASSANDRA_PASSWORD_FILE": None,
    "BDQ_PROFILE": None,
}


def bdq(*args: str, env: dict[str, str | None] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={**CLEAN_ENV, **(env or {})}, input=stdin)


def one_line_error(result: Result, code: int, *parts: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1, result.stderr
    for part in parts:
        assert part in result.stderr
    assert "Traceback" not in result.output


def settings_cli() -> Any:
    """A group with the connection flags on it and on its one command, which prints them."""

    @click_group()
    @profile_option
    @group_connection_options
    def cli() -> None:
        pass

    @cli.command()
    @connection_options
    def show(settings: ConnectionSettings) -> None:
        print(json.dumps({
            "hosts": [str(h) for h in settings.hosts], "keyspace": settings.keyspace,
            "consistency": settings.consistency, "password": settings.password,
        }))  # fmt: skip

    return cli


def click_group() -> Any:
    import click

    return click.group(cls=CommandGroup)


def shown(*args: str, env: dict[str, str | None] | None = None, stdin: str | None = None) -> Any:
    result = CliRunner().invoke(
        settings_cli(), list(args), env={**CLEAN_ENV, **(env or {})}, input=stdin
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1])


def test_connection_flags_work_before_the_command_and_the_command_s_own_win() -> None:
    # Given the same flag on the group, in the environment, and on the command
    env = {"BDQ_KEYSPACE": "from_env", "BDQ_CONSISTENCY": "one"}
    # Then the command's flag wins, then the group's, then the environment
    assert shown("--keyspace", "group", "show", env=env)["keyspace"] == "group"
    assert shown("--keyspace", "group", "show", "--keyspace", "own", env=env)["keyspace"] == "own"
    assert shown("show", env=env) | {"hosts": None, "password": None} == {
        "hosts": None, "keyspace": "from_env", "consistency": "ONE", "password": None,
    }  # fmt: skip


def test_the_real_group_hands_its_flags_to_every_command() -> None:
    # When the contact point is given to `bdq` itself, before `queue list`
    result = bdq("--hosts", BAD_HOST, "queue", "list")
    # Then the command used it (and said it does not resolve, in one line)
    one_line_error(result, 1, f"hosts '{BAD_HOST}:9042': no contact point resolves")


def test_consistency_has_its_variable_like_every_connection_flag() -> None:
    result = bdq("queue", "list", env={"BDQ_CONSISTENCY": "most"})
    one_line_error(result, 1, "--consistency 'most': must be one of ONE,")
    help_text = bdq("queue", "list", "--help").stdout
    assert "BDQ_CONSISTENCY" in help_text


@pytest.mark.parametrize("where", ["group", "command"])
def test_a_password_on_the_command_line_is_refused_naming_the_alternatives(where: str) -> None:
    args = ["--password", "hunter2", "queue", "list"]
    if where == "command":
        args = ["queue", "list", "--password", "hunter2"]
    result = bdq(*args)
    one_line_error(
        result, 2, "--password:", "--password-prompt", "--password-file", "BDQ_CASSANDRA_PASSWORD"
    )
    assert "hunter2" not in result.output


def test_the_password_comes_from_a_file_a_prompt_or_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    assert (
        shown("show", "--username", "u", "--password-file", str(secret))["password"] == "from-file"
    )
    assert (
        shown("--username", "u", "--password-prompt", "show", stdin="typed\n")["password"]
        == "typed"
    )
    env = {"BDQ_CASSANDRA_USERNAME": "u", "BDQ_CASSANDRA_PASSWORD": "from-env"}
    assert shown("show", env=env)["password"] == "from-env"
    result = CliRunner().invoke(
        settings_cli(), ["show", "--username", "u", "--password-file", str(tmp_path / "none")],
        env=CLEAN_ENV,
    )  # fmt: skip
    one_line_error(result, 1, f"--password-file '{tmp_path / 'none'}': cannot be read")


def write_config(tmp_path: Path, text: str) -> dict[str, str | None]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return {"BDQ_CONFIG": str(path)}


def test_a_profile_gives_the_defaults_and_flags_and_variables_win(tmp_path: Path) -> None:
    # Given a config file with a default profile and a named one, and one command's defaults
    env = write_config(tmp_path, (
        '[profiles.default]\nkeyspace = "ks_default"\n'
        '[profiles.prod]\nhosts = "10.1.1.1:9043"\nkeyspace = "ks_prod"\n'
        '[profiles.prod.show]\nconsistency = "ALL"\n'
    ))  # fmt: skip
    # Then the default profile applies without --profile, the named one with it
    assert shown("show", env=env)["keyspace"] == "ks_default"
    got = shown("--profile", "prod", "show", env=env)
    assert got == {"hosts": ["10.1.1.1:9043"], "keyspace": "ks_prod", "consistency": "ALL",
                   "password": None}  # fmt: skip
    # And a variable, then a flag, win over the profile
    assert shown("show", env={**env, "BDQ_PROFILE": "prod"})["keyspace"] == "ks_prod"
    assert shown("show", env={**env, "BDQ_KEYSPACE": "ks_env"})["keyspace"] == "ks_env"
    assert shown("--profile", "prod", "--keyspace", "ks_flag", "show", env=env)["keyspace"] == (
        "ks_flag"
    )


def test_the_real_bdq_reads_its_profile(tmp_path: Path) -> None:
    env = write_config(tmp_path, f'[profiles.far]\nhosts = "{BAD_HOST}"\n')
    one_line_error(bdq("--profile", "far", "queue", "list", env=env), 1, f"hosts '{BAD_HOST}:9042'")


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        ("[profiles.a]\n", ["--profile", "b"], "--profile 'b': not in"),
        ('[profiles.a]\nhost = "x"\n', ["--profile", "a"], "[profiles.a]: unknown key 'host'"),
        ('[profiles.a]\npassword = "x"\n', ["--profile", "a"], "password: never kept in this file"),
        ("[profiles.a\n", ["--profile", "a"], "not readable TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_key_and_the_fix(
    tmp_path: Path, text: str, args: list[str], message: str
) -> None:
    env = write_config(tmp_path, text)
    one_line_error(bdq(*args, "queue", "list", env=env), 1, message)


def test_shell_completion_is_click_s_own() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "_BDQ_COMPLETE": "bash_source"}
    done = subprocess.run(
        [sys.executable, "-m", "spark_queue.cli"], env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "_bdq_completion()" in done.stdout and "_BDQ_COMPLETE=bash_complete" in done.stdout
