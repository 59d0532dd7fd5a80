"""``bdq bench sqs``: ``bdq serve`` (one and two processes) against ElasticMQ, as ratios."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from spark_queue import defaults
from spark_queue.cli.bench_output import format_rate, format_ratio, progress_status, stdout_console
from spark_queue.cli.flags import connection_options, echo_json, json_option
from spark_queue.config import ConnectionSettings


def parse_servers(text: str) -> tuple[int, ...]:
    """``--servers``: a comma list of process counts, each 1 to 8, such as ``1,2``."""
    counts: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= 8:
            raise click.BadParameter(
                f"{text!r}: must be a comma list of server counts from 1 to 8, such as '1,2'"
            )
        counts.append(int(part))
    return tuple(counts)


@click.command("sqs")
@click.option(
    "--messages",
    "-m",
    type=click.IntRange(1),
    default=20_000,
    show_default=True,
    help="Messages sent, then received and deleted, per target.",
)
@click.option(
    "--connections",
    "-c",
    type=click.IntRange(1, 1024),
    default=32,
    show_default=True,
    help="Concurrent requests of the load generator.",
)
@click.option(
    "--wake-rounds",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Long-poll wake-up samples per target.",
)
@click.option(
    "--servers",
    default="1,2",
    show_default=True,
    help="bdq serve process counts to measure, a comma list.",
)
@click.option(
    "--elasticmq/--no-elasticmq",
    "with_elasticmq",
    default=True,
    show_default=True,
    help="Measure ElasticMQ too (resolved with Maven, run with java).",
)
@click.option(
    "--elasticmq-version",
    default=defaults.ELASTICMQ_VERSION,
    show_default=True,
    help="org.elasticmq:elasticmq-server_2.13 version.",
)
@connection_options
@json_option
def sqs(settings: ConnectionSettings, as_json: bool, **options: Any) -> None:  # fmt: skip
    """Send, receive+delete and long-poll wake-up through bdq serve, beside ElasticMQ.

    Starts ElasticMQ and 1 (then 2) bdq serve processes on loopback over the
    keyspace, and drives each with SigV4-signed AWS JSON requests in batches of
    10 over many connections; reports rates, wake-up p50/p99, loss and
    duplicates, and ratios to ElasticMQ. Uses fresh queues, deleted at the end.
    """
    from spark_queue.bench.sqs_bench import run_sqs_bench
    from spark_queue.bench.sqs_load import Load

    load = Load(
        messages=options["messages"],
        connections=options["connections"],
        wake_rounds=options["wake_rounds"],
    )
    servers = parse_servers(options["servers"])
    with progress_status() as progress:
        r = run_sqs_bench(
            settings,
            load,
            servers=servers,
            with_elasticmq=options["with_elasticmq"],
            elasticmq_version=options["elasticmq_version"],
            progress=progress,
        )
    if as_json:
        echo_json(r.as_json())
        return
    table = Table(
        "target", "send", "vs ElasticMQ", "receive+delete", "vs ElasticMQ", "wake p50",
        "wake p99", "lost", "duplicates", "generator CPU",
        title=f"bdq bench sqs: {load.messages:,} messages, {load.connections} connections,"
        " batches of 10",
    )  # fmt: skip
    for t in r.targets:
        table.add_row(
            t.name, format_rate(t.send_rate), format_ratio(r.send_ratio(t)),
            format_rate(t.receive_rate), format_ratio(r.receive_ratio(t)),
            _ms(t.wake_p50), _ms(t.wake_p99), str(t.lost), str(t.duplicates),
            f"{t.generator_cores:.2f} cores",
        )  # fmt: skip
    stdout_console().print(table)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f} ms"
