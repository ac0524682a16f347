"""The on-disk form of a ledger: append-only checksummed frames, replayed on open.

Layout (all integers little-endian)::

    file   = MAGIC frame*                 MAGIC = b"RVCMLDG1"
    frame  = length:u32 length_crc:u32 body_crc:u32 body[length]
    body   = msgpack [kind, {field: value, ...}]

The first frame is a ``header`` record naming the correspondent that owns
the file; every other frame is one :mod:`ledger <rvasync.protocol.cm.ledger>`
record. ``length_crc`` (CRC-32 of the four length bytes) lets a reader trust
the length before it trusts the body, so a damaged length can never make it
skip over good records.

Crash safety comes from three rules the driver follows: each frame is
appended with a single write, the file is never rewritten in place
(compaction writes a new file and renames it over the old), and after a
crash the file is cut back to :attr:`LedgerReplay.valid_length` before
anything is appended. On open, a damaged frame at the very end is a write
the crash interrupted (a *torn tail*) and is discarded; a damaged frame
followed by any intact frame cannot be explained by a crash, so it raises
:class:`LedgerCorrupt` with the file name and the frame's offset rather than
silently dropping the records after it.

Everything here works on ``bytes``; the driver does the file I/O.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync.errors import InvalidArgument, RvError
from rvasync.protocol.cm._flat import FlatError, from_flat
from rvasync.protocol.cm.ledger import LEDGER_RECORD_TYPES, LedgerRecord, LedgerState
from rvasync.protocol.cm.names import check_correspondent_name

__all__ = [
    "FORMAT_VERSION",
    "FRAME_HEADER_SIZE",
    "MAGIC",
    "LedgerCorrupt",
    "LedgerReplay",
    "compact_ledger",
    "decode_ledger",
    "encode_record",
    "encode_records",
    "new_ledger",
]

MAGIC = b"RVCMLDG1"
"""The first eight bytes of every ledger file."""
FORMAT_VERSION = 1
"""Version stored in the header record; a reader refuses versions it does not know."""
FRAME_HEADER_SIZE = 12
"""Bytes before each frame body: length, CRC of the length, CRC of the body."""

_FRAME = struct.Struct("<III")
_LENGTH = struct.Struct("<I")
_HEADER_KIND = "header"


class LedgerCorrupt(RvError, ValueError):
    """A ledger file is damaged beyond what a crash explains; ``path`` and ``offset`` say where."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"ledger file {path!r} is corrupt at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass(slots=True)
class LedgerReplay:
    """What opening a ledger found.

    ``state`` is None for an empty (new) file. ``valid_length`` is where good
    data ends: the driver truncates the file there before appending (and
    writes :func:`new_ledger` first when it is 0). ``torn_bytes`` counts what
    was discarded after it.
    """

    name: str | None
    created: float
    state: LedgerState | None
    record_count: int
    valid_length: int
    torn_bytes: int
    records: list[LedgerRecord] = field(default_factory=list)


def _frame(body: bytes) -> bytes:
    length = _LENGTH.pack(len(body))
    return _FRAME.pack(len(body), zlib.crc32(length), zlib.crc32(body)) + body


_packers = threading.local()


def _pack(kind: str, fields: dict[str, Any]) -> bytes:
    # A Packer made once per thread: msgpack.packb makes a new one per call,
    # which costs more than packing a record (drivers encode on several threads).
    packer: msgpack.Packer
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, autoreset=True)
    return packer.pack([kind, fields])


def encode_record(record: LedgerRecord) -> bytes:
    """One record as a frame, ready to append with a single write."""
    return _frame(_pack(record.KIND, record.to_fields()))


def encode_records(records: Iterable[LedgerRecord]) -> bytes:
    """Several records as consecutive frames (a group commit appends this in one write)."""
    return b"".join(encode_record(record) for record in records)


def new_ledger(name: str, created: float = 0.0) -> bytes:
    """The bytes that start a ledger file for correspondent ``name``: magic and header."""
    check_correspondent_name(name, allow_transient=True)
    header = {"name": name, "version": FORMAT_VERSION, "created": float(created)}
    return MAGIC + _frame(_pack(_HEADER_KIND, header))


def compact_ledger(state: LedgerState, created: float = 0.0) -> bytes:
    """A whole new ledger file holding just ``state`` (write it aside, then rename it over)."""
    return new_ledger(state.name, created) + encode_records(state.records())


def _intact_frame_at(data: bytes, offset: int) -> bool:
    if offset + FRAME_HEADER_SIZE > len(data):
        return False
    length: int
    length, length_crc, body_crc = _FRAME.unpack_from(data, offset)
    if zlib.crc32(data[offset : offset + 4]) != length_crc:
        return False
    end = offset + FRAME_HEADER_SIZE + length
    return end <= len(data) and zlib.crc32(data[offset + FRAME_HEADER_SIZE : end]) == body_crc


def _intact_frame_after(data: bytes, offset: int) -> int | None:
    """Offset of the first intact frame starting after ``offset``, if any (slow path)."""
    for candidate in range(offset + 1, len(data) - FRAME_HEADER_SIZE + 1):
        if _intact_frame_at(data, candidate):
            return candidate
    return None


