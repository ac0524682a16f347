"""Capture directories: rolling, append-only Parquet files with a committed-offset marker.

A recorder writes messages into a directory that readers (Spark, pyarrow,
anything that reads Parquet) may scan at any moment, so the layout is built
for one writer and many readers that never see a torn file:

``.part-0000000007.parquet.inprogress``
    The file being written. Hidden (leading dot) so Spark's own Parquet
    reader skips it; not readable as Parquet until it is closed.
``part-0000000001.parquet`` ... ``part-0000000006.parquet``
    Closed files. A file becomes visible under this name only after it was
    closed and fsynced; it never changes again. Its Parquet metadata names
    its format version, its capture and its number.
``_committed.json``
    ``{"format": "rvasync-capture", "version": 2, "capture": ID, "committed": 6,
    "rows": N, "files": [...], "crc": ...}``: files 1..committed are complete.
    ``capture`` is the capture's identity (made when a recorder first opens
    the directory); ``files`` holds each file's size, rows and checksums
    (:mod:`rvasync.spark.integrity`); ``crc`` covers the rest. Replaced
    atomically (write, fsync, rename), so readers see the old or the new
    marker, never half of one.
``_lock``
    Held (``flock``) by the recorder writing here: two recorders cannot
    interleave files in one directory.

A commit is: close the in-progress file, fsync it, checksum it, rename it to
its final name, fsync the directory, replace the marker, fsync the
directory. Only the marker makes a file part of the capture, so a crash
anywhere in between leaves a file *past* the committed offset, which readers
skip with a warning and the next recorder moves aside (a torn tail, dropped
with a warning). A committed file that is missing, unreadable or fails its
checksums is real damage and an error (:class:`CaptureError`), as is a
marker that fails its own.

Offsets are file indexes: files are numbered from 1 without gaps and never
rewritten, which is what makes them replayable offsets for Structured
Streaming. Directories are named by a path or URL (:mod:`rvasync.spark.storage`):
readers take any file system, the writer a local directory (the recorder
uploads what it commits elsewhere, see :mod:`rvasync.spark.upload`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rvasync._logging import stderr_logger
from rvasync._wire import INT_RANGE
from rvasync.errors import InvalidArgument, RvError
from rvasync.fieldtypes import FieldType
from rvasync.jsonform import _value_to_jsonable as value_to_jsonable
from rvasync.message import Message
from rvasync.spark.integrity import (
    Damaged,
    FileEntry,
    check_layout,
    checked_batches,
    describe,
    parse_footer,
    read_footer,
)
from rvasync.spark.storage import Location, locate, parse_storage_options

__all__ = [
    "CAPTURE_COLUMNS",
    "CAPTURE_SCHEMA",
    "CaptureError",
    "CaptureWriter",
    "CommittedFile",
    "Marker",
    "OpenFile",
    "committed_files",
    "committed_urls",
    "field_entries",
    "fields_json",
    "file_path",
    "open_committed",
    "read_marker",
    "snapshot",
]

FORMAT = "rvasync-capture"
#: The version of the files' format (their columns), in their Parquet metadata.
VERSION = 1
#: The version of the marker's format (2: capture identity, file entries, checksum).
MARKER_VERSION = 2
MARKER_NAME = "_committed.json"
LOCK_NAME = "_lock"
#: The Parquet schema metadata key naming a file's format and version.
FORMAT_KEY = b"rvasync.format"
#: Parquet metadata keys naming the capture a file belongs to and its number in it.
CAPTURE_KEY = b"rvasync.capture"
INDEX_KEY = b"rvasync.file"
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
    """What the marker says: files 1..``committed`` are complete, holding ``rows`` rows.

    ``capture`` is the capture's identity, made when a recorder first opens the
    directory: a stream's checkpoint records it, so a different capture behind the
    same path is noticed. ``files`` has an entry per committed file (its size, rows
    and checksums: :mod:`rvasync.spark.integrity`); None for a marker of format
    version 1, written before rvasync recorded them, and None entries for files
    committed then.
    """

    committed: int = 0
    rows: int = 0
    capture: str | None = None
    files: tuple[FileEntry | None, ...] | None = None

    def entry(self, index: int) -> FileEntry | None:
        """The entry of committed file ``index`` (None when the marker has none for it)."""
        return None if self.files is None else self.files[index - 1]


def as_location(directory: str | os.PathLike[str] | Location, options: str = "") -> Location:
    return directory if isinstance(directory, Location) else locate(directory, options)


def check_directory(
    directory: str | os.PathLike[str] | Location, what: str = "capture directory"
) -> Location:
    """``directory`` as a Location after checking it exists and can be listed."""
    location = as_location(directory)
    if location.local:
        path = Path(location.root)
        if not path.exists():
            raise InvalidArgument(f"{what} {location.url!r} does not exist")
        if not path.is_dir():
            raise InvalidArgument(f"{what} {location.url!r} is not a directory")
        if not os.access(path, os.R_OK | os.X_OK):
            raise InvalidArgument(f"{what} {location.url!r} is not readable")
        return location
    try:
        info = location.fs.get_file_info(location.root)
    except OSError as exc:
        raise InvalidArgument(f"cannot reach {what} {location.url!r}: {exc}") from None
    if info.type == pafs.FileType.NotFound:
        raise InvalidArgument(f"{what} {location.url!r} does not exist")
    if info.type != pafs.FileType.Directory:
        raise InvalidArgument(f"{what} {location.url!r} is not a directory")
    return location


def marker_bytes(marker: Marker) -> bytes:
    """The marker file's content: JSON carrying a CRC-32 of the rest of it."""
    body: dict[str, Any] = {
        "format": FORMAT,
        "version": MARKER_VERSION,
        "capture": marker.capture,
        "committed": marker.committed,
        "rows": marker.rows,
        "files": [None if e is None else e.to_json() for e in marker.files or ()],
    }
    body["crc"] = f"{zlib.crc32(_canonical(body)):08x}"
    return json.dumps(body).encode()


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _parse_marker(data: Any) -> Marker:
    if data.get("format") != FORMAT:
        raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r}")
    version = data.get("version")
    if version not in (1, MARKER_VERSION):
        raise ValueError(
            f"version {version!r} is not supported (this rvasync reads 1 and {MARKER_VERSION}; "
            f"a newer rvasync wrote it: upgrade rvasync on the driver and every executor)"
        )
    committed, rows = data["committed"], data["rows"]
    if not (isinstance(committed, int) and committed >= 0 and isinstance(rows, int)):
        raise ValueError("'committed' and 'rows' must be non-negative integers")
    if version == 1:
        return Marker(committed, rows)
    crc = data.pop("crc", None)
    if crc != f"{zlib.crc32(_canonical(data)):08x}":
        raise ValueError("its checksum does not match its content")
    capture, raw = data["capture"], data["files"]
    if not isinstance(capture, str) or not isinstance(raw, list) or len(raw) != committed:
        raise ValueError(f"it names {committed} files but has {len(raw)} file entries")
    files = tuple(None if e is None else FileEntry.from_json(e) for e in raw)
    if all(e is not None for e in files) and sum(e.rows for e in files if e) != rows:
        raise ValueError(
            f"its file entries hold {sum(e.rows for e in files if e)} rows, not {rows}"
        )
    return Marker(committed, rows, capture, files)


