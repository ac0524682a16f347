"""A certified-delivery ledger file: open and replay, append with group commit, compact.

The on-disk format and its crash rules are in
:mod:`rvasync.protocol.cm.ledger_format`; the file handling (lock, torn
tails, appends that fail part way, atomic rewrites) is the package's durable
file kit, :mod:`rvasync.driverkit.durable`. This module adds what a ledger
needs on top: a writer task that never blocks the event loop.

* **Open** takes the file's lock before it touches anything (a second
  transport is refused without disturbing the first, even mid-compaction),
  reads and replays it on a thread, cuts a torn tail back and starts a new
  file with a header when it is empty. A damaged file raises
  :class:`~rvasync.errors.LedgerCorrupt`; a file of another correspondent
  raises :class:`~rvasync.errors.InvalidArgument`.
* **Append** queues a record. The writer task takes everything queued,
  writes it with one ``write`` on the ledger's thread (and, for a synced
  ledger, one ``fsync``: the group commit every concurrent sender shares),
  then reports the highest record number durable.
* **A full disk** (no space, quota) does not stop the writer: the batch that
  failed is kept, nothing queued is dropped, the owner is told
  (:class:`LedgerTrouble`) and the write is retried every
  :attr:`LedgerFile.retry_interval` until it fits; then everything queued
  meanwhile follows, in order. Any other write error stops the writer for
  good (:attr:`LedgerFile.failure`).
* **Compaction** rewrites the file as the live state once it has grown to
  ``compact_ratio`` times what the last rewrite left (and at least
  ``compact_min_bytes``). The loop only takes a snapshot (a shallow copy of
  the state: the stored messages are immutable and shared); a thread of its
  own encodes and writes it beside the ledger, while appends go on to the
  old file and are kept aside; between two appends the writer adds those to
  the new file, syncs it and renames it over the ledger. A rewrite that
  fails (no room for the new file) is abandoned, its side file removed; the
  owner is told, appends continue, and it is tried again after
  :attr:`LedgerFile.compact_retry_interval`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from rvasync._logging import stderr_logger
from rvasync.driverkit.durable import AppendLog, Replacement, is_space_error
from rvasync.errors import InvalidArgument
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.ledger import LedgerRecord, LedgerState, StoredMessage
from rvasync.protocol.cm.ledger_format import (
    LedgerDecoder,
    LedgerReplay,
    compact_ledger_chunks,
    encode_records,
    new_ledger,
)

__all__ = [
    "DEFAULT_BACKLOG_BYTES",
    "LedgerFile",
    "LedgerTrouble",
    "check_ledger_path",
]

DEFAULT_BACKLOG_BYTES = 8 << 20
"""Appends queued but not yet written beyond which senders wait for the writer."""

_COMPACT_SUFFIX = ".compact"


@dataclass(frozen=True, slots=True)
class LedgerTrouble:
    """Something the owner of a ledger file must hear about (it presents an advisory).

    ``write_failed``: appends do not fit (``retrying``: room may come back,
    they are kept and retried; otherwise the writer stopped for good).
    ``write_resumed``: a retried append fitted; what was kept is written.
    ``compaction_failed``: a rewrite was abandoned; appends go on.
    """

    kind: Literal["write_failed", "write_resumed", "compaction_failed"]
    path: str
    error: str = ""
    retrying: bool = False

    @property
    def writable(self) -> bool | None:
        """Whether the ledger takes records now (None: unchanged, a compaction failed)."""
        return None if self.kind == "compaction_failed" else self.kind == "write_resumed"

    def advisory(self, name: str) -> adv.Advisory:
        """The advisory correspondent ``name`` presents for it (rvasync's LEDGER.*)."""
        if self.kind == "compaction_failed":
            return adv.ledger_compaction_failed(name, self.path, self.error)
        if self.kind == "write_failed":
            return adv.ledger_write_failed(name, self.path, self.error, self.retrying)
        return adv.ledger_write_resumed(name, self.path)


class _Cancelled(Exception):
    """The compaction was given up because the ledger is closing."""


@dataclass(slots=True)
class _Batch:
    """Records taken from the queue, encoded, waiting to be written (or retried)."""

    data: bytes
    lsn: int
    records: list[LedgerRecord]
    tail: bool
    """Written while a compaction runs, after its snapshot: the new file needs it too."""


class LedgerFile:
    """One open ledger file. Create it with :meth:`open`; start it with :meth:`start`."""

    def __init__(
        self,
        log: AppendLog,
        created: float,
        executor: ThreadPoolExecutor,
        *,
        sync: bool,
        compact_min_bytes: int,
        compact_ratio: float,
    ) -> None:
        self.path = log.path
        self._log = log
        self._base = log.size
        self._created = created
        self._executor = executor
        self.sync = sync
        self._compact_min = compact_min_bytes
        self._compact_ratio = compact_ratio
        self._queued: list[LedgerRecord] = []
        self._queued_lsn = 0
        self._queued_bytes = 0
        self._durable_lsn = 0
        self._batch: _Batch | None = None
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._room_waiters: list[asyncio.Future[None]] = []
        self._compact_waiters: list[asyncio.Future[None]] = []
        """compact_now calls waiting for a compaction that has not started yet."""
        self._compacting_waiters: list[asyncio.Future[None]] = []
        """compact_now calls the running compaction (its snapshot taken after them) serves."""
        self._wake = asyncio.Event()
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._on_durable: Callable[[int], None] | None = None
        self._snapshot: Callable[[], LedgerState] | None = None
        self._on_trouble: Callable[[LedgerTrouble], None] | None = None
        self._closing = False
        self._compaction: asyncio.Future[Replacement] | None = None
        self._compaction_executor: ThreadPoolExecutor | None = None
        self._cancel = threading.Event()
        self._tail: list[bytes] = []
        self._compact_not_before = 0.0
        self.failure: BaseException | None = None
        """The error that stopped the writer for good (a lost device, say), if any."""
        self.full: OSError | None = None
        """While appends do not fit (no space): the error; they are kept and retried."""
        self.compactions = 0
        self.compaction_failures = 0
        self.backlog_bytes = DEFAULT_BACKLOG_BYTES
        self.retry_interval = 1.0
        """Seconds between attempts to write while the disk is full."""
        self.compact_retry_interval = 30.0
        """Seconds before a failed compaction is tried again (compact_now tries at once)."""

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
            log, replay = await loop.run_in_executor(executor, _open_log, path, name)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        created = replay.created if replay.state is not None else time.time()
        ledger = cls(
            log,
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

    def start(
        self,
        on_durable: Callable[[int], None],
        snapshot: Callable[[], LedgerState],
        on_trouble: Callable[[LedgerTrouble], None] | None = None,
    ) -> None:
        """Begin writing: ``on_durable(lsn)`` after each write, ``snapshot()`` to compact.

        ``snapshot()`` returns a copy of the live state that nothing changes
        afterwards (it is encoded on another thread); ``on_trouble`` hears
        of full disks and failed compactions.
        """
        self._on_durable = on_durable
        self._snapshot = snapshot
        self._on_trouble = on_trouble
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"rvcm-ledger:{self.path}"
        )

    @property
    def created(self) -> float:
        return self._created

    @property
    def size(self) -> int:
        """Bytes in the file (what the writer has written so far)."""
        return self._log.size

    @property
    def durable_lsn(self) -> int:
        return self._durable_lsn

    @property
    def compacting(self) -> bool:
        """True while a compaction's new file is being written."""
        return self._compaction is not None

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
            if self.full is not None:
                raise self.full_error()
            fut = asyncio.get_running_loop().create_future()
            self._room_waiters.append(fut)
            await fut
        self._raise_failure()

    async def wait_durable(self, lsn: int) -> None:
        """Return once append ``lsn`` (and every one before it) is written, synced if ``sync``.

        While the disk is full this waits for the retry that fits.
        """
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

    def full_error(self) -> OSError:
        """The error a new certified send raises while the disk is full."""
        full = self.full
        assert full is not None
        return OSError(
            full.errno,
            f"the certified-delivery ledger {self.path!r} cannot be written "
            f"({full.strerror or full}); what was already sent is kept and written once "
            "there is room, and new sends are refused until then",
        )

    # --- the writer ----------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._has_work():
                if not await self._step(loop):
                    return
            if self._closing:
                return

    def _has_work(self) -> bool:
        if self.failure is not None:
            return False
        compaction = self._compaction
        return bool(
            self._batch is not None
            or self._queued
            or (self._compact_waiters and compaction is None)
            or (compaction is not None and compaction.done())
        )

    async def _step(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Commit a finished compaction, then write one batch; False once the writer must stop."""
        compaction = self._compaction
        if compaction is not None and compaction.done():
            await self._finish_compaction(loop, compaction)
        if self._batch is None:
            self._take_batch(loop)
        batch = self._batch
        if batch is None:
            return True
        try:
            await loop.run_in_executor(self._executor, self._write, batch.data)
        except OSError as exc:
            if not is_space_error(exc):
                self._fail(exc)
                return False
            self._report_full(exc)
            if self._closing:
                return False  # one last attempt made; close() reports what is lost
            await self._pause()
            return True
        self._batch = None
        if batch.tail and self._compaction is not None:
            self._tail.append(batch.data)
        if self.full is not None:
            self.full = None
            self._trouble(LedgerTrouble("write_resumed", self.path))
        self._made_durable(batch.lsn)
        return True

    def _write(self, data: bytes) -> None:
        self._log.append(data, sync=self.sync)

    def _take_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take every queued record as one batch; start a compaction first if it is due."""
        records, self._queued = self._queued, []
        lsn = self._queued_lsn
        self._queued_bytes = 0
        for fut in self._room_waiters:
            if not fut.done():
                fut.set_result(None)
        self._room_waiters.clear()
        if self._compaction is None and (self._compact_waiters or self._compaction_due(loop)):
            # The state already holds every record queued so far, these included:
            # the snapshot covers them, the new file needs only what comes after.
            self._start_compaction(loop)
            tail = False
        else:
            tail = self._compaction is not None
        if records:
            self._batch = _Batch(encode_records(records), lsn, records, tail)

    def _compaction_due(self, loop: asyncio.AbstractEventLoop) -> bool:
        size = self._log.size
        return (
            size >= self._compact_min
            and size >= self._compact_ratio * self._base
            and loop.time() >= self._compact_not_before
        )

    def _made_durable(self, lsn: int) -> None:
        self._durable_lsn = lsn
        if self._on_durable is not None:
            self._on_durable(lsn)
        waiters = self._waiters
        while waiters and waiters[0][0] <= lsn:
            fut = waiters.popleft()[1]
            if not fut.done():
                fut.set_result(None)

    async def _pause(self) -> None:
        """Wait before retrying a write that did not fit (close or a compaction cut it short)."""
        self._kick.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._kick.wait(), self.retry_interval)

    def _report_full(self, exc: OSError) -> None:
        first = self.full is None
        self.full = exc
        if first:
            stderr_logger().error(
                "the certified-delivery ledger does not fit on its disk; what is not written "
                "yet is kept and retried, new certified sends are refused meanwhile",
                path=self.path,
                error=repr(exc),
            )
            self._trouble(LedgerTrouble("write_failed", self.path, repr(exc), retrying=True))
        for fut in self._room_waiters:
            if not fut.done():
                fut.set_result(None)
        self._room_waiters.clear()

    def _trouble(self, trouble: LedgerTrouble) -> None:
        if self._on_trouble is not None:
            try:
                self._on_trouble(trouble)
            except Exception:
                stderr_logger().exception("reporting ledger trouble failed", path=self.path)

    def _fail(self, exc: Exception) -> None:
        self.failure = exc
        stderr_logger().error(
            "writing the certified-delivery ledger failed; this transport can no longer "
            "record anything (certified sends fail, listeners stop confirming)",
            path=self.path,
            error=repr(exc),
        )
        self._trouble(LedgerTrouble("write_failed", self.path, repr(exc), retrying=False))
        self._reject_all(exc)

    def _reject_all(self, exc: BaseException) -> None:
        for fut in [*self._compact_waiters, *self._compacting_waiters]:
            if not fut.done():
                fut.set_exception(exc)
        self._compact_waiters.clear()
        self._compacting_waiters.clear()
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()
        for fut in self._room_waiters:
            if not fut.done():
                fut.set_result(None)
        self._room_waiters.clear()

    # --- compaction -------------------------------------------------------------------

    def _start_compaction(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self._snapshot is not None
        state = self._snapshot()
        self._compacting_waiters, self._compact_waiters = self._compact_waiters, []
        if self._compaction_executor is None:
            self._compaction_executor = ThreadPoolExecutor(1, thread_name_prefix="rvcm-compact")
        self._cancel.clear()
        self._tail = []
        self._compaction = loop.run_in_executor(
            self._compaction_executor,
            _build_replacement,
            self._log,
            state,
            self._created,
            self._cancel,
        )
        self._compaction.add_done_callback(lambda _: self._wake_writer())

    def _wake_writer(self) -> None:
        self._wake.set()
        self._kick.set()

    async def _finish_compaction(
        self, loop: asyncio.AbstractEventLoop, compaction: asyncio.Future[Replacement]
    ) -> None:
        self._compaction = None
        tail, self._tail = self._tail, []
        try:
            replacement = compaction.result()
            await loop.run_in_executor(self._executor, replacement.commit, b"".join(tail))
        except _Cancelled:
            return
        except Exception as exc:
            self._compaction_failed(loop, exc)
            return
        self._base = self._log.size
        self.compactions += 1
        batch = self._batch
        if batch is not None and not batch.tail:
            # Waiting for room when the snapshot was taken: the new file holds it.
            self._batch = None
            self._made_durable(batch.lsn)
        if self.full is not None and self._batch is None:
            self.full = None
            self._trouble(LedgerTrouble("write_resumed", self.path))
        waiters, self._compacting_waiters = self._compacting_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        self._kick.set()  # the rewrite may have freed room for a write that did not fit

    def _compaction_failed(self, loop: asyncio.AbstractEventLoop, exc: Exception) -> None:
        self.compaction_failures += 1
        self._compact_not_before = loop.time() + self.compact_retry_interval
        stderr_logger().warning(
            "compacting the certified-delivery ledger failed; it was abandoned (appends "
            "go on to the ledger as it is) and will be tried again later",
            path=self.path,
            error=repr(exc),
        )
        self._trouble(LedgerTrouble("compaction_failed", self.path, repr(exc)))
        waiters, self._compacting_waiters = self._compacting_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    async def compact_now(self) -> None:
        """Rewrite the file as the live state at once (after the queued appends)."""
        self._raise_failure()
        if self.full is not None:
            raise self.full_error()
        fut = asyncio.get_running_loop().create_future()
        self._compact_waiters.append(fut)
        self._wake.set()
        await fut

    # --- closing ----------------------------------------------------------------------

    async def close(self) -> list[LedgerRecord]:
        """Write what is queued, sync, close the file and release it.

        Returns the records that could not be written (the disk stayed full
        through the last attempt): the owner reports what they held.
        """
        self._closing = True
        if self._task is not None and not self._task.done():
            self._wake.set()
            self._kick.set()
            with contextlib.suppress(Exception):
                await self._task
        self._cancel.set()
        compaction = self._compaction
        if compaction is not None:
            with contextlib.suppress(BaseException):
                replacement = await compaction
                replacement.abandon()
            self._compaction = None
        lost: list[LedgerRecord] = []
        if self._batch is not None:
            lost.extend(self._batch.records)
            self._batch = None
        lost.extend(self._queued)
        self._queued = []
        if lost:
            self._reject_all(self.full_error() if self.full is not None else OSError("closed"))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close_log)
        finally:
            self._executor.shutdown(wait=False)
            if self._compaction_executor is not None:
                self._compaction_executor.shutdown(wait=False)
        return lost

    def _close_log(self) -> None:
        try:
            self._log.close(sync=True)
        except OSError:
            self._log.abandon()

    def abandon(self) -> None:
        """Stop at once as a killed process would: nothing queued is written (tests use it)."""
        self._closing = True
        self._cancel.set()
        self._queued = []
        self._batch = None
        if self._task is not None:
            self._task.cancel()
        self._executor.shutdown(wait=True)  # a write the OS already had completes
        if self._compaction_executor is not None:
            self._compaction_executor.shutdown(wait=True)
        self._log.abandon()


def _estimate(record: LedgerRecord) -> int:
    """About how many bytes ``record`` takes in the file (for the backlog limit)."""
    if record.__class__ is StoredMessage:
        return 64 + len(record.payload)
    return 48


# --- executor side: every function below runs on a ledger thread -------------------------


def _open_log(path: str, name: str) -> tuple[AppendLog, LedgerReplay]:
    found: list[LedgerReplay] = []

    def replay(pieces: Iterator[bytes]) -> int:
        decoder = LedgerDecoder(path=path, expected_name=name, keep_records=False)
        for piece in pieces:
            decoder.feed(piece)
        result = decoder.finish()
        found.append(result)
        return result.valid_length

    log = AppendLog.open(
        path,
        refusal=(
            f"ledger file {path!r} is in use by another CM transport; "
            "two transports must never share a ledger file"
        ),
        replay=replay,
        new_file=lambda: new_ledger(name, time.time()),
        leftovers=(_COMPACT_SUFFIX,),
    )
    return log, found[0]


def _build_replacement(
    log: AppendLog, state: LedgerState, created: float, cancel: threading.Event
) -> Replacement:
    """Write ``state`` as a new ledger beside ``log``'s file and sync it (not renamed yet)."""
    replacement = log.begin_replace(_COMPACT_SUFFIX)
    try:
        for chunk in compact_ledger_chunks(state, created):
            if cancel.is_set():
                raise _Cancelled
            replacement.write(chunk)
        replacement.sync()
    except BaseException:
        replacement.abandon()
        raise
    return replacement


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
