"""A certified-delivery ledger file: open and replay, append with group commit, compact.

The on-disk format and its crash rules are in
:mod:`rvasync.protocol.cm.ledger_format`; this module does the I/O. Every
file system call runs on one thread of its own, so the event loop never
waits for the disk and appends reach the file in the order they were made.

* **Open** locks the file (two transports must never share a ledger), reads
  and replays it, cuts a torn tail back to the last intact record and starts
  a new file with a header when it is empty. A damaged file raises
  :class:`~rvasync.protocol.cm.ledger_format.LedgerCorrupt`; a file of
  another correspondent raises :class:`~rvasync.errors.InvalidArgument`.
* **Append** queues a record. A writer task takes everything queued, writes
  it with one ``write`` (and, for a synced ledger, one ``fsync``: the group
  commit every concurrent sender shares), then reports the highest record
  number durable.
* **Compaction** replaces the file by the live state once the file has grown
  to ``compact_ratio`` times what the last rewrite left (and at least
  ``compact_min_bytes``): the state is encoded on the loop, written to a side
  file, synced and renamed over the ledger, so a crash leaves either file
  whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.cm.ledger import LedgerRecord, StoredMessage
from rvasync.protocol.cm.ledger_format import (
    LedgerReplay,
    decode_ledger,
    encode_records,
    new_ledger,
)

__all__ = ["DEFAULT_BACKLOG_BYTES", "LedgerFile", "check_ledger_path"]

DEFAULT_BACKLOG_BYTES = 8 << 20
"""Appends queued but not yet written beyond which senders wait for the writer."""

_COMPACT_SUFFIX = ".compact"
_READ_CHUNK = 1 << 20


class LedgerFile:
    """One open ledger file. Create it with :meth:`open`; start it with :meth:`start`."""

    def __init__(
        self,
        path: str,
        fd: int,
        size: int,
        created: float,
        executor: ThreadPoolExecutor,
        *,
        sync: bool,
        compact_min_bytes: int,
        compact_ratio: float,
    ) -> None:
        self.path = path
        self._fd = fd
        self._size = size
        self._base = size
        self._created = created
        self._executor = executor
        self.sync = sync
        self._compact_min = compact_min_bytes
        self._compact_ratio = compact_ratio
        self._queued: list[LedgerRecord] = []
        self._queued_lsn = 0
        self._queued_bytes = 0
        self._durable_lsn = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._room_waiters: list[asyncio.Future[None]] = []
        self._compact_waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._on_durable: Callable[[int], None] | None = None
        self._snapshot: Callable[[], bytes] | None = None
        self._closing = False
        self.failure: BaseException | None = None
        """The error that stopped the writer (a full disk, say), if any."""
        self.compactions = 0
        self.backlog_bytes = DEFAULT_BACKLOG_BYTES

    # --- opening ----------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: str,
        name: str,
        *,
        sync: bool = False,
        compact_min_bytes: int = 4 << 20,
        compact_ratio: float = 4.0,
    ) -> tuple[LedgerFile, LedgerReplay]:
        """Open (or create) the ledger of correspondent ``name`` at ``path`` and replay it."""
        executor = ThreadPoolExecutor(1, thread_name_prefix="rvcm-ledger")
        loop = asyncio.get_running_loop()
        try:
            fd, replay, size = await loop.run_in_executor(executor, _open_file, path, name)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        created = replay.created if replay.state is not None else time.time()
        ledger = cls(
            path,
            fd,
            size,
            created,
            executor,
            sync=sync,
            compact_min_bytes=compact_min_bytes,
            compact_ratio=compact_ratio,
        )
        if replay.torn_bytes:
            stderr_logger().warning(
                "ledger file ended in a record cut short by a crash; it was discarded",
                path=path,
                offset=replay.valid_length,
                discarded_bytes=replay.torn_bytes,
            )
        return ledger, replay

    def start(self, on_durable: Callable[[int], None], snapshot: Callable[[], bytes]) -> None:
        """Begin writing: ``on_durable(lsn)`` after each write, ``snapshot()`` to compact."""
        self._on_durable = on_durable
        self._snapshot = snapshot
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"rvcm-ledger:{self.path}"
        )

    @property
    def created(self) -> float:
        return self._created

    @property
    def size(self) -> int:
        """Bytes in the file (what the writer has written so far)."""
        return self._size

    @property
    def durable_lsn(self) -> int:
        return self._durable_lsn

    # --- appending ---------------------------------------------------------------------

    def append(self, lsn: int, record: LedgerRecord) -> None:
        """Queue ``record`` (append number ``lsn``) for the next write."""
        self._queued.append(record)
        self._queued_lsn = lsn
        self._queued_bytes += _estimate(record)
        if not self._wake.is_set():
            self._wake.set()

    @property
    def backlogged(self) -> bool:
        """True when so much waits to be written that senders should wait."""
        return self._queued_bytes > self.backlog_bytes

    async def wait_room(self) -> None:
        """Wait until the queued appends fall below the backlog limit."""
        while self._queued_bytes > self.backlog_bytes and self.failure is None:
            fut = asyncio.get_running_loop().create_future()
            self._room_waiters.append(fut)
            await fut
        self._raise_failure()

    async def wait_durable(self, lsn: int) -> None:
        """Return once append ``lsn`` (and every one before it) is written, synced if ``sync``."""
        self._raise_failure()
        if lsn <= self._durable_lsn:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((lsn, fut))
        await fut

    async def flush(self) -> None:
        """Wait until everything appended so far is durable."""
        await self.wait_durable(self._queued_lsn)

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    # --- the writer ----------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queued or self._compact_waiters:
                compact_waiters, self._compact_waiters = self._compact_waiters, []
                records, self._queued = self._queued, []
                lsn = self._queued_lsn
                self._queued_bytes = 0
                for fut in self._room_waiters:
                    if not fut.done():
                        fut.set_result(None)
                self._room_waiters.clear()
                try:
                    if compact_waiters or self._should_compact():
                        assert self._snapshot is not None
                        # The state already holds every record queued so far, these included.
                        data = self._snapshot()
                        fd = await loop.run_in_executor(
                            self._executor, _replace_file, self.path, data, self._fd
                        )
                        self._fd = fd
                        self._size = self._base = len(data)
                        self.compactions += 1
                    else:
                        data = encode_records(records)
                        await loop.run_in_executor(
                            self._executor, _write_all, self._fd, data, self.sync
                        )
                        self._size += len(data)
                except Exception as exc:  # a full disk, a lost device: stop, tell everyone
                    self._fail(exc, compact_waiters)
                    return
                self._durable_lsn = lsn
                if self._on_durable is not None:
                    self._on_durable(lsn)
                waiters = self._waiters
                while waiters and waiters[0][0] <= lsn:
                    fut = waiters.popleft()[1]
                    if not fut.done():
                        fut.set_result(None)
                for fut in compact_waiters:
                    if not fut.done():
                        fut.set_result(None)
            if self._closing:
                return

    def _should_compact(self) -> bool:
        return self._size >= self._compact_min and self._size >= self._compact_ratio * self._base

    def _fail(self, exc: Exception, compact_waiters: list[asyncio.Future[None]]) -> None:
        self.failure = exc
        for fut in compact_waiters:
            if not fut.done():
                fut.set_exception(exc)
        stderr_logger().error(
            "writing the certified-delivery ledger failed; certified sends now fail",
            path=self.path,
            error=repr(exc),
        )
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()
        for fut in self._room_waiters:
            if not fut.done():
                fut.set_result(None)
        self._room_waiters.clear()

    async def compact_now(self) -> None:
        """Rewrite the file as the live state at once (after the queued appends)."""
        self._raise_failure()
        fut = asyncio.get_running_loop().create_future()
        self._compact_waiters.append(fut)
        self._wake.set()
        await fut

    async def close(self) -> None:
        """Write what is queued, sync, close the file and release it."""
        if self._task is not None and not self._task.done():
            self._closing = True
            self._wake.set()
            with contextlib.suppress(Exception):
                await self._task
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, _close_file, self._fd)
        finally:
            self._executor.shutdown(wait=False)


def _estimate(record: LedgerRecord) -> int:
    """About how many bytes ``record`` takes in the file (for the backlog limit)."""
    if record.__class__ is StoredMessage:
        return 64 + len(record.payload)
    return 48


# --- executor side: every function below runs on the ledger's own thread ---------------


def _open_file(path: str, name: str) -> tuple[int, LedgerReplay, int]:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path + _COMPACT_SUFFIX)  # a compaction a crash interrupted
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except IsADirectoryError:
        raise InvalidArgument(f"ledger path {path!r} is a directory; give a file path") from None
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidArgument(
            f"ledger path {path!r}: the directory {os.path.dirname(path) or '.'!r} does not "
            "exist; create it first (the ledger file itself is created on open)"
        ) from None
    except PermissionError as exc:
        raise NotPermitted(f"ledger path {path!r}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NotPermitted(
                f"ledger file {path!r} is in use by another CM transport; "
                "two transports must never share a ledger file"
            ) from None
        data = _read_all(fd)
        replay = decode_ledger(data, path=path, expected_name=name)
        if replay.state is None:
            os.ftruncate(fd, 0)
            header = new_ledger(name, time.time())
            _write_at_end(fd, header)
            os.fsync(fd)
            _sync_directory(path)
            size = len(header)
        else:
            if replay.torn_bytes:
                os.ftruncate(fd, replay.valid_length)
                os.fsync(fd)
            size = replay.valid_length
        os.lseek(fd, size, os.SEEK_SET)
        return fd, replay, size
    except BaseException:
        os.close(fd)
        raise


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_at_end(fd: int, data: bytes) -> None:
    os.lseek(fd, 0, os.SEEK_END)
    _write_all(fd, data, False)


def _write_all(fd: int, data: bytes, sync: bool) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    if sync:
        os.fsync(fd)


def _replace_file(path: str, data: bytes, old_fd: int) -> int:
    """Write ``data`` beside ``path``, sync it, rename it over ``path``; the new fd, locked."""
    side = path + _COMPACT_SUFFIX
    fd = os.open(side, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_all(fd, data, True)
        os.rename(side, path)
        _sync_directory(path)
    except BaseException:
        os.close(fd)
        raise
    os.close(old_fd)
    return fd


def _sync_directory(path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is still atomic
    finally:
        os.close(dfd)


def _close_file(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_ledger_path(ledger: object) -> str:
    """Validate the ``ledger`` argument of a CM transport and return it as a path string."""
    if isinstance(ledger, bytes):
        raise InvalidArgument("ledger must be a str or os.PathLike path, not bytes")
    try:
        path = os.fspath(ledger)  # type: ignore[call-overload]  # any object: TypeError is the check
    except TypeError:
        raise InvalidArgument(
            f"ledger must be a file path (str or os.PathLike) or None, not {type(ledger).__name__}"
        ) from None
    if not isinstance(path, str):  # an os.PathLike whose __fspath__ gives bytes
        raise InvalidArgument(f"ledger must be a str path, not {type(ledger).__name__} of bytes")
    if not path:
        raise InvalidArgument("ledger path must not be empty")
    return path
