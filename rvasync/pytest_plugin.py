"""pytest fixtures for programs that use rvasync (registered through the ``pytest11`` entry point).

Installing rvasync makes these fixtures available to every test suite, with no
conftest set-up (docs/testing.md):

- ``rv_service``: a ``(service, network)`` pair on loopback that no other test
  uses, so tests running side by side never hear each other.
- ``rv_process_transport``: the intra-process transport of the test's event loop,
  shut down (listeners closed) when the test ends.
- ``rv_transport``: an open network transport on ``rv_service`` (in-process
  daemon), closed when the test ends.
- ``rv_cm_transport``: a certified transport on ``rv_transport`` with a file
  ledger in the test's temporary directory.
- ``rv_router_pair``: two loopback networks joined by two routing daemons
  (:class:`rvasync.testbeds.RouterPair`).
- ``rv_secure_daemon``: a TLS daemon with a users file and test certificates
  (:class:`rvasync.testbeds.SecureDaemon`).
- ``rv_daemon``: a standalone daemon process started for the test; yields its
  daemon parameter (``"127.0.0.1:PORT"``) and is always stopped afterwards.

The asynchronous ones need pytest-asyncio and work in its strict and auto
modes: each is a ``pytest_asyncio.fixture``, registered once per loop scope
(``_rv_transport__module`` ...). The public name is a plain fixture that picks
the one of the requesting test's loop, so a fixture always runs in the loop
its test runs in, whatever ``loop_scope`` the test's ``asyncio`` mark or
``asyncio_default_test_loop_scope`` gives it: a transport opened in another
loop than the test's would be unusable there.
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
import types
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, cast

import pytest

from rvasync.testing import LOOPBACK, free_port

try:
    import pytest_asyncio
except ImportError:  # the synchronous fixtures still work; the others say what is missing
    pytest_asyncio = None  # type: ignore[assignment]

__all__ = [
    "rv_cm_transport",
    "rv_daemon",
    "rv_process_transport",
    "rv_router_pair",
    "rv_secure_daemon",
    "rv_service",
    "rv_transport",
]

#: Seconds a standalone daemon has to report that it is ready, and then to stop.
DAEMON_START_TIMEOUT = 30.0
DAEMON_STOP_TIMEOUT = 5.0

LoopScope = Literal["function", "class", "module", "package", "session"]

#: pytest-asyncio's loop scopes, narrowest first.
LOOP_SCOPES: tuple[LoopScope, ...] = ("function", "class", "module", "package", "session")

#: The correspondent name (and ledger file) of ``rv_cm_transport``.
CM_NAME = "RVASYNC.TEST.CM"


@pytest.fixture
def rv_service() -> tuple[str, str]:
    """A free loopback service for this test, as ``(service, network)``."""
    return str(free_port()), LOOPBACK


def requesting_loop_scope(request: pytest.FixtureRequest) -> str:
    """The loop scope the requesting test runs in, as pytest-asyncio decides it.

    The ``loop_scope`` of the closest ``asyncio`` mark (function, class,
    module), else the ``asyncio_default_test_loop_scope`` option, else
    ``function``.
    """
    marker = request.node.get_closest_marker("asyncio")
    if marker is not None:
        scope = marker.kwargs.get("loop_scope") or marker.kwargs.get("scope")
        if scope:
            return str(scope)
    try:
        default = request.config.getini("asyncio_default_test_loop_scope")
    except ValueError:  # a pytest-asyncio without that option: tests run per function
        default = None
    return str(default or "function")


def _in_test_loop(name: str, body: Callable[..., AsyncIterator[Any]]) -> Any:
    """Register ``body`` as ``_<name>__<scope>`` per loop scope; return the public fixture.

    pytest-asyncio marks the function object itself with its loop scope, so
    every scope gets a copy of ``body`` (same code and signature, so pytest
    hands it the same fixtures).
    """
    if pytest_asyncio is not None:
        for scope in LOOP_SCOPES:
            copy = cast(
                Callable[..., AsyncIterator[Any]],
                types.FunctionType(
                    body.__code__, body.__globals__, f"{name}__{scope}", None, body.__closure__
                ),
            )
            copy.__doc__ = body.__doc__
            variant = f"_{name}__{scope}"
            globals()[variant] = pytest_asyncio.fixture(copy, loop_scope=scope, name=variant)

    def public(request: pytest.FixtureRequest) -> Any:
        if pytest_asyncio is None:
            pytest.fail(
                f"the {name} fixture needs pytest-asyncio (pip install pytest-asyncio)",
                pytrace=False,
            )
        return request.getfixturevalue(f"_{name}__{requesting_loop_scope(request)}")

    public.__name__ = public.__qualname__ = name
    public.__doc__ = body.__doc__
    return pytest.fixture(public, name=name)


async def _process_transport() -> AsyncIterator[object]:
    """The process transport of the test's loop; its listeners are closed afterwards."""
    from rvasync.transport.process import process_transport

    transport = process_transport()
    try:
        yield transport
    finally:
        transport.shutdown()


async def _transport(rv_service: tuple[str, str]) -> AsyncIterator[object]:
    """An open network transport on this test's service (in-process daemon); closed afterwards."""
    from rvasync.transport.network import Transport

    service, network = rv_service
    transport = Transport(service, network, description="rv_transport fixture")
    await transport.open()
    try:
        yield transport
    finally:
        await transport.close()


async def _cm_transport(rv_transport: Any, tmp_path: Path) -> AsyncIterator[object]:
    """A certified transport on ``rv_transport``, named RVASYNC.TEST.CM, its ledger in tmp_path.

    The ledger file is ``tmp_path / "RVASYNC.TEST.CM.ledger"``; the transport
    is closed (ledger written out) when the test ends.
    """
    from rvasync.cmdriver import CmTransport

    ledger = tmp_path / f"{CM_NAME}.ledger"
    async with CmTransport(rv_transport, CM_NAME, ledger=str(ledger)) as cm:
        yield cm


async def _router_pair() -> AsyncIterator[object]:
    """Two loopback networks, ``left`` and ``right``, joined by two routing daemons (linked)."""
    from rvasync.testbeds import router_pair

    async with router_pair() as pair:
        yield pair


async def _secure_daemon(tmp_path: Path) -> AsyncIterator[object]:
    """A TLS daemon with users alice (password) and bob (certificate); see rvasync.testbeds."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        pytest.skip("rv_secure_daemon needs the secure extra: pip install 'rvasync[secure]'")
    from rvasync.testbeds import secure_daemon

    async with secure_daemon(tmp_path / "rv_secure_daemon") as setup:
        yield setup


rv_process_transport = _in_test_loop("rv_process_transport", _process_transport)
rv_transport = _in_test_loop("rv_transport", _transport)
rv_cm_transport = _in_test_loop("rv_cm_transport", _cm_transport)
rv_router_pair = _in_test_loop("rv_router_pair", _router_pair)
rv_secure_daemon = _in_test_loop("rv_secure_daemon", _secure_daemon)


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
