"""The shared Spark session of the Spark tests (no tests here: a fixture and the skip rule).

One local[2] session serves every Spark test module: the JVM takes seconds to
start, which the suite pays once. Modules import ``spark_session`` from here;
``SparkSession.builder.getOrCreate`` hands every importer the same session.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest


def spark_skip_reason() -> str | None:
    """Why Spark tests cannot run here (None when they can)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"Spark tests need pyspark and pyarrow (pip install -e '.[spark]'): {exc}"
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and os.path.exists(java_home)):
        return "Spark tests need Java 17+ (apt-get install openjdk-17-jre-headless)"
    return None


@pytest.fixture(scope="session", name="spark")
def spark_fixture():
    reason = spark_skip_reason()
    if reason:
        pytest.skip(reason)
    # Executors' Python workers must be this interpreter (it has rvasync installed).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rvasync.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rvasync-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    yield spark
    spark.stop()


def start_id_stream(spark, source, out, checkpoint):
    """An availableNow stream of a capture's ``id`` field into a Parquet file sink."""
    return (
        spark.readStream.format("rvasync")
        .option("fields", "id:I64")
        .load(str(source))
        .select("id")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
