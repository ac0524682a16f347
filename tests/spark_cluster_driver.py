"""The Spark driver of the cluster tier (tests/test_spark_cluster.py runs it as a process).

A driver of its own, because one Python process holds one SparkContext and
the other Spark tests hold a local[2] one. Each run is a fresh driver, so
running ``stream`` twice against one checkpoint is a restarted driver.

    python tests/spark_cluster_driver.py MASTER CAPTURE_DIR WORK_DIR STEP [STEP ...] \
        [--daemon HOST:PORT --service S]

Steps: ``batch`` (read and check counts), ``kill`` (a batch read during which
one executor is killed with SIGKILL), ``stream`` (availableNow from the
checkpoint in WORK_DIR into a Parquet table there), ``write`` (publish rows
from the executors to the daemon). Prints one JSON object of results on the
last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

MEMORY = "512m"


def session(master: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rvasync.spark import register

    builder = SparkSession.builder.appName("rvasync-cluster-tier").master(master)
    config = {
        "spark.executor.memory": MEMORY,
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.driver.memory": MEMORY,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.task.maxFailures": "4",
        # Small JVMs that start fast on a loaded 2-core machine.
        "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }
    for name in ("PYTHONPATH", "RVASYNC_PURE"):
        if os.environ.get(name):
            config[f"spark.executorEnv.{name}"] = os.environ[name]
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def step_batch(spark, capture_dir: str) -> dict:
    from pyspark.sql import functions as F

    df = spark.read.format("rvasync").option("fields", "id, region, amount").load(capture_dir)
    rows = df.select("id", "subject", "region", "amount", "data").collect()
    ids = [r["id"] for r in rows]
    # Executors registered with the driver (the driver's own entry left out).
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    by_subject = {r["subject"]: r["count"] for r in df.groupBy("subject").count().collect()}
    # Filters on subject / time / sender are evaluated correctly (Spark applies them).
    eu = df.where(F.col("subject") == "ORDERS.EU.NEW").count()
    return {
        "rows": len(rows),
        "ids": sorted(ids),
        "partitions": df.rdd.getNumPartitions(),
        "executors": executors,
        "by_subject": by_subject,
        "eu": eu,
        "consistent": all(
            r["subject"] == f"ORDERS.{r['region']}.NEW" and r["amount"] == r["id"] / 4 for r in rows
        ),
        "driver_pid": os.getpid(),
    }


def step_kill(spark, capture_dir: str) -> dict:
    """Count rows while one executor is killed: Spark must retry its tasks, counts exact."""
    app_id = spark.sparkContext.applicationId
    killed: list[int] = []

    def slow(rows):
        time.sleep(1.0)  # keep tasks running long enough to be killed mid-read
        for row in rows:
            yield row["id"]

    def killer() -> None:
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            running = sum(
                info.numActiveTasks
                for stage in tracker.getActiveStageIds()
                if (info := tracker.getStageInfo(stage)) is not None
            )
            if running:
                out = subprocess.run(
                    ["pgrep", "-f", f"CoarseGrainedExecutorBackend.*{app_id}"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                pids = [int(p) for p in out.stdout.split()]
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
            time.sleep(0.1)

    ids_rdd = (
        spark.read.format("rvasync")
        .option("fields", "id")
        .load(capture_dir)
        .select("id")
        .rdd.repartition(8)
        .mapPartitions(slow)
    )
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    ids = ids_rdd.collect()
    thread.join(5)
    return {"killed": killed, "rows": len(ids), "distinct": len(set(ids))}


def step_stream(spark, capture_dir: str, work: str) -> dict:
    out, checkpoint = os.path.join(work, "stream-out"), os.path.join(work, "checkpoint")
    query = (
        spark.readStream.format("rvasync")
        .option("fields", "id")
        .option("maxFilesPerTrigger", "2")
        .load(capture_dir)
        .select("id", "subject")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(240):
        query.stop()
        raise SystemExit("the streaming query did not finish within 240 s")
    if query.exception() is not None:
        raise SystemExit(f"the streaming query failed: {query.exception()}")
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    ids = sorted(r["id"] for r in spark.read.parquet(out).collect())
    return {"batches": batches, "ids": ids}


def step_write(spark, capture_dir: str, daemon: str, service: str) -> dict:
    from pyspark.sql import functions as F

    df = (
        spark.read.format("rvasync")
        .option("fields", "id, amount")
        .load(capture_dir)
        .select(
            F.concat(F.lit("BACK."), F.split("subject", r"\.").getItem(1)).alias("subject"),
            "id",
            (F.col("amount") * 2).alias("doubled"),
        )
        .repartition(4)
    )
    df.write.format("rvasync").mode("append").option("daemon", daemon).option(
        "service", service
    ).save()
    return {"written": df.count()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("capture")
    parser.add_argument("work")
    parser.add_argument("steps", nargs="+", choices=["batch", "kill", "stream", "write"])
    parser.add_argument("--daemon")
    parser.add_argument("--service")
    args = parser.parse_args()
    spark = session(args.master)
    results: dict = {"app": spark.sparkContext.applicationId}
    try:
        for step in args.steps:
            started = time.monotonic()
            if step == "batch":
                results[step] = step_batch(spark, args.capture)
            elif step == "kill":
                results[step] = step_kill(spark, args.capture)
            elif step == "stream":
                results[step] = step_stream(spark, args.capture, args.work)
            else:
                results[step] = step_write(spark, args.capture, args.daemon, args.service)
            results[step]["seconds"] = round(time.monotonic() - started, 1)
    finally:
        spark.stop()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
