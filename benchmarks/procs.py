"""Processes: measured workers, brokers, loopback ports, and their certain cleanup.

Every child runs in its own session (process group), so it can be killed with
everything it started, and the terminal's Ctrl-C reaches only the runner, whose
``finally`` blocks then kill the children. :data:`_LIVE` also kills, at
interpreter exit, any group a crash left behind, and on Linux each child asks
the kernel to kill it if the runner dies outright. Every wait has a timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

LOOPBACK = "127.0.0.1"

#: Lines a worker prints on stdout that belong to the runner start with this.
PROTOCOL_PREFIX = "@@bench "

_LIVE: set[int] = set()

_PR_SET_PDEATHSIG = 1


class WorkerError(RuntimeError):
    """A worker failed, timed out, or broke the line protocol; the message says which."""


async def gather_or_fail(coros: Iterable[Awaitable[T]]) -> list[T]:
    """Await all of ``coros``; if one fails, cancel the rest and raise its exception
    (not an exception group), preferring a :class:`WorkerError`."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_as_coroutine(c)) for c in coros]
    except BaseExceptionGroup as failed:
        leaves = list(_leaves(failed))
        chosen = next((e for e in leaves if isinstance(e, WorkerError)), leaves[0])
        raise chosen from None
    return [task.result() for task in tasks]


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


def _leaves(group: BaseExceptionGroup) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that was free a moment ago (TCP by default, UDP with SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_ports(count: int, kind: int = socket.SOCK_STREAM) -> list[int]:
    """``count`` distinct free loopback ports (held open together while choosing)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, kind)
            held.append(s)
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGKILL it if the runner dies (even by
    SIGKILL, when no ``finally`` can run). Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@atexit.register
def _reap_leftovers() -> None:
    for pid in list(_LIVE):
        _kill_group(pid, signal.SIGKILL)
    _LIVE.clear()


def wait_tcp(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:``port``.

    Raises WorkerError after ``timeout`` seconds, or at once if ``proc`` exits.
    """
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise WorkerError(f"process {proc.args!r} exited with {proc.returncode} while starting")
        with socket.socket() as s:
            s.settimeout(0.2)
            try:
                s.connect((LOOPBACK, port))
                return
            except OSError:
                pass
        if time.monotonic() >= deadline:
            raise WorkerError(f"nothing listens on {LOOPBACK}:{port} after {timeout:.0f}s")
        time.sleep(0.05)


class Broker:
    """A long-lived helper process (nats-server ...), stopped on exit whatever happens."""

    def __init__(self, argv: Sequence[str], log_path: Path) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_port: int, timeout: float = 15.0) -> None:
        """Start the process and wait until it accepts connections on ``ready_port``."""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        _LIVE.add(self.proc.pid)
        try:
            wait_tcp(ready_port, timeout, self.proc)
        except WorkerError as exc:
            self.stop()
            tail = self.log_tail().strip()
            raise WorkerError(f"{exc}; output:\n{tail}" if tail else str(exc)) from None
        except BaseException:
            self.stop()
            raise

    def stop(self, grace: float = 5.0) -> None:
        """Terminate the process group, then kill it if it lingers past ``grace`` seconds."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=grace)
        _kill_group(proc.pid, signal.SIGKILL)  # anything it left in its group
        _LIVE.discard(proc.pid)
        self.proc = None

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the process's output, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class Worker:
    """One measured process: ``python -m benchmarks.worker SPEC``, driven over stdin/stdout.

    The worker prints ``@@bench {"event": ...}`` lines (ready, result, error) and
    reads ``go`` and ``stop`` lines; anything else it prints is ignored here and
    its stderr goes to a file quoted in error messages.
    """

    def __init__(self, name: str, spec: Mapping[str, Any], env: Mapping[str, str], workdir: Path):
        self.name = name
        self.spec = dict(spec)
        self.env = dict(env)
        self.stderr_path = workdir / f"{name}.stderr"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Spawn the process in its own session."""
        environ = dict(os.environ)
        environ.update(self.env)
        environ["PYTHONUNBUFFERED"] = "1"
        with open(self.stderr_path, "wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.worker",
                json.dumps(self.spec),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                env=environ,
                cwd=str(Path(__file__).resolve().parent.parent),
                start_new_session=True,
                preexec_fn=_die_with_parent,
                limit=1 << 20,
            )
        _LIVE.add(self.proc.pid)

    async def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """Wait up to ``timeout`` seconds for the next ``event`` line; its ``data``."""
        proc = self._require()
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await proc.stdout.readline()
                    if not line:
                        await asyncio.wait_for(proc.wait(), 5)
                        raise WorkerError(
                            f"{self.name} exited with {proc.returncode} before {event!r}"
                            + self._stderr_suffix()
                        )
                    text = line.decode(errors="replace").rstrip("\n")
                    if not text.startswith(PROTOCOL_PREFIX):
                        continue
                    message = json.loads(text[len(PROTOCOL_PREFIX) :])
                    if message.get("event") == "error":
                        raise WorkerError(f"{self.name}: {message.get('error')}")
                    if message.get("event") == event:
                        return dict(message.get("data") or {})
                    raise WorkerError(
                        f"{self.name} sent {message.get('event')!r} while {event!r} was expected"
                    )
        except TimeoutError:
            raise WorkerError(
                f"{self.name} sent no {event!r} within {timeout:.0f}s" + self._stderr_suffix()
            ) from None

    async def tell(self, command: str) -> None:
        """Send one command line (``go``, ``stop``); a dead worker is not an error here,
        the following :meth:`expect` reports it."""
        proc = self._require()
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(command.encode() + b"\n")
            await asyncio.wait_for(proc.stdin.drain(), 5)

    async def finish(self, timeout: float = 10.0) -> None:
        """Close stdin and wait for a clean exit; kill after ``timeout`` seconds."""
        proc = self._require()
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            await self.kill()

    async def kill(self) -> None:
        """Kill the worker's process group (idempotent) and reap it."""
        proc = self.proc
        if proc is None:
            return
        _kill_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            await asyncio.wait_for(proc.wait(), 5)
        _LIVE.discard(proc.pid)

    def _require(self) -> asyncio.subprocess.Process:
        if self.proc is None:
            raise WorkerError(f"{self.name} was not started")
        return self.proc

    def _stderr_suffix(self, chars: int = 1500) -> str:
        try:
            tail = self.stderr_path.read_text(errors="replace").strip()[-chars:]
        except OSError:
            return ""
        return f"; stderr:\n{tail}" if tail else ""