def _decode_body(body: bytes, path: str, offset: int) -> tuple[str, dict[str, Any]]:
    try:
        decoded = msgpack.unpackb(body, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise LedgerCorrupt(path, offset, f"frame body is not valid msgpack ({exc})") from None
    if (
        not isinstance(decoded, list)
        or len(decoded) != 2
        or not isinstance(decoded[0], str)
        or not isinstance(decoded[1], dict)
    ):
        raise LedgerCorrupt(path, offset, "frame body is not a [kind, fields] pair")
    return decoded[0], decoded[1]


def decode_ledger(
    data: bytes, *, path: str = "<memory>", expected_name: str | None = None
) -> LedgerReplay:
    """Replay a ledger file's bytes.

    ``path`` only names the file in errors. With ``expected_name``, a ledger
    that belongs to another correspondent raises
    :class:`~rvasync.errors.InvalidArgument` (two correspondents must never
    share a ledger). Damage raises :class:`LedgerCorrupt`, except a torn tail.
    """
    size = len(data)
    if size < len(MAGIC):
        if MAGIC.startswith(bytes(data)):
            # Empty, or a crash while the file was being created.
            return LedgerReplay(None, 0.0, None, 0, 0, size)
        raise LedgerCorrupt(path, 0, "not a ledger file (the magic bytes are wrong)")
    if data[: len(MAGIC)] != MAGIC:
        raise LedgerCorrupt(path, 0, "not a ledger file (the magic bytes are wrong)")
    offset = len(MAGIC)
    name: str | None = None
    created = 0.0
    state: LedgerState | None = None
    records: list[LedgerRecord] = []
    while offset < size:
        problem = _frame_problem(data, offset)
        if problem is not None:
            following = _intact_frame_after(data, offset)
            if following is not None:
                raise LedgerCorrupt(
                    path, offset, f"{problem}, and an intact record follows at offset {following}"
                )
            if not _could_be_torn(data, offset):
                raise LedgerCorrupt(
                    path,
                    offset,
                    f"{problem}, and the {size - offset} bytes there are not what an "
                    "interrupted append leaves",
                )
            break  # torn tail: a crash interrupted the last append
        length = _LENGTH.unpack_from(data, offset)[0]
        body_start = offset + FRAME_HEADER_SIZE
        kind, fields = _decode_body(data[body_start : body_start + length], path, offset)
        if name is None:
            name, created = _read_header(kind, fields, path, offset)
            if expected_name is not None and name != expected_name:
                raise InvalidArgument(
                    f"ledger file {path!r} belongs to correspondent {name!r}, "
                    f"not {expected_name!r}; each correspondent needs its own ledger file"
                )
            state = LedgerState(name=name)
        else:
            record = _read_record(kind, fields, path, offset)
            assert state is not None
            state.apply(record)
            records.append(record)
        offset = body_start + length
    if name is None:
        # Only the magic survived: the crash came before the header was complete.
        return LedgerReplay(None, 0.0, None, 0, 0, size)
    return LedgerReplay(name, created, state, len(records), offset, size - offset, records)


def _could_be_torn(data: bytes, offset: int) -> bool:
    """Whether the damaged frame at ``offset`` (the file's last) can be a torn append.

    An interrupted append leaves a prefix of the frame, possibly followed by zeros
    (blocks allocated but never written). So: a header cut short; or an intact
    length (its checksum holds) with a body cut short or damaged; or a length
    that fails its checksum with nothing but zeros after the length's own
    eight bytes (the write stopped inside the header). Anything else, such as
    kilobytes of garbage after the magic, is damage, not a crash.
    """
    if offset + FRAME_HEADER_SIZE > len(data):
        return True
    if zlib.crc32(data[offset : offset + 4]) == _FRAME.unpack_from(data, offset)[1]:
        return True
    return not any(data[offset + 8 :])


def _frame_problem(data: bytes, offset: int) -> str | None:
    size = len(data)
    if offset + FRAME_HEADER_SIZE > size:
        return f"frame header is cut short ({size - offset} of {FRAME_HEADER_SIZE} bytes)"
    length: int
    length, length_crc, body_crc = _FRAME.unpack_from(data, offset)
    if zlib.crc32(data[offset : offset + 4]) != length_crc:
        return "frame length fails its checksum"
    end = offset + FRAME_HEADER_SIZE + length
    if end > size:
        return f"frame body is cut short ({size - offset - FRAME_HEADER_SIZE} of {length} bytes)"
    actual = zlib.crc32(data[offset + FRAME_HEADER_SIZE : end])
    if actual != body_crc:
        return f"frame body fails its checksum (stored {body_crc:#010x}, computed {actual:#010x})"
    return None


def _read_header(kind: str, fields: dict[str, Any], path: str, offset: int) -> tuple[str, float]:
    if kind != _HEADER_KIND:
        raise LedgerCorrupt(path, offset, f"first record is {kind!r}, expected the header")
    version = fields.get("version")
    if version != FORMAT_VERSION:
        raise LedgerCorrupt(
            path, offset, f"ledger format version {version!r} is not {FORMAT_VERSION}"
        )
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        raise LedgerCorrupt(path, offset, "header names no correspondent")
    created = fields.get("created", 0.0)
    return name, float(created) if isinstance(created, (int, float)) else 0.0


def _read_record(kind: str, fields: dict[str, Any], path: str, offset: int) -> LedgerRecord:
    cls = LEDGER_RECORD_TYPES.get(kind)
    if cls is None:
        raise LedgerCorrupt(path, offset, f"unknown record kind {kind!r}")
    try:
        return from_flat(cls, fields, what=f"{kind} record")
    except FlatError as exc:
        raise LedgerCorrupt(path, offset, str(exc)) from None
