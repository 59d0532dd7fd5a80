"""What ``make run`` runs: seed sample orders, run the pipeline once, print a summary.

::

    python jobs/demo.py                        # 2000 orders, 5% malformed, on the local node
    python jobs/demo.py --orders 500 --keyspace scratch

Steps: create the three queues if missing; send ``--orders`` sample orders to
``orders`` with the Python client; run ``jobs/pipeline.py``'s query with
``availableNow`` (drains ``orders`` into ``shipments`` and ``orders-rejected``);
print messages in, out, rejected and the rate. Orders already waiting in
``orders`` are processed too, and ``shipments`` keeps what earlier runs sent.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: make `jobs` (and a checkout's spark_queue) importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.errors import StreamingQueryException

from jobs.order_producer import produce
from jobs.orders import sample_orders
from jobs.pipeline_run import build_session, ensure_queues, run_pipeline
from jobs.settings import add_connection_flags, connection_settings, job_settings, load_config
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, SparkQueueError


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line."""
    parser = argparse.ArgumentParser(
        prog="demo.py",
        description=(
            "Seed sample orders into 'orders', run the pipeline once (availableNow) and print"
            " a summary: messages in, out, rejected, rate."
        ),
    )
    parser.add_argument(
        "--orders",
        dest="count",  # the [producer] count of the config file
        type=int,
        metavar="N",
        help="orders to seed (default: [producer] count)",
    )
    parser.add_argument(
        "--malformed",
        type=float,
        metavar="FRACTION",
        help="share of malformed orders, 0 to 1 (default: [producer] malformed_fraction)",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="checkpoint folder (default: <checkpoint_dir>/<keyspace>/<app_name> from config)",
    )
    add_connection_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Seed, run, summarise; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        values = job_settings(args, config)
        settings = connection_settings(values)
        count, fraction = values["count"], values["malformed"]
        if count < 0:
            raise InvalidSetting(f"--orders {count}: must be a whole number >= 0")
        if not 0 <= fraction <= 1:
            raise InvalidSetting(f"--malformed {fraction}: must be a share from 0 to 1")
    except SparkQueueError as e:
        parser.error(str(e))

    try:
        ensure_queues(settings, config)
        with QueueClient(settings=settings) as client:
            orders = sample_orders(count, fraction, prefix=f"o-{uuid.uuid4().hex[:8]}")
            seeded = produce(
                client.queue(config.orders.name),
                orders,
                batch_size=config.producer.batch_size,
            )
        print(seeded.render(), flush=True)
    except SparkQueueError as e:
        print(f"demo.py: error: {e}", file=sys.stderr)
        return 1

    spark = build_session(config.pipeline.app_name)
    try:
        summary = run_pipeline(spark, config, settings, checkpoint=args.checkpoint)
    except SparkQueueError as e:
        print(f"demo.py: error: {e}", file=sys.stderr)
        return 1
    except StreamingQueryException as e:
        print(f"demo.py: error: the pipeline's query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(summary.render())
    print(cluster_command(settings))
    return 0


def cluster_command(settings: ConnectionSettings) -> str:
    """The one command that runs the same pipeline on a Spark standalone cluster."""
    hosts = ",".join(str(h) for h in settings.hosts)
    python = sys.executable
    return (
        "on a cluster (every executor with spark-queue installed at the same interpreter):\n"
        f"  {Path(python).parent / 'spark-submit'} --master spark://<master>:7077"
        f" --conf spark.pyspark.python={python} {Path(__file__).parent / 'pipeline.py'}"
        f" --hosts {hosts} --keyspace {settings.keyspace}"
    )


if __name__ == "__main__":
    sys.exit(main())
