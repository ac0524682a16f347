"""The Spark driver of the cluster tier (tests/test_spark_cluster.py runs it as a process).

A driver of its own, because one Python process holds one SparkContext and
the other Spark tests hold a local[2] one. Each run is a fresh driver, so
running ``stream`` twice against one checkpoint is a restarted driver.

    python tests/spark_cluster_driver.py MASTER CAPTURE_DIR WORK_DIR STEP [STEP ...] \
        [--daemon HOST:PORT --service S] [--gate ID] [--remote URL --storage-options JSON]

Steps: ``batch`` (read and check counts, from the --remote copy when
given); ``kill`` (a batch read during which the executor running row ID is
killed with SIGKILL); ``stream``
(availableNow from the checkpoint in WORK_DIR into a Parquet file sink
there); ``stream-kill`` (the same, killing the executor that runs row ID
mid-batch); ``write`` (publish rows from the executors to the daemon);
``kill-worker`` (a batch read during which the whole worker running row ID,
its JVM and its executor, is killed: leaves the cluster one worker short).

The kill steps pass the ``id`` column through a UDF that stops the task at
row ID: it records where it runs (stage, partition, attempt, executor JVM,
worker) in a file, and waits until the driver has killed that executor, so
the kill always lands mid-read and never before a task runs. A retried
attempt finds the gate open. Prints one JSON object of results on the last
line of stdout."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

MEMORY = "512m"
GATE_TIMEOUT = 240  # seconds a task waits at the gate for the driver's kill


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
    for name in ("PYTHONPATH", "RVASYNC_PURE", "AWS_EC2_METADATA_DISABLED"):
        if os.environ.get(name):
            config[f"spark.executorEnv.{name}"] = os.environ[name]
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def step_batch(spark, source: str, storage_options: str | None) -> dict:
    """Read the capture's uploaded copy (an object store) on the executors."""
    from pyspark.sql import functions as F

    # Partitions of a few thousand rows (the default is 1,048,576), so this small
    # capture is read by several tasks on both executors.
    reader = spark.read.format("rvasync")
    if storage_options:
        reader = reader.option("storageOptions", storage_options)
    df = (
        reader.option("fields", "id, region, amount")
        .option("rowsPerPartition", "4096")
        .load(source)
    )
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
        "source": source,
    }


def _executor_jvm(pid: int) -> int | None:
    """The executor JVM above a Python worker: the nearest CoarseGrainedExecutorBackend ancestor."""
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"CoarseGrainedExecutorBackend" in f.read():
                    return pid
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # field 4: the parent
        except (OSError, ValueError, IndexError):
            return None
    return None


