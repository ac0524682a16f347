"""Starting a standalone daemon for a transport that finds none (auto-start).

When a transport's daemon parameter is a bare local port (``"7500"``,
``"tcp:7500"``) and nothing listens there, its link starts ``rvasync daemon
--listen PORT --idle-exit 60`` as a detached process and connects to it. A
two-part parameter (``"host:7500"``, even ``"127.0.0.1:7500"``) never starts
one. The daemon outlives the program that started it and exits after an idle
minute on its own; its errors go to a log file in the temporary directory
(named in the error when it does not come up), and a thread reaps it if it
exits while that program still runs, so it never lingers as a zombie.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rvasync.errors import DaemonUnavailable
from rvasync.protocol.clientproto.address import DaemonAddress

__all__ = [
    "AUTOSTART_IDLE_EXIT",
    "AUTOSTART_TIMEOUT",
    "daemon_log_path",
    "may_autostart",
    "spawn_daemon",
    "start_daemon_and_connect",
]

#: Seconds an auto-started daemon has to start accepting connections.
AUTOSTART_TIMEOUT = 15.0
#: Idle seconds after which an auto-started daemon with no clients exits.
AUTOSTART_IDLE_EXIT = 60.0

_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}

T = TypeVar("T")


def may_autostart(address: DaemonAddress) -> bool:
    """Whether a link may start a daemon at ``address`` when none answers there."""
    return address.autostart and address.host in _LOCAL_HOSTS


def daemon_log_path(port: int) -> str:
    """Where an auto-started daemon on ``port`` writes its errors."""
    return os.path.join(tempfile.gettempdir(), f"rvasync-daemon-{port}.log")


def spawn_daemon(port: int) -> subprocess.Popen[bytes]:
    """Start ``rvasync daemon --listen PORT`` detached from this process's session."""
    command = [
        sys.executable,
        "-m",
        "rvasync",
        "daemon",
        "--listen",
        str(port),
        "--idle-exit",
        f"{AUTOSTART_IDLE_EXIT:g}",
    ]
    with open(daemon_log_path(port), "ab") as log:
        try:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise DaemonUnavailable(
                f"cannot start a daemon on port {port}: {exc.strerror or exc}"
            ) from None
    threading.Thread(target=proc.wait, name=f"rvasync-daemon-{port}-reaper", daemon=True).start()
    return proc


async def start_daemon_and_connect(
    address: DaemonAddress,
    connect: Callable[[], Awaitable[T]],
    refused: DaemonUnavailable,
    started: Callable[[int], None],
) -> T:
    """Start a daemon on ``address.port``, then ``connect()`` until it answers.

    ``started`` is told the daemon's pid as soon as it exists (not at all when
    another transport of this loop started one meanwhile: this one waits for it
    and connects to it). ``refused`` (the
    error that made auto-start necessary) becomes the cause of the
    DaemonUnavailable raised when the daemon does not accept connections
    within ``AUTOSTART_TIMEOUT`` seconds.
    """
    where = f"{address.host}:{address.port}"
    loop = asyncio.get_running_loop()
    # Transports of one loop opening at once (each refused) start one daemon between
    # them: the first starts it, the others wait for it and connect to it.
    lock = _start_locks(loop).setdefault(address.port, asyncio.Lock())
    async with lock:
        try:
            return await connect()  # started meanwhile, by another transport here
        except DaemonUnavailable:
            pass
        proc = spawn_daemon(address.port)
        started(proc.pid)
        return await _connect_until_up(where, address.port, proc.pid, connect, refused)


def _start_locks(loop: asyncio.AbstractEventLoop) -> dict[int, asyncio.Lock]:
    """The auto-start locks of ``loop``, by port (asyncio locks belong to one loop)."""
    locks = _locks.get(loop)
    if locks is None:
        locks = _locks[loop] = {}
    return locks


_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


async def _connect_until_up(
    where: str,
    port: int,
    pid: int,
    connect: Callable[[], Awaitable[T]],
    refused: DaemonUnavailable,
) -> T:
    """``connect()`` until the daemon just started (``pid``) answers, or the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + AUTOSTART_TIMEOUT
    delay = 0.02
    while True:
        try:
            return await connect()
        except DaemonUnavailable as exc:
            # A daemon that exited may have lost a race for the port to another
            # auto-started one: keep trying until the deadline either way.
            if loop.time() + delay > deadline:
                raise DaemonUnavailable(
                    f"started a daemon for {where} (pid {pid}) but it did "
                    f"not accept connections within {AUTOSTART_TIMEOUT} s ({exc}); "
                    f"see {daemon_log_path(port)}"
                ) from refused
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.25)
