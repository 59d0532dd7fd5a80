"""The input partition of the source: one task's buckets, share and step, sent to an executor.

Spark pickles each partition on the driver and unpickles it in a Python
worker, so ``BucketPartition`` is a frozen dataclass at module level holding
everything a task needs: no driver state travels beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition

from spark_queue.spark.options import SourceOptions


@dataclass(frozen=True)
class BucketPartition(InputPartition):
    """What one task needs to read its share: everything travels in here (no driver state)."""

    options: SourceOptions
    buckets: tuple[int, ...]
    max_messages: int
    stream: str = ""
    step: int = 0
    part: int = 0
    peek: bool = False
    #: ``queue_id`` (hex) of the queue incarnation the step was planned from ("" unknown).
    incarnation: str = ""
    #: The id slice ``(first, end)`` of the bucket this part reads; None for all of it.
    ids: tuple[int, int] | None = None
    #: The step was planned by an earlier run of the query (a replay after a restart).
    replay: bool = False
    value: Any = field(default=None, repr=False)  # InputPartition's own attribute
