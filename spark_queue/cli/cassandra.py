"""``bdq cassandra``: the local Cassandra node (start, stop, status) and its queue keyspace."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from spark_queue.cli.flags import (
    CommandGroup,
    echo_json,
    echo_progress,
    json_option,
)
from spark_queue.config import (
    DEFAULT_KEYSPACE,
    ENV_VARS,
    ConnectionSettings,
    HostPort,
    check_keyspace,
    hosts_from_env,
    parse_hosts,
)
from spark_queue.errors import InvalidSetting
from spark_queue.local import cql
from spark_queue.local.node import (
    DEFAULT_HEAP,
    MAX_NODES,
    MAX_TIMER_SLACK_US,
    START_TIMEOUT,
    STOP_TIMEOUT,
    LocalCluster,
    NodeStatus,
)
from spark_queue.local.node_conf import DEFAULT_SUPERUSER
from spark_queue.local.processes import NODE_TIMER_SLACK_US
from spark_queue.store.keyspace import Replication, create_keyspace

HOSTS_VAR = ENV_VARS["hosts"]
R = TypeVar("R")


def _home_option(func: Callable[..., R]) -> Callable[..., R]:
    return click.option(
        "--home",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="BDQ_HOME",
        show_envvar=True,
        default=None,
        help="Folder with the nodes' configuration, data and logs."
        "  [default: .bdq/ in the checkout]",
    )(func)


def _parse_overrides(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    overrides = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{item!r}: must be KEY=VALUE with a top-level cassandra.yaml key,"
                " such as 'concurrent_reads=8'",
                ctx,
                param,
            )
        overrides[key.strip()] = value.strip()
    return overrides


def _external_hosts() -> tuple[HostPort, ...] | None:
    """The user's cluster from BDQ_CASSANDRA_HOSTS, or None (then local nodes are ours to run)."""
    try:
        return hosts_from_env()
    except InvalidSetting as e:
        raise InvalidSetting(f"{HOSTS_VAR}: {e}") from e


def _say_external(hosts: tuple[HostPort, ...], what: str) -> None:
    click.echo(
        f"{HOSTS_VAR} is set ({', '.join(map(str, hosts))}): using that cluster, {what}."
        f" Unset {HOSTS_VAR} to manage the local node."
    )


@click.group(cls=CommandGroup)
def cassandra() -> None:
    """The local Cassandra node: start (with its queue keyspace), stop, status.

    Local nodes run Apache Cassandra from the official cassandra-all artifacts
    (fetched with Maven on first use) on loopback addresses; their configuration,
    data and logs live under --home. When BDQ_CASSANDRA_HOSTS names your own
    cluster, start and stop do nothing and status asks that cluster.
    """


