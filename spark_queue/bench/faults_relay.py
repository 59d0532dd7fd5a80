"""A queue-to-queue relay with the bdq source and sink, run as its own driver process.

``python -m spark_queue.bench.faults_relay --hosts ... --source a --target b
--checkpoint DIR``. The crash tests and ``bdq bench faults --pipeline`` start
it, kill its process group with SIGKILL at chosen points and start it again from
its checkpoint. Each message carries its source id in the header ``source-id``
so the checks can tell that every message arrived exactly once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.types import BinaryType

_BEGAN = time.monotonic()


def _say(what: str) -> None:
    """One line of the relay's log, with the seconds since the process started."""
    print(f"[relay +{time.monotonic() - _BEGAN:.1f}s] {what}", flush=True)


class _Progress(StreamingQueryListener):
    """Logs each batch's rows and where its time went (a run's profile is in its log)."""

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        _say(f"batch {progress.batchId}: {progress.numInputRows} rows, {dict(progress.durationMs)}")

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--writer-id", default=None)
    parser.add_argument("--max-per-trigger", type=int, default=100)
    parser.add_argument("--trigger-seconds", type=float, default=2.0)
    parser.add_argument("--row-delay-ms", type=int, default=0, help="slow each row down")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--visibility-timeout", default="120s")
    parser.add_argument("--consistency", default=None, help="consistency of reads and writes")
    parser.add_argument("--restarts", type=int, default=3, help="query restarts after a failure")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("bdq-relay")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Python workers get 15 s to connect back by default: too little on a busy host
        .config("spark.python.authenticate.socketTimeout", "120s")
        # A relay run is short-lived and restarted after every kill: the client
        # compiler alone (C1) and the serial collector start the JVM faster.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    progress = _Progress()
    spark.streams.addListener(progress)
    _say("session ready")
    connection = {"hosts": args.hosts, "keyspace": args.keyspace}
    if args.consistency:
        connection["consistency"] = args.consistency
    source = (
        spark.readStream.format("bdq")
        .options(**connection)
        .option("queue", args.source)
        .option("visibilityTimeout", args.visibility_timeout)
        .option("maxMessagesPerTrigger", str(args.max_per_trigger))
        .load()
    )
    payload = F.col("payload")
    if args.row_delay_ms:
        delay = args.row_delay_ms / 1000

        @F.udf(BinaryType())
        def slowly(value: bytes) -> bytes:
            time.sleep(delay)
            return value

        payload = slowly(payload)
    relayed = source.select(
        payload.alias("payload"),
        F.map_concat(
            F.col("headers"), F.create_map(F.lit("source-id"), F.col("id").cast("string"))
        ).alias("headers"),
    )
    writer = (
        relayed.writeStream.format("bdq")
        .options(**connection)
        .option("queue", args.target)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.writer_id:
        writer = writer.option("writerId", args.writer_id)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    for attempt in range(args.restarts + 1):
        query = writer.start()
        _say("relay started")
        try:
            query.awaitTermination()
            # else its callback of the query's end races the Python side's exit
            spark.streams.removeListener(progress)
            return 0
        except StreamingQueryException as e:
            # e.g. a Python worker that did not connect back within Spark's 10 s on a
            # busy host: start the query again from its checkpoint, in this JVM
            if attempt == args.restarts:
                raise
            print(f"query failed, restarting it from its checkpoint: {e}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
