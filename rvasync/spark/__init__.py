"""rvasync's data pipeline: record message streams, analyse them with Spark, publish results.

- :class:`Recorder` (and ``rvasync record``) captures messages into a
  directory of Parquet files with a committed-offset marker
  (:mod:`rvasync.spark.capture`);
- :func:`register` makes the ``rvasync`` PySpark data source available to a
  session: batch and streaming reads of capture directories, batch and
  streaming writes that publish rows as messages
  (:mod:`rvasync.spark.datasource`);
- :func:`decode_fields_udf` and :func:`field_udf` decode raw wire bytes inside Spark;
- :func:`to_thread` runs a blocking Spark call off the event loop (``asyncio.to_thread``)
  with the session active in that thread, which the data source needs
  (:func:`activate` for threads of your own; :mod:`rvasync.spark.threads`).

The recorder needs only pyarrow; the data source needs PySpark 4 (``pip
install 'rvasync[spark]'``). See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from rvasync.spark.capture import CaptureError, committed_files
from rvasync.spark.recorder import Recorder
from rvasync.spark.threads import activate, to_thread

__all__ = [
    "CaptureError",
    "Recorder",
    "activate",
    "committed_files",
    "decode_fields_udf",
    "field_udf",
    "register",
    "to_thread",
]


def register(spark: Any) -> None:
    """Register the ``rvasync`` data source with a SparkSession (harmless to repeat)."""
    from rvasync.spark.datasource import RvasyncDataSource

    spark.dataSource.register(RvasyncDataSource)


def decode_fields_udf(*, vectorized: bool = False) -> Any:
    """A Spark UDF turning the wire-bytes column into the ``fields`` JSON string.

    ``vectorized=True`` gives an Arrow UDF (PySpark 4.1+, no pandas needed) or,
    on older PySpark, a pandas UDF; the plain UDF works everywhere.
    """
    from rvasync.spark import udfs

    return udfs.decode_fields_udf(vectorized=vectorized)


def field_udf(name: str, type: str) -> Any:
    """A Spark UDF extracting field ``name`` of field type ``type`` from the wire-bytes column."""
    from rvasync.spark import udfs

    return udfs.field_udf(name, type)
