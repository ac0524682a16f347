"""A Spark standalone cluster on this machine: one master and N workers on 127.0.0.1.

Tests, the cluster example and the benchmark need a real cluster, where the
``rvasync`` data source is pickled to executor JVMs that the workers launch,
not the single JVM of ``local[2]``. This starts PySpark's own
``org.apache.spark.deploy.master.Master`` and ``...deploy.worker.Worker``
(``spark-class`` from the pyspark package) on free ports, with bounded memory
and one core per worker, and waits until every worker has registered.

Every daemon runs in a process group of its own, and :meth:`StandaloneCluster.stop`
kills the groups (the workers' executors included), so a failed test or an
interrupted program leaves no JVM behind. Use it as a context manager.

It is a convenience for development machines and CI; a production cluster is
started by its operators (see docs/spark.md, "Running on a cluster").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rvasync.errors import InvalidArgument, RvError
from rvasync.testing import LOOPBACK, free_port

__all__ = ["ClusterError", "StandaloneCluster", "spark_home"]


class ClusterError(RvError):
    """The standalone cluster could not start (the message names the daemon and its log)."""


def spark_home() -> Path:
    """The pyspark package directory, which holds ``bin/spark-class`` and the jars."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"pyspark at {str(home)!r} has no bin/spark-class")
    return home


