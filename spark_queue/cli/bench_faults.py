"""``bdq bench faults``: the BlueDove evaluation under faults on a three-node cluster.

Without ``BDQ_CASSANDRA_HOSTS`` the command starts its own three local nodes on
127.0.0.51-53 (JMX 7290-7292, home ``<bdq home>/faults``) and stops them when it
ends (``--keep-cluster`` leaves them running for the next run). With
``BDQ_CASSANDRA_HOSTS`` it uses that cluster as it is and skips the node fault,
which needs nodes it can kill. The network fault's proxies listen on
127.0.0.61 and the next addresses, on the nodes' CQL port. ``--pipeline`` runs
the random-kill Spark relay instead (spark_queue.bench.faults_pipeline), and
``--pipeline --node-fault`` kills a node of the bench's own three beside it.
The faults ``skew``, ``pause``, ``speculation`` and ``stage-retry`` run that relay
under the faults of a real cluster instead (spark_queue.bench.faults_levels),
each checked by source id; ``skew`` needs Debian's ``faketime``.
"""

from __future__ import annotations

import dataclasses
import random
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from spark_queue.bench.faults_bench import fresh_workdir, run_faults_bench
from spark_queue.bench.faults_params import PIPELINE_FAULTS, FaultsParams, check_faults
from spark_queue.bench.faults_report import HEADERS, level_row, write_report
from spark_queue.cli.flags import echo_json, echo_progress, json_option
from spark_queue.config import ConnectionSettings, hosts_from_env
from spark_queue.errors import InvalidSetting, MissingExtra
from spark_queue.local import cql
from spark_queue.local.node import LocalCluster
from spark_queue.local.node_conf import default_home

if TYPE_CHECKING:
    from spark_queue.bench.faults_levels import PipelineLevel
    from spark_queue.bench.faults_pipeline import NodeFaults

ADDRESS = "127.0.0.51"
JMX_PORT = 7290
PROXY_ADDRESS = "127.0.0.61"
KEYSPACE = "bdq_faults"


