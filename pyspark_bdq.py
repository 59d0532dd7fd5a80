"""Makes ``format("bdq")`` work in any SparkSession without a register call.

Spark imports every top-level module named ``pyspark_*`` that exposes a
``DefaultSource`` and registers it under ``DefaultSource.name()``.
"""

from spark_queue.spark.datasource import BdqDataSource as DefaultSource

__all__ = ["DefaultSource"]
