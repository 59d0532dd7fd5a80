"""Parameters of one ``bdq bench spark`` run, and the Spark settings every run starts from."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES
from spark_queue.bench.spark_floor import FLOOR_SECONDS
from spark_queue.config import check_int, check_seconds
from spark_queue.errors import InvalidSetting

#: Spark's setting that picks how checkpoint logs are written.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
#: Writes a checkpoint file with ``FileSystem.rename``: atomic on local disks and HDFS.
FILESYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
#: Session settings of every run, which ``spark_conf`` adds to or overrides. Each
#: micro-batch writes two checkpoint files (offsets before it, commits after), and
#: Spark's default FileContext-based manager took 80-190 ms per file on this project's
#: 2-core machine against 17-55 ms for the FileSystem-based one, most of a
#: low-latency trigger and none of it the queue's work. The run's checkpoints are
#: on local disk, where that manager is safe; README, "Latency".
DEFAULT_SPARK_CONF = {CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINTS}


@dataclass(frozen=True, kw_only=True)
class SparkBenchParams:
    """One run's parameters.

    Attributes:
        messages: Messages of the sink, source and pipeline phases [M].
        payload_bytes: Size of each payload [L].
        max_per_trigger: ``maxMessagesPerTrigger`` of the source and pipeline queries.
        partitions: Partitions of the sink phase's DataFrame (tasks that write at once).
        latency_messages: Messages sent during the latency phase.
        latency_rate: Messages per second sent during the latency phase.
        trigger_interval: Processing-time trigger of the latency query, in seconds
            (0: a batch starts as soon as the last one ended and a message is visible;
            an idle source answers Spark's polls from memory for 0.1 s).
        visibility_timeout: Lease of a micro-batch's messages, in seconds.
        bucket_size: Ids per bucket of the run's queues.
        master: Spark master of the session the run creates.
        seed: Seed of the random payloads (chosen at random when not given).
        baseline: Measure the raw insert baseline too.
        baseline_concurrency: In-flight requests of the raw baseline.
        spark_conf: SQL settings set on the session for the run (and restored after),
            ``DEFAULT_SPARK_CONF`` unless overridden.
        floor_seconds: Seconds the floor (a no-op Python stream, ``spark_floor``) is
            timed after the latency phase; 0 skips it.
        source_floor: Time draining M rows of a Python source with no queue behind it
            (``source_floor``), after the source phase.
    """

    messages: int = 20_000
    payload_bytes: int = 2048
    max_per_trigger: int = 10_000
    partitions: int = 2
    latency_messages: int = 1500
    latency_rate: float = 60.0
    trigger_interval: float = 0.25
    visibility_timeout: float = 120.0
    bucket_size: int = 1000
    master: str = "local[2]"
    seed: int = field(default_factory=lambda: random.randrange(2**32))
    baseline: bool = True
    baseline_concurrency: int = BASELINE_CONCURRENCY
    spark_conf: tuple[tuple[str, str], ...] = tuple(DEFAULT_SPARK_CONF.items())
    floor_seconds: float = FLOOR_SECONDS
    source_floor: bool = True

    def __post_init__(self) -> None:
        check_int("messages", self.messages, 1, 10_000_000)
        check_int("payload_bytes", self.payload_bytes, MIN_PAYLOAD_BYTES, 16 * 1024 * 1024)
        check_int("max_per_trigger", self.max_per_trigger, 1, 10_000_000)
        check_int("partitions", self.partitions, 1, 10_000)
        check_int("latency_messages", self.latency_messages, 1, 1_000_000)
        check_seconds("latency_rate", self.latency_rate)
        check_seconds("trigger_interval", self.trigger_interval, allow_zero=True)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("floor_seconds", self.floor_seconds, allow_zero=True)
        check_int("bucket_size", self.bucket_size, 1, 100_000)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("baseline_concurrency", self.baseline_concurrency, 1, 4096)
        if not self.master.strip():
            raise InvalidSetting("master '': name a Spark master, such as 'local[2]'")
        for key, value in self.spark_conf:
            if not (isinstance(key, str) and key.startswith("spark.") and isinstance(value, str)):
                raise InvalidSetting(
                    f"spark conf {key!r}={value!r}: must be a 'spark.' key with a string value"
                )

    @property
    def latency_seconds(self) -> float:
        """How long the latency phase's producer sends."""
        return self.latency_messages / self.latency_rate
