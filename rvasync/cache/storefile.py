"""The cache's store file on disk: replay at start, append per update, compaction.

The format is :mod:`rvasync.protocol.cvc.storefile`'s; the file handling
(lock taken first, torn tail cut off, damaged complete records refused,
appends that fail part way cut back off, atomic rewrites) is the package's
durable file kit, :mod:`rvasync.driverkit.durable`. Updates are appended
with one ``os.write`` per batch (the updates of one event-loop turn),
straight to the kernel: a cache killed with ``kill -9`` keeps every update
whose batch was written. (A power cut may lose what the kernel had not yet
written to the disk; :meth:`StoreFile.sync` forces it, and the cache calls
it on close.) The file is locked, so two caches cannot share one. When the
log has grown to several times what it retains, it is rewritten (to a
temporary file, fsynced, then renamed over the old one). A batch that does
not fit on the disk is kept and retried every second; a rewrite that does
not fit is abandoned and tried again once the log has grown as much again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator

from rvasync._logging import stderr_logger
from rvasync.driverkit.durable import AppendLog, is_space_error
from rvasync.errors import LedgerCorrupt
from rvasync.protocol.cvc.store import Entry
from rvasync.protocol.cvc.storefile import MAGIC, LogRecord, Op, encode_record, parse_log

__all__ = ["StoreCorrupt", "StoreFile"]

#: Compaction runs when the log is this many times the retained bytes (and over 4 MiB).
COMPACT_FACTOR = 3
COMPACT_MIN = 4 << 20
_RETRY_INTERVAL = 1.0


class StoreCorrupt(LedgerCorrupt):
    """The cache's store file is damaged (not a torn last record): the cache will not start.

    A :class:`~rvasync.errors.LedgerCorrupt` (``path``, ``offset``, ``reason``)
    like every other damaged durable file of the package.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        Exception.__init__(self, f"store file {path} is corrupt: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StoreFile:
    """One cache's store file, open and locked."""

    __slots__ = ("_batch", "_compact_floor", "_flush_scheduled", "_log", "_size", "path", "torn")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._log: AppendLog | None = None
        self._batch: list[bytes] = []
        self._flush_scheduled = False
        self._size = 0
        self._compact_floor = 0
        #: Bytes of a torn last record dropped when the file was opened.
        self.torn = 0

    def open(self) -> list[LogRecord]:
        """Open (creating it if absent), lock, and return the records to replay.

        StoreCorrupt names the damage; OSError for a file that cannot be opened.
        """
        records: list[LogRecord] = []

        def replay(pieces: Iterator[bytes]) -> int:
            parsed = parse_log(b"".join(pieces), self.path)
            if parsed.corrupt is not None:
                raise StoreCorrupt(self.path, parsed.good_end, parsed.corrupt)
            records.extend(parsed.records)
            self.torn = parsed.torn
            return parsed.good_end

        self._log = AppendLog.open(
            self.path,
            refusal=f"store file {self.path} is in use by another cache (it is locked)",
            replay=replay,
            new_file=lambda: MAGIC,
            what="store path",
        )
        self._size = self._log.size
        return records

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
        """Write the queued records now (one write); a batch that does not fit is retried."""
        self._flush_scheduled = False
        log = self._log
        if not self._batch or log is None or log.closed:
            return
        try:
            log.append(b"".join(self._batch))
        except OSError as exc:
            if not is_space_error(exc):
                raise
            stderr_logger().error(
                "the cache store file does not fit on its disk; the updates not written yet "
                "are kept and retried",
                path=self.path,
                error=repr(exc),
            )
            self._flush_scheduled = True
            asyncio.get_running_loop().call_later(_RETRY_INTERVAL, self.flush)
            return
        self._batch.clear()

    def wants_compaction(self, retained_bytes: int) -> bool:
        return (
            self._size > COMPACT_MIN
            and self._size > COMPACT_FACTOR * (retained_bytes + 1)
            and self._size > self._compact_floor
        )

    def compact(self, entries: Iterable[Entry]) -> None:
        """Rewrite the file to hold exactly ``entries`` (crash-safe: temp file, fsync, rename).

        A rewrite that fails (no room for the new file) is abandoned: the
        file stays as it was, and the next attempt waits until it has grown
        as much again.
        """
        self.flush()
        log = self._log
        if log is None or self._batch:
            return  # a batch waits for room: the rewrite would not fit either
        try:
            log.replace(_chunks(entries))
        except OSError as exc:
            stderr_logger().warning(
                "compacting the cache store file failed; it was abandoned",
                path=self.path,
                error=repr(exc),
            )
            self._compact_floor = 2 * self._size
            return
        self._size = log.size

    def sync(self) -> None:
        """Write the batch and force the file to the disk."""
        self.flush()
        if self._log is not None and not self._log.closed:
            self._log.sync()

    def close(self) -> None:
        log = self._log
        if log is None or log.closed:
            return
        try:
            self.flush()
        finally:
            if self._batch:
                stderr_logger().error(
                    "the cache closed with updates its store file could not hold",
                    path=self.path,
                    updates=len(self._batch),
                )
            try:
                log.close()
            except OSError:
                log.abandon()


def _chunks(entries: Iterable[Entry]) -> Iterator[bytes]:
    chunk: list[bytes] = [MAGIC]
    size = 0
    for entry in entries:
        record = encode_record(Op.PUT, entry.subject, entry.stamp, entry.wire)
        chunk.append(record)
        size += len(record)
        if size >= 1 << 20:
            yield b"".join(chunk)
            chunk, size = [], 0
    yield b"".join(chunk)