@cassandra.command()
@click.option(
    "--nodes",
    type=click.IntRange(1, MAX_NODES),
    default=None,
    help="How many nodes; node i listens on the i-th address from --address, node 1 is the"
    " seed.  [default: every node of the local cluster under --home, 1 for a new one]",
)
@click.option(
    "--address", default="127.0.0.1", show_default=True, help="Loopback address of node 1."
)
@click.option("--native-port", type=int, default=9042, show_default=True, help="CQL port.")
@click.option("--storage-port", type=int, default=7000, show_default=True, help="Inter-node port.")
@click.option(
    "--jmx-port",
    type=int,
    default=7199,
    show_default=True,
    help="JMX port of node 1; node i uses jmx-port + i - 1.",
)
@click.option("--heap", default=DEFAULT_HEAP, show_default=True, help="JVM heap per node.")
@click.option(
    "--timer-slack-us",
    type=click.IntRange(0, MAX_TIMER_SLACK_US),
    default=NODE_TIMER_SLACK_US,
    show_default=True,
    help="Timer slack of the nodes' threads, in microseconds (Linux; 0: the system's 50):"
    " idle request workers then wake less often, for less CPU and up to this much latency.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_parse_overrides,
    help="Override a top-level cassandra.yaml setting (repeatable).",
)
@click.option(
    "--tls",
    is_flag=True,
    help="Serve CQL over TLS as well as plain text, with a CA, node and client certificate"
    " made under HOME/tls/ (clients must show the client certificate).",
)
@click.option("--tls-required", is_flag=True, help="Like --tls, and refuse plain-text clients.")
@click.option(
    "--auth",
    is_flag=True,
    help="Ask clients for a password and check their permissions (PasswordAuthenticator,"
    " CassandraAuthorizer); the node makes Cassandra's default superuser 'cassandra'"
    " (password 'cassandra'), with which roles are then created.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=START_TIMEOUT,
    show_default=True,
    help="Seconds to wait for each node to answer CQL.",
)
@click.option(
    "--keyspace",
    envvar=ENV_VARS["keyspace"],
    show_envvar=True,
    default=DEFAULT_KEYSPACE,
    show_default=True,
    help="Queue keyspace to create on the local node when missing (SimpleStrategy, one"
    " replica per node up to 3), with its tables.",
)
@click.option(
    "--no-keyspace", is_flag=True, help="Create no keyspace (bdq keyspace create does, later)."
)
@_home_option
def start(
    nodes: int | None,
    address: str,
    native_port: int,
    storage_port: int,
    jmx_port: int,
    heap: str,
    timer_slack_us: int,
    overrides: dict[str, str],
    tls: bool,
    tls_required: bool,
    auth: bool,
    timeout: float,
    keyspace: str,
    no_keyspace: bool,
    home: Path | None,
) -> None:
    """Start the local node, or every node of the local cluster, unless already running.

    Without --nodes, starts every node recorded under --home (all three after a
    `--nodes 3`), or one node in a new home; --nodes smaller than the recorded
    cluster is refused, since the keyspaces on it would lose their quorum.
    Returns once every node answers CQL and prints its version and address,
    then creates the queue keyspace (--keyspace, default bdq) and its tables
    where missing, and says so: the local node is ready for `make run`, the
    notebook and the README's examples. Nodes that are running are left alone,
    so this is safe to call before anything that needs Cassandra. A node that
    fails to start prints the end of its log and the command exits with status 1.
    """
    check_keyspace(keyspace)
    hosts = _external_hosts()
    if hosts:
        _say_external(hosts, "no local node started, no keyspace created")
        return
    cluster = LocalCluster(
        home,
        address=address,
        native_port=native_port,
        storage_port=storage_port,
        jmx_port=jmx_port,
        heap=heap,
        timer_slack_us=timer_slack_us,
    )
    nodes = cluster.nodes_to_start(nodes)
    already = {s.index for s in cluster.status() if s.running}
    began = time.monotonic()
    mode = "required" if tls_required else "optional" if tls else None
    statuses = cluster.start(
        nodes, settings=overrides, tls=mode, auth=auth, timeout=timeout, echo=echo_progress
    )
    elapsed = time.monotonic() - began
    for s in statuses:
        if s.index > nodes:
            continue
        how = "already running" if s.index in already else "started"
        click.echo(f"Cassandra {s.version} at {s.endpoint} (node{s.index}, pid {s.pid}, {how})")
    if len(already) < nodes:
        echo_progress(f"ready in {elapsed:.1f}s; data and logs under {cluster.home}")
    if not no_keyspace:
        # A node that already answered there (not started from this home) reports no
        # status: it is the one at --address and --native-port.
        answering = [s.endpoint for s in statuses if s.index <= nodes]
        answering = answering or [f"{address}:{native_port}"]
        # Log in as the superuser when node 1 has roles (--auth now, or when it was started).
        roles = cluster.has_roles()
        _create_local_keyspace(
            cluster, answering, nodes, keyspace, tls=mode is not None, auth=roles
        )
    if mode is not None:
        files = cluster.tls_files
        endpoints = ",".join(s.endpoint for s in statuses if s.index <= nodes)
        click.echo(
            f"TLS {mode}; connect with:\n"
            f"  export BDQ_CASSANDRA_HOSTS={endpoints}\n"
            f"  export BDQ_CASSANDRA_TLS_CA_FILE={files.ca}\n"
            f"  export BDQ_CASSANDRA_TLS_CERT_FILE={files.client_cert}\n"
            f"  export BDQ_CASSANDRA_TLS_KEY_FILE={files.client_key}\n"
            f"or the connector options tlsCaFile, tlsCertFile and tlsKeyFile with these paths"
        )
    if cluster.has_roles():
        user, password = DEFAULT_SUPERUSER
        click.echo(
            f"Roles on (PasswordAuthenticator, CassandraAuthorizer); the superuser is {user!r}"
            f" with the password {password!r}: log in with\n"
            f"  export {ENV_VARS['username']}={user}\n"
            f"  export {ENV_VARS['password']}={password}\n"
            f"then create roles and grant them (bdq keyspace grant ROLE --help)"
        )


