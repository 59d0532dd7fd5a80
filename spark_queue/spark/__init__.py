"""The Spark connector: ``format("bdq")`` for Structured Streaming and batch DataFrames.

Installing spark-queue installs the top-level module ``pyspark_bdq``, which
Spark finds by itself, so ``spark.readStream.format("bdq")`` needs no setup.
``register(spark)`` does the same explicitly (for example when the package
reaches the executors as a zip through ``--py-files``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_queue.spark.datasource import BdqDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BdqDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``bdq`` data source with ``spark``."""
    spark.dataSource.register(BdqDataSource)