def _console() -> Console:
    """Stdout console; 160 columns when it is not a terminal (the table has 12 of them)."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(soft_wrap=True, width=160)


def _cluster(home: Path) -> LocalCluster:
    """The bench's three local nodes, seeded with the default home's resolved classpath."""
    lib = default_home() / "lib"
    if lib.is_dir() and not (home / "lib").exists():
        shutil.copytree(lib, home / "lib")
    return LocalCluster(home, address=ADDRESS, jmx_port=JMX_PORT)


@click.command("faults")
@click.option("--quick", is_flag=True, help="Short levels, MTTF 20 s / MTTR 5 s: a few minutes.")
@click.option(
    "--faults",
    "chosen",
    default="network,receiver,node,load",
    show_default=True,
    help="Comma list of network, receiver, node, load; and of the Spark relay's skew, pause,"
    " speculation, stage-retry (checked by source id; --messages, --kills for skew).",
)
@click.option("--rate", type=click.FloatRange(1), default=None, help="Offered msgs/s of faults.")
@click.option("--seconds", type=click.FloatRange(1), default=None, help="Sending time per level.")
@click.option(
    "--pipeline",
    is_flag=True,
    help="Instead: a queue -> Spark -> queue relay SIGKILLed at random points (--kills).",
)
@click.option(
    "--node-fault",
    is_flag=True,
    help="With --pipeline: in every other relay run a node of the three is SIGKILLed and"
    " restarted (needs the bench's own nodes, not BDQ_CASSANDRA_HOSTS).",
)
@click.option(
    "--messages", type=click.IntRange(1), default=None,
    help="Messages the relay carries: with --pipeline (20000), per relay level (6000).",
)  # fmt: skip
@click.option(
    "--kills", type=click.IntRange(0, 1000), default=10, show_default=True,
    help="With --pipeline: SIGKILLs of the relay at random points.",
)  # fmt: skip
@click.option("--seed", type=click.IntRange(0), default=None, help="[default: random]")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write report.md and PNG plots into this folder.",
)
@click.option(
    "--cluster-home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Home of the bench's local nodes.  [default: <bdq home>/faults]",
)
@click.option("--keep-cluster", is_flag=True, help="Leave the bench's local nodes running.")
@json_option
def faults(
    quick: bool,
    chosen: str,
    pipeline: bool,
    node_fault: bool,
    seed: int | None,
    report_dir: Path | None,
    cluster_home: Path | None,
    keep_cluster: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Loss, duplication, order and response times under one fault at a time.

    Faults: client connections dropped with probability p per request by
    proxies between the clients and the nodes; receiver processes SIGKILLed
    with probability p per received batch (and restarted); Cassandra nodes
    SIGKILLed after Exp(MTTF) and restarted after MTTR, at LOCAL_QUORUM with
    replication factor 3; and, without faults, the offered load stepped up
    until response time p99 passes 200 ms. Loss must be
    0 in every level: the command exits with 1 otherwise.
    """
    names = check_faults([n.strip() for n in chosen.split(",") if n.strip()])
    relay_levels = [n for n in names if n in PIPELINE_FAULTS]
    names = [n for n in names if n not in PIPELINE_FAULTS]
    external = bool(hosts_from_env())
    if node_fault and (not pipeline or external):
        raise InvalidSetting(
            "--node-fault: needs --pipeline and the bench's own three nodes"
            " (BDQ_CASSANDRA_HOSTS unset), so that it can kill and restart them"
        )
    if pipeline or relay_levels:  # the Spark relay needs the 'spark' extra: say so first
        try:
            from spark_queue.bench import faults_levels, faults_pipeline
        except MissingExtra as e:
            raise MissingExtra("bdq bench faults --pipeline", e.extra, e.name) from e
    cluster = None if external else _cluster(cluster_home or default_home() / "faults")
    if cluster is not None:
        cluster.start(nodes=3, echo=echo_progress)
        hosts = ",".join(cluster.node(i).address for i in (1, 2, 3))
        settings = ConnectionSettings.from_env(
            {}, hosts=hosts, keyspace=KEYSPACE, replication_factor=3
        )
    else:
        given = ConnectionSettings.from_env(keyspace=KEYSPACE)
        # RF 3 as in the paper, or as many replicas as contact points when fewer
        settings = dataclasses.replace(given, replication_factor=min(3, len(given.hosts)))
        if "node" in names:
            echo_progress("BDQ_CASSANDRA_HOSTS is set: skipping the node fault (no nodes to kill)")
            names.remove("node")
    workdir = fresh_workdir()
    try:
        # The bench's own scratch keyspace: created on purpose, replicated as the paper's.
        if cql.ensure_keyspace(settings):
            echo_progress(f"keyspace {settings.keyspace} created (replication factor"
                          f" {settings.replication_factor})")  # fmt: skip
        if pipeline:
            disturb = None
            if node_fault:
                assert cluster is not None  # checked above: no BDQ_CASSANDRA_HOSTS
                seed = random.SystemRandom().randrange(2**31) if seed is None else seed
                disturb = faults_pipeline.NodeFaults(cluster, seed, echo=echo_progress)
            messages = options.pop("messages") or 20_000
            _pipeline(
                settings, workdir, seed=seed, as_json=as_json, disturb=disturb,
                messages=messages, **options,
            )  # fmt: skip
            return
        params = FaultsParams.quick(seed) if quick else FaultsParams()
        if seed is not None:
            params = dataclasses.replace(params, seed=seed)
        if options.get("rate") is not None:
            params = dataclasses.replace(params, rate=options["rate"])
        if options.get("seconds") is not None:
            params = dataclasses.replace(params, seconds=options["seconds"])
        result = None
        if names:
            result = run_faults_bench(
                settings,
                params,
                workdir,
                cluster=cluster,
                faults=names,
                proxy_address=PROXY_ADDRESS,
                echo=echo_progress,
            )
        levels = []
        if relay_levels:
            levels = faults_levels.run_pipeline_levels(
                settings, workdir / "relay", relay_levels,
                messages=options.get("messages") or (3000 if quick else 6000),
                kills=2 if quick and options.get("kills") == 10 else options["kills"],
                seed=params.seed, lease=8.0 if quick else 10.0, echo=echo_progress,
            )  # fmt: skip
    finally:
        if cluster is not None and not keep_cluster:
            cluster.stop(echo=echo_progress)
        shutil.rmtree(workdir, ignore_errors=True)
    command = shlex.join(["bdq", "bench", "faults", *sys.argv[3:]])
    if "--seed" not in sys.argv:
        command += f" --seed {params.seed}"
    if levels:
        _relay_levels(levels, as_json, report_dir, command)
    if result is None:
        return
    if report_dir is not None:
        for path in write_report(result, report_dir, command):
            echo_progress(f"wrote {path}")
    if as_json:
        echo_json(
            {"seed": params.seed, "params": params.__dict__, "saturation": result.saturation,
             "levels": [
                level.__dict__ | {"send_rate": level.send_rate} for level in result.levels
            ]}
        )  # fmt: skip
    else:
        table = Table(*HEADERS, title=f"bdq bench faults (seed {params.seed})")
        for level in result.levels:
            table.add_row(*level_row(level))
        _console().print(table)
        if result.saturation is not None:
            click.echo(f"saturation: {result.saturation:g} msgs/s offered (p99 within 200 ms)")
    if result.lost:
        raise click.ClickException(f"{result.lost} messages lost: a defect, please report it")


