"""The Spark connector: ``format("bdq")`` for Structured Streaming and batch DataFrames.

Installing spark-queue installs the top-level module ``pyspark_bdq``, which
Spark finds by itself, so ``spark.readStream.format("bdq")`` needs no setup.
``register(spark)`` registers it where Spark cannot find it (for example when
the package reaches the cluster as a zip through ``--py-files``) and does
nothing where it can.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_queue.spark.datasource import BdqDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BdqDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("bdq")`` available in ``spark`` when Spark did not find it by itself.

    Spark registers ``pyspark_bdq`` statically when spark-queue is installed;
    registering over that would replace it (and Spark warns about it), so this
    registers only when the session does not know ``bdq`` yet, as when the
    package reaches the cluster as a ``--py-files`` zip. Safe to call always.
    """
    jsession = getattr(spark, "_jsparkSession", None)  # None in a Spark Connect client
    if jsession is not None and jsession.sessionState().dataSourceManager().dataSourceExists(
        BdqDataSource.name()
    ):
        return
    spark.dataSource.register(BdqDataSource)
