"""rvasync's data pipeline adapters: the Recorder, and Spark reading captures.

The recorder listens on the process transport, so its row measures the
capture path (queue, encoding, JSON, Parquet, fsync) rather than a network.
The Spark row runs PySpark in local[2] against ``format("rvasync")``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.registry import adapter
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


@adapter
class RvCaptureScan(CaptureScan):
    """PySpark local[2] reading captures with ``format("rvasync")``."""

    system = "rvasync"
    capability = "spark-read"

    @classmethod
    def unavailable(cls) -> str | None:
        missing = _missing_packages("pyarrow", "pyspark") or missing_module(
            "rvasync.spark", "register"
        )
        if missing is None and not (shutil.which("java") or os.environ.get("JAVA_HOME")):
            missing = "Spark needs Java 17+ (apt-get install openjdk-17-jre-headless)"
        return missing

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

        self._spark = (
            SparkSession.builder.master("local[2]")
            .appName("rvasync benchmark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
        self._spark.sparkContext.setLogLevel("ERROR")
        register(self._spark)

    def scan(self, directory: str, project: bool) -> int:
        spark = self._spark
        # asyncio.to_thread runs this in a fresh thread: Python data sources are
        # looked up through the thread's active session.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        reader = spark.read.format("rvasync")
        if project:
            df = reader.option("fields", "amount:F64, qty:I32").load(directory)
            row = df.selectExpr("count(*) AS n", "sum(amount)", "sum(qty)").first()
        else:
            df = reader.load(directory)
            row = df.selectExpr("count(*) AS n", "sum(length(data))", "max(received_at)").first()
        return int(row["n"])

    async def close(self) -> None:
        spark = getattr(self, "_spark", None)
        if spark is not None:
            await asyncio.to_thread(spark.stop)
