"""``bdq keyspace create`` and ``bdq keyspace grant``: a queue keyspace, and who may use it.

``create`` is the one command that creates a queue keyspace and its tables: every
other command only opens a keyspace that exists (and fails with the command to run
when it does not); ``bdq queue create --create-keyspace`` uses the same replication
flags. ``grant`` gives a role the least permissions of one part
(``spark_queue.store.grants``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import click

from spark_queue.cli.flags import (
    CommandGroup,
    cluster_options,
    connection_options,
    echo_json,
    json_option,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, check_keyspace
from spark_queue.errors import InvalidSetting
from spark_queue.store.grants import PARTS, grant, grant_statements
from spark_queue.store.keyspace import Replication
from spark_queue.store.session import Store

R = TypeVar("R")


@click.group(cls=CommandGroup)
def keyspace() -> None:
    """Create the keyspace that holds the queues, and grant roles their part in it.

    Nothing else creates a keyspace: every other command fails with the command
    to run when its keyspace is missing.
    """


def _parse_dcs(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, int]:
    factors: dict[str, int] = {}
    for item in values:
        dc, sep, count = item.partition("=")
        if not sep or not dc.strip() or not count.strip().isdigit() or int(count) < 1:
            raise click.BadParameter(
                f"{item!r}: must be DC=N, a data center and its replicas, such as dc1=3", ctx, param
            )
        if dc.strip() in factors:
            raise click.BadParameter(
                f"{item!r}: data center {dc.strip()!r} given twice", ctx, param
            )
        factors[dc.strip()] = int(count)
    if factors:
        try:
            Replication.network(factors)
        except InvalidSetting as e:
            raise click.BadParameter(str(e), ctx, param) from None
    return factors


def replication_options(func: Callable[..., R]) -> Callable[..., R]:
    """Add ``--dc DC=N`` (repeatable) and ``--simple N``; pass ``dcs`` and ``simple``.

    Args:
        func: A click command callback that takes ``dcs: dict[str, int]`` and
            ``simple: int | None``; :func:`replication_of` turns them into a Replication.

    Returns:
        The callback with the flags attached.
    """
    func = click.option(
        "--simple",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="SimpleStrategy with N replicas: for a local node or a test cluster.",
    )(func)
    return click.option(
        "--dc",
        "dcs",
        multiple=True,
        metavar="DC=N",
        callback=_parse_dcs,
        help="NetworkTopologyStrategy: N replicas in data center DC (repeatable, one per DC).",
    )(func)


def replication_of(dcs: dict[str, int], simple: int | None) -> Replication | None:
    """The replication the flags ask for, None if neither was given.

    Raises:
        click.UsageError: Both ``--dc`` and ``--simple`` were given (exit status 2).
    """
    if dcs and simple is not None:
        raise click.UsageError("--dc and --simple: give one of them, not both")
    if dcs:
        return Replication.network(dcs)
    return None if simple is None else Replication.simple(simple)


@keyspace.command()
@click.argument("name")
@replication_options
@click.option(
    "--exist-ok",
    is_flag=True,
    help="Accept an existing keyspace and create only its missing tables and columns (the"
    " upgrade after a new spark-queue version); a different --dc/--simple is still refused.",
)
@cluster_options
@json_option
def create(
    settings: ConnectionSettings,
    name: str,
    dcs: dict[str, int],
    simple: int | None,
    exist_ok: bool,
    as_json: bool,
) -> None:
    """Create keyspace NAME and its queue tables, and say what was made.

    Give the replication: --dc DC=N for each data center (NetworkTopologyStrategy,
    for production), or --simple N (SimpleStrategy, for a local node):

    \b
        bdq keyspace create orders --dc dc1=3 --dc dc2=3
        bdq keyspace create bdq --simple 1            # the local node
        bdq keyspace create orders --exist-ok         # add what a new version needs

    An existing keyspace is refused unless --exist-ok; its replication is never
    changed (ALTER KEYSPACE and a repair do that).
    """
    try:
        check_keyspace(name)
    except InvalidSetting as e:
        raise click.BadParameter(str(e), param_hint="NAME") from None
    replication = replication_of(dcs, simple)
    if replication is None and not exist_ok:
        raise click.UsageError(
            "give the replication of the new keyspace: --dc DC=N per data center, or --simple N"
            " for a local node (or --exist-ok to only complete an existing one)"
        )
    settings = dataclasses.replace(settings, keyspace=name)
    report = QueueClient.create_keyspace(
        replication,
        exist_ok=exist_ok,
        settings=settings,
    )
    if as_json:
        echo_json({**report.as_dict(), "hosts": [str(h) for h in settings.hosts]})
    else:
        click.echo(report.summary())


@keyspace.command(name="grant")
@click.argument("role")
@click.option("--monitor", "part", flag_value="monitor", help=PARTS["monitor"].does + ".")
@click.option("--producer", "part", flag_value="producer", help=PARTS["producer"].does + ".")
@click.option("--consumer", "part", flag_value="consumer", help=PARTS["consumer"].does + ".")
@click.option("--operator", "part", flag_value="operator", help=PARTS["operator"].does + ".")
@click.option(
    "--print", "print_only", is_flag=True,
    help="Print the GRANT statements (for cqlsh) instead of running them; connects nowhere.",
)  # fmt: skip
@connection_options
def grant_command(
    settings: ConnectionSettings, role: str, part: str | None, print_only: bool
) -> None:
    """Grant ROLE the least permissions of one part on the keyspace (--keyspace).

    Every queue of a keyspace shares its tables, so the keyspace is the unit of
    isolation: these parts separate what touches different tables, and a
    producer and a consumer both write the messages table. Running the
    statements needs a role with AUTHORIZE on the keyspace (or a superuser);
    the role itself is made with CREATE ROLE. See docs/connection.md.

    \b
        bdq keyspace grant grafana --monitor --keyspace orders
        bdq keyspace grant app --producer --print      # the CQL, for cqlsh
    """
    if part is None:
        raise click.UsageError(
            "give the part ROLE plays: --monitor, --producer, --consumer or --operator"
        )
    statements = grant_statements(part, role, settings.keyspace)
    if print_only:
        for statement in statements:
            click.echo(f"{statement};")
        return
    store = Store(settings)
    try:
        grant(store, statements)
    finally:
        store.close()
    click.echo(
        f"granted role {role!r} the {part} permissions on keyspace {settings.keyspace!r}"
        f" ({len(statements)} statements)"
    )
