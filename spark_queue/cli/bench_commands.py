"""``bdq bench``: benchmarks of the queue on a live cluster (the BlueDove paper's method).

``bdq bench queue`` sends M messages with Tsend threads, then receives and acks
them with Trecv threads, and prints the paper's rates, response times and
consistency metrics beside a raw insert baseline measured in the same run.

``bdq bench spark`` measures the ``format("bdq")`` connector on a local
SparkSession: sink, source and queue -> queue rates and end-to-end latency,
beside the same raw baseline and against the connector's targets.

``bdq bench head`` measures what a receive at the head of a queue costs before
and after traffic. ``bdq bench sqs`` drives ``bdq serve`` (one and two processes)
and ElasticMQ with the same SigV4-signed load and reports ratios. ``bdq bench
spread`` counts each node's share of one queue's writes, window by window, on
three local nodes it starts itself. Each command lives in a module of its own
(``bench_queue``, ``bench_spark``, ``bench_head``, ``bench_sqs``,
``bench_spread``; ``bench_stats`` and ``bench_faults`` are added to the group by
``spark_queue.cli``); this module makes the group.
"""

from __future__ import annotations

import click

from spark_queue.cli.bench_head import head
from spark_queue.cli.bench_queue import queue
from spark_queue.cli.bench_spark import spark
from spark_queue.cli.bench_spread import spread
from spark_queue.cli.bench_sqs import sqs
from spark_queue.cli.flags import CommandGroup


@click.group(cls=CommandGroup)
def bench() -> None:
    """Benchmarks against a live cluster (use a keyspace you can spare, e.g. --keyspace bench)."""


for command in (queue, spark, head, sqs, spread):
    bench.add_command(command)
