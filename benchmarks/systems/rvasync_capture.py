"""rvasync's data pipeline adapters: the Recorder, and Spark reading captures.

The recorder listens on the process transport, so its row measures the
capture path (queue, encoding, JSON, Parquet, fsync) rather than a network.
The Spark rows run PySpark in local[2] and on a 2-worker standalone cluster
against ``format("rvasync")``, and Spark's own Parquet reader on the same
files as the floor.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.registry import Variant, adapter
from benchmarks.scenarios.capture import REGIONS, CaptureScan, Recording, order_fields
from benchmarks.systems.rvasync_api import PREFIX, missing_module


def _missing_packages(*modules: str) -> str | None:
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{PREFIX}: {module} does not import ({exc}; pip install -e '.[spark]')"
    return None


def _message(subject: str | None, fields: Sequence[tuple[str, str, Any]]) -> Any:
    import rvasync as rv

    msg = rv.Message(subject)
    for name, tag, value in fields:
        msg.add(name, value, type=rv.FieldType[tag.upper()])
    return msg


@adapter
class RvRecording(Recording):
    """``rvasync.spark.Recorder`` on the process transport."""

    system = "rvasync"
    capability = "record"

    @classmethod
    def unavailable(cls) -> str | None:
        return _missing_packages("pyarrow") or missing_module("rvasync.spark", "Recorder")

    async def start(self, directory: str, pattern: str) -> None:
        from rvasync.spark import Recorder
        from rvasync.transport.process import process_transport

        self._transport = process_transport()
        self._directory = directory
        self._recorder = await Recorder(self._transport, pattern, directory).start()

    def prepare(self, subject: str, fields: Sequence[tuple[str, str, Any]]) -> Any:
        return _message(subject, fields)

    async def publish(self, handle: Any) -> None:
        await self._transport.send(handle)

    async def close(self) -> None:
        recorder = getattr(self, "_recorder", None)
        if recorder is not None:
            await recorder.stop()

    async def finish(self, count: int) -> dict[str, int]:
        recorder = self._recorder
        async with asyncio.timeout(float(self.params["timeout"])):
            while recorder.stats.received < count:
                await asyncio.sleep(0.001)
        await recorder.stop()
        self._recorder = None
        size = sum(p.stat().st_size for p in Path(self._directory).glob("part-*.parquet"))
        return {"rows": recorder.stats.committed_rows, "bytes": size}


LOCAL = Variant(name="local", label="local[2]", headline=True)
CLUSTER = Variant(name="cluster", label="2-worker standalone cluster", headline=False)


def _spark_unavailable() -> str | None:
    missing = _missing_packages("pyarrow", "pyspark") or missing_module("rvasync.spark", "register")
    if missing is None and not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        missing = "Spark needs Java 17+ (apt-get install openjdk-17-jre-headless)"
    return missing


class _SparkScan(CaptureScan):
    """A Spark session in local[2] or on a 2-worker standalone cluster on 127.0.0.1
    (one core and 512 MiB per worker), by variant; the capture is the same."""

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (LOCAL, CLUSTER)

    @classmethod
    def not_applicable(cls, scenario: Any, params: Any, variant: Variant) -> str | None:
        if variant.name == "cluster" and not params.get("cluster"):
            return "the cluster rows run in the full pass only (starting a cluster takes a while)"
        return None

    def write_capture(self, directory: str, count: int) -> None:
        from rvasync.spark.capture import CaptureWriter, fields_json, rows_to_batch

        chunk = 50_000
        with CaptureWriter(directory) as writer:
            for start in range(0, count, chunk):
                ids = range(start, min(count, start + chunk))
                messages = [_message(f"ORDERS.{REGIONS[i % 3]}.NEW", order_fields(i)) for i in ids]
                n = len(messages)
                writer.append(
                    rows_to_batch(
                        [
                            [m.subject for m in messages],
                            [None] * n,
                            [None] * n,
                            [None] * n,
                            [1_700_000_000_000_000 + i for i in ids],
                            [m.to_bytes() for m in messages],
                            [fields_json(m) for m in messages],
                        ]
                    )
                )
                if writer.uncommitted_rows >= 250_000:
                    writer.commit()

    def start_engine(self) -> None:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        from rvasync.spark import register

        builder = SparkSession.builder.appName("rvasync benchmark")
        config = {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
        self._cluster = None
        if self.variant.name == "cluster":
            from rvasync.spark.standalone import StandaloneCluster

            self._cluster = StandaloneCluster(workers=2, cores_per_worker=1).start()
            config.update(self._cluster.session_config())
        for key, value in config.items():
            builder = builder.config(key, value)
        self._spark = builder.getOrCreate()
        self._spark.sparkContext.setLogLevel("ERROR")
        register(self._spark)

    def share_engine(self, other: _SparkScan) -> None:
        """Run on ``other``'s started Spark session instead of starting one (a tool
        interleaving two readers in one JVM, benchmarks/spark_cpu.py); ``other``
        alone stops it."""
        self._spark, self._cluster = other._spark, None
        self._shared = True

    def _session(self) -> Any:
        spark = self._spark
        # asyncio.to_thread runs this in a fresh thread: Python data sources are
        # looked up through the thread's active session.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        return spark

    async def close(self) -> None:
        if getattr(self, "_shared", False):
            return
        spark = getattr(self, "_spark", None)
        if spark is not None:
            await asyncio.to_thread(spark.stop)
        cluster = getattr(self, "_cluster", None)
        if cluster is not None:
            await asyncio.to_thread(cluster.stop)


@adapter
class RvCaptureScan(_SparkScan):
    """PySpark reading captures with ``format("rvasync")``."""

    system = "rvasync"
    capability = "spark-read"

    @classmethod
    def unavailable(cls) -> str | None:
        return _spark_unavailable()

    def scan(
        self,
        directory: str,
        project: bool,
        prune: bool = True,
        options: Mapping[str, str] | None = None,
    ) -> int:
        """:meth:`CaptureScan.scan`; ``options``: more reader options (tools comparing
        settings, such as ``rowsPerPartition``; the benchmark passes none)."""
        reader = self._session().read.format("rvasync")
        for key, value in (options or {}).items():
            reader = reader.option(key, value)
        if project:
            # The query uses no capture column; one must be kept, the smallest.
            if prune:
                reader = reader.option("columns", "received_at")
            df = reader.option("fields", "amount:F64, qty:I32").load(directory)
            row = df.selectExpr("count(*) AS n", "sum(amount)", "sum(qty)").first()
        else:
            if prune:
                reader = reader.option("columns", "received_at, data")
            df = reader.load(directory)
            row = df.selectExpr("count(*) AS n", "sum(length(data))", "max(received_at)").first()
        return int(row["n"])


@adapter
class ParquetCaptureScan(_SparkScan):
    """Spark's own Parquet reader over the same committed files (no rvasync code on the
    executors): the floor of the rvasync source. Its "projected" scan takes the two
    fields out of the ``fields`` JSON column with get_json_object, as a user without
    the rvasync source would."""

    system = "spark-parquet"
    capability = "spark-read"

    @classmethod
    def unavailable(cls) -> str | None:
        return _spark_unavailable()

    def scan(self, directory: str, project: bool, prune: bool = True) -> int:
        # Spark's Parquet reader prunes columns by itself: ``prune`` changes nothing.
        from rvasync.spark import committed_files

        files = [str(path) for path in committed_files(directory)]
        df = self._session().read.parquet(*files)
        if project:
            # order_fields: amount is field 1, qty field 2.
            row = df.selectExpr(
                "count(*) AS n",
                "sum(cast(get_json_object(fields, '$[1].value') AS double))",
                "sum(cast(get_json_object(fields, '$[2].value') AS int))",
            ).first()
        else:
            row = df.selectExpr("count(*) AS n", "sum(length(data))", "max(received_at)").first()
        return int(row["n"])