def _relay_levels(
    levels: list[PipelineLevel], as_json: bool, report_dir: Path | None, command: str
) -> None:
    """Print (or write) the relay levels; exit 1 when one of them was not exactly once."""
    from spark_queue.bench.faults_levels import LEVEL_HEADERS, level_cells, levels_markdown

    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        path = report_dir / "relay-levels.md"
        path.write_text(levels_markdown(levels, command))
        echo_progress(f"wrote {path}")
    if as_json:
        echo_json([level.__dict__ | {"exactly_once": level.exactly_once} for level in levels])
    else:
        table = Table(*LEVEL_HEADERS, title="the Spark relay under faults (by source id)")
        for level in levels:
            table.add_row(*level_cells(level))
        _console().print(table)
        for level in levels:
            click.echo(f"{level.fault} {level.level}: " + "; ".join(level.evidence))
    lost = sum(level.result.missing for level in levels)
    if lost:
        raise click.ClickException(f"{lost} messages lost: a defect, please report it")
    if not all(level.exactly_once for level in levels):
        raise click.ClickException("a relay level was not exactly once: see its figures")


def _pipeline(
    settings: ConnectionSettings,
    workdir: Path,
    *,
    seed: int | None,
    as_json: bool,
    messages: int,
    kills: int,
    disturb: NodeFaults | None,
    **_: Any,
) -> None:
    from spark_queue.bench.faults_pipeline import run_pipeline_faults  # checked by faults()

    result = run_pipeline_faults(
        settings,
        workdir,
        messages=messages,
        kills=kills,
        seed=seed,
        disturb=disturb,
        echo=echo_progress,
    )
    if disturb is not None:
        result.events += disturb.events
    if as_json:
        echo_json(result.__dict__ | {"exactly_once": result.exactly_once})
    else:
        table = Table("kill", "phase", "+settle", "landed at", "after", title="relay kills")
        for i, k in enumerate(result.kills, 1):
            state = k.landed if k.killed else f"{k.landed} (ended by itself: {k.exit_code})"
            table.add_row(str(i), k.phase, f"{k.settle:.2f}s", state, f"{k.seconds:.1f}s")
        _console().print(table)
        for event in result.events:
            click.echo(event)
        click.echo(
            f"seed {result.seed}: {result.messages} sent, {result.delivered} delivered,"
            f" {result.duplicates} duplicates, {result.missing} missing, {result.corrupt}"
            f" corrupt; left in source {result.source_left}, in target {result.target_left};"
            f" {result.seconds:.0f}s"
        )
    if not result.exactly_once:
        raise click.ClickException(f"not exactly once (seed {result.seed})")
