"""What every ``bdq`` command shares: connection flags, ``--json`` output and error reporting.

A command that talks to Cassandra takes :func:`connection_options` and receives
one checked :class:`~spark_queue.config.ConnectionSettings` as ``settings``::

    @queue.command()
    @connection_options
    @json_option
    def peek(settings: ConnectionSettings, as_json: bool) -> None: ...

Each flag falls back to its ``BDQ_*`` environment variable, then to the default
of ``ConnectionSettings``. Groups built with :class:`CommandGroup` turn any
:class:`~spark_queue.errors.SparkQueueError` raised below them into
``Error: <message>`` on stderr and exit code 1, without a traceback, the
message naming the command's flags rather than the library's parameters.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from spark_queue.cli.wording import flag_names, for_command
from spark_queue.config import CONSISTENCY_LEVELS, ENV_VARS, ConnectionSettings
from spark_queue.errors import SparkQueueError

R = TypeVar("R")

# (parameter name, flag, help) in the order --help lists them.
_CONNECTION_FLAGS = (
    ("hosts", "--hosts", "Contact points, a comma list of host[:port].  [default: 127.0.0.1:9042]"),
    ("keyspace", "--keyspace", "Keyspace that holds the queues.  [default: bdq]"),
    ("username", "--username", "User for password authentication."),
    ("password", "--password", "Password for password authentication."),
    ("local_dc", "--local-dc", "Data center of the load-balancing policy."),
    (
        "consistency",
        "--consistency",
        f"Read/write consistency, one of {', '.join(CONSISTENCY_LEVELS)}.  [default: LOCAL_QUORUM]",
    ),
    (
        "auth_provider",
        "--auth-provider",
        "module.Class of a driver auth provider, given the username and password.",
    ),
    (
        "protocol_version",
        "--protocol-version",
        "Native protocol version to pin (3, 4 or 5).  [default: the highest the cluster speaks]",
    ),
    ("tls", "--tls/--no-tls", "Encrypt connections with TLS.  [default: on with any TLS file]"),
    ("tls_ca_file", "--tls-ca-file", "PEM bundle of the CAs that sign the nodes' certificates."),
    ("tls_cert_file", "--tls-cert-file", "PEM client certificate (mutual TLS)."),
    ("tls_key_file", "--tls-key-file", "PEM private key of the client certificate."),
    (
        "tls_check_hostname",
        "--tls-check-hostname/--no-tls-check-hostname",
        "Check that each node's certificate names its address.  [default: on]",
    ),
)


class CommandGroup(click.Group):
    """A click group that reports spark-queue errors as a message and exit code 1.

    Subcommands run inside the group's ``invoke``, so one group of this class at
    the root covers every command below it; subgroups use it too so that they
    behave the same when invoked on their own (as tests do).
    """

    def invoke(self, ctx: click.Context) -> Any:
        """Run the group and its subcommand, translating SparkQueueError."""
        try:
            return super().invoke(ctx)
        except SparkQueueError as e:
            name = ctx.invoked_subcommand
            command = self.get_command(ctx, name) if name else None
            flags = flag_names(command) if command is not None else {}
            raise click.ClickException(for_command(str(e), flags)) from e


def connection_options(func: Callable[..., R]) -> Callable[..., R]:
    """Add the connection flags to a command and pass it ``settings`` instead.

    The flags are ``--hosts``, ``--keyspace``, ``--username``, ``--password``,
    ``--local-dc``, ``--consistency``, ``--auth-provider``, ``--protocol-version``
    and the ``--tls*`` flags; each (but ``--consistency``) reads its ``BDQ_*``
    environment variable when not given.

    Args:
        func: A click command callback that takes ``settings: ConnectionSettings``.

    Returns:
        The callback with the flags attached.
    """
    return _with_flags(func, list(_CONNECTION_FLAGS))


def cluster_options(func: Callable[..., R]) -> Callable[..., R]:
    """The connection flags but ``--keyspace``, for commands that name the keyspace themselves.

    ``settings.keyspace`` is ``BDQ_KEYSPACE`` or the default: such a command
    replaces it with the keyspace it was given.

    Args:
        func: A click command callback that takes ``settings: ConnectionSettings``.

    Returns:
        The callback with the flags attached.
    """
    return _with_flags(func, [flag for flag in _CONNECTION_FLAGS if flag[0] != "keyspace"])


def _with_flags(func: Callable[..., R], flags: list[tuple[str, str, str]]) -> Callable[..., R]:
    names = [name for name, _, _ in flags]

    @functools.wraps(func)
    def with_settings(*args: Any, **kwargs: Any) -> R:
        given = {name: kwargs.pop(name) for name in names}
        kwargs["settings"] = ConnectionSettings.from_env(**given)
        return func(*args, **kwargs)

    command: Callable[..., R] = with_settings
    for name, flag, help_text in reversed(flags):
        envvar = ENV_VARS.get(name)
        command = click.option(
            flag,
            name,
            envvar=envvar,
            show_envvar=envvar is not None,
            default=None,
            help=help_text,
        )(command)
    return command


def json_option(func: Callable[..., R]) -> Callable[..., R]:
    """Add ``--json`` (parameter ``as_json``): print machine-readable JSON instead of text.

    Args:
        func: A click command callback that takes ``as_json: bool``.

    Returns:
        The callback with the flag attached.
    """
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        func
    )


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (paths, enums and the like as strings).

    Times are ISO-8601 in UTC (``2026-11-25T14:59:39.123000+00:00``); a naive one
    is taken to be UTC already.

    Args:
        value: Anything ``json.dumps`` can write once non-JSON values become strings.
    """
    click.echo(json.dumps(value, indent=2, default=_json_value))


def _json_value(value: object) -> str:
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat()
    return str(value)


def echo_progress(message: str) -> None:
    """Print a progress line on stderr, so stdout keeps only the command's result.

    Args:
        message: One line of progress.
    """
    click.echo(message, err=True)
