"""The orders pipeline: ``orders`` -> validate, enrich -> ``shipments`` / ``orders-rejected``.

One Structured Streaming query, ``format("bdq")`` in and out::

    python jobs/pipeline.py                    # drain what is in 'orders' (availableNow), then stop
    python jobs/pipeline.py --continuous       # a micro-batch every --trigger-interval until Ctrl-C
    spark-submit --properties-file conf/spark-defaults.conf jobs/pipeline.py

Each order (a JSON object, see ``jobs/orders.py``) is parsed with ``from_json``
and checked with Spark SQL expressions (no Python UDF: between the bdq source
and sink, rows stay in the JVM). A valid order goes to ``shipments`` as JSON with ``item_count``,
``line_count``, ``total``, ``processed_at`` and ``source_id`` added; any other
message goes, unchanged, to ``orders-rejected`` with the broken rule in its
``reject-reason`` header. The sink's per-row ``queue`` column does the routing.

Exactly once: the source replays a batch with the messages it first leased,
and the sink gets a ``writerId`` kept in the checkpoint folder, so a batch
replayed after a crash sends nothing twice. A new checkpoint gets a new writer
identity (a reused one would make the sink skip the new query's first batches).

Run with ``python``, the job builds its own local SparkSession from
``conf/spark-defaults.conf`` and runs workers on this interpreter; under
``spark-submit``, Spark's own configuration applies.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

if __package__ in (None, ""):
    # Run as a script: make `jobs` (and a checkout's spark_queue) importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.errors import StreamingQueryException

from jobs.pipeline_run import build_session, run_pipeline
from jobs.settings import add_connection_flags, connection_settings, job_settings, load_config
from spark_queue.errors import SparkQueueError
from spark_queue.spark.options import parse_duration

# -- command line --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The job's command line."""
    parser = argparse.ArgumentParser(
        prog="pipeline.py",
        description=(
            "Read JSON orders from the 'orders' queue, validate and enrich them, and send valid"
            " ones to 'shipments' and malformed ones to 'orders-rejected' (reason in the"
            " 'reject-reason' header). Drains the queue and stops (availableNow) unless"
            " --continuous is given."
        ),
        epilog=(
            "Queue names, leases and the checkpoint folder come from --config. Run with python,"
            " the job starts a local Spark from conf/spark-defaults.conf; under spark-submit,"
            " pass --properties-file or --master as usual."
        ),
    )
    mode = parser.add_argument_group("mode")
    mode.add_argument(
        "--continuous",
        action="store_true",
        help="keep running, one micro-batch per --trigger-interval, until Ctrl-C or --run-for",
    )
    mode.add_argument(
        "--trigger-interval",
        metavar="DURATION",
        help="micro-batch interval of --continuous, such as 5s or 500ms (default: from config)",
    )
    mode.add_argument(
        "--run-for",
        type=float,
        metavar="SECONDS",
        help="stop a --continuous run after this many seconds",
    )
    mode.add_argument(
        "--max-messages-per-trigger",
        type=int,
        metavar="N",
        help="most orders per micro-batch (default: from config)",
    )
    mode.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="checkpoint folder (default: <checkpoint_dir>/<keyspace>/<app_name> from config)",
    )
    mode.add_argument(
        "--writer-id",
        metavar="ID",
        help="the sink's writer identity (default: made once and kept in the checkpoint)",
    )
    add_connection_flags(parser)
    return parser


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline from the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.trigger_interval is not None and not args.continuous:
        parser.error("--trigger-interval applies to --continuous runs only")
    if args.run_for is not None and not args.continuous:
        parser.error("--run-for applies to --continuous runs only")
    if args.max_messages_per_trigger is not None and args.max_messages_per_trigger < 1:
        parser.error(f"--max-messages-per-trigger {args.max_messages_per_trigger}: must be >= 1")
    try:
        config = load_config(args.config)
        values = job_settings(args, config)
        settings = connection_settings(values)
        if args.continuous:  # fail before Spark starts, not after
            parse_duration("--trigger-interval", values["trigger_interval"])
    except SparkQueueError as e:
        parser.error(str(e))
    spark = build_session(config.pipeline.app_name)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        summary = run_pipeline(
            spark,
            config,
            settings,
            continuous=args.continuous,
            trigger_interval=values["trigger_interval"],
            run_for=args.run_for,
            checkpoint=args.checkpoint,
            writer_id=args.writer_id,
            max_messages_per_trigger=values["max_messages_per_trigger"],
        )
    except SparkQueueError as e:
        print(f"pipeline.py: error: {e}", file=sys.stderr)
        return 1
    except StreamingQueryException as e:
        # Its text holds the cause (a worker's traceback too), without the JVM stack.
        print(f"pipeline.py: error: the query failed: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(summary.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
