"""Durable files for the drivers: one lock, atomic replacement, append logs, full disks.

Every file a driver must find intact after a crash (certified-delivery and
relay agent ledgers, remote-operations state files, the value cache's
store) is written through this module, so each of them keeps the same
rules:

* **Lock first.** :class:`FileLock` holds ``<path>.lock`` (``flock``) for as
  long as the file is open. It is taken before anything else touches the
  file or its leftovers (a half-written side file of a compaction a crash
  interrupted is removed only by the lock's holder), so a second opener is
  refused without disturbing the first. The lock file is never renamed or
  removed, which is why it is a file of its own: a lock on the data file
  itself would move to the old inode when the file is replaced.
* **Replace atomically.** :func:`atomic_replace` writes a side file, syncs
  it, renames it over the file and syncs the directory: a crash leaves the
  old file or the new one, whole. If anything fails (a full disk), the side
  file is removed and the old file stays as it was.
* **Append whole frames.** :class:`AppendLog` is an append-only file of
  checksummed frames (:mod:`rvasync.framing`). On open it replays under the
  package's one rule (a torn tail is cut off, a damaged complete frame is
  :class:`~rvasync.errors.LedgerCorrupt`); an append that fails part way
  (no space left) is cut back off the file, so a later append never lands
  behind half a frame, which the next open would rightly call corruption.
  :meth:`AppendLog.begin_replace` rewrites it (compaction) while appends go
  on, and a rewrite that fails is abandoned with its side file removed.
* **Say when the disk is full.** :func:`is_space_error` tells a full disk
  or quota (which may pass) from other failures (which do not).

Everything here blocks: drivers call it on a thread of their own (see
:class:`~rvasync.cmdriver.ledgerfile.LedgerFile`) or, for small writes, on
the loop. Nothing here imports asyncio.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator

from rvasync.errors import InvalidArgument, NotPermitted

__all__ = [
    "AppendLog",
    "FileLock",
    "Replacement",
    "atomic_replace",
    "fsync_directory",
    "is_space_error",
    "open_for_writing",
    "read_all",
    "read_pieces",
    "remove_quietly",
    "write_all",
]

_READ_CHUNK = 1 << 20
_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_space_error(exc: BaseException) -> bool:
    """True for a full disk, an exceeded quota or a file too large: room may come back."""
    return isinstance(exc, OSError) and exc.errno in _SPACE_ERRNOS


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` at ``fd``'s position (``os.write`` may write less)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_all(fd: int) -> bytes:
    """The whole file behind ``fd``, read from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


REPLAY_PIECE = 8 << 20
"""Bytes :meth:`AppendLog.open` reads at a time to replay a file."""


def read_pieces(fd: int, piece: int = REPLAY_PIECE) -> Iterator[bytes]:
    """The file behind ``fd`` from its start, ``piece`` bytes at a time."""
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = read_exactly(fd, piece)
        if not chunk:
            return
        yield chunk
        if len(chunk) < piece:
            return


