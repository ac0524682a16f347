"""The cache's store file on disk: replay at start, append per update, compaction.

The format and its crash rules are :mod:`rvasync.protocol.cvc.storefile`'s;
this module does the I/O. Updates are appended with one ``os.write`` per
batch (the updates of one event-loop turn), straight to the kernel: a cache
killed with ``kill -9`` keeps every update whose batch was written, which is
every update it has answered for. (A power cut may lose what the kernel had
not yet written to the disk; :meth:`StoreFile.sync` forces it, and the cache
calls it on close.) The file is locked, so two caches cannot share one. When
the log has grown to several times what it retains, it is rewritten (to a
temporary file, fsynced, then renamed over the old one).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import Iterable

from rvasync.errors import NotPermitted, RvError
from rvasync.protocol.cvc.store import Entry
from rvasync.protocol.cvc.storefile import MAGIC, LogRecord, Op, encode_record, parse_log

__all__ = ["StoreCorrupt", "StoreFile"]

#: Compaction runs when the log is this many times the retained bytes (and over 4 MiB).
COMPACT_FACTOR = 3
COMPACT_MIN = 4 << 20


class StoreCorrupt(RvError):
    """The cache's store file is damaged (not a torn last record): the cache will not start."""


class StoreFile:
    """One cache's store file, open and locked."""

    __slots__ = ("_batch", "_fd", "_flush_scheduled", "_size", "path", "torn")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._fd = -1
        self._batch: list[bytes] = []
        self._flush_scheduled = False
        self._size = 0
        #: Bytes of a torn last record dropped when the file was opened.
        self.torn = 0

    def open(self) -> list[LogRecord]:
        """Open (creating it if absent), lock, and return the records to replay.

        StoreCorrupt names the damage; OSError for a file that cannot be opened.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise NotPermitted(
                    f"store file {self.path} is in use by another cache (it is locked)"
                ) from None
            with os.fdopen(os.dup(fd), "rb") as reader:
                data = reader.read()
            parsed = parse_log(data)
            if parsed.corrupt is not None:
                raise StoreCorrupt(f"store file {self.path} is corrupt: {parsed.corrupt}")
            if parsed.good_end == 0:
                os.ftruncate(fd, 0)
                os.pwrite(fd, MAGIC, 0)
                self._size = len(MAGIC)
            else:
                os.ftruncate(fd, parsed.good_end)  # drop a torn tail
                self._size = parsed.good_end
            os.lseek(fd, self._size, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.torn = parsed.torn
        return parsed.records

    @property
    def size(self) -> int:
        """Bytes in the file, batches not yet written included."""
        return self._size

    def append(self, op: Op, subject: str, stamp: float, wire: bytes = b"") -> None:
        """Queue one record; written with the rest of this loop turn's batch."""
        record = encode_record(op, subject, stamp, wire)
        self._batch.append(record)
        self._size += len(record)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write the queued records now (one write)."""
        self._flush_scheduled = False
        if not self._batch or self._fd < 0:
            self._batch.clear()
            return
        data = b"".join(self._batch)
        self._batch.clear()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def wants_compaction(self, retained_bytes: int) -> bool:
        return self._size > COMPACT_MIN and self._size > COMPACT_FACTOR * (retained_bytes + 1)

    def compact(self, entries: Iterable[Entry]) -> None:
        """Rewrite the file to hold exactly ``entries`` (crash-safe: temp file, fsync, rename)."""
        self.flush()
        temp = f"{self.path}.compact"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        size = 0
        try:
            chunk: list[bytes] = [MAGIC]
            for entry in entries:
                chunk.append(encode_record(Op.PUT, entry.subject, entry.stamp, entry.wire))
            data = b"".join(chunk)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            size = len(data)
            os.fsync(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        os.replace(temp, self.path)
        _sync_directory(self.path)
        os.close(self._fd)
        self._fd = fd
        os.lseek(fd, size, os.SEEK_SET)
        self._size = size

    def sync(self) -> None:
        """Write the batch and force the file to the disk."""
        self.flush()
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            os.close(self._fd)
            self._fd = -1


def _sync_directory(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
