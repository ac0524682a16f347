"""The pipeline on a real Spark standalone cluster: a master and two workers on 127.0.0.1.

Unlike local[2], the ``rvasync`` data source is pickled to executor JVMs the
workers launch, each with Python workers of its own. The tier records with
``rvasync record`` through a standalone daemon, then runs drivers
(tests/spark_cluster_driver.py, a process each: the other Spark tests hold
this process's one SparkContext). The first reads the capture as a batch;
reads it while the executor running one read task is killed (SIGKILL) at a
given row; streams it with a checkpoint into a Parquet file sink while an
executor is killed mid-batch the same way; publishes rows back to the daemon
from the executors; and last reads it while a whole worker (its JVM and its
executor) is killed. The worker is restarted while more is recorded, and a
second driver process resumes the stream from the checkpoint (a restarted
driver). Every kill lands mid-read: the task at the gate row waits until
the driver has killed its executor, and the tests check that exactly one
retry of that task, elsewhere, read past the row and the counts are exact.

Memory is bounded (512 MiB per worker and executor, 256 MiB per daemon JVM),
one core per worker. Everything runs once per module, and the cluster's
process groups are killed at the end whatever the outcome.

Two tiers. The quick one (the default, and CI's) runs the first driver: the
batch read, the three kills and the write. The long one
(``RVASYNC_SPARK_LONG=1``) adds the restarted driver: the killed worker is
restarted while more is recorded, and a second driver process resumes the
stream from the checkpoint. That part is a second driver JVM, a worker
restart and a second recording, about as long as everything before it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_spark_support import spark_skip_reason

if spark_skip_reason():
    pytest.skip(spark_skip_reason(), allow_module_level=True)

import rvasync as rv
from rvasync.pytest_plugin import stop_process_group
from rvasync.queues import Queue
from rvasync.spark import capture, storage
from rvasync.spark.standalone import StandaloneCluster
from rvasync.testing import free_port

FIRST = 20000  # messages recorded before the first driver (about 5 files)
SECOND = 5000  # recorded between the two drivers (2 files)
# The row at which the kill steps kill: mid-file and past the stream's first
# micro-batch (two files), so the kill lands mid-read in a later batch.
GATE = FIRST * 3 // 5 + 7
REGIONS = ("EU", "US", "ASIA")
DRIVER = Path(__file__).with_name("spark_cluster_driver.py")
TIMEOUT = 300
LONG = os.environ.get("RVASYNC_SPARK_LONG", "") not in ("", "0")
long_tier = pytest.mark.skipif(
    not LONG, reason="the restarted driver runs in the long tier: RVASYNC_SPARK_LONG=1"
)
# The module's fixture starts a cluster and two drivers (the first of five
# steps, given twice as long): slow on a loaded machine.
pytestmark = pytest.mark.timeout(4 * TIMEOUT)


def _start_daemon() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(30)
    found = re.search(r"listening on (\S+:\d+)", line[0] if line else "")
    if found is None:
        stop_process_group(proc)
        raise RuntimeError(f"the daemon did not start: {line!r}")
    return proc, found.group(1)


def _order(i: int) -> rv.Message:
    region = REGIONS[i % len(REGIONS)]
    msg = rv.Message(f"ORDERS.{region}.NEW")
    msg.add("id", i)
    msg.add("region", region)
    msg.add("amount", i / 4)
    return msg


class ObjectStore:
    """An S3 server on 127.0.0.1 (moto's), in this process, for the capture's upload."""

    BUCKET = "rvasync-tier"

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.options = json.dumps(
            {
                "endpoint_override": f"http://{host}:{port}",
                "access_key": "tier",
                "secret_key": "tier",
                "region": "us-east-1",
                "allow_bucket_creation": True,
            }
        )
        self.url = f"s3://{self.BUCKET}/capture"

    def stop(self) -> None:
        self.server.stop()


def _s3_environment() -> None:
    # Credentials and region are in the storage options: never ask a metadata service.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


async def _record(
    capture_dir: Path, daemon: str, service: str, ids: range, store: ObjectStore
) -> None:
    """Run ``rvasync record --count`` and publish ``ids`` to it through the daemon; it
    uploads what it commits to the object store."""
    recorder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rvasync", "record", "ORDERS.>",
        "--to", str(capture_dir), "--daemon", daemon, "--service", service,
        "--roll-size", "48KiB", "--roll-interval", "1", "--count", str(len(ids)),
        "--no-progress", "--upload", store.url, "--storage-options", store.options,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert recorder.stderr is not None
        async with asyncio.timeout(60):
            while b"recording" not in (line := await recorder.stderr.readline()):
                assert line, "rvasync record exited before recording"
        async with rv.Transport(service, daemon=daemon) as transport:
            batch = [_order(i) for i in ids]
            for start in range(0, len(batch), 200):
                await transport.send_many(batch[start : start + 200])
            await transport.link.ping()
        async with asyncio.timeout(60):
            rest = await recorder.stderr.read()
            assert await recorder.wait() == 0, rest.decode()
    finally:
        if recorder.returncode is None:
            recorder.kill()
            await recorder.wait()


async def _drive(
    cluster, capture_dir, work, steps, store, daemon=None, service=None, timeout=TIMEOUT
):
    args = [sys.executable, str(DRIVER), cluster.master_url, str(capture_dir), str(work), *steps]
    args += ["--gate", str(GATE), "--remote", store.url, "--storage-options", store.options]
    if daemon:
        args += ["--daemon", daemon, "--service", service]
    errors = work / f"driver-{'-'.join(steps)}.log"
    with errors.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=log, start_new_session=True
        )
        try:
            async with asyncio.timeout(timeout):
                out, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, 9)
                await proc.wait()
    if proc.returncode != 0:
        raise AssertionError(
            f"driver {steps} exited {proc.returncode}:\n{errors.read_text()[-4000:]}\n"
            f"cluster logs:\n{cluster.logs()}"
        )
    return json.loads(out.decode().strip().splitlines()[-1])


async def _collect(queue: Queue, count: int) -> list[rv.Message]:
    received = []
    async with asyncio.timeout(TIMEOUT):
        while len(received) < count:
            received.append(await queue.get())
    return received


async def _tier(cluster, daemon: str, tmp: Path, store: ObjectStore) -> dict:
    capture_dir, work = tmp / "capture", tmp / "work"
    work.mkdir()
    service = str(free_port())
    results: dict = {}
    await _record(capture_dir, daemon, service, range(FIRST), store)
    results["files_first"] = capture.read_marker(capture_dir).committed
    remote = capture.read_marker(storage.locate(store.url, store.options))
    results["uploaded"] = remote == capture.read_marker(capture_dir)
    await asyncio.to_thread(cluster.ready.wait, TIMEOUT)
    if cluster.error is not None:
        raise cluster.error
    out_service = str(free_port())
    async with rv.Transport(out_service, daemon=daemon) as listener:
        queue = Queue()
        listener.listen("BACK.>", queue=queue)
        await listener.link.ping()
        collecting = asyncio.ensure_future(_collect(queue, FIRST))
        try:
            # kill-worker comes last: the cluster is one worker short after it.
            results["first"] = await _drive(
                cluster.cluster, capture_dir, work,
                ["batch", "kill", "stream-kill", "write", "kill-worker"], store, daemon,
                out_service, timeout=2 * TIMEOUT,
            )  # fmt: skip
            results["received"] = await collecting
        finally:
            collecting.cancel()
        await asyncio.sleep(0.5)  # a duplicate would arrive in this time
        results["extra"] = len(queue)
    if LONG:
        await _restarted_driver(cluster, daemon, service, capture_dir, work, results, store)
    # Kept beside the drivers' logs: step times and kill reports for a look afterwards.
    kept = {key: value for key, value in results.items() if key != "received"}
    (work / "results.json").write_text(json.dumps(kept))
    return results


async def _restarted_driver(cluster, daemon, service, capture_dir, work, results, store) -> None:
    # The killed worker comes back while more is recorded.
    restarting = asyncio.ensure_future(asyncio.to_thread(cluster.cluster.restart_workers))
    try:
        await _record(capture_dir, daemon, service, range(FIRST, FIRST + SECOND), store)
    finally:
        results["restarted"] = await restarting
    results["files_total"] = capture.read_marker(capture_dir).committed
    results["second"] = await _drive(cluster.cluster, capture_dir, work, ["stream"], store)


class _Starting:
    """The cluster, started on a thread while the capture is recorded."""

    def __init__(self) -> None:
        self.cluster = StandaloneCluster(workers=2, cores_per_worker=1, worker_memory="512m")
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.cluster.start()
        except BaseException as exc:
            self.error = exc
        finally:
            self.ready.set()


@pytest.fixture(scope="module")
def tier(tmp_path_factory):
    _s3_environment()
    store = ObjectStore()
    daemon, where = _start_daemon()
    starting = _Starting()
    try:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(starting.run)
            try:
                tmp = tmp_path_factory.mktemp("cluster")
                yield asyncio.run(_tier(starting, where, tmp, store))
            finally:
                starting.ready.wait(TIMEOUT)
    finally:
        starting.cluster.stop()
        stop_process_group(daemon)
        store.stop()


def test_the_recorder_rolled_many_files(tier):
    assert tier["files_first"] >= 4


@long_tier
def test_the_recorder_went_on_rolling_while_the_worker_restarted(tier):
    assert tier["files_total"] > tier["files_first"]


def test_the_recorder_uploaded_the_capture_to_the_object_store(tier):
    assert tier["uploaded"]


def test_a_batch_read_on_two_executors_returns_every_message_once(tier):
    batch = tier["first"]["batch"]
    # Read from the object store: the executors' Python workers fetch the files from S3.
    assert batch["source"].startswith("s3://")
    assert batch["executors"] == 2
    assert batch["rows"] == FIRST
    assert batch["ids"] == list(range(FIRST))
    assert batch["partitions"] >= 2
    assert batch["consistent"]
    expected = {f"ORDERS.{r}.NEW": len(range(i, FIRST, 3)) for i, r in enumerate(REGIONS)}
    assert batch["by_subject"] == expected
    assert batch["eu"] == expected["ORDERS.EU.NEW"]


def _killed_mid_read_and_retried(report: dict, whole_worker: bool) -> dict:
    """The task at the gate row was killed there, then retried elsewhere; returns the retry."""
    assert report["error"] == "", report["error"]
    reached = report["reached"]
    first, *retries = reached
    # The first attempt reached the gate row (mid-read) and was killed there.
    assert first["attempt"] == 0
    assert report["killed"]["executor_pid"] == first["executor_pid"]
    if whole_worker:
        assert report["killed"]["worker_pid"] == first["worker_pid"]
    # Exactly one later attempt of the same task read past the gate row, in
    # another executor (another worker when the whole worker was killed).
    assert len(retries) == 1, reached
    retry = retries[0]
    assert (retry["stage"], retry["partition"]) == (first["stage"], first["partition"])
    assert retry["attempt"] >= 1
    assert retry["executor_pid"] not in (None, first["executor_pid"])
    if whole_worker:
        assert retry["worker_pid"] not in (None, first["worker_pid"])
    return retry


def test_a_killed_executor_is_retried_and_the_count_stays_exact(tier):
    killed = tier["first"]["kill"]
    _killed_mid_read_and_retried(killed, whole_worker=False)
    assert killed["rows"] == FIRST
    assert killed["distinct"] == FIRST


def test_a_killed_worker_is_retried_on_the_survivor_and_the_count_stays_exact(tier):
    killed = tier["first"]["kill-worker"]
    _killed_mid_read_and_retried(killed, whole_worker=True)
    assert killed["rows"] == FIRST
    assert killed["distinct"] == FIRST


@long_tier
def test_the_killed_worker_is_restarted(tier):
    # The worker JVM itself died (the cluster saw one worker exit), and
    # restart_workers brought it back for the second driver.
    assert len(tier["restarted"]) == 1


def test_executors_publish_rows_back_through_the_daemon(tier):
    received = tier["received"]
    assert tier["first"]["write"]["written"] == FIRST
    assert sorted(msg["id"] for msg in received) == list(range(FIRST))
    assert tier["extra"] == 0, "a row was published twice"
    for msg in received:
        assert msg.subject == f"BACK.{REGIONS[msg['id'] % 3]}"
        assert msg["doubled"] == msg["id"] / 2


def test_streaming_is_exactly_once_across_a_killed_executor(tier):
    first = tier["first"]["stream-kill"]
    # An executor was killed mid-batch; its task was retried within the batch.
    _killed_mid_read_and_retried(first, whole_worker=False)
    # The file sink holds every id once: nothing lost, nothing duplicated.
    assert first["ids"] == list(range(FIRST))
    assert sum(first["batches"]) == FIRST
    assert len(first["batches"]) >= 2  # maxFilesPerTrigger=2 over several files
    assert first["batches"][0] <= GATE  # the kill came after a batch was committed


@long_tier
def test_a_restarted_driver_resumes_the_stream_from_the_checkpoint(tier):
    second = tier["second"]["stream"]
    # The second driver resumed from the checkpoint: it read only the new files.
    assert sum(second["batches"]) == SECOND
    assert second["ids"] == list(range(FIRST + SECOND))
