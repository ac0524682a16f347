"""Capture directories: rolling, append-only Parquet files with a committed-offset marker.

A recorder writes messages into a directory that readers (Spark, pyarrow,
anything that reads Parquet) may scan at any moment, so the layout is built
for one writer and many readers that never see a torn file:

``.part-0000000007.parquet.inprogress``
    The file being written. Hidden (leading dot) so Spark's own Parquet
    reader skips it; not readable as Parquet until it is closed.
``part-0000000001.parquet`` ... ``part-0000000006.parquet``
    Closed files. A file becomes visible under this name only after it was
    closed and fsynced; it never changes again.
``_committed.json``
    ``{"format": "rvasync-capture", "version": 1, "committed": 6, "rows": N}``:
    files 1..committed are complete. Replaced atomically (write, fsync,
    rename), so readers see the old or the new marker, never half of one.
``_lock``
    Held (``flock``) by the recorder writing here: two recorders cannot
    interleave files in one directory.

A commit is: close the in-progress file, fsync it, rename it to its final
name, fsync the directory, replace the marker, fsync the directory. Only the
marker makes a file part of the capture, so a crash anywhere in between
leaves a file *past* the committed offset, which readers skip with a
warning and the next recorder moves aside. A committed file that is missing
or unreadable is real damage and an error (:class:`CaptureError`).

Offsets are file indexes: files are numbered from 1 without gaps and never
rewritten, which is what makes them replayable offsets for Structured
Streaming.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from rvasync._logging import stderr_logger
from rvasync._wire import INT_RANGE
from rvasync.errors import InvalidArgument, RvError
from rvasync.fieldtypes import FieldType
from rvasync.jsonform import _value_to_jsonable as value_to_jsonable
from rvasync.message import Message

__all__ = [
    "CAPTURE_COLUMNS",
    "CAPTURE_SCHEMA",
    "CaptureError",
    "CaptureWriter",
    "Marker",
    "committed_files",
    "field_entries",
    "fields_json",
    "file_path",
    "open_committed",
    "read_marker",
]

FORMAT = "rvasync-capture"
VERSION = 1
MARKER_NAME = "_committed.json"
LOCK_NAME = "_lock"
#: The Parquet schema metadata key naming a file's format and version.
FORMAT_KEY = b"rvasync.format"
#: The Parquet codecs a CaptureWriter can use (pyarrow's names).
Compression: TypeAlias = Literal["gzip", "brotli", "lz4", "zstd", "snappy", "none"]
_PART_RE = re.compile(r"^part-(\d{10})\.parquet$")
_INPROGRESS_RE = re.compile(r"^\.part-(\d{10})\.parquet\.inprogress$")

_CAPTURE_FIELDS: list[pa.Field[Any]] = [
    pa.field("subject", pa.string(), nullable=False),
    pa.field("reply_subject", pa.string()),
    pa.field("sender", pa.string()),
    pa.field("sequence", pa.int64()),
    pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("data", pa.binary(), nullable=False),
    pa.field("fields", pa.string(), nullable=False),
]
#: The columns of every capture file, in order (see docs/spark.md).
CAPTURE_SCHEMA = pa.schema(
    _CAPTURE_FIELDS,
    metadata={FORMAT_KEY: f"{FORMAT}/{VERSION}".encode()},
)
CAPTURE_COLUMNS = tuple(CAPTURE_SCHEMA.names)


class CaptureError(RvError):
    """A capture directory is damaged: a committed file is missing or unreadable, or
    the marker is corrupt. (Bad paths and options raise InvalidArgument instead.)"""


def _log() -> Any:
    return stderr_logger()


def file_name(index: int) -> str:
    return f"part-{index:010d}.parquet"


def file_path(directory: str | os.PathLike[str], index: int) -> Path:
    """Where committed file number ``index`` lives."""
    return Path(directory) / file_name(index)


def _inprogress_path(directory: Path, index: int) -> Path:
    return directory / f".{file_name(index)}.inprogress"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TYPE_NAMES = {ftype: ftype.name for ftype in FieldType}
# Values JSON carries as they are; everything else goes through rvasync.jsonform.
_JSON_NATIVE = frozenset(
    (FieldType.STRING, FieldType.BOOL, FieldType.IPPORT16, *(FieldType(code) for code in INT_RANGE))
)
_FLOATS = frozenset((FieldType.F32, FieldType.F64))
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def fields_json(msg: Message) -> str:
    """The ``fields`` column: the message's fields in rvasync's readable JSON form
    (a list of ``{"name", "id", "type", "value"}``, exactly the ``fields`` part of
    :func:`rvasync.jsonform.to_jsonable`, which reads it back).

    The recorder renders this for every message, so the common scalar types
    skip the general converter.
    """
    entries = []
    for name, field_id, ftype, value in msg._fields:
        if ftype in _JSON_NATIVE or (ftype in _FLOATS and math.isfinite(value)):
            rendered = value
        else:
            rendered = value_to_jsonable(ftype, value)
        entries.append(
            {"name": name, "id": field_id, "type": _TYPE_NAMES[ftype], "value": rendered}
        )
    return _encode_json(entries)


def field_entries(msg: Message) -> tuple[tuple[str | None, int, FieldType, Any], ...]:
    """The message's fields as ``(name, id, type, value)`` tuples, in order, without
    building a Field object each: readers projecting a few fields out of every
    captured message call this once per row (see scan.py)."""
    return tuple(msg._fields)


# -- the marker ------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """What the marker says: files 1..``committed`` are complete, holding ``rows`` rows."""

    committed: int = 0
    rows: int = 0


def check_directory(directory: str | os.PathLike[str], what: str = "capture directory") -> Path:
    """``directory`` as a Path after checking it exists and can be listed."""
    path = Path(directory)
    if not path.exists():
        raise InvalidArgument(f"{what} {str(path)!r} does not exist")
    if not path.is_dir():
        raise InvalidArgument(f"{what} {str(path)!r} is not a directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InvalidArgument(f"{what} {str(path)!r} is not readable")
    return path


def read_marker(directory: str | os.PathLike[str]) -> Marker:
    """The committed offset of a capture directory (0 files when nothing was committed yet)."""
    path = check_directory(directory)
    marker = path / MARKER_NAME
    try:
        raw = marker.read_bytes()
    except FileNotFoundError:
        return Marker()
    except OSError as exc:
        raise InvalidArgument(
            f"cannot read capture marker {str(marker)!r}: {exc.strerror}"
        ) from None
    try:
        # Bytes that are not UTF-8 are a UnicodeDecodeError (a ValueError); JSON nested
        # thousands of levels deep is a RecursionError: damage, like any other.
        data = json.loads(raw.decode("utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r}")
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r} is not supported (need {VERSION})")
        committed, rows = data["committed"], data["rows"]
        if not (isinstance(committed, int) and committed >= 0 and isinstance(rows, int)):
            raise ValueError("'committed' and 'rows' must be non-negative integers")
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as exc:
        raise CaptureError(f"capture marker {str(marker)!r} is corrupt: {exc}") from None
    return Marker(committed, rows)


def _write_marker(directory: Path, marker: Marker) -> None:
    tmp = directory / f".{MARKER_NAME}.tmp"
    payload = json.dumps(
        {"format": FORMAT, "version": VERSION, "committed": marker.committed, "rows": marker.rows}
    ).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / MARKER_NAME)
    _fsync_dir(directory)


# -- reading ----------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(path: Path, committed: int, why: str) -> None:
    key = str(path)
    if key in _warned:
        return
    _warned.add(key)
    _log().warning(
        "capture file past the committed offset skipped",
        path=key,
        committed=committed,
        reason=why,
    )


def uncommitted_files(directory: Path, committed: int) -> list[Path]:
    """Files past the committed offset (in progress, or left by a crash)."""
    found = []
    for entry in os.scandir(directory):
        match = _PART_RE.match(entry.name) or _INPROGRESS_RE.match(entry.name)
        if match and int(match.group(1)) > committed:
            found.append(Path(entry.path))
    return sorted(found)


def recorder_active(directory: str | os.PathLike[str]) -> bool:
    """Whether a recorder holds the directory's lock right now."""
    try:
        fd = os.open(Path(directory) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a shared lock we may have taken
    return False


def warn_uncommitted(directory: str | os.PathLike[str], committed: int) -> list[Path]:
    """Warn (once per file and process) about files past the committed offset; return them.

    The in-progress file of a running recorder is expected and not warned
    about; a half-written file no recorder is writing, or a closed file the
    marker never named, is what a crash leaves, and readers skip it.
    """
    extras = uncommitted_files(Path(directory), committed)
    active = None
    for extra in extras:
        if extra.name.endswith(".inprogress"):
            if active is None:
                active = recorder_active(directory)
            if active:
                continue
            why = "half-written, left by a recorder that stopped without committing it"
        else:
            why = "closed but never committed (the recorder stopped before committing it)"
        _warn_once(extra, committed, why)
    return extras


def committed_files(
    directory: str | os.PathLike[str],
    start: int = 0,
    end: int | None = None,
    *,
    warn: bool = True,
) -> list[Path]:
    """Paths of committed files ``start+1 .. end`` (``end`` defaults to the marker's offset).

    Files past the committed offset are skipped, with one warning per file and
    process when ``warn``; a committed file that is missing is a CaptureError.
    The list can be handed to ``spark.read.parquet(*paths)`` on a cluster
    without rvasync installed.
    """
    path = check_directory(directory)
    marker = read_marker(path)
    if end is None:
        end = marker.committed
    if end > marker.committed:
        raise CaptureError(
            f"offset {end} is past the committed offset {marker.committed} of {str(path)!r}"
        )
    if warn:
        warn_uncommitted(path, marker.committed)
    files = [file_path(path, index) for index in range(start + 1, end + 1)]
    for file in files:
        if not file.is_file():
            raise CaptureError(
                f"committed capture file {str(file)!r} is missing "
                f"(the marker of {str(path)!r} says files 1..{marker.committed} are complete)"
            )
    return files


#: What pyarrow raises for a damaged Parquet file: its own errors, OSError, and plain
#: ValueError (a UnicodeDecodeError for metadata strings that are not UTF-8, for one).
UNREADABLE = (OSError, ValueError, pa.ArrowException)


def _check_format(path: str | os.PathLike[str], parquet: pq.ParquetFile) -> None:
    """Refuse a file whose ``rvasync.format`` metadata names another format or a newer
    version: its columns may mean something this reader does not know, and guessing
    would give wrong rows. (A file without the key is read if its columns fit.)"""
    metadata = parquet.schema_arrow.metadata or {}
    raw = metadata.get(FORMAT_KEY)
    if raw is None:
        return
    text = raw.decode("utf-8", "replace")
    name, _, version = text.partition("/")
    if name != FORMAT or not version.isdigit():
        raise CaptureError(
            f"committed capture file {str(path)!r} has format {text!r}, not {FORMAT}/N"
        )
    if int(version) > VERSION:
        raise CaptureError(
            f"committed capture file {str(path)!r} was written in capture format version "
            f"{version}, newer than this rvasync reads ({VERSION}); upgrade rvasync on the "
            f"driver and every executor"
        )


def open_committed(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """A committed capture file, checked: unreadable or foreign files are a CaptureError."""
    try:
        parquet = pq.ParquetFile(os.fspath(path))
        names = parquet.schema_arrow.names
    except UNREADABLE as exc:
        raise CaptureError(f"committed capture file {str(path)!r} is unreadable: {exc}") from None
    _check_format(path, parquet)
    missing = [name for name in CAPTURE_COLUMNS if name not in names]
    if missing:
        raise CaptureError(
            f"committed capture file {str(path)!r} is not an rvasync capture "
            f"(missing columns {', '.join(missing)})"
        )
    return parquet


# -- writing --------------------------------------------------------------------


@dataclass(frozen=True)
class CommitInfo:
    """One commit: file ``index`` now holds ``rows`` rows; ``total_rows`` in the capture."""

    index: int
    path: Path
    rows: int
    total_rows: int


def rows_to_batch(columns: Sequence[Sequence[Any]]) -> pa.RecordBatch:
    """Seven column lists (CAPTURE_COLUMNS order, received_at in µs since the epoch) as a batch."""
    arrays = [
        pa.array(values, type=field.type)
        for values, field in zip(columns, CAPTURE_SCHEMA, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=CAPTURE_SCHEMA)


class CaptureWriter:
    """The one writer of a capture directory (blocking calls: run it off the event loop).

    ``append`` adds rows to the in-progress file; ``commit`` makes them
    visible to readers. Rows are buffered in memory and written a row group
    at a time (``row_group_rows``), which keeps files efficient to scan.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        row_group_rows: int = 65536,
        compression: Compression = "snappy",
    ) -> None:
        if row_group_rows < 1:
            raise InvalidArgument(f"row_group_rows must be at least 1, got {row_group_rows}")
        self.directory = Path(directory)
        self.row_group_rows = row_group_rows
        self.compression = compression
        self._lock_fd: int | None = None
        self._marker = Marker()
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._file_rows = 0
        self._file_bytes = 0
        self._file_started: float | None = None

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> CaptureWriter:
        """Create/lock the directory and move aside what a crashed writer left behind."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgument(
                f"cannot create capture directory {str(self.directory)!r}: {exc.strerror}"
            ) from None
        check_directory(self.directory)
        if not os.access(self.directory, os.W_OK):
            raise InvalidArgument(f"capture directory {str(self.directory)!r} is not writable")
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        # Readers take the lock shared for an instant (see recorder_active):
        # only a lock held for a whole second is another recorder.
        deadline = time.monotonic() + 1.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
                os.close(fd)
                raise InvalidArgument(
                    f"capture directory {str(self.directory)!r} is in use by another recorder"
                ) from None
        self._lock_fd = fd
        self._marker = read_marker(self.directory)
        self._set_aside_leftovers()
        return self

    def _set_aside_leftovers(self) -> None:
        # Their messages were never committed (nor, when certified, confirmed):
        # adopting them could duplicate what a certified sender redelivers.
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for path in uncommitted_files(self.directory, self._marker.committed):
            target = path.with_name(f".orphan-{stamp}-{path.name.lstrip('.')}")
            os.replace(path, target)
            _log().warning(
                "uncommitted capture file set aside",
                path=str(path),
                moved_to=str(target),
                committed=self._marker.committed,
            )

    def close(self) -> CommitInfo | None:
        """Commit what is pending and release the directory."""
        try:
            return self.commit() if self._lock_fd is not None else None
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> CaptureWriter:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- state -----------------------------------------------------------------

    @property
    def marker(self) -> Marker:
        return self._marker

    @property
    def uncommitted_rows(self) -> int:
        """Rows appended since the last commit."""
        return self._file_rows + self._pending_rows

    @property
    def uncommitted_bytes(self) -> int:
        """Approximate size of the in-progress file (uncompressed column data)."""
        return self._file_bytes

    @property
    def file_age(self) -> float:
        """Seconds since the first uncommitted row was appended (0 when none)."""
        return 0.0 if self._file_started is None else time.monotonic() - self._file_started

    # -- writing -----------------------------------------------------------------

    def append(self, batch: pa.RecordBatch) -> None:
        """Add rows (a batch with CAPTURE_SCHEMA) to the in-progress file."""
        if self._lock_fd is None:
            raise InvalidArgument("capture writer is not open")
        if not batch.num_rows:
            return
        if self._file_started is None:
            self._file_started = time.monotonic()
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._file_bytes += batch.nbytes
        if self._pending_rows >= self.row_group_rows:
            self._write_pending()

    def _write_pending(self) -> None:
        if not self._pending:
            return
        if self._writer is None:
            index = self._marker.committed + 1
            self._writer = pq.ParquetWriter(
                _inprogress_path(self.directory, index),
                CAPTURE_SCHEMA,
                compression=self.compression,
            )
        table = pa.Table.from_batches(self._pending, schema=CAPTURE_SCHEMA)
        self._writer.write_table(table, row_group_size=max(self.row_group_rows, table.num_rows))
        self._file_rows += self._pending_rows
        self._pending = []
        self._pending_rows = 0

    def commit(self) -> CommitInfo | None:
        """Make every appended row visible to readers (None when there was nothing to commit)."""
        if self._lock_fd is None:
            raise InvalidArgument("capture writer is not open")
        self._write_pending()
        if self._writer is None:
            return None
        index = self._marker.committed + 1
        self._writer.close()
        self._writer = None
        source = _inprogress_path(self.directory, index)
        fd = os.open(source, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        target = file_path(self.directory, index)
        os.replace(source, target)
        _fsync_dir(self.directory)
        rows = self._file_rows
        self._marker = Marker(index, self._marker.rows + rows)
        _write_marker(self.directory, self._marker)
        self._file_rows = 0
        self._file_bytes = 0
        self._file_started = None
        return CommitInfo(index, target, rows, self._marker.rows)

    def abandon(self) -> None:
        """Drop the uncommitted rows (used when a write failed half-way)."""
        if self._writer is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._writer.close()
            self._writer = None
        self._pending = []
        self._pending_rows = 0
        self._file_rows = 0
        self._file_bytes = 0
        self._file_started = None
