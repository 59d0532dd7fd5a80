"""A queue-to-queue relay with the bdq source and sink, run as its own driver process.

``python -m spark_queue.bench.faults_relay --hosts ... --source a --target b
--checkpoint DIR``. The crash tests and ``bdq bench faults --pipeline`` start
it, kill its process group with SIGKILL at chosen points and start it again from
its checkpoint. Each message carries its source id in the header ``source-id``
so the checks can tell that every message arrived exactly once.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryListener
from pyspark.sql.types import BinaryType

from spark_queue.bench.relay_faults import RelayFaults, touch

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
    parser.add_argument("--conf", action="append", default=[], help="KEY=VALUE Spark setting")
    parser.add_argument("--min-partitions", type=int, default=None, help="source minPartitions")
    parser.add_argument(
        "--shuffle", action="store_true", help="write in a stage after the source's (by id)"
    )
    parser.add_argument("--fault-folder", default=None, help="record task attempts here")
    parser.add_argument(
        "--straggle-ms",
        type=int,
        default=0,
        help="partition 0's first attempt waits for a second up to this",
    )
    parser.add_argument("--kill-executor-batch", type=int, default=-1, help="its sink stage")
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(args.master)
        .appName("bdq-relay")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Python workers get 15 s to connect back by default: too little on a busy host
        .config("spark.python.authenticate.socketTimeout", "120s")
        # A relay run is short-lived and restarted after every kill: the client
        # compiler alone (C1) and the serial collector start the JVM faster.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    )
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    progress = _Progress()
    spark.streams.addListener(progress)
    _say("session ready")
    connection = {"hosts": args.hosts, "keyspace": args.keyspace}
    if args.consistency:
        connection["consistency"] = args.consistency
    reader = (
        spark.readStream.format("bdq")
        .options(**connection)
        .option("queue", args.source)
        .option("visibilityTimeout", args.visibility_timeout)
        .option("maxMessagesPerTrigger", str(args.max_per_trigger))
    )
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    source = reader.load()
    payload = F.col("payload")
    if args.row_delay_ms:
        delay = args.row_delay_ms / 1000

        @F.udf(BinaryType())
        def slowly(value: bytes) -> bytes:
            time.sleep(delay)
            return value

        payload = slowly(payload)
    faults = None
    if args.fault_folder:
        faults = RelayFaults(args.fault_folder, args.straggle_ms, args.kill_executor_batch)
        payload = F.udf(functools.partial(touch, "source", faults), BinaryType())(payload)
    relayed = source.select(
        F.col("id"),
        payload.alias("payload"),
        F.map_concat(
            F.col("headers"), F.create_map(F.lit("source-id"), F.col("id").cast("string"))
        ).alias("headers"),
    )
    if args.shuffle:
        # The sink's send-once needs each task's rows in the same order in every
        # attempt, and a streaming query cannot sort: this holds only while each
        # batch has one source partition (one map task; see faults_levels).
        relayed = relayed.repartition(2, "id")
        if faults is not None:
            sink = F.udf(functools.partial(touch, "sink", faults), BinaryType())
            relayed = relayed.withColumn("payload", sink(F.col("payload")))
    relayed = relayed.drop("id")
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
