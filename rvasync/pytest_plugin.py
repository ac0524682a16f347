"""pytest fixtures for programs that use rvasync (registered through the ``pytest11`` entry point).

Installing rvasync makes these fixtures available to every test suite, with no
conftest set-up:

- ``rv_service``: a ``(service, network)`` pair on loopback that no other test
  uses, so tests running side by side never hear each other.
- ``rv_process_transport``: the intra-process transport of the test's event loop,
  shut down (listeners closed) when the test ends.
- ``rv_transport``: an open network transport on ``rv_service`` (in-process
  daemon), closed when the test ends.
- ``rv_daemon``: a standalone daemon process started for the test; yields its
  daemon parameter (``"127.0.0.1:PORT"``) and is always stopped afterwards.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import IO

import pytest

from rvasync.testing import LOOPBACK, free_port

__all__ = ["rv_daemon", "rv_process_transport", "rv_service", "rv_transport"]

#: Seconds a standalone daemon has to report that it is ready, and then to stop.
DAEMON_START_TIMEOUT = 30.0
DAEMON_STOP_TIMEOUT = 5.0


@pytest.fixture
def rv_service() -> tuple[str, str]:
    """A free loopback service for this test, as ``(service, network)``."""
    return str(free_port()), LOOPBACK


@pytest.fixture
async def rv_process_transport() -> AsyncIterator[object]:
    """The process transport of the running loop; its listeners are closed afterwards."""
    from rvasync.transport.process import process_transport

    transport = process_transport()
    try:
        yield transport
    finally:
        transport.shutdown()


@pytest.fixture
async def rv_transport(rv_service: tuple[str, str]) -> AsyncIterator[object]:
    """An open network transport on this test's service (in-process daemon); closed afterwards."""
    from rvasync.transport.network import Transport

    service, network = rv_service
    transport = Transport(service, network, description="rv_transport fixture")
    await transport.open()
    try:
        yield transport
    finally:
        await transport.close()


@pytest.fixture
def rv_daemon() -> Iterator[str]:
    """A standalone daemon process for this test; yields ``"127.0.0.1:PORT"``.

    Transports reach it with ``rv.Transport(..., daemon=rv_daemon)``. The
    process (and anything it started) is stopped when the test ends, whatever
    the outcome.
    """
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )
        try:
            port = _await_ready(proc, errors)
            yield f"{LOOPBACK}:{port}"
        finally:
            stop_process_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()


def _await_ready(proc: subprocess.Popen[bytes], errors: IO[bytes]) -> int:
    """Read the daemon's ready line (bounded), returning its TCP port."""
    assert proc.stdout is not None
    deadline = time.monotonic() + DAEMON_START_TIMEOUT
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            break
        ready, _, _ = select.select([proc.stdout], [], [], remaining)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    found = re.search(rb"listening on [^\s]+:(\d+)", line)
    if found is None:
        errors.seek(0)
        detail = errors.read().decode(errors="replace").strip()
        raise RuntimeError(
            f"rvasync daemon did not become ready within {DAEMON_START_TIMEOUT:g} s "
            f"(exit status {proc.poll()}): {detail or line.decode(errors='replace')}"
        )
    return int(found.group(1))


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started with ``start_new_session=True`` and its group (TERM, then KILL)."""
    for signum, wait in ((signal.SIGTERM, DAEMON_STOP_TIMEOUT), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    try:  # whatever the daemon left in its group (nothing, normally)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
