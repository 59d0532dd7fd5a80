"""The Spark connector: ``format("bdq")`` for Structured Streaming and batch DataFrames.

Installing spark-queue installs the top-level module ``pyspark_bdq``, which
Spark finds by itself, so ``spark.readStream.format("bdq")`` needs no setup.
``register(spark)`` registers it where Spark cannot find it (for example when
the package reaches the cluster as a zip through ``--py-files``) and does
nothing where it can. Importing it without pyspark and pyarrow (the ``spark``
extra) raises ``MissingExtra``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_queue.errors import MissingExtra

try:  # the 'spark' extra: the core install (client, bdq) has neither
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as e:
    raise MissingExtra("the Spark connector (spark_queue.spark)", "spark", e.name) from e

from spark_queue.spark.datasource import BdqDataSource
from spark_queue.spark.options import options_from_spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BdqDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("bdq")`` available in ``spark``, with the session's ``spark.bdq.*`` defaults.

    A Python data source sees only the options of each query, never the
    session's conf, so connection settings set once in the Spark conf
    (``spark.bdq.<option>``, or the Spark Cassandra Connector's
    ``spark.cassandra.connection.host`` and friends) reach it only through
    this call, which registers the source with them as defaults.

    Without such keys, this registers only when Spark did not find the
    source by itself (Spark registers ``pyspark_bdq`` statically when
    spark-queue is installed, and warns when that is replaced), as when the
    package reaches the cluster as a ``--py-files`` zip. Safe to call always.
    """
    defaults = options_from_spark_conf(spark.conf.getAll)
    if defaults:
        spark.dataSource.register(BdqDataSource.with_defaults(defaults))
        return
    jsession = getattr(spark, "_jsparkSession", None)  # None in a Spark Connect client
    if jsession is not None and jsession.sessionState().dataSourceManager().dataSourceExists(
        BdqDataSource.name()
    ):
        return
    spark.dataSource.register(BdqDataSource)
