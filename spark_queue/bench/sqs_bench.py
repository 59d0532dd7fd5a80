"""``bdq bench sqs``: ``bdq serve`` against ElasticMQ, with the same load, in one run.

Each target (ElasticMQ, then one and two ``bdq serve`` processes over the
keyspace) gets a fresh queue and the three phases of ``sqs_load``; the report
gives each target's rates, wake-up percentiles and loss/duplicates, and its
ratios to ElasticMQ, which keeps its queues in memory while bdq writes every
message to Cassandra. Everything runs on loopback, one target at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager

from spark_queue.bench.progress_sink import Progress
from spark_queue.bench.sqs_load import Load, Target, run_target
from spark_queue.bench.sqs_results import SqsBenchResult, TargetResult
from spark_queue.bench.sqs_targets import ELASTICMQ_VERSION, bdq_servers, elasticmq
from spark_queue.config import ConnectionSettings


def plan(
    settings: ConnectionSettings,
    servers: Sequence[int],
    with_elasticmq: bool,
    elasticmq_version: str = ELASTICMQ_VERSION,
) -> Iterator[tuple[str, AbstractContextManager[Target]]]:
    """The targets of a run in order: ElasticMQ first (the baseline), then each server count."""
    if with_elasticmq:
        yield f"ElasticMQ {elasticmq_version}", elasticmq(elasticmq_version)
    for count in servers:
        yield f"{count} bdq serve", bdq_servers(settings, count)


def run_sqs_bench(
    settings: ConnectionSettings,
    load: Load,
    servers: Sequence[int] = (1, 2),
    with_elasticmq: bool = True,
    elasticmq_version: str = ELASTICMQ_VERSION,
    progress: Progress = lambda line: None,
) -> SqsBenchResult:
    """Run ``load`` against each target of the plan, one after the other."""
    results: list[TargetResult] = []
    for label, target in plan(settings, servers, with_elasticmq, elasticmq_version):
        progress(f"{label}: starting")
        with target as running:
            progress(f"{label}: {load.messages:,} messages over {load.connections} connections")
            results.append(asyncio.run(run_target(running, load)))
    return SqsBenchResult(tuple(results))
