"""The rvasync data source on a Spark standalone cluster (a master and two workers on this machine).

1. a Spark standalone cluster starts: PySpark's own master and two workers
   on 127.0.0.1, 512 MiB and one core each (rvasync.spark.standalone);
   meanwhile
2. a standalone daemon starts, and a Recorder captures the orders a
   publisher sends through it into a directory of Parquet files;
3. a driver connected to the cluster reads the capture as a batch: the
   ``rvasync`` source's reader runs inside the executors' Python workers;
4. the executors publish one message per region with the totals back
   through the daemon (each task opens one transport for its partition);
5. a listener checks the totals add up to what was sent, and the cluster
   is torn down (also on failure).

The same code runs against your own cluster: give the driver your master's
URL and a capture directory every executor sees; docs/spark.md, "Running on
a cluster", says how executors get rvasync.

Needs the spark extra and Java 17: pip install -e '.[spark]'
Run: python examples/spark_cluster.py
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict

import rvasync as rv
from rvasync.spark import Recorder, register, to_thread
from rvasync.spark.standalone import StandaloneCluster
from rvasync.testing import free_port

REGIONS = ("EU", "US", "ASIA")
ORDERS = 20_000


def start_daemon() -> tuple[subprocess.Popen[str], str]:
    """Run ``rvasync daemon --listen 0``; return it and its ``host:port``."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert daemon.stdout is not None
    found = re.search(r"listening on (\S+:\d+)", daemon.stdout.readline())
    if found is None:
        raise SystemExit("the daemon did not start")
    return daemon, found.group(1)


def cluster_session(cluster: StandaloneCluster):
    """A driver on this machine using the cluster, with the rvasync data source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this Python
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("rvasync on a cluster")
    # spark.master, executor memory and cores, driver address, and (when set)
    # PYTHONPATH for the executors: see StandaloneCluster.session_config.
    for key, value in cluster.session_config().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


async def record(daemon: str, service: str, directory: str) -> dict[str, list]:
    """Publish orders through the daemon and capture them; return what was sent per region."""
    sent: dict[str, list] = defaultdict(lambda: [0, 0.0])
    async with rv.Transport(service, daemon=daemon, description="publisher") as transport:
        recorder = Recorder(transport, "ORDERS.*.NEW", directory, roll_bytes=256 * 1024)
        async with recorder:
            await transport.link.ping()  # the recorder's interest is in place
            batch = []
            for number in range(ORDERS):
                region = REGIONS[number % 3]
                msg = rv.Message(f"ORDERS.{region}.NEW")
                msg.add("order_id", number)
                msg.add("amount", round(5 + (number * 7919 % 49500) / 100, 2))
                sent[region][0] += 1
                sent[region][1] += msg["amount"]
                batch.append(msg)
                if len(batch) == 500:
                    await transport.send_many(batch)
                    batch = []
            await transport.send_many(batch)
            async with asyncio.timeout(30):  # until the recorder has taken every order
                while recorder.stats.received < ORDERS:
                    await asyncio.sleep(0.05)
    print(f"recorder: {ORDERS} orders captured in {directory}")
    return sent


def totals_back(spark, directory: str, daemon: str, service: str) -> int:
    """On the executors: per-region totals of the capture, published as messages."""
    from pyspark.sql import functions as F

    orders = spark.read.format("rvasync").option("fields", "amount:F64").load(directory)
    print(f"batch read: {orders.rdd.getNumPartitions()} partitions over the executors")
    totals = orders.groupBy(
        F.concat(F.lit("ORDERS.TOTAL."), F.split("subject", r"\.").getItem(1)).alias("subject")
    ).agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
    (
        totals.write.format("rvasync")
        .mode("append")
        .option("daemon", daemon)  # every executor reaches the daemon here
        .option("service", service)
        .save()
    )
    return totals.count()


async def pipeline(cluster: StandaloneCluster, started: threading.Event, work: str) -> bool:
    daemon_proc, daemon = start_daemon()
    try:
        service = str(free_port())
        capture_dir = os.path.join(work, "capture")
        sent = await record(daemon, service, capture_dir)
        await asyncio.to_thread(started.wait)
        if not cluster.master_url:
            return False
        print(f"cluster: {cluster.master_url} with {cluster.workers} workers")
        spark = await asyncio.to_thread(cluster_session, cluster)
        try:
            async with rv.Transport(service, daemon=daemon, description="listener") as listener:
                results = rv.Queue()
                listener.listen("ORDERS.TOTAL.*", queue=results)
                await listener.link.ping()

                # Off the event loop, with the session active in that thread (the JVM
                # finds the data source through it).
                count = await to_thread(spark, totals_back, spark, capture_dir, daemon, service)
                got = {}
                async with asyncio.timeout(30):
                    while len(got) < count:
                        msg = await results.get()
                        got[msg.subject.rsplit(".", 1)[1]] = (msg["orders"], msg["total"])
        finally:
            await asyncio.to_thread(spark.stop)
    finally:
        os.killpg(daemon_proc.pid, signal.SIGTERM)
        daemon_proc.wait(10)
    for region in REGIONS:
        orders, total = got[region]
        print(f"{region:5} {orders:6d} orders, total {total:12.2f}")
    return all(
        got[r][0] == sent[r][0] and math.isclose(got[r][1], sent[r][1], abs_tol=0.01)
        for r in REGIONS
    )


def main() -> int:
    # A SIGTERM ends the program through the with blocks, which stop the cluster.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with tempfile.TemporaryDirectory(prefix="rvasync-cluster-") as work:
        cluster = StandaloneCluster(workers=2, cores_per_worker=1, worker_memory="512m")
        started = threading.Event()
        errors: list[BaseException] = []

        def start() -> None:
            try:
                cluster.start()
            except BaseException as exc:
                errors.append(exc)
                cluster.master_url = ""
            finally:
                started.set()

        starter = threading.Thread(target=start, daemon=True)
        starter.start()  # the cluster starts while the capture is recorded
        try:
            ok = asyncio.run(pipeline(cluster, started, work))
        finally:
            started.wait()
            cluster.stop()
        if errors:
            raise errors[0]
    print("every order counted once" if ok else "the totals do not add up")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