def read_exactly(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd``'s position (fewer only at the end of the file)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def fsync_directory(path: str) -> None:
    """Sync the directory holding ``path``, so a rename or a new file in it is durable.

    Some file systems cannot sync a directory; the rename is still atomic there.
    """
    directory = os.path.dirname(os.path.abspath(path)) or "."
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def remove_quietly(path: str) -> None:
    """Remove ``path`` if it exists (a leftover side file)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def open_for_writing(path: str, what: str, flags: int = 0) -> int:
    """``os.open(path, O_RDWR | O_CREAT | flags)`` with the usual mistakes as clear errors.

    ``what`` names the file in the messages ("ledger path", "store path" ...).
    """
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | flags, 0o644)
    except IsADirectoryError:
        raise InvalidArgument(f"{what} {path!r} is a directory; give a file path") from None
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidArgument(
            f"{what} {path!r}: the directory {os.path.dirname(path) or '.'!r} does not "
            "exist; create it first (the file itself is created on open)"
        ) from None
    except PermissionError as exc:
        raise NotPermitted(f"{what} {path!r}: {exc.strerror or exc}") from None


class FileLock:
    """An exclusive lock on ``<path>.lock``, held until :meth:`release` (or the process ends)."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, path: str, *, refusal: str, what: str = "file") -> FileLock:
        """Lock the file at ``path`` (through ``path + ".lock"``) or raise NotPermitted.

        ``refusal`` is the error's message when another holder has it (say
        who and why it matters). Raises before anything else is touched.
        """
        lock_path = path + ".lock"
        fd = open_for_writing(lock_path, f"{what} lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise NotPermitted(refusal) from None
        except BaseException:
            os.close(fd)
            raise
        return cls(lock_path, fd)

    @staticmethod
    def held(path: str) -> bool:
        """Whether some process holds the lock of the file at ``path`` now (a probe)."""
        try:
            fd = os.open(path + ".lock", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    @property
    def locked(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        """Let the next opener have the file (closing the descriptor drops the lock)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _lock_data_file(fd: int, refusal: str) -> None:
    # Older releases locked the data file itself: hold that lock too, so a
    # process of such a release and one of this release never share a file.
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise NotPermitted(refusal) from None


def atomic_replace(
    path: str, chunks: Iterable[bytes], *, side_suffix: str = ".new", sync: bool = True
) -> None:
    """Make ``path`` hold exactly ``chunks``: side file, sync, rename over, sync the directory.

    A crash at any moment leaves the old file or the new one, whole. On any
    error (a full disk) the side file is removed, ``path`` is untouched and
    the error propagates. ``sync=False`` skips the two syncs (a file whose
    loss on a power cut is acceptable).
    """
    side = path + side_suffix
    fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        for chunk in chunks:
            write_all(fd, chunk)
        if sync:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(side, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        remove_quietly(side)
        raise
    if sync:
        fsync_directory(path)


class Replacement:
    """A rewrite of an :class:`AppendLog` in progress (see :meth:`AppendLog.begin_replace`).

    :meth:`write` may run on another thread than the log's appends; only
    :meth:`commit` switches the log over, and it must run where the appends
    run (between two of them).
    """

    __slots__ = ("_fd", "_log", "side", "size")

    def __init__(self, log: AppendLog, side: str, fd: int) -> None:
        self._log = log
        self._fd = fd
        self.side = side
        self.size = 0

    def write(self, data: bytes | memoryview) -> None:
        """Add ``data`` to the new file."""
        write_all(self._fd, data)
        self.size += len(data)

    def sync(self) -> None:
        """Sync what was written so far (so :meth:`commit` has only the tail left to sync)."""
        os.fsync(self._fd)

    def commit(self, tail: bytes = b"") -> None:
        """Add ``tail`` (what was appended to the old file meanwhile), sync, rename, switch.

        On failure the rewrite is abandoned (side file removed) and the error
        propagates; the log keeps appending to its old file.
        """
        try:
            if tail:
                self.write(tail)
            os.fsync(self._fd)
            _lock_data_file(self._fd, f"{self._log.path!r} is locked by another process")
            os.rename(self.side, self._log.path)
        except BaseException:
            self.abandon()
            raise
        fsync_directory(self._log.path)
        self._log.switch_to(self._fd, self.size)
        self._fd = -1

    def abandon(self) -> None:
        """Give the rewrite up: close and remove the side file (the log is unchanged)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        remove_quietly(self.side)


class AppendLog:
    """An open, locked append-only file of checksummed frames.

    Open it with :meth:`open`; every method blocks (run them on one thread).
    """

    __slots__ = ("_fd", "_lock", "path", "size")

    def __init__(self, path: str, lock: FileLock, fd: int, size: int) -> None:
        self.path = path
        self._lock = lock
        self._fd = fd
        self.size = size
        """Bytes in the file: everything appended so far."""

    @classmethod
    def open(
        cls,
        path: str,
        *,
        refusal: str,
        replay: Callable[[Iterator[bytes]], int],
        new_file: Callable[[], bytes],
        leftovers: Iterable[str] = (".compact",),
        what: str = "ledger path",
    ) -> AppendLog:
        """Lock, read and replay ``path`` (created if absent); cut a torn tail off.

        ``replay(pieces)`` decodes the file, given as an iterator of pieces
        of at most :data:`REPLAY_PIECE` bytes in order (so a large file is
        never in memory whole), raising for damage; it returns where the
        intact frames end, 0 for a file to start afresh;
        ``new_file()`` is then written (magic and header) and synced.
        ``leftovers`` are suffixes of side files to remove once the lock is
        held. ``refusal`` is the NotPermitted message for a file in use.
        """
        lock = FileLock.acquire(path, refusal=refusal, what=what)
        try:
            for suffix in leftovers:
                remove_quietly(path + suffix)  # a rewrite a crash interrupted
            fd = open_for_writing(path, what)
        except BaseException:
            lock.release()
            raise
        try:
            _lock_data_file(fd, refusal)
            valid = replay(read_pieces(fd))
            if valid == 0:
                header = new_file()
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                write_all(fd, header)
                os.fsync(fd)
                fsync_directory(path)
                valid = len(header)
            elif valid < os.fstat(fd).st_size:
                os.ftruncate(fd, valid)  # the torn tail
                os.fsync(fd)
            os.lseek(fd, valid, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            lock.release()
            raise
        return cls(path, lock, fd, valid)

    def append(self, data: bytes | memoryview, *, sync: bool = False) -> None:
        """Append ``data`` (whole frames), synced if ``sync``.

        If the write fails part way (no space left), what it wrote is cut off
        again before the error propagates: the file ends after its last whole
        append, ready for the next one once there is room.
        """
        try:
            write_all(self._fd, data)
        except OSError:
            self._cut_back()
            raise
        self.size += len(data)
        if sync:
            os.fsync(self._fd)

    def _cut_back(self) -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self.size)
        os.lseek(self._fd, self.size, os.SEEK_SET)

    def sync(self) -> None:
        os.fsync(self._fd)

    def begin_replace(self, suffix: str = ".compact") -> Replacement:
        """Start rewriting the file beside it; :meth:`Replacement.commit` renames it over."""
        side = self.path + suffix
        fd = os.open(side, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        return Replacement(self, side, fd)

    def replace(self, chunks: Iterable[bytes], suffix: str = ".compact") -> None:
        """Rewrite the file as ``chunks`` at once (nothing is appended meanwhile)."""
        replacement = self.begin_replace(suffix)
        try:
            for chunk in chunks:
                replacement.write(chunk)
        except BaseException:
            replacement.abandon()
            raise
        replacement.commit()

    def switch_to(self, fd: int, size: int) -> None:
        """Append to ``fd`` from now on (a committed :class:`Replacement`'s file)."""
        old, self._fd = self._fd, fd
        self.size = size
        os.lseek(fd, size, os.SEEK_SET)
        os.close(old)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def abandon(self) -> None:
        """Close without syncing and release the lock, as the process's death would."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._lock.release()

    def close(self, *, sync: bool = True) -> None:
        """Sync (unless told not to), close the file and release the lock."""
        if self._fd < 0:
            return
        try:
            if sync:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
            self._lock.release()
