"""The cache's store file format: an append-only log a restarted cache replays.

Layout: the 8-byte magic ``RVCVC01\\n``, then records

``<u32 length><u32 ~length><u32 crc32><u8 op><f64 stamp><u16 subject length><subject utf-8><wire>``

where ``length`` counts everything after the crc, ``~length`` is its bitwise
complement (a damaged length is recognised, never taken for a short record)
and the crc covers the same bytes as ``length``. ``op`` is 1 (put: ``wire``
is the message) or 2 (delete: no wire).
Replaying the records in order rebuilds the store.

These are the package's checksummed frames (:mod:`rvasync.framing`, with
the complement as the length's check), and the package's one replay rule.

Crash safety: the cache writes each record whole with one ``write``, and
rewrites the file (compaction) into a new file that replaces the old one by
rename, so a crash leaves either file complete. A ``kill -9`` in the middle of
an append can leave only the *last* record cut short: that torn tail is
dropped (the update it held was not yet answered for). A complete record
that fails its checks, the last one included, a bad magic, or a record that
does not decode is corruption and :func:`parse_log` reports it with its
offset: the cache refuses to start rather than serve wrong values.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from rvasync.errors import LedgerCorrupt
from rvasync.framing import COMPLEMENT_LENGTH, FrameScan

__all__ = ["MAGIC", "LogRecord", "Op", "ParsedLog", "encode_record", "parse_log"]

MAGIC = b"RVCVC01\n"
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
    return COMPLEMENT_LENGTH.encode(body)


def _decode_body(body: bytes | memoryview) -> LogRecord | str:
    if len(body) < _BODY.size:
        return "record shorter than its header"
    op, stamp, name_len = _BODY.unpack_from(body)
    if op not in (Op.PUT, Op.DELETE):
        return f"unknown record op {op}"
    end = _BODY.size + name_len
    if end > len(body):
        return "subject overruns its record"
    try:
        subject = bytes(body[_BODY.size : end]).decode()
    except UnicodeDecodeError:
        return "subject is not UTF-8"
    return LogRecord(Op(op), subject, stamp, bytes(body[end:]))


def parse_log(data: bytes, path: str = "<memory>") -> ParsedLog:
    """Every good record of a store file's bytes, a torn tail dropped, or the corruption."""
    if not data:
        return ParsedLog([], 0, 0, None)  # a new file: the magic is written first
    if not data.startswith(MAGIC):
        if len(data) < len(MAGIC) and MAGIC.startswith(data):
            return ParsedLog([], 0, len(data), None)  # torn while writing the magic
        return ParsedLog([], 0, 0, "not an rvasync cache store file (bad magic)")
    records: list[LogRecord] = []
    frames = FrameScan(data, len(MAGIC), path=path, layout=COMPLEMENT_LENGTH)
    try:
        for offset, body in frames:
            decoded = _decode_body(body)
            if isinstance(decoded, str):
                return ParsedLog(records, offset, 0, f"{decoded} in the record at byte {offset}")
            records.append(decoded)
    except LedgerCorrupt as exc:
        return ParsedLog(records, exc.offset, 0, f"{exc.reason} at byte {exc.offset}")
    return ParsedLog(records, frames.end, frames.torn, None)