def read_marker(directory: str | os.PathLike[str] | Location) -> Marker:
    """The committed offset of a capture directory (0 files when nothing was committed yet)."""
    location = check_directory(directory)
    where = location.url_of(MARKER_NAME)
    try:
        with location.fs.open_input_stream(location.path(MARKER_NAME)) as stream:
            raw = stream.read()
    except FileNotFoundError:
        return Marker()
    except OSError as exc:
        if location.fs.get_file_info(location.path(MARKER_NAME)).type == pafs.FileType.NotFound:
            return Marker()
        raise InvalidArgument(f"cannot read capture marker {where!r}: {exc}") from None
    try:
        # Bytes that are not UTF-8 are a UnicodeDecodeError (a ValueError); JSON nested
        # thousands of levels deep is a RecursionError: damage, like any other.
        return _parse_marker(json.loads(raw.decode("utf-8")))
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as exc:
        raise CaptureError(f"capture marker {where!r} is corrupt: {exc}") from None


def write_marker(directory: Path, marker: Marker) -> None:
    tmp = directory / f".{MARKER_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, marker_bytes(marker))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / MARKER_NAME)
    _fsync_dir(directory)


# -- reading ----------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(url: str, committed: int, why: str) -> None:
    if url in _warned:
        return
    _warned.add(url)
    _log().warning(
        "capture file past the committed offset skipped", path=url, committed=committed, reason=why
    )