def _free_tcp_port() -> int:
    import socket

    return free_port(socket.SOCK_STREAM)


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers bound to 127.0.0.1 (``with`` starts and stops them).

    ``worker_memory`` is what each worker offers its executors (Spark's
    ``--memory``); ``daemon_memory`` is the heap of the master and worker
    JVMs themselves. Sessions should ask for ``spark.executor.memory`` of at
    most ``worker_memory`` (:meth:`session_config` does).
    """

    workers: int = 2
    cores_per_worker: int = 1
    worker_memory: str = "512m"
    daemon_memory: str = "256m"
    start_timeout: float = 90.0
    work_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    master_url: str = ""
    master_ui: str = ""
    _daemons: list[_Daemon] = field(default_factory=list)
    _own_work_dir: bool = False
    # restart_workers (on another thread, say) and stop never interleave, so
    # a worker started during a restart is always one that stop kills.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _running: bool = False

    def __post_init__(self) -> None:
        if self.workers < 1 or self.cores_per_worker < 1:
            raise InvalidArgument("a standalone cluster needs at least one worker with one core")

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> StandaloneCluster:
        """Start the master, then the workers; return once all are registered."""
        self._running = True
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="rvasync-spark-cluster-"))
            self._own_work_dir = True
        self.work_dir.mkdir(parents=True, exist_ok=True)
        port, ui = _free_tcp_port(), _free_tcp_port()
        self.master_url = f"spark://{LOOPBACK}:{port}"
        self.master_ui = f"http://{LOOPBACK}:{ui}"
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui)],
        )
        self._wait(lambda state: state is not None, "the master to answer")
        ports = [self._spawn_worker(index) for index in range(self.workers)]
        self._wait(
            lambda state: self._registered(state, ports), f"{self.workers} workers to register"
        )
        return self

    def stop(self) -> None:
        """Kill every daemon's process group (executors included); safe to repeat."""
        with self._lock:
            self._running = False
            self._stop()

    def _stop(self) -> None:
        for daemon in reversed(self._daemons):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for daemon in reversed(self._daemons):
            try:
                daemon.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(daemon.process.pid, signal.SIGKILL)
                daemon.process.wait(10)
            # Executors are in the worker's group; make sure none outlives it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.process.pid, signal.SIGKILL)
            daemon.log.close()
        self._daemons.clear()
        if self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None
            self._own_work_dir = False

    def restart_workers(self) -> list[str]:
        """Start a fresh worker in place of each one that has exited; return their names.

        A worker killed or crashed (its executors die with it) leaves the
        cluster short; this brings it back to ``workers`` workers, each
        registered with the master before it returns, so a test that kills a
        worker can go on with the full cluster.
        """
        with self._lock:
            if not self._running:
                raise ClusterError("the cluster is not started (or already stopped)")
            return self._restart_workers()

    def _restart_workers(self) -> list[str]:
        dead = [
            d for d in self._daemons if d.name.startswith("worker") and d.process.poll() is not None
        ]
        ports = []
        for daemon in dead:
            daemon.log.close()
            self._daemons.remove(daemon)
            ports.append(self._spawn_worker(int(daemon.name.split("-")[1])))
        if ports:
            self._wait(
                lambda state: self._registered(state, ports), f"{len(ports)} restarted workers"
            )
        return [daemon.name for daemon in dead]

    # -- what a session needs --------------------------------------------------

    def session_config(self) -> dict[str, str]:
        """Spark settings for a driver on this machine using this cluster."""
        config = {
            "spark.master": self.master_url,
            "spark.executor.memory": self.worker_memory,
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.workers * self.cores_per_worker),
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            "spark.driver.memory": self.worker_memory,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": str(self.workers * self.cores_per_worker),
        }
        # Executors run the Python this driver runs, with the same import path
        # and implementation choice (an installed or editable rvasync is found
        # through them; docs/spark.md covers wheels shipped with spark.archives).
        for name in ("PYTHONPATH", "RVASYNC_PURE"):
            if os.environ.get(name):
                config[f"spark.executorEnv.{name}"] = os.environ[name]
        return config

    def state(self) -> dict[str, Any] | None:
        """The master's status page as JSON (workers, applications), or None if unreachable."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as reply:
                loaded: dict[str, Any] = json.loads(reply.read())
                return loaded
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def executor_pids(self) -> list[int]:
        """Process ids of the executors the workers run right now."""
        pids: list[int] = []
        for daemon in self._daemons:
            if not daemon.name.startswith("worker"):
                continue
            out = subprocess.run(
                ["pgrep", "-g", str(daemon.process.pid), "-f", "CoarseGrainedExecutorBackend"],
                capture_output=True,
                text=True,
                check=False,
            )
            pids.extend(int(pid) for pid in out.stdout.split())
        return pids

    def logs(self) -> str:
        """The tail of every daemon's log (for error messages)."""
        parts = []
        for daemon in self._daemons:
            daemon.log.flush()
            text = daemon.log_path.read_text(errors="replace")
            parts.append(f"--- {daemon.name} ({daemon.log_path})\n{text[-3000:]}")
        return "\n".join(parts)

    # -- internals -------------------------------------------------------------

    @staticmethod
    def _registered(state: dict[str, Any] | None, ports: list[int]) -> bool:
        """Whether the workers listening on ``ports`` are all ALIVE in the master's state."""
        if state is None:
            return False
        alive = {w.get("port") for w in state.get("workers", []) if w.get("state") == "ALIVE"}
        return all(port in alive for port in ports)

    def _spawn_worker(self, index: int) -> int:
        """Start worker ``index`` on a free port (returned) and its own work directory."""
        assert self.work_dir is not None
        worker_dir = self.work_dir / f"worker-{index}"
        worker_dir.mkdir(exist_ok=True)
        port = _free_tcp_port()
        self._spawn(
            f"worker-{index}",
            "org.apache.spark.deploy.worker.Worker",
            [
                "--host", LOOPBACK,
                "--port", str(port),
                "--webui-port", str(_free_tcp_port()),
                "--cores", str(self.cores_per_worker),
                "--memory", self.worker_memory,
                "--work-dir", str(worker_dir),
                self.master_url,
            ],
        )  # fmt: skip
        return port

    def _spawn(self, name: str, main_class: str, args: list[str]) -> None:
        assert self.work_dir is not None
        home = spark_home()
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(home),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                # The master and workers only schedule: a quick-starting, small JVM.
                "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
                "SPARK_WORKER_DIR": str(self.work_dir),
                "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
            }
        )
        env.update(self.env)
        log_path = self.work_dir / f"{name}.log"
        log = log_path.open("ab")  # a restarted worker appends to its predecessor's log
        try:
            process = subprocess.Popen(
                [str(home / "bin" / "spark-class"), main_class, *args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group, killed as one
            )
        except BaseException:
            log.close()
            raise
        self._daemons.append(_Daemon(name, process, log_path, log))

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            for daemon in self._daemons:
                code = daemon.process.poll()
                if code is not None:
                    raise ClusterError(
                        f"spark {daemon.name} exited with status {code} while waiting for "
                        f"{what}:\n{self.logs()}"
                    )
            if ready(self.state()):
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"timed out after {self.start_timeout:g} s waiting for {what}:\n{self.logs()}"
                )
            time.sleep(0.2)
