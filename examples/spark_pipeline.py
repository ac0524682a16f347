"""A data pipeline on Spark: orders are published, recorded, aggregated, and published back.

1. a standalone daemon starts (Spark executors are separate processes: they
   reach the bus through it);
2. a publisher sends order messages on ORDERS.<region>.NEW;
3. a Recorder captures them into a directory of Parquet files, committing a
   file every second;
4. a PySpark Structured Streaming job reads that directory as a stream,
   counts orders and sums their amounts per region in one-minute windows,
   and publishes each updated window as a message on ORDERS.STATS.<region>;
5. a listener prints those results as they arrive.

At the end the program checks that the last published figures add up to
exactly what the publisher sent, and exits 0 if they do.

Needs the spark extra and Java 17: pip install -e '.[spark]'
Run: python examples/spark_pipeline.py
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict

import rvasync as rv
from rvasync.spark import Recorder, register, to_thread
from rvasync.testing import free_port

REGIONS = ("EU", "US", "ASIA")
PUBLISH_SECONDS = 8
ORDERS_PER_SECOND = 250


def start_daemon() -> tuple[subprocess.Popen[str], str]:
    """Run ``rvasync daemon --listen 0``; return it and its ``host:port``."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert daemon.stdout is not None
    line = daemon.stdout.readline()
    found = re.search(r"listening on (\S+:\d+)", line)
    if found is None:
        raise SystemExit(f"the daemon did not start: {line!r}")
    return daemon, found.group(1)


def start_spark():
    """A local Spark session with the rvasync data source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this Python
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rvasync spark pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def start_stats_query(spark, capture_dir: str, daemon: str, service: str, checkpoint: str):
    """Per-region order counts and totals in one-minute windows, published back."""
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("rvasync")
        # Only what the query uses crosses from the Python reader into Spark.
        .option("columns", "subject, received_at")
        .option("fields", "amount:F64, qty:I32")
        .load(capture_dir)
        .withWatermark("received_at", "1 minute")
    )
    stats = (
        orders.groupBy(
            F.split("subject", r"\.").getItem(1).alias("region"),
            F.window("received_at", "1 minute"),
        )
        .agg(
            F.count("*").alias("orders"), F.sum("amount").alias("total"), F.sum("qty").alias("qty")
        )
        .select(
            F.concat(F.lit("ORDERS.STATS."), "region").alias("subject"),
            "region",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "orders",
            "total",
            "qty",
        )
    )
    return (
        # complete: every trigger publishes the current figures of every window
        # (a Python sink takes append or complete; for update, use foreachBatch).
        stats.writeStream.format("rvasync")
        .outputMode("complete")
        .option("daemon", daemon)
        .option("service", service)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="2 seconds")
        .start()
    )


async def publish_orders(transport) -> dict[str, tuple[int, float]]:
    """Send orders for a few seconds; return what was sent per region."""
    sent: dict[str, list] = defaultdict(lambda: [0, 0.0])
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    end = loop.time() + PUBLISH_SECONDS
    number = 0
    while loop.time() < end:
        batch = []
        for _ in range(ORDERS_PER_SECOND // 10):
            region = rng.choice(REGIONS)
            amount = round(rng.uniform(5, 500), 2)
            msg = rv.Message(f"ORDERS.{region}.NEW")
            msg.add("order_id", number)
            msg.add("amount", amount)
            msg.add("qty", rng.randint(1, 20), rv.FieldType.I32)
            batch.append(msg)
            sent[region][0] += 1
            sent[region][1] += amount
            number += 1
        await transport.send_many(batch)
        await asyncio.sleep(0.1)
    print(f"publisher: sent {number} orders")
    return {region: (count, total) for region, (count, total) in sent.items()}


async def pipeline(spark, daemon: str, work: str) -> bool:
    service = str(free_port())  # a service of our own: other programs' messages stay out
    latest: dict[tuple[str, object], tuple[int, float]] = {}

    def show(msg: rv.Message) -> None:
        key = (msg["region"], msg["window_start"])
        latest[key] = (msg["orders"], msg["total"])
        start = msg["window_start"].to_datetime().strftime("%H:%M")
        print(
            f"stats {msg.subject:<17} window {start}: {msg['orders']:5d} orders, "
            f"total {msg['total']:11.2f}, qty {msg['qty']}"
        )

    async with rv.Transport(service, daemon=daemon, description="pipeline") as transport:
        transport.listen("ORDERS.STATS.*", callback=show)
        capture_dir = os.path.join(work, "capture")
        recorder = Recorder(transport, "ORDERS.*.NEW", capture_dir, roll_interval=1.0)
        async with recorder:
            await transport.link.ping()  # the daemon has our interests
            query = await to_thread(
                spark,
                start_stats_query,
                spark,
                capture_dir,
                daemon,
                service,
                os.path.join(work, "checkpoint"),
            )
            try:
                sent = await publish_orders(transport)
                await recorder.flush()  # every order is now in a committed file
                print(
                    f"recorder: {recorder.stats.committed_rows} orders in "
                    f"{recorder.stats.committed_files} files"
                )
                await to_thread(spark, query.processAllAvailable)
                async with asyncio.timeout(30):
                    while not _adds_up(_by_region(latest), sent):
                        await asyncio.sleep(0.1)
            except TimeoutError:
                print(f"results do not add up: published {_by_region(latest)}, sent {sent}")
                return False
            finally:
                await to_thread(spark, query.stop)
    print(f"every order counted once: {_by_region(latest)}")
    return True


def _by_region(latest) -> dict[str, tuple[int, float]]:
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for (region, _window), (count, total) in latest.items():
        totals[region][0] += count
        totals[region][1] += total
    return {region: (count, round(total, 2)) for region, (count, total) in totals.items()}


def _adds_up(published, sent) -> bool:
    """Counts exactly equal, totals equal up to float summation order."""
    return published.keys() == sent.keys() and all(
        published[region][0] == count and math.isclose(published[region][1], total, abs_tol=0.01)
        for region, (count, total) in sent.items()
    )


def main() -> int:
    daemon, where = start_daemon()
    try:
        spark = start_spark()
        try:
            with tempfile.TemporaryDirectory(prefix="rvasync-spark-") as work:
                ok = asyncio.run(pipeline(spark, where, work))
        finally:
            spark.stop()
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(10)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
