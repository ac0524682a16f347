"""The cache's store file format: an append-only log a restarted cache replays.

Layout: the 8-byte magic ``RVCVC01\\n``, then records

``<u32 length><u32 ~length><u32 crc32><u8 op><f64 stamp><u16 subject length><subject utf-8><wire>``

where ``length`` counts everything after the crc, ``~length`` is its bitwise
complement (a damaged length is recognised, never taken for a short record)
and the crc covers the same bytes as ``length``. ``op`` is 1 (put: ``wire``
is the message) or 2 (delete: no wire).
Replaying the records in order rebuilds the store.

Crash safety: the cache writes each record whole with one ``write``, and
rewrites the file (compaction) into a new file that replaces the old one by
rename, so a crash leaves either file complete. A ``kill -9`` in the middle of
an append can leave only the *last* record short or damaged: that torn tail
is dropped (the update it held was not yet answered for). Damage anywhere
else (a bad magic, a damaged record header, a bad record followed by more
records) is corruption and
:func:`parse_log` reports it with its offset: the cache refuses to start
rather than serve wrong values.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

__all__ = ["MAGIC", "LogRecord", "Op", "ParsedLog", "encode_record", "parse_log"]

MAGIC = b"RVCVC01\n"
_FRAME = struct.Struct("<III")  # length, ~length, crc
_BODY = struct.Struct("<BdH")  # op, stamp, subject length


class Op(enum.IntEnum):
    PUT = 1
    DELETE = 2


@dataclass(frozen=True, slots=True)
class LogRecord:
    op: Op
    subject: str
    stamp: float
    wire: bytes


@dataclass(frozen=True, slots=True)
class ParsedLog:
    """What :func:`parse_log` found.

    ``records`` the good records in order; ``good_end`` the offset after the
    last good record (where appending resumes); ``torn`` bytes of a torn tail
    dropped after it; ``corrupt`` a description of corruption (None if none).
    """

    records: list[LogRecord]
    good_end: int
    torn: int
    corrupt: str | None


def encode_record(op: Op, subject: str, stamp: float, wire: bytes = b"") -> bytes:
    """One record, ready to append."""
    name = subject.encode()
    body = _BODY.pack(op, stamp, len(name)) + name + wire
    return _FRAME.pack(len(body), len(body) ^ 0xFFFFFFFF, zlib.crc32(body)) + body


def _decode_body(body: bytes) -> LogRecord | str:
    if len(body) < _BODY.size:
        return "record shorter than its header"
    op, stamp, name_len = _BODY.unpack_from(body)
    if op not in (Op.PUT, Op.DELETE):
        return f"unknown record op {op}"
    end = _BODY.size + name_len
    if end > len(body):
        return "subject overruns its record"
    try:
        subject = body[_BODY.size : end].decode()
    except UnicodeDecodeError:
        return "subject is not UTF-8"
    return LogRecord(Op(op), subject, stamp, body[end:])


def parse_log(data: bytes) -> ParsedLog:
    """Every good record of a store file's bytes, a torn tail dropped, or the corruption."""
    if not data:
        return ParsedLog([], 0, 0, None)  # a new file: the magic is written first
    if not data.startswith(MAGIC):
        if len(data) < len(MAGIC) and MAGIC.startswith(data):
            return ParsedLog([], 0, len(data), None)  # torn while writing the magic
        return ParsedLog([], 0, 0, "not an rvasync cache store file (bad magic)")
    records: list[LogRecord] = []
    offset, end = len(MAGIC), len(data)
    while offset < end:
        if end - offset < _FRAME.size:
            return ParsedLog(records, offset, end - offset, None)
        length, check, crc = _FRAME.unpack_from(data, offset)
        if length ^ check != 0xFFFFFFFF:
            return ParsedLog(records, offset, 0, f"damaged record header at byte {offset}")
        body_start = offset + _FRAME.size
        body_end = body_start + length
        if body_end > end:
            return ParsedLog(records, offset, end - offset, None)  # short last record
        body = data[body_start:body_end]
        problem = "crc mismatch" if zlib.crc32(body) != crc else None
        decoded = _decode_body(body) if problem is None else problem
        if isinstance(decoded, str):
            if body_end == end:
                return ParsedLog(records, offset, end - offset, None)  # damaged last record
            return ParsedLog(records, offset, 0, f"{decoded} in the record at byte {offset}")
        records.append(decoded)
        offset = body_end
    return ParsedLog(records, offset, 0, None)
