"""The recorder: listen on subjects and write every message into a capture directory.

The event loop only takes messages off the listeners' queue and stamps their
arrival time; encoding, JSON rendering and Parquet writing happen on one
worker thread (a single thread keeps rows in arrival order), so a slow disk
never stalls message delivery. Batches go to the thread as they accumulate;
the thread rolls (commits) the in-progress file when it reaches
``roll_bytes`` or has been open ``roll_interval`` seconds, and a ticker asks
for that check even when no message arrives, so the last messages of a quiet
stream become readable within ``roll_interval``.

With a certified transport (``rv.CmTransport``) the recorder listens with
explicit confirmation and confirms each message only after the file holding
it is committed (closed, fsynced, named in the marker): a recorder killed at
any point loses nothing, because the sender redelivers whatever was not
confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rvasync._logging import stderr_logger
from rvasync.errors import InvalidArgument, RvError
from rvasync.message import Message
from rvasync.queues import Queue
from rvasync.spark.capture import CaptureWriter, CommitInfo, fields_json, rows_to_batch
from rvasync.spark.progress import Progress, RecorderStats
from rvasync.spark.storage import locate, parse_storage_options
from rvasync.spark.upload import Mirror
from rvasync.subjects import check_listen_subject

__all__ = ["Recorder"]

_MAX_INFLIGHT = 4


def _is_certified(transport: Any) -> bool:
    try:
        from rvasync.cmdriver import CmTransport
    except ImportError:
        return False
    return isinstance(transport, CmTransport)


class _Job:
    """One batch handed to the writer thread, and the messages awaiting its commit."""

    __slots__ = ("future", "messages")

    def __init__(self, future: asyncio.Future[Any], messages: list[Message] | None) -> None:
        self.future = future
        self.messages = messages


def _whole(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} must be a whole number, at least 1, got {value!r}")


class Recorder:
    """Capture every message on ``subjects`` into ``directory``.

    ``transport`` is any rvasync transport (process, network, or a certified
    ``CmTransport``). Use it as an async context manager, or ``await
    start()`` / ``await stop()``; ``await flush()`` commits now. ``stats``
    holds running totals. ``progress`` draws them on stderr (default: only
    when stderr is a terminal).
    """

    def __init__(
        self,
        transport: Any,
        subjects: str | Sequence[str],
        directory: str | os.PathLike[str],
        *,
        roll_bytes: int = 64 * 1024 * 1024,
        roll_interval: float = 10.0,
        batch_rows: int = 4096,
        row_group_rows: int = 65536,
        progress: bool | None = False,
        upload: str | None = None,
        storage_options: str | dict[str, Any] | None = None,
    ) -> None:
        if not callable(getattr(transport, "listen", None)):
            raise InvalidArgument(
                f"transport must be an rvasync transport (process, network or CmTransport), "
                f"got {type(transport).__name__}"
            )
        if isinstance(subjects, str):
            subjects = [subjects]
        elif isinstance(subjects, Sequence):
            subjects = list(subjects)
        else:
            raise InvalidArgument(
                f"subjects must be a subject or a sequence of them, got {type(subjects).__name__}"
            )
        if not subjects:
            raise InvalidArgument("a recorder needs at least one subject")
        for subject in subjects:
            check_listen_subject(subject)
        if not isinstance(directory, str | os.PathLike) or not os.fspath(directory):
            raise InvalidArgument(
                f"directory must be a non-empty path (str or os.PathLike), got {directory!r}"
            )
        _whole("roll_bytes", roll_bytes)
        if (
            isinstance(roll_interval, bool)
            or not isinstance(roll_interval, int | float)
            or not 0 < roll_interval < math.inf
        ):
            raise InvalidArgument(
                f"roll_interval must be a positive finite number of seconds, got {roll_interval!r}"
            )
        _whole("batch_rows", batch_rows)
        _whole("row_group_rows", row_group_rows)
        if progress is not None and not isinstance(progress, bool):
            raise InvalidArgument(f"progress must be True, False or None, got {progress!r}")
        self.transport = transport
        self.subjects = subjects
        self.directory = os.fspath(directory)
        self.roll_bytes = roll_bytes
        self.roll_interval = float(roll_interval)
        self.batch_rows = batch_rows
        self.certified = _is_certified(transport)
        self.stats = RecorderStats()
        self._writer = CaptureWriter(directory, row_group_rows=row_group_rows)
        self.upload = None
        if upload is not None:
            options = parse_storage_options(storage_options, "storage_options")
            self.upload = locate(upload, options, what="upload")
        self._mirror: Mirror | None = None
        self._progress_setting = progress
        self._progress: Progress | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._queue: Queue | None = None
        self._listeners: list[Any] = []
        self._jobs: deque[_Job] = deque()
        self._finishing = asyncio.Lock()
        self._unconfirmed: list[Message] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._error: BaseException | None = None
        self._stopped = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self._running = False

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> Recorder:
        """Open the capture directory and start listening."""
        if self._running:
            return self
        loop = asyncio.get_running_loop()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="rvasync-recorder")
        try:
            await loop.run_in_executor(self._executor, self._writer.open)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self.stats = RecorderStats(
            committed_rows=self._writer.marker.rows,
            committed_files=self._writer.marker.committed,
            started=time.monotonic(),
        )
        if self.upload is not None:
            # Catches up with what an earlier recorder here committed but did not upload.
            self._mirror = Mirror(self.directory, self.upload)
            self._mirror.kick()
        self._queue = Queue(name=f"recorder:{self.directory}")
        try:
            for subject in self.subjects:
                if self.certified:
                    listener = self.transport.listen(
                        subject, queue=self._queue, explicit_confirm=True
                    )
                else:
                    listener = self.transport.listen(subject, queue=self._queue)
                self._listeners.append(listener)
        except BaseException:
            await self._close_listeners()
            await loop.run_in_executor(self._executor, self._writer.close)
            self._executor.shutdown(wait=False)
            raise
        title = f"recording {', '.join(self.subjects)} -> {self.directory}"
        self._progress = Progress(title, enabled=self._progress_setting)
        self._running = True
        self._stopped.clear()
        self._tasks = [
            asyncio.create_task(self._consume(), name="rvasync-recorder-consume"),
            asyncio.create_task(self._tick(), name="rvasync-recorder-tick"),
        ]
        return self

    async def stop(self) -> None:
        """Stop listening, write what was received, commit, release the directory.

        Raises the error that stopped the recorder early, if one did.
        """
        if not self._running:
            self._raise_error()
            return
        self._running = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        # No await between draining and closing: nothing can slip in between. A
        # certified recorder keeps its listeners until the final commit is
        # confirmed; what arrives meanwhile is unconfirmed and comes back later.
        leftovers = self._drain()
        if not self.certified:
            await self._close_listeners()
        if leftovers and self._error is None:
            self._submit(leftovers)
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        try:
            await self._settle()
            if self._error is None:
                await self._commit(self._writer.close)
                # Everything appended is committed now, including what a commit
                # interrupted by this stop made durable without being accounted.
                marker = self._writer.marker
                self.stats.committed_files, self.stats.committed_rows = (
                    marker.committed,
                    marker.rows,
                )
                durable, self._unconfirmed = self._unconfirmed, []
                await self._after_commit(None, durable)
            else:
                await loop.run_in_executor(self._executor, self._close_after_error)
        finally:
            await self._close_listeners()
            self._executor.shutdown(wait=True)
            self._executor = None
            await self._finish_upload()
            if self._queue is not None:
                self._queue.destroy()
            if self._progress is not None:
                self._progress.close(self.stats)
            self._stopped.set()
        self._raise_error()

    async def __aenter__(self) -> Recorder:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def wait(self) -> None:
        """Wait until the recorder stops (``stop()``, or an error, which this raises)."""
        await self._stopped.wait()
        self._raise_error()

    async def flush(self) -> CommitInfo | None:
        """Commit everything received so far; returns the commit (None if nothing was new)."""
        if not self._running:
            raise InvalidArgument("the recorder is not running")
        leftovers = self._drain()
        if leftovers:
            self._submit(leftovers)
        await self._settle()
        self._raise_error()
        assert self._executor is not None
        return await self._commit(self._writer.commit)

    # -- the loop side ---------------------------------------------------------------

    def _drain(self, first: Message | None = None) -> list[tuple[Message, int]]:
        queue = self._queue
        assert queue is not None
        now = time.time_ns() // 1000
        items: list[tuple[Message, int]] = [] if first is None else [(first, now)]
        limit = self.batch_rows
        while len(items) < limit:
            msg = queue.poll()
            if msg is None:
                break
            items.append((msg, now))
        self.stats.received += len(items)
        return items

    async def _consume(self) -> None:
        queue = self._queue
        assert queue is not None
        try:
            while True:
                first = await queue.get()
                self._submit(self._drain(first))
                await self._reap()
                while len(self._jobs) > _MAX_INFLIGHT:
                    await self._finish_oldest()
                if self._progress is not None:
                    self._progress.update(self.stats)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a write failed: stop recording, report it
            self._fail(exc)

    async def _tick(self) -> None:
        assert self._executor is not None
        period = min(1.0, self.roll_interval / 4)
        try:
            while True:
                await asyncio.sleep(period)
                await self._reap()
                if not self._jobs:
                    await self._commit(self._commit_if_due)
                if self._progress is not None:
                    self._progress.update(self.stats)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            stderr_logger().error(
                "recorder stopped by an error", directory=self.directory, error=repr(exc)
            )
        if self._running:
            self._stop_task = asyncio.get_running_loop().create_task(self._stop_quietly())

    async def _stop_quietly(self) -> None:
        # The error is kept for wait() and stop() to raise.
        with contextlib.suppress(BaseException):
            await self.stop()

    def _raise_error(self) -> None:
        if self._error is not None:
            if isinstance(self._error, RvError | OSError):
                raise self._error
            raise RvError(f"recorder for {self.directory!r} failed: {self._error!r}")

    def _submit(self, items: list[tuple[Message, int]]) -> None:
        assert self._executor is not None
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, self._write_items, items
        )
        messages = [msg for msg, _ in items] if self.certified else None
        self._jobs.append(_Job(future, messages))

    async def _finish_oldest(self) -> None:
        # The receiving loop and the roll timer both finish jobs; one at a
        # time, or both would wait on the same job and then each pop one (the
        # second popping a job nobody accounted for, or an empty deque).
        async with self._finishing:
            if not self._jobs:
                return
            job = self._jobs[0]
            # Shielded: stop() cancels the task waiting here, not the job's result.
            info = await asyncio.shield(job.future)
            self._jobs.popleft()
            if job.messages:
                self._unconfirmed.extend(job.messages)
            if info is not None:
                # The job's own roll: every job finished so far is in the file.
                durable, self._unconfirmed = self._unconfirmed, []
                await self._after_commit(info, durable)

    async def _reap(self) -> None:
        """Account for the jobs the writer thread has finished (in order)."""
        while self._jobs and self._jobs[0].future.done():
            await self._finish_oldest()

    async def _settle(self) -> None:
        while self._jobs:
            try:
                await self._finish_oldest()
            except BaseException as exc:
                if self._jobs:
                    self._jobs.popleft()
                if self._error is None:
                    self._error = exc

    async def _commit(self, commit: Callable[[], CommitInfo | None]) -> CommitInfo | None:
        """Run ``commit`` on the writer thread; confirm what it made durable.

        Only the messages of jobs finished before the commit was queued are
        known to be in the file; jobs finishing while it runs were queued
        after it, and a later commit confirms them.
        """
        assert self._executor is not None
        covered, self._unconfirmed = self._unconfirmed, []
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, commit)
            info = await asyncio.shield(future)
        except BaseException:
            self._unconfirmed[:0] = covered
            raise
        if info is None:
            self._unconfirmed[:0] = covered
            return None
        await self._after_commit(info, covered)
        return info

    async def _finish_upload(self) -> None:
        mirror, self._mirror = self._mirror, None
        if mirror is None:
            return
        try:
            await asyncio.to_thread(mirror.finish)
        except RvError as exc:
            if self._error is None:
                self._error = exc
        finally:
            self.stats.uploaded_files, self.stats.upload_errors = mirror.uploaded, mirror.errors

    async def _after_commit(self, info: CommitInfo | None, durable: list[Message]) -> None:
        if info is not None:
            self.stats.committed_files = info.index
            self.stats.committed_rows = info.total_rows
            self.stats.last_commit = time.monotonic()
            if self._mirror is not None:
                self._mirror.kick()
                self.stats.uploaded_files = self._mirror.uploaded
                self.stats.upload_errors = self._mirror.errors
        for msg in durable:
            await msg.listener.confirm(msg)

    async def _close_listeners(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            with contextlib.suppress(RvError):
                await listener.close()

    # -- the writer thread -----------------------------------------------------------

    def _write_items(self, items: list[tuple[Message, int]]) -> CommitInfo | None:
        subjects, replies, senders, sequences, times, data, fields = ([] for _ in range(7))
        skipped = 0
        for msg, received in items:
            try:
                wire = msg.to_bytes()
                text = fields_json(msg)
            except RvError as exc:
                skipped += 1
                stderr_logger().warning(
                    "message not recordable, skipped", subject=msg.subject, error=str(exc)
                )
                continue
            cm = msg.cm
            subjects.append(msg.subject)
            replies.append(msg.reply_subject)
            senders.append(None if cm is None else cm.sender)
            sequences.append(None if cm is None else cm.sequence)
            times.append(received)
            data.append(wire)
            fields.append(text)
            self.stats.written_bytes += len(wire)
        self.stats.skipped += skipped
        self._writer.append(
            rows_to_batch([subjects, replies, senders, sequences, times, data, fields])
        )
        return self._commit_if_due()

    def _commit_if_due(self) -> CommitInfo | None:
        writer = self._writer
        if writer.uncommitted_rows and (
            writer.uncommitted_bytes >= self.roll_bytes or writer.file_age >= self.roll_interval
        ):
            return writer.commit()
        return None

    def _close_after_error(self) -> None:
        self._writer.abandon()
        self._writer.close()
