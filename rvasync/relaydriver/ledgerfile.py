"""The relay agent's ledger file: open (lock, replay, repair a torn tail), append, compact.

Records are appended in batches, one ``write`` per event-loop turn, so a
burst of stored messages costs one system call; with ``sync`` each batch is
also fsynced before it counts as durable. A write that reached the kernel
survives the agent being killed; ``sync`` adds survival of a power cut.
When the file holds several times more records than the live state needs
it is rewritten as a snapshot (beside it, synced, renamed over it).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Callable
from typing import Any

from rvasync.errors import InvalidArgument, NotPermitted
from rvasync.protocol.relay import (
    AgentLedger,
    decode_relay_ledger,
    encode_relay_record,
    new_relay_ledger,
)

__all__ = ["RelayLedgerFile"]

_COMPACT_MIN = 20_000
"""Records appended before compaction is considered."""


class RelayLedgerFile:
    """An open, locked relay agent ledger file."""

    def __init__(self, path: str, fd: int, state: AgentLedger, records: int, sync: bool) -> None:
        self.path = path
        self._fd = fd
        self._sync = sync
        self._pending: list[bytes] = []
        self._pending_lsn = 0
        self._records = records
        self._scheduled = False
        self._on_durable: Callable[[int], None] | None = None
        self._snapshot: Callable[[], list[tuple[Any, ...]]] | None = None
        self.state = state
        self.failure: OSError | None = None

    @classmethod
    def open(cls, path: str, name: str, *, sync: bool = False) -> RelayLedgerFile:
        """Open (creating it if absent) and replay the ledger of relay agent ``name``.

        A damaged file raises :class:`~rvasync.errors.LedgerCorrupt`; a file
        another running agent holds raises NotPermitted.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except IsADirectoryError:
            raise InvalidArgument(
                f"ledger path {path!r} is a directory; give a file path"
            ) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise NotPermitted(
                    f"relay ledger {path!r} is in use by another relay agent"
                ) from None
            data = _read_all(fd)
            if not data:
                header = new_relay_ledger(name)
                _write_all(fd, header)
                os.fsync(fd)
                replay = decode_relay_ledger(header, path, name)
            else:
                replay = decode_relay_ledger(data, path, name)
                if replay.torn:
                    os.ftruncate(fd, replay.valid_length)
            os.lseek(fd, replay.valid_length, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, replay.state, replay.records, sync)

    def start(
        self,
        on_durable: Callable[[int], None],
        snapshot: Callable[[], list[tuple[Any, ...]]],
    ) -> None:
        self._on_durable = on_durable
        self._snapshot = snapshot

    def append(self, lsn: int, record: tuple[Any, ...]) -> None:
        """Queue ``record`` (numbered ``lsn``); it is written at the end of this loop turn."""
        self._pending.append(encode_relay_record(record))
        self._pending_lsn = lsn
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued now and report it durable."""
        self._scheduled = False
        if not self._pending or self._fd < 0:
            return
        data = b"".join(self._pending)
        count = len(self._pending)
        self._pending = []
        try:
            _write_all(self._fd, data)
            if self._sync:
                os.fsync(self._fd)
        except OSError as exc:
            self.failure = exc
            raise
        self._records += count
        if self._on_durable is not None:
            self._on_durable(self._pending_lsn)
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        snapshot = self._snapshot
        if snapshot is None or self._records < _COMPACT_MIN:
            return
        live = sum(1 + len(c.items) + len(c.listens) for c in self.state.clients.values())
        if self._records < 4 * live + _COMPACT_MIN:
            return
        records = snapshot()
        data = new_relay_ledger(self.state.name) + b"".join(encode_relay_record(r) for r in records)
        side = self.path + ".compact"
        fd = os.open(side, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_all(fd, data)
            os.fsync(fd)
            os.rename(side, self.path)
        except BaseException:
            os.close(fd)
            raise
        os.close(self._fd)
        self._fd = fd
        self._records = len(records) + 1

    def close(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            self.flush()
        with contextlib.suppress(OSError):
            os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
