"""Library errors reworded for the command line: flags instead of Python parameter names.

The library names its parameters (``max_messages 0: must be ...``) and its own API
(``pass exist_ok=True``); raised through ``bdq`` the same message must name the
flag that carried the value (``-n/--max 0: must be ...``) and the command that
fixes it. :class:`~spark_queue.cli.flags.CommandGroup` calls :func:`for_command`
on every :class:`~spark_queue.errors.SparkQueueError` it reports.
"""

from __future__ import annotations

import re

import click

# Phrases that name the Python API, and what the command line says instead.
_PHRASES = (
    ("pass exist_ok=True to use it", "pass --exist-ok to accept it"),
    ("(use Delivery.receipt)", "(give a receipt exactly as `bdq receive` printed it)"),
    ("(create it with create_queue or 'bdq queue create')", "(create it with `bdq queue create`)"),
    ("change them with update_queue", "change them with `bdq queue update`"),
)

# A message that opens with a setting's name, its value and its rule, as the library's
# checks word them: ``visibility_timeout -5.0: must be a positive number of seconds``.
_LEADING_SETTING = re.compile(
    r"^(?P<lead>(?:line \d+ of stdin: )?)(?P<name>[a-z][a-z_]*) (?=.*: must )"
)


def flag_names(command: click.Command) -> dict[str, str]:
    """Each option's parameter name and how ``--help`` spells it, e.g. ``-n/--max``.

    Args:
        command: A click command.

    Returns:
        ``{"max_messages": "-n/--max", "visibility_timeout": "--visibility-timeout", ...}``.
    """
    return {
        param.name: "/".join(param.opts)
        for param in command.params
        if isinstance(param, click.Option) and param.name and not param.is_flag
    }


def for_command(message: str, flags: dict[str, str]) -> str:
    """``message`` in the words of a command whose options are ``flags``.

    Args:
        message: The library's error message.
        flags: The command's options, as :func:`flag_names` gives them.

    Returns:
        The message with Python names replaced by the command line's.
    """
    for python, cli in _PHRASES:
        message = message.replace(python, cli)
    match = _LEADING_SETTING.match(message)
    if match and match["name"] in flags:
        message = match["lead"] + flags[match["name"]] + message[match.end("name") :]
    return message
