"""The relay agent's ledger file: open (lock, replay, repair a torn tail), append, compact.

The file handling is the package's durable file kit
(:mod:`rvasync.driverkit.durable`): the lock is taken before anything is
touched, a torn tail is cut off, a complete record that fails its checksum
is :class:`~rvasync.errors.LedgerCorrupt`, an append that fails part way is
cut back off. Records are appended in batches, one ``write`` per event-loop
turn, so a burst of stored messages costs one system call; with ``sync``
each batch is also fsynced before it counts as durable. A write that
reached the kernel survives the agent being killed; ``sync`` adds survival
of a power cut. A batch that does not fit (a full disk) is kept and retried
every second; what follows waits behind it, so nothing is lost while the
agent runs. When the file holds several times more records than the live
state needs it is rewritten as a snapshot (beside it, synced, renamed over
it). A version 1 file is rewritten as version 2 when it is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.driverkit.durable import AppendLog, is_space_error
from rvasync.protocol.relay import (
    AgentLedger,
    decode_relay_ledger,
    encode_relay_record,
    new_relay_ledger,
)
from rvasync.protocol.relay.ledger import RelayReplay

__all__ = ["RelayLedgerFile"]

_COMPACT_MIN = 20_000
"""Records appended before compaction is considered."""
_RETRY_INTERVAL = 1.0
"""Seconds between attempts to write a batch that did not fit on the disk."""


class RelayLedgerFile:
    """An open, locked relay agent ledger file."""

    def __init__(self, log: AppendLog, state: AgentLedger, records: int, sync: bool) -> None:
        self.path = log.path
        self._log = log
        self._sync = sync
        self._pending: list[bytes] = []
        self._pending_lsn = 0
        self._records = records
        self._scheduled = False
        self._on_durable: Callable[[int], None] | None = None
        self._snapshot: Callable[[], list[tuple[Any, ...]]] | None = None
        self.state = state
        self.failure: OSError | None = None
        """The error that stopped the writer for good (not a full disk), if any."""
        self.full: OSError | None = None
        """While a batch does not fit on the disk: the error (it is retried)."""

    @classmethod
    def open(cls, path: str, name: str, *, sync: bool = False) -> RelayLedgerFile:
        """Open (creating it if absent) and replay the ledger of relay agent ``name``.

        A damaged file raises :class:`~rvasync.errors.LedgerCorrupt`; a file
        another running agent holds raises NotPermitted.
        """
        found: list[RelayReplay] = []

        def replay(pieces: Iterator[bytes]) -> int:
            data = b"".join(pieces)
            if not data:
                return 0
            result = decode_relay_ledger(data, path, name)
            found.append(result)
            return result.valid_length

        log = AppendLog.open(
            path,
            refusal=f"relay ledger {path!r} is in use by another relay agent",
            replay=replay,
            new_file=lambda: new_relay_ledger(name),
        )
        if not found or found[0].valid_length == 0:
            return cls(log, AgentLedger(name), 1, sync)
        result = found[0]
        ledger = cls(log, result.state, result.records, sync)
        if result.version < 2:
            try:
                ledger.rewrite(result.state.snapshot())
            except BaseException:
                log.close()
                raise
        return ledger

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
        if not self._scheduled and self.full is None:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued now and report it durable.

        A batch that does not fit stays queued and is retried; any other
        error stops the writer (:attr:`failure`) and propagates.
        """
        self._scheduled = False
        if not self._pending or self._log.closed or self.failure is not None:
            return
        data = b"".join(self._pending)
        try:
            self._log.append(data, sync=self._sync)
        except OSError as exc:
            if is_space_error(exc):
                self._retry_later(exc)
                return
            self.failure = exc
            raise
        if self.full is not None:
            self.full = None
            stderr_logger().warning("the relay ledger fits again; writing resumed", path=self.path)
        self._records += len(self._pending)
        self._pending = []
        if self._on_durable is not None:
            self._on_durable(self._pending_lsn)
        self._maybe_compact()

    def _retry_later(self, exc: OSError) -> None:
        if self.full is None:
            stderr_logger().error(
                "the relay ledger does not fit on its disk; what is not written yet is kept "
                "and retried (nothing it holds is sent on before it is written)",
                path=self.path,
                error=repr(exc),
            )
        self.full = exc
        self._scheduled = True
        asyncio.get_running_loop().call_later(_RETRY_INTERVAL, self.flush)

    def _maybe_compact(self) -> None:
        snapshot = self._snapshot
        if snapshot is None or self._records < _COMPACT_MIN:
            return
        live = sum(1 + len(c.items) + len(c.listens) for c in self.state.clients.values())
        if self._records < 4 * live + _COMPACT_MIN:
            return
        try:
            self.rewrite(snapshot())
        except OSError as exc:
            # Abandoned (the side file is gone); appends go on to the file as it is.
            stderr_logger().warning(
                "compacting the relay ledger failed; it was abandoned and will be tried again",
                path=self.path,
                error=repr(exc),
            )
            self._records = 4 * live  # try again once as many records again have come

    def rewrite(self, records: list[tuple[Any, ...]]) -> None:
        """Replace the file by ``records`` (atomically: beside it, synced, renamed over)."""
        header = new_relay_ledger(self.state.name)
        self._log.replace([header, b"".join(encode_relay_record(r) for r in records)])
        self._records = len(records) + 1

    def close(self) -> None:
        if self._log.closed:
            return
        with contextlib.suppress(OSError):
            self.flush()
        if self._pending:
            stderr_logger().error(
                "the relay agent closed with records its ledger could not hold; the messages "
                "they stored are lost",
                path=self.path,
                records=len(self._pending),
            )
        try:
            self._log.close()
        except OSError:
            self._log.abandon()
