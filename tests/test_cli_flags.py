"""The flags of every ``bdq`` command, checked by click before anything touches Cassandra."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from spark_queue.cli import main

# A contact point nothing answers at: a check that came too late would fail on it instead.
NOWHERE = ["--hosts", "127.0.0.1:1"]


def commands(command: click.Command, path: tuple[str, ...] = ("bdq",)) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            found += commands(sub, (*path, name))
    return found


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path[1:]:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", commands(main), ids=" ".join)
def test_every_command_and_every_flag_has_help(path: tuple[str, ...]) -> None:
    command = command_at(path)
    assert command.help, f"{' '.join(path)}: no help"
    silent = [
        "/".join(p.opts)
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and not p.help
    ]
    assert not silent, f"{' '.join(path)}: flags without help: {silent}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue", "create", "q", "--visibility-timeout", "-5"],
         "Invalid value for '--visibility-timeout': '-5': must be a positive duration"),
        (["queue", "create", "q", "--seal-delay", "5 parsecs"], "'5 parsecs': must be a positive"),
        (["queue", "create", "q", "--bucket-size", "0"], "Invalid value for '--bucket-size'"),
        (["queue", "create", "q", "--lanes", "0"], "Invalid value for '--lanes'"),
        (["queue", "update", "q", "--message-ttl", "1.5s"], "'1.5s': must be whole seconds"),
        (["queue", "update", "q", "--max-deliveries", "0"], "Invalid value for '--max-deliveries'"),
        (["queue", "update", "q", "--max-message-bytes", "0"],
         "Invalid value for '--max-message-bytes'"),
        (["queue", "stats", "q", "--interval", "10ms"], "'10ms': must be at least 0.1 s"),
        (["send", "q", "x", "--delay", "-1"], "Invalid value for '--delay'"),
        (["send", "q", "a", "-", "b"], "MESSAGE '-' reads stdin and stands alone"),
        (["receive", "q", "-k", "2"], "No such option '-k'"),
        (["queue", "create", "q", "-k", "2"], "No such option '-k'"),
        (["receive", "q", "--ack", "--release"], "--ack and --release: give one of them"),
        (["receive", "q", "--max", "0"], "Invalid value for '-n' / '--max'"),
        (["change-visibility", "q", "receipt", "soon"], "Invalid value for 'DURATION'"),
        (["dlq", "redrive", "q", "--rate", "-1"], "Invalid value for '--rate'"),
        (["top", "--interval", "0"], "Invalid value for '--interval'"),
    ],
)  # fmt: skip
def test_bad_flag_values_are_usage_errors_before_any_connection(
    args: list[str], message: str
) -> None:
    result = CliRunner().invoke(main, [*args, *NOWHERE], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "redriving" not in result.stderr  # no progress bar came first
    assert "127.0.0.1:1" not in result.stderr and "Traceback" not in result.output


def test_durations_are_accepted_in_every_unit() -> None:
    # the help of a duration flag shows the syntax it takes
    help_text = CliRunner().invoke(main, ["receive", "--help"], terminal_width=200).stdout
    assert "--visibility-timeout DURATION" in help_text and "--wait DURATION" in help_text
    assert not re.search(r"(^|\s)-k[\s,]", help_text)  # --order-hint has no short form
