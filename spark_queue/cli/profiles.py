"""Profiles of the ``bdq`` config file, loaded into click's ``default_map``.

The file is ``~/.config/bdq/config.toml`` (click's application folder for
``bdq``), or the path in ``BDQ_CONFIG``. Each ``[profiles.NAME]`` table gives
defaults for the flags of the ``bdq`` group (the connection flags), and a
sub-table named after a command gives defaults for that command's flags::

    [profiles.prod]
    hosts = "cass1:9042,cass2:9042"
    keyspace = "orders"
    username = "app"
    password_file = "~/.config/bdq/prod.password"

    [profiles.prod.receive]
    wait = "2s"

``--profile NAME`` (or ``BDQ_PROFILE``) picks one; without it the profile
``default`` applies when the file has one. A flag on the command line, then
its ``BDQ_*`` variable, win over the profile (click's precedence of
``default_map``). A password is never read from this file: ``password_file``
names a file that holds it.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from spark_queue.errors import InvalidSetting, SparkQueueError

R = TypeVar("R")

#: Variable naming the config file instead of the default place.
CONFIG_ENV = "BDQ_CONFIG"
#: Variable naming the profile when ``--profile`` is not given.
PROFILE_ENV = "BDQ_PROFILE"
#: The profile that applies without ``--profile``, when the file has one.
DEFAULT_PROFILE = "default"


def profile_option(func: Callable[..., R]) -> Callable[..., R]:
    """Add ``--profile NAME`` to a group: the profile's values become its ``default_map``.

    The option is eager, so the profile is loaded before the group's other
    flags look up their defaults; the commands below find their sub-tables
    there through click's own ``default_map`` lookup.

    Args:
        func: The group's callback (it does not receive the profile's name).

    Returns:
        The callback with the option attached.
    """
    return click.option(
        "--profile", envvar=PROFILE_ENV, show_envvar=True, is_eager=True, expose_value=False,
        callback=_use_profile, metavar="NAME",
        help="Profile of the config file (BDQ_CONFIG, else ~/.config/bdq/config.toml) whose"
        " values are the flags' defaults.  [default: the profile 'default', if any]",
    )(func)  # fmt: skip


def _use_profile(ctx: click.Context, param: click.Parameter, name: str | None) -> None:
    try:
        profile = load_profile(ctx.command, name, config_path())
    except SparkQueueError as e:
        raise click.ClickException(str(e)) from e
    if profile:
        ctx.default_map = {**profile, **(ctx.default_map or {})}


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``BDQ_CONFIG``, else ``config.toml`` in click's application folder (``~/.config/bdq``)."""
    env = os.environ if env is None else env
    given = env.get(CONFIG_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    return Path(click.get_app_dir("bdq", force_posix=False)) / "config.toml"


def load_profile(command: click.Command, name: str | None, path: Path) -> dict[str, Any]:
    """The ``default_map`` of profile ``name`` in ``path``, every key checked against ``command``.

    Args:
        command: The ``bdq`` group: keys must be its flags or its commands' names.
        name: The profile asked for; None for ``default`` if there is one.
        path: The config file.

    Raises:
        InvalidSetting: The file is not TOML, the profile asked for is not in it,
            or a key is no flag of the command it is under; each names the fix.
    """
    if not path.is_file():
        if name is None:
            return {}
        raise InvalidSetting(
            f"--profile {name!r}: no config file at {str(path)!r}; write the profile there"
            f" ([profiles.{name}]) or point {CONFIG_ENV} at your file"
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InvalidSetting(f"config {str(path)!r}: not readable TOML ({e}); fix the file") from e
    profiles = data.get("profiles", {})
    unknown = sorted(set(data) - {"profiles"})
    if unknown or not isinstance(profiles, dict):
        raise InvalidSetting(
            f"config {str(path)!r}: {'key ' + repr(unknown[0]) if unknown else 'profiles'}:"
            " the file holds only [profiles.NAME] tables"
        )
    if name is None:
        name = DEFAULT_PROFILE
        if name not in profiles:
            return {}
    if name not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise InvalidSetting(
            f"--profile {name!r}: not in {str(path)!r} (its profiles: {known}); add"
            f" [profiles.{name}] or pick one of those"
        )
    return _checked(command, profiles[name], f"{path} [profiles.{name}]")


def _checked(command: click.Command, table: object, where: str) -> dict[str, Any]:
    """``table`` with flag names as click's parameter names, each key known to ``command``."""
    if not isinstance(table, dict):
        raise InvalidSetting(f"{where}: must be a table of flags")
    params = {p.name for p in command.params if p.name and p.expose_value}
    commands = command.commands if isinstance(command, click.Group) else {}
    checked: dict[str, Any] = {}
    for key, value in table.items():
        if key in commands:
            checked[key] = _checked(commands[key], value, f"{where}.{key}")
            continue
        param = key.replace("-", "_")
        if param == "password":
            raise InvalidSetting(
                f"{where}: password: never kept in this file; set password_file to a file"
                " holding it, or use --password-prompt or BDQ_CASSANDRA_PASSWORD"
            )
        if param not in params:
            known = ", ".join(sorted(params | set(commands)))
            raise InvalidSetting(f"{where}: unknown key {key!r}; known here: {known}")
        checked[param] = value
    return checked
