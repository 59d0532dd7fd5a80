"""The ``bdq`` command line: one group per area, each command a thin layer over the library."""

from __future__ import annotations

import click

from spark_queue import __version__
from spark_queue.cli.bench_commands import bench
from spark_queue.cli.bench_faults import faults
from spark_queue.cli.bench_stats import stats as bench_stats
from spark_queue.cli.cassandra import cassandra
from spark_queue.cli.describe_command import describe_command
from spark_queue.cli.dlq import dlq
from spark_queue.cli.flags import CommandGroup, group_connection_options
from spark_queue.cli.keyspace_commands import keyspace
from spark_queue.cli.message_commands import (
    ack,
    change_visibility,
    peek,
    receive,
    reject,
    send,
)
from spark_queue.cli.metrics import metrics
from spark_queue.cli.profiles import profile_option
from spark_queue.cli.queue_commands import queue
from spark_queue.cli.serve_commands import access_key, serve
from spark_queue.cli.spark_commands import spark
from spark_queue.cli.top import top


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
# The running code's own version, installed or run from a checkout (no metadata there)
@click.version_option(__version__, "--version", prog_name="bdq", message="%(prog)s %(version)s")
@profile_option
@group_connection_options
def main() -> None:
    """spark-queue: a message queue stored in Apache Cassandra, with a Spark connector.

    Connection flags go before the command (bdq --hosts h1,h2 queue list) or
    after it. Each setting comes from its flag, then its BDQ_* environment
    variable, then the profile (--profile), then the local defaults
    (127.0.0.1:9042, keyspace bdq). A password comes from --password-prompt,
    --password-file or BDQ_CASSANDRA_PASSWORD, never from the command line.

    Only `bdq keyspace create` (and `bdq queue create --create-keyspace`)
    creates a keyspace; `bdq cassandra start` creates the local node's.

    Shell completion: eval "$(_BDQ_COMPLETE=bash_source bdq)" in ~/.bashrc
    (zsh_source in ~/.zshrc, fish_source for fish).
    """


main.add_command(cassandra)
main.add_command(keyspace)
main.add_command(queue)
queue.add_command(describe_command)
for command in (send, receive, peek, ack, change_visibility, reject):
    main.add_command(command)
main.add_command(dlq)
main.add_command(top)
main.add_command(metrics)
main.add_command(serve)
main.add_command(access_key)
main.add_command(spark)
main.add_command(bench)
bench.add_command(bench_stats)
bench.add_command(faults)
