"""What every ``bdq`` command shares: connection flags, ``--json`` output and error reporting.

A command that talks to Cassandra takes :func:`connection_options` and receives
one checked :class:`~spark_queue.config.ConnectionSettings` as ``settings``::

    @queue.command()
    @connection_options
    @json_option
    def peek(settings: ConnectionSettings, as_json: bool) -> None: ...

Each flag falls back to the same flag given to the ``bdq`` group, then to its
``BDQ_*`` environment variable, then to the profile of the config file, then to
the default of ``ConnectionSettings``. A password never comes as a flag's value:
``--password-prompt``, ``--password-file`` or ``BDQ_CASSANDRA_PASSWORD``.

Groups built with :class:`CommandGroup` turn any
:class:`~spark_queue.errors.SparkQueueError` raised below them into
``Error: <message>`` on stderr and exit code 1, without a traceback, the
message naming the command's flags rather than the library's parameters.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from spark_queue.cli.wording import flag_names, for_command
from spark_queue.config import CONSISTENCY_LEVELS, ENV_VARS, ConnectionSettings, parse_duration
from spark_queue.errors import InvalidSetting, SparkQueueError

R = TypeVar("R")

# (parameter name, flag, help) in the order --help lists them.
_CONNECTION_FLAGS = (
    ("hosts", "--hosts", "Contact points, a comma list of host[:port].  [default: 127.0.0.1:9042]"),
    ("keyspace", "--keyspace", "Keyspace that holds the queues.  [default: bdq]"),
    ("username", "--username", "User for password authentication."),
    (
        "password_file",
        "--password-file",
        "File holding the password (its first line); or --password-prompt, or"
        " BDQ_CASSANDRA_PASSWORD.",
    ),
    ("password_prompt", "--password-prompt", "Ask for the password, without echoing it."),
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
#: Variables of the flags that are not settings of ConnectionSettings.
_FLAG_ENV_VARS = {"password_file": "BDQ_CASSANDRA_PASSWORD_FILE"}
#: How a user gives a password instead of ``--password VALUE``.
PASSWORD_WAYS = "--password-prompt, --password-file PATH or the variable BDQ_CASSANDRA_PASSWORD"


class RefusedFlag(click.ClickException):
    """A flag that the command line no longer takes: one line on stderr, exit status 2."""

    exit_code = 2


class Duration(click.ParamType[float]):
    """A flag's duration, written as everywhere else (``config.parse_duration``): 30, '500ms', '2m'.

    Args:
        allow_zero: Accept 0 (a wait, a delay).
        minimum: Smallest number of seconds accepted (a refresh interval).
        whole: Accept only whole seconds, returned as an int (a TTL).
    """

    name = "duration"

    def __init__(self, *, allow_zero: bool = False, minimum: float = 0.0, whole: bool = False):
        self.allow_zero = allow_zero
        self.minimum = minimum
        self.whole = whole

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """Seconds (float, or int when ``whole``); a usage error naming the rule otherwise."""
        try:
            seconds = parse_duration("", value, allow_zero=self.allow_zero, whole=self.whole)
        except InvalidSetting as e:
            self.fail(str(e).strip(), param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value!r}: must be at least {self.minimum:g} s", param, ctx)
        return int(seconds) if self.whole else seconds

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        """How --help shows the value."""
        return "DURATION"


class ConnectionFlags(dict[str, Any]):
    """The connection flags given to the ``bdq`` group itself, kept in ``ctx.obj``."""


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

    The flags are ``--hosts``, ``--keyspace``, ``--username``, ``--password-file``,
    ``--password-prompt``, ``--local-dc``, ``--consistency``, ``--auth-provider``,
    ``--protocol-version`` and the ``--tls*`` flags; each reads its ``BDQ_*``
    environment variable when not given. A flag given to the command wins over
    the same flag given to the ``bdq`` group (:func:`group_connection_options`),
    which wins over the environment, then a profile, then the default.

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


def group_connection_options(func: Callable[..., R]) -> Callable[..., R]:
    """The connection flags on a group: ``bdq --hosts X queue list``.

    The group's callback gets none of them: what was given (on the command
    line, by a ``BDQ_*`` variable or by a profile's ``default_map``) goes to
    ``ctx.obj`` as :class:`ConnectionFlags`, where each command's
    :func:`connection_options` finds it.

    Args:
        func: The group's callback.

    Returns:
        The callback with the flags attached.
    """

    @functools.wraps(func)
    def keep_flags(*args: Any, **kwargs: Any) -> R:
        ctx = click.get_current_context()
        given = {name: kwargs.pop(name) for name, _, _ in _CONNECTION_FLAGS}
        given["password_prompt"] = given["password_prompt"] or None  # False: not asked for
        ctx.obj = ConnectionFlags({k: v for k, v in given.items() if v is not None})
        return func(*args, **kwargs)

    return _attach(keep_flags, list(_CONNECTION_FLAGS))


def _with_flags(func: Callable[..., R], flags: list[tuple[str, str, str]]) -> Callable[..., R]:
    names = [name for name, _, _ in flags]

    @functools.wraps(func)
    def with_settings(*args: Any, **kwargs: Any) -> R:
        ctx = click.get_current_context()
        given = {name: kwargs.pop(name) for name in names}
        outer = ctx.find_object(ConnectionFlags)
        if outer is not None:
            for name, value in outer.items():
                on_line = ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
                if name in given and not on_line:
                    given[name] = value
        kwargs["settings"] = settings_of(given)
        return func(*args, **kwargs)

    return _attach(with_settings, flags)


def _attach(func: Callable[..., R], flags: list[tuple[str, str, str]]) -> Callable[..., R]:
    command: Callable[..., R] = click.option(
        "--password",
        hidden=True,
        expose_value=False,
        callback=_refuse_password,
        help="Refused: see --password-file and --password-prompt.",
    )(func)
    for name, flag, help_text in reversed(flags):
        envvar = ENV_VARS.get(name, _FLAG_ENV_VARS.get(name))
        extra: dict[str, Any] = {"default": None}
        if name == "password_prompt":
            extra = {"is_flag": True, "default": False}
        elif name in ("tls_ca_file", "tls_cert_file", "tls_key_file", "password_file"):
            extra["type"] = click.Path(dir_okay=False)
        command = click.option(
            flag, name, envvar=envvar, show_envvar=envvar is not None, help=help_text, **extra
        )(command)
    return command


def _refuse_password(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise RefusedFlag(
            f"--password: a password on the command line shows in `ps` and in the shell's"
            f" history, so bdq does not take one; use {PASSWORD_WAYS}"
        )


def settings_of(given: dict[str, Any]) -> ConnectionSettings:
    """Connection settings from the flags' values (None: not given); the password read here.

    ``--password-prompt`` asks on the terminal (stderr), ``--password-file``
    reads the file's first line; otherwise ``BDQ_CASSANDRA_PASSWORD`` applies.
    """
    given = dict(given)
    prompt = bool(given.pop("password_prompt", False))
    path = given.pop("password_file", None)
    if prompt and path is not None:
        raise InvalidSetting("--password-prompt and --password-file: give one of them, not both")
    if prompt:
        given["password"] = click.prompt("Password", hide_input=True, err=True)
    elif path is not None:
        given["password"] = read_password(path)
    return ConnectionSettings.from_env(**given)


def read_password(path: str) -> str:
    """The first line of ``path`` (``~`` expanded), without its line break.

    Raises:
        InvalidSetting: The file cannot be read or its first line is empty.
    """
    file = Path(path).expanduser()
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise InvalidSetting(
            f"--password-file {path!r}: cannot be read ({why}); give a readable file whose first"
            " line is the password"
        ) from e
    if not lines or not lines[0]:
        raise InvalidSetting(
            f"--password-file {path!r}: its first line is empty; write the password there"
        )
    return lines[0]


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


def yes_option(func: Callable[..., R]) -> Callable[..., R]:
    """Add ``--yes``/``-y`` (parameter ``yes``): do it without asking first.

    Args:
        func: A click command callback that takes ``yes: bool`` and calls :func:`confirm`.

    Returns:
        The callback with the flag attached.
    """
    return click.option(
        "--yes", "-y", "yes", is_flag=True, help="Do not ask first (scripts, CI: no terminal)."
    )(func)


def confirm(question: str, refusal: str) -> None:
    """Ask ``question`` on the terminal; stop with ``refusal`` (exit 1) unless the answer is yes.

    Without a terminal to answer (stdin closed, as in CI), the answer is no.

    Args:
        question: What is about to happen, with its size.
        refusal: One line naming what was not done and how to do it anyway.
    """
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.Abort:  # end of input or Ctrl-C: nobody said yes
        click.echo(err=True)  # end the question's line
        agreed = False
    if not agreed:
        raise click.ClickException(refusal)


def echo_progress(message: str) -> None:
    """Print a progress line on stderr, so stdout keeps only the command's result.

    Args:
        message: One line of progress.
    """
    click.echo(message, err=True)
