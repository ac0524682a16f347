"""Checksums of committed capture files: what the marker records, and reads verify.

Parquet's own page checksums cover page data but not page headers, and
nothing covers the footer (schema, row-group offsets, statistics): a
flipped bit there can give other rows, or make pushdown skip rows, with no
error. So when a file is committed the recorder records in the marker, for
that file, its size, its row count, a CRC-32 of its footer and a CRC-32 of
every column chunk (page headers and pages, dictionary included), row group
by row group. A read checks the size and the footer before it trusts
anything the footer says, then reads each column chunk it needs into
memory, checks it, and hands pyarrow those checked bytes to decode
(:class:`CheckedChunks`); the rows decoded must add up to the row groups'
counts. Every byte a read uses is covered; the only bytes nobody reads are
the file's leading magic number. The files also carry Parquet page CRCs
(``write_page_checksum``), for other Parquet readers that verify them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from io import IOBase
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = ["CheckedChunks", "Damaged", "FileEntry", "checked_batches", "describe", "read_footer"]

_MAGIC = b"PAR1"


class Damaged(Exception):
    """A committed file does not match its marker entry (the caller names the file)."""


@dataclass(frozen=True)
class FileEntry:
    """What the marker records about one committed file."""

    rows: int
    size: int
    footer: int
    #: CRC-32 of each column chunk: row group 0's columns in file order, then group 1's ...
    chunks: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "bytes": self.size,
            "footer": f"{self.footer:08x}",
            "chunks": "".join(f"{crc:08x}" for crc in self.chunks),
        }

    @classmethod
    def from_json(cls, data: Any) -> FileEntry:
        """An entry from the marker's JSON (ValueError, KeyError or TypeError when malformed)."""
        rows, size, text = data["rows"], data["bytes"], data["chunks"]
        if not (isinstance(rows, int) and isinstance(size, int) and isinstance(text, str)):
            raise ValueError(f"file entry {data!r} is malformed")
        if rows < 0 or size < 0 or len(text) % 8:
            raise ValueError(f"file entry {data!r} is malformed")
        chunks = tuple(int(text[i : i + 8], 16) for i in range(0, len(text), 8))
        return cls(rows, size, int(str(data["footer"]), 16), chunks)


def _chunk_range(group: Any, column: int) -> tuple[int, int]:
    chunk = group.column(column)
    start = chunk.data_page_offset
    if chunk.has_dictionary_page and chunk.dictionary_page_offset is not None:
        start = min(start, chunk.dictionary_page_offset)
    return int(start), int(chunk.total_compressed_size)


def _read(source: pa.NativeFile, offset: int, length: int) -> bytes:
    source.seek(offset)
    return source.read(length)


def read_footer(source: pa.NativeFile, size: int) -> tuple[bytes, int]:
    """The footer bytes of a Parquet file and their CRC-32 (Damaged if there is no footer)."""
    if size < 12:
        raise Damaged(f"{size} bytes is too short for a Parquet file")
    tail = _read(source, size - 8, 8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or length > size - 12:
        raise Damaged("the file has no Parquet footer (torn or not Parquet)")
    footer = _read(source, size - 8 - length, length)
    return footer, zlib.crc32(tail, zlib.crc32(footer))


def parse_footer(footer: bytes) -> pq.FileMetaData:
    """The metadata a footer holds (pyarrow reads it as a file of footer only)."""
    length = len(footer).to_bytes(4, "little")
    return pq.read_metadata(pa.BufferReader(footer + length + _MAGIC))


def describe(fs: pafs.FileSystem, path: str) -> FileEntry:
    """The entry of a file just written (read back: it is in the page cache)."""
    with fs.open_input_file(path) as source:
        size = source.size()
        footer, footer_crc = read_footer(source, size)
        metadata = parse_footer(footer)
        crcs = []
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            for c in range(group.num_columns):
                start, length = _chunk_range(group, c)
                crcs.append(zlib.crc32(_read(source, start, length)))
    return FileEntry(metadata.num_rows, size, footer_crc, tuple(crcs))


class CheckedChunks:
    """A read-only file that serves pyarrow the checked column chunks of one row group
    (and nothing else: a read outside them is an error, never unchecked bytes)."""

    def __init__(self, size: int, ranges: Sequence[tuple[int, bytes]]) -> None:
        self._size = size
        self._ranges = sorted(ranges, key=lambda item: item[0])
        self._pos = 0
        self.closed = False

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def read(self, nbytes: int = -1) -> Any:
        start = self._pos
        end = self._size if nbytes < 0 else start + nbytes
        pieces: list[memoryview] = []
        at = start
        for offset, buffer in self._ranges:
            stop = offset + len(buffer)
            if stop <= at or offset > at:
                if offset > at:
                    break
                continue
            take = min(end, stop) - at
            pieces.append(memoryview(buffer)[at - offset : at - offset + take])
            at += take
            if at == end:
                break
        if at != end:
            raise OSError(f"read of bytes {start}..{end} outside the checked column chunks")
        self._pos = end
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def checked_batches(
    source: pa.NativeFile,
    metadata: pq.FileMetaData,
    entry: FileEntry,
    groups: Sequence[int],
    columns: Sequence[str],
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """Record batches of ``columns`` of row groups ``groups``, decoded from chunks whose
    CRC matches ``entry`` (Damaged at the first that does not, or when the rows decoded
    do not add up to a row group's count)."""
    names = metadata.schema.to_arrow_schema().names
    indexes = [names.index(name) for name in columns]
    width = metadata.num_columns
    size = source.size()
    for g in groups:
        group = metadata.row_group(g)
        ranges = []
        for c in indexes:
            start, length = _chunk_range(group, c)
            data = _read(source, start, length)
            if len(data) != length or zlib.crc32(data) != entry.chunks[g * width + c]:
                raise Damaged(f"column {names[c]!r} of row group {g} fails its checksum")
            ranges.append((start, data))
        chunks = pa.PythonFile(cast("IOBase", CheckedChunks(size, ranges)), mode="r")
        parquet = pq.ParquetFile(chunks, metadata=metadata, pre_buffer=False)
        rows = 0
        for batch in parquet.iter_batches(
            batch_size=batch_size, row_groups=[g], columns=list(columns)
        ):
            rows += batch.num_rows
            yield batch
        if rows != group.num_rows:
            raise Damaged(f"row group {g} decoded {rows} rows, its footer says {group.num_rows}")


def check_layout(metadata: pq.FileMetaData, entry: FileEntry) -> None:
    """The footer's row groups must be the ones the entry has checksums for."""
    if metadata.num_rows != entry.rows:
        raise Damaged(f"the file holds {metadata.num_rows} rows, the marker says {entry.rows}")
    if metadata.num_row_groups * metadata.num_columns != len(entry.chunks):
        raise Damaged(
            f"the file has {metadata.num_row_groups} row groups of {metadata.num_columns} "
            f"columns, the marker has checksums for {len(entry.chunks)} column chunks"
        )