def uncommitted_files(directory: str | os.PathLike[str] | Location, committed: int) -> list[str]:
    """Names of the files past the committed offset (in progress, or left by a crash)."""
    location = as_location(directory)
    found = []
    for info in location.fs.get_file_info(pafs.FileSelector(location.root, allow_not_found=True)):
        match = _PART_RE.match(info.base_name) or _INPROGRESS_RE.match(info.base_name)
        if match and int(match.group(1)) > committed:
            found.append(info.base_name)
    return sorted(found)


def recorder_active(directory: str | os.PathLike[str] | Location) -> bool:
    """Whether a recorder holds the directory's lock right now (only a local directory
    has one: a recorder uploads only committed files)."""
    location = as_location(directory)
    if not location.local:
        return False
    try:
        fd = os.open(Path(location.root) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a shared lock we may have taken
    return False


def warn_uncommitted(directory: str | os.PathLike[str] | Location, committed: int) -> list[str]:
    """Warn (once per file and process) about files past the committed offset; return them.

    The in-progress file of a running recorder is expected and not warned
    about; a half-written file no recorder is writing, or a closed file the
    marker never named, is what a crash leaves, and readers skip it.
    """
    location = as_location(directory)
    extras = uncommitted_files(location, committed)
    active = None
    for extra in extras:
        if extra.endswith(".inprogress"):
            if active is None:
                active = recorder_active(location)
            if active:
                continue
            why = "half-written, left by a recorder that stopped without committing it"
        else:
            why = "closed but never committed (the recorder stopped before committing it)"
        _warn_once(location.url_of(extra), committed, why)
    return extras


@dataclass(frozen=True)
class CommittedFile:
    """Committed file ``index`` of the capture at ``location``, as the marker described it
    when a read was planned (picklable: executors open it)."""

    location: Location
    index: int
    capture: str | None = None
    entry: FileEntry | None = None

    @property
    def url(self) -> str:
        return self.location.url_of(file_name(self.index))

    def open(self) -> OpenFile:
        return OpenFile(self)


def snapshot(
    directory: str | os.PathLike[str] | Location,
    start: int = 0,
    end: int | None = None,
    *,
    warn: bool = True,
    marker: Marker | None = None,
) -> list[CommittedFile]:
    """Committed files ``start+1 .. end`` (``end`` defaults to the marker's offset).

    Files past the committed offset are skipped, with one warning per file and
    process when ``warn``. Missing or damaged files are found when opened.
    """
    location = check_directory(directory)
    if marker is None:
        marker = read_marker(location)
    if end is None:
        end = marker.committed
    if end > marker.committed:
        raise CaptureError(
            f"offset {end} is past the committed offset {marker.committed} of {location.url!r}"
        )
    if warn:
        warn_uncommitted(location, marker.committed)
    return [
        CommittedFile(location, index, marker.capture, marker.entry(index))
        for index in range(start + 1, end + 1)
    ]


def committed_files(
    directory: str | os.PathLike[str],
    start: int = 0,
    end: int | None = None,
    *,
    warn: bool = True,
) -> list[Path]:
    """Paths of the committed files ``start+1 .. end`` of a local capture directory.

    A committed file that is missing is a CaptureError. The list can be handed
    to ``spark.read.parquet(*paths)`` on a cluster without rvasync installed;
    :func:`committed_urls` gives the same for any file system.
    """
    location = as_location(directory)
    if not location.local:
        raise InvalidArgument(f"{location.url!r} is not a local directory: use committed_urls")
    files = snapshot(location, start, end, warn=warn)
    paths = [Path(location.path(file_name(f.index))) for f in files]
    for path in paths:
        if not path.is_file():
            raise CaptureError(
                f"committed capture file {str(path)!r} is missing "
                f"(the marker of {location.url!r} says files 1..{files[-1].index} are complete)"
            )
    return paths


def committed_urls(url: str, storage_options: str | dict[str, Any] | None = None) -> list[str]:
    """The URLs of the committed files of the capture at ``url`` (any file system)."""
    options = parse_storage_options(storage_options, "storage_options")
    return [f.url for f in snapshot(locate(url, options))]


#: What pyarrow raises for a damaged Parquet file: its own errors, OSError, and plain
#: ValueError (a UnicodeDecodeError for metadata strings that are not UTF-8, for one).
UNREADABLE = (OSError, ValueError, pa.ArrowException)


def _check_format(path: str | os.PathLike[str], metadata: dict[bytes, bytes]) -> None:
    """Refuse a file whose ``rvasync.format`` metadata names another format or a newer
    version: its columns may mean something this reader does not know, and guessing
    would give wrong rows. (A file without the key is read if its columns fit.)"""
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


def _check_columns(path: str, names: Sequence[str]) -> None:
    missing = [name for name in CAPTURE_COLUMNS if name not in names]
    if missing:
        raise CaptureError(
            f"committed capture file {path!r} is not an rvasync capture "
            f"(missing columns {', '.join(missing)})"
        )


def open_committed(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """A capture file opened as it is, without its marker entry's checks (a file handed
    over on its own): unreadable or foreign files are a CaptureError."""
    try:
        parquet = pq.ParquetFile(os.fspath(path))
        names = parquet.schema_arrow.names
    except UNREADABLE as exc:
        raise CaptureError(f"committed capture file {str(path)!r} is unreadable: {exc}") from None
    _check_format(path, parquet.schema_arrow.metadata or {})
    _check_columns(os.fspath(path), names)
    return parquet


class OpenFile:
    """A committed file opened for reading, checked against its marker entry.

    Opening checks the size and the footer's checksum, then that the footer
    names this capture and this file number and holds the rows the marker
    says; :meth:`batches` checks every column chunk before decoding it. A
    file the marker has no entry for (committed by an rvasync before 0.13)
    gets only the format and column checks. Any mismatch is a CaptureError
    naming the file.
    """

    def __init__(self, ref: CommittedFile) -> None:
        self.ref = ref
        self.url = ref.url
        fs = ref.location.fs
        try:
            self._source = fs.open_input_file(ref.location.path(file_name(ref.index)))
        except FileNotFoundError:
            raise self._missing() from None
        except OSError as exc:
            if (
                fs.get_file_info(ref.location.path(file_name(ref.index))).type
                == pafs.FileType.NotFound
            ):
                raise self._missing() from None
            raise self._unreadable(exc) from None
        try:
            self.metadata = self._checked_footer()
        except BaseException:
            self._source.close()
            raise

    def _missing(self) -> CaptureError:
        return CaptureError(
            f"committed capture file {self.url!r} is missing (the marker of "
            f"{self.ref.location.url!r} says it is complete)"
        )

    def _unreadable(self, why: object) -> CaptureError:
        return CaptureError(f"committed capture file {self.url!r} is unreadable: {why}")

    def _damaged(self, why: object) -> CaptureError:
        return CaptureError(
            f"committed capture file {self.url!r} is damaged: {why} (it changed after it was "
            f"committed: bit rot, a torn copy, or another file put in its place)"
        )

    def _checked_footer(self) -> pq.FileMetaData:
        entry = self.ref.entry
        try:
            size = self._source.size()
            if entry is not None and size != entry.size:
                why = f"it has {size} bytes, its marker entry says {entry.size}"
                raise Damaged(self._identity_mismatch(size) or why)
            footer, crc = read_footer(self._source, size)
            if entry is not None and crc != entry.footer:
                raise Damaged(self._identity_mismatch(size) or "its footer fails its checksum")
            metadata = parse_footer(footer)
            kv = metadata.metadata or {}
            _check_format(self.url, kv)
            if entry is not None:
                check_layout(metadata, entry)
            _check_columns(self.url, metadata.schema.to_arrow_schema().names)
        except Damaged as exc:
            raise self._damaged(exc) from None
        except UNREADABLE as exc:
            raise self._unreadable(exc) from None
        return metadata

    def _identity_mismatch(self, size: int) -> str | None:
        """Why a file that does not match its entry is not this one, when its footer
        says so (another capture's file, or another file number)."""
        try:
            kv = parse_footer(read_footer(self._source, size)[0]).metadata or {}
        except (Damaged, *UNREADABLE):
            return None
        capture, index = kv.get(CAPTURE_KEY), kv.get(INDEX_KEY)
        if capture is not None and self.ref.capture and capture.decode() != self.ref.capture:
            return f"it belongs to capture {capture.decode()}, not {self.ref.capture}"
        if index is not None and index != str(self.ref.index).encode():
            return f"it is file {index.decode()} of its capture, not file {self.ref.index}"
        return None

    @property
    def row_group_rows(self) -> list[int]:
        return [self.metadata.row_group(g).num_rows for g in range(self.metadata.num_row_groups)]

    def batches(
        self, groups: Sequence[int], columns: Sequence[str], batch_size: int = 8192
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of ``columns`` of row groups ``groups``, in order, checked."""
        try:
            if self.ref.entry is None:
                parquet = pq.ParquetFile(self._source, metadata=self.metadata)
                yield from parquet.iter_batches(
                    batch_size=batch_size, row_groups=list(groups), columns=list(columns)
                )
                return
            yield from checked_batches(
                self._source, self.metadata, self.ref.entry, groups, columns, batch_size
            )
        except Damaged as exc:
            raise self._damaged(exc) from None
        except UNREADABLE as exc:
            raise self._unreadable(exc) from None

    def close(self) -> None:
        self._source.close()

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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
        location = as_location(directory)
        if not location.local:
            raise InvalidArgument(
                f"a capture is written to a local directory, not {location.url!r}: record into "
                f"a local directory and upload it there (Recorder(..., upload=URL), "
                f"rvasync record --upload URL)"
            )
        self.directory = Path(location.root)
        self.row_group_rows = row_group_rows
        self.compression = compression
        self._lock_fd: int | None = None
        self._marker = Marker()
        self._writer: pq.ParquetWriter | None = None
        self._file_schema = CAPTURE_SCHEMA
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
        try:
            self._marker = self._identified(read_marker(self.directory))
            self._set_aside_leftovers()
        except BaseException:
            os.close(fd)
            self._lock_fd = None
            raise
        return self

    def _identified(self, marker: Marker) -> Marker:
        """The marker with an identity: a new capture (no marker yet) or one written
        before captures had identities gets one now, written at once, so a stream
        that reads the directory from its first file on can record it."""
        if marker.capture is not None:
            return marker
        files = marker.files if marker.files is not None else (None,) * marker.committed
        marker = Marker(marker.committed, marker.rows, uuid.uuid4().hex, files)
        write_marker(self.directory, marker)
        return marker

    def _set_aside_leftovers(self) -> None:
        # Their messages were never committed (nor, when certified, confirmed):
        # adopting them could duplicate what a certified sender redelivers.
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for name in uncommitted_files(self.directory, self._marker.committed):
            path = self.directory / name
            target = path.with_name(f".orphan-{stamp}-{name.lstrip('.')}")
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
            assert self._marker.capture is not None
            schema = CAPTURE_SCHEMA.with_metadata(
                {
                    FORMAT_KEY: f"{FORMAT}/{VERSION}".encode(),
                    CAPTURE_KEY: self._marker.capture.encode(),
                    INDEX_KEY: str(index).encode(),
                }
            )
            self._file_schema = schema
            self._writer = pq.ParquetWriter(
                _inprogress_path(self.directory, index),
                schema,
                compression=self.compression,
                write_page_checksum=True,
            )
        table = pa.Table.from_batches(self._pending, schema=CAPTURE_SCHEMA)
        table = table.replace_schema_metadata(self._file_schema.metadata)
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
        entry = describe(pafs.LocalFileSystem(), str(source))
        target = file_path(self.directory, index)
        os.replace(source, target)
        _fsync_dir(self.directory)
        rows = self._file_rows
        files = (*(self._marker.files or ()), entry)
        self._marker = Marker(index, self._marker.rows + rows, self._marker.capture, files)
        write_marker(self.directory, self._marker)
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