def _create_local_keyspace(
    cluster: LocalCluster,
    endpoints: list[str],
    nodes: int,
    keyspace: str,
    *,
    tls: bool,
    auth: bool,
) -> None:
    """Create ``keyspace`` and its tables on the local nodes where missing; say what was made."""
    files = cluster.tls_files if tls else None
    user, password = DEFAULT_SUPERUSER if auth else (None, None)
    settings = ConnectionSettings(
        username=user,
        password=password,
        hosts=parse_hosts(endpoints),
        keyspace=keyspace,
        tls_ca_file=str(files.ca) if files else None,
        tls_cert_file=str(files.client_cert) if files else None,
        tls_key_file=str(files.client_key) if files else None,
    )
    replication = Replication.simple(min(nodes, 3))
    with cql.connect(settings) as session:
        # An existing keyspace keeps its replication (the node may have had fewer nodes).
        report = create_keyspace(
            session, keyspace, replication, exist_ok=True, compare_replication=False
        )
    click.echo(report.summary())


@cassandra.command()
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=STOP_TIMEOUT,
    show_default=True,
    help="Seconds to wait for each node to exit before killing it.",
)
@_home_option
def stop(timeout: float, home: Path | None) -> None:
    """Stop every local node under --home and wait until it has exited.

    Data stays where it is; the next start finds it again.
    """
    hosts = _external_hosts()
    if hosts:
        _say_external(hosts, "no local node stopped")
        return
    cluster = LocalCluster(home)
    stopped = cluster.stop(timeout=timeout, echo=echo_progress)
    if stopped:
        click.echo(f"stopped {stopped} node{'s' if stopped > 1 else ''} under {cluster.home}")
    else:
        click.echo(f"no local node running under {cluster.home}")


def _state(running: bool, ready: bool) -> str:
    if ready:
        return "ready"
    return "running, not answering CQL" if running else "stopped"


def _local_rows(statuses: list[NodeStatus]) -> list[dict[str, Any]]:
    return [
        {
            "node": f"node{s.index}",
            "address": s.endpoint,
            "state": _state(s.running, s.ready),
            "running": s.running,
            "ready": s.ready,
            "pid": s.pid,
            "version": s.version,
        }
        for s in statuses
    ]


def _external_rows(hosts: tuple[HostPort, ...]) -> list[dict[str, Any]]:
    settings = ConnectionSettings.from_env()
    rows = []
    for host in hosts:
        version = cql.release_version(settings, host)
        rows.append(
            {
                "node": str(host),
                "address": str(host),
                "state": "ready" if version else "not answering CQL",
                "running": None,  # not ours to know: the process is on the user's machines
                "ready": version is not None,
                "pid": None,
                "version": version,
            }
        )
    return rows


@cassandra.command()
@json_option
@_home_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, home: Path | None) -> None:
    """Show each node: running or not, ready (answers CQL), pid, version, address.

    With BDQ_CASSANDRA_HOSTS set, asks each listed host of that cluster instead.

    Exit status: 0 when every node listed is ready; 1 when any is not, or when
    there is no node at all (never started under --home).
    """
    hosts = _external_hosts()
    if hosts:
        source, where = HOSTS_VAR, ", ".join(map(str, hosts))
        rows = _external_rows(hosts)
    else:
        cluster = LocalCluster(home)
        source, where = "local", str(cluster.home)
        rows = _local_rows(cluster.status())
    if as_json:
        echo_json({"source": source, "where": where, "nodes": rows})
    elif not rows:
        click.echo(f"no local node under {where}; start one with 'bdq cassandra start'")
    else:
        title = f"Cassandra from {HOSTS_VAR}" if hosts else f"Local Cassandra under {where}"
        table = Table(title=title, title_justify="left")
        for column in ("node", "address", "state", "pid", "version"):
            table.add_column(column)
        for row in rows:
            table.add_row(
                row["node"],
                row["address"],
                row["state"],
                str(row["pid"]) if row["pid"] else "-",
                row["version"] or "-",
            )
        Console(soft_wrap=True).print(table)
    if not rows or not all(row["ready"] for row in rows):
        ctx.exit(1)
