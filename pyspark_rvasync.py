"""Automatic registration of the ``rvasync`` Spark data source.

PySpark (4.0 and later) imports every installed top-level module whose name
starts with ``pyspark_`` when a session starts, and registers its
``DefaultSource``; so with ``rvasync[spark]`` installed,
``spark.read.format("rvasync")`` works without calling
``rvasync.spark.register(spark)`` first.
"""

from rvasync.spark.datasource import RvasyncDataSource as DefaultSource

__all__ = ["DefaultSource"]
