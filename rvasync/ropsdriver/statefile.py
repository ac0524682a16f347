"""A remote-operations state file: one checksummed snapshot, replaced atomically.

Layout: ``MAGIC length:u32 crc32:u32 body`` where body is the msgpack form of
the endpoint core's snapshot. Each save writes the whole snapshot to a side
file, syncs it, renames it over the state file and syncs the directory, so a
crash at any moment leaves either the old snapshot or the new one, whole.
A file whose checksum or length does not match was damaged by something
other than a crash and raises :class:`~rvasync.cmdriver.LedgerCorrupt` (the
certified ledger's error: same meaning, same fields) instead of starting
empty and forgetting which invocations were performed.

Saves are group commits: the writer always writes the newest snapshot, and
everyone waiting for any version up to it is released by that one write. A
side lock file (``<path>.lock``, held with ``flock``) keeps two endpoints
from sharing one state; it is taken before anything else is touched (the
side file of a save a crash interrupted is removed only by the lock's
holder). Locking, the atomic replacement and the directory sync are the
package's durable file kit (:mod:`rvasync.driverkit.durable`). All file
system calls run on a thread of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack

from rvasync.driverkit.durable import FileLock, atomic_replace, remove_quietly
from rvasync.errors import InvalidArgument, LedgerCorrupt

__all__ = ["MAGIC", "StateFile"]

MAGIC = b"RVOPSST1"
_HEAD = struct.Struct("<II")
_SIDE = ".new"


class StateFile:
    """An open state file. Create with :meth:`open`, then :meth:`start` the writer."""

    def __init__(self, path: str, lock: FileLock, executor: ThreadPoolExecutor) -> None:
        self.path = path
        self._lock = lock
        self._executor = executor
        self._wanted = 0
        self._durable = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._snapshot: Callable[[], tuple[int, Any]] | None = None
        self.failure: BaseException | None = None
        self.writes = 0

    @classmethod
    async def open(cls, path: str) -> tuple[StateFile, Any]:
        """Lock and read ``path``; returns the file and the snapshot in it (None when new)."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="rvops-state")
        loop = asyncio.get_running_loop()
        try:
            lock, data = await loop.run_in_executor(executor, _open, path)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(path, lock, executor), data

    def start(self, snapshot: Callable[[], tuple[int, Any]]) -> None:
        """Begin: ``snapshot()`` returns ``(version, state)`` of the live endpoint."""
        self._snapshot = snapshot
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"rvops:{self.path}")

    @property
    def durable_version(self) -> int:
        return self._durable

    async def wait_durable(self, version: int) -> None:
        """Return once a snapshot of ``version`` or later is on disk."""
        if self.failure is not None:
            raise self.failure
        if version <= self._durable:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((version, fut))
        self._wanted = max(self._wanted, version)
        self._wake.set()
        await fut

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._snapshot is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._wanted > self._durable:
                version, state = self._snapshot()
                data = msgpack.packb(state, use_bin_type=True)
                try:
                    await loop.run_in_executor(self._executor, _replace, self.path, data)
                except Exception as exc:  # a full disk: stop, tell every waiter
                    self.failure = exc
                    for _, fut in self._waiters:
                        if not fut.done():
                            fut.set_exception(exc)
                    self._waiters.clear()
                    return
                self.writes += 1
                self._durable = version
                keep = []
                for wanted, fut in self._waiters:
                    if wanted <= version:
                        if not fut.done():
                            fut.set_result(None)
                    else:
                        keep.append((wanted, fut))
                self._waiters = keep

    async def close(self) -> None:
        """Write what is pending, then release the file."""
        if self._snapshot is not None and self.failure is None:
            version, _ = self._snapshot()
            with contextlib.suppress(Exception):
                await self.wait_durable(version)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._lock.release)
        finally:
            self._executor.shutdown(wait=False)


def encode_state(state: Any) -> bytes:
    """The whole file for ``state`` (exposed for tests that craft files)."""
    body = msgpack.packb(state, use_bin_type=True)
    return MAGIC + _HEAD.pack(len(body), zlib.crc32(body)) + body


def _decode(path: str, data: bytes) -> Any:
    if not data:
        return None
    if not data.startswith(MAGIC):
        raise LedgerCorrupt(path, 0, "not a remote-operations state file (bad magic)")
    head = data[len(MAGIC) : len(MAGIC) + _HEAD.size]
    if len(head) < _HEAD.size:
        raise LedgerCorrupt(path, len(MAGIC), "header cut short")
    length, crc = _HEAD.unpack(head)
    body = data[len(MAGIC) + _HEAD.size :]
    if len(body) != length:
        raise LedgerCorrupt(path, len(MAGIC), f"body is {len(body)} bytes, header says {length}")
    if zlib.crc32(body) != crc:
        raise LedgerCorrupt(path, len(MAGIC) + _HEAD.size, "checksum mismatch")
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise LedgerCorrupt(path, len(MAGIC) + _HEAD.size, f"undecodable body: {exc}") from None


# --- executor side ---


def _open(path: str) -> tuple[FileLock, Any]:
    if os.path.isdir(path):
        raise InvalidArgument(f"state path {path!r} is a directory; give a file path")
    lock = FileLock.acquire(
        path,
        refusal=f"state file {path!r} is in use by another RemoteOps endpoint",
        what="state path",
    )
    try:
        remove_quietly(path + _SIDE)  # a save a crash interrupted; the old file is whole
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        return lock, _decode(path, data)
    except BaseException:
        lock.release()
        raise


def _replace(path: str, body: bytes) -> None:
    atomic_replace(path, [MAGIC, _HEAD.pack(len(body), zlib.crc32(body)), body], side_suffix=_SIDE)