def _pass_gate(gate_dir: str) -> None:
    """Run in the task that reaches the gate row: say where it runs, wait for the driver.

    The first attempt blocks until the driver has killed its executor (or
    worker), so the kill always lands mid-read; a retried attempt finds the
    gate released and goes on.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    jvm = _executor_jvm(os.getpid())
    worker = os.getpgid(jvm) if jvm else None  # the worker's group holds its executors
    name = f"reached-{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}-{jvm}-{worker}"
    with open(os.path.join(gate_dir, f".{name}"), "w"):
        pass
    os.rename(os.path.join(gate_dir, f".{name}"), os.path.join(gate_dir, name))
    released = os.path.join(gate_dir, "released")
    deadline = time.monotonic() + GATE_TIMEOUT
    while not os.path.exists(released):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the driver never released the gate in {gate_dir}")
        time.sleep(0.05)


def gated(df, gate_dir: str, gate_id: int):
    """``df`` with its ``id`` column passed through a UDF that stops at row ``gate_id``."""
    from pyspark.sql import functions as F

    def gate(value):
        if value == gate_id:
            _pass_gate(gate_dir)
        return value

    os.makedirs(gate_dir)
    return df.withColumn("id", F.udf(gate, df.schema["id"].dataType)("id"))


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _reached(gate_dir: str) -> list[dict]:
    found = []
    for name in sorted(os.listdir(gate_dir)):
        if name.startswith("reached-"):
            stage, partition, attempt, jvm, worker = name.split("-")[1:]
            found.append(
                {
                    "stage": int(stage),
                    "partition": int(partition),
                    "attempt": int(attempt),
                    "executor_pid": None if jvm == "None" else int(jvm),
                    "worker_pid": None if worker == "None" else int(worker),
                }
            )
    return found


class Killer(threading.Thread):
    """Waits for the first task at the gate, kills its executor (or whole worker), releases it."""

    def __init__(self, gate_dir: str, whole_worker: bool) -> None:
        super().__init__(daemon=True)
        self.gate_dir = gate_dir
        self.whole_worker = whole_worker
        self.finished = threading.Event()
        self.killed: dict = {}
        self.error = ""

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported by the step, which the test asserts on
            self.error = repr(exc)
        finally:
            # Never leave a task blocked, whatever happened here.
            with open(os.path.join(self.gate_dir, "released"), "w"):
                pass

    def _run(self) -> None:
        deadline = time.monotonic() + GATE_TIMEOUT
        while not (reached := _reached(self.gate_dir)):
            if self.finished.is_set() or time.monotonic() > deadline:
                raise RuntimeError("no task reached the gate row")
            time.sleep(0.05)
        jvm = reached[0]["executor_pid"]
        if jvm is None:
            raise RuntimeError("the task at the gate runs under no executor JVM")
        if self.whole_worker:
            group = os.getpgid(jvm)
            with open(f"/proc/{group}/cmdline", "rb") as f:
                if b"deploy.worker.Worker" not in f.read():
                    raise RuntimeError(f"process group {group} of executor {jvm} is no worker's")
            os.killpg(group, signal.SIGKILL)
            victims = [jvm, group]
            self.killed = {"executor_pid": jvm, "worker_pid": group}
        else:
            os.kill(jvm, signal.SIGKILL)
            victims = [jvm]
            self.killed = {"executor_pid": jvm}
        deadline = time.monotonic() + 60
        while not all(_dead(pid) for pid in victims):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{victims} still alive 60 s after SIGKILL")
            time.sleep(0.05)


def killing(gate_dir: str, whole_worker: bool, action):
    """Run ``action()`` while a Killer kills the executor (or worker) running the gate row."""
    killer = Killer(gate_dir, whole_worker)
    killer.start()
    try:
        value = action()
    finally:
        killer.finished.set()
        killer.join(GATE_TIMEOUT + 70)
    return value, {"killed": killer.killed, "error": killer.error, "reached": _reached(gate_dir)}


def step_kill(spark, capture_dir: str, work: str, gate_id: int, whole_worker: bool) -> dict:
    """Read while the executor (or the whole worker) running one read task is killed.

    The read has no shuffle, so a retried task re-reads its partition from
    the capture files; the counts must stay exact.
    """
    name = "kill-worker" if whole_worker else "kill"
    df = (
        spark.read.format("rvasync")
        .option("fields", "id")
        .option("rowsPerPartition", "4096")
        .load(capture_dir)
        .select("id")
    )
    df = gated(df, os.path.join(work, f"gate-{name}"), gate_id)
    rows, report = killing(
        os.path.join(work, f"gate-{name}"),
        whole_worker,
        lambda: [r["id"] for r in df.collect()],
    )
    report.update(rows=len(rows), distinct=len(set(rows)))
    return report


def step_stream(spark, capture_dir: str, work: str, gate_id: int | None = None) -> dict:
    """availableNow from the checkpoint in ``work`` into a Parquet file sink there.

    With ``gate_id``, the executor running the task that reaches that row is
    killed mid-batch (the gate row lies past the first micro-batch, so
    earlier batches are already committed to the checkpoint and the sink).
    """
    out, checkpoint = os.path.join(work, "stream-out"), os.path.join(work, "checkpoint")
    df = (
        spark.readStream.format("rvasync")
        .option("fields", "id")
        .option("maxFilesPerTrigger", "2")
        .load(capture_dir)
        .select("id", "subject")
    )
    if gate_id is not None:
        df = gated(df, os.path.join(work, "gate-stream"), gate_id)

    def run():
        query = (
            df.writeStream.format("parquet")
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
        return query

    report: dict = {}
    if gate_id is None:
        query = run()
    else:
        query, report = killing(os.path.join(work, "gate-stream"), False, run)
    # The sink's own log names the files of committed batches; a killed
    # attempt's partial file, if any, is not among them.
    rows = spark.read.parquet(out).collect()
    report.update(
        batches=[p["numInputRows"] for p in query.recentProgress if p["numInputRows"]],
        ids=sorted(r["id"] for r in rows),
    )
    return report


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


STEPS = ("batch", "kill", "stream", "stream-kill", "write", "kill-worker")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("master")
    parser.add_argument("capture")
    parser.add_argument("work")
    parser.add_argument("steps", nargs="+", choices=STEPS)
    parser.add_argument("--daemon")
    parser.add_argument("--service")
    parser.add_argument("--gate", type=int, help="the id whose task the kill steps kill")
    parser.add_argument("--remote", help="the capture's uploaded copy, which batch reads")
    parser.add_argument("--storage-options", help="storageOptions for --remote (JSON)")
    args = parser.parse_args()
    if args.gate is None and {"kill", "stream-kill", "kill-worker"} & set(args.steps):
        parser.error("the kill steps need --gate ID")
    spark = session(args.master)
    results: dict = {"app": spark.sparkContext.applicationId}
    try:
        for step in args.steps:
            started = time.monotonic()
            if step == "batch":
                results[step] = step_batch(spark, args.remote or args.capture, args.storage_options)
            elif step in ("kill", "kill-worker"):
                results[step] = step_kill(
                    spark, args.capture, args.work, args.gate, step == "kill-worker"
                )
            elif step == "stream":
                results[step] = step_stream(spark, args.capture, args.work)
            elif step == "stream-kill":
                results[step] = step_stream(spark, args.capture, args.work, args.gate)
            else:
                results[step] = step_write(spark, args.capture, args.daemon, args.service)
            results[step]["seconds"] = round(time.monotonic() - started, 1)
    finally:
        spark.stop()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
