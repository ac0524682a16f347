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
anything is appended. Frames and the replay rule are the package's one
definition (:mod:`rvasync.framing`): a frame cut short at the end is a
write the crash interrupted (a *torn tail*) and is discarded; a complete
frame that fails its checksum, the last one included, raises
:class:`LedgerCorrupt` with the file name and the frame's offset rather
than silently dropping it and what follows.

Everything here works on ``bytes``; the driver does the file I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from rvasync.errors import InvalidArgument, LedgerCorrupt
from rvasync.framing import CRC_LENGTH, FRAME_HEADER_SIZE, FrameScan
from rvasync.protocol.cm._flat import FlatError, from_flat
from rvasync.protocol.cm.ledger import LEDGER_RECORD_TYPES, LedgerRecord, LedgerState
from rvasync.protocol.cm.names import check_correspondent_name

__all__ = [
    "FORMAT_VERSION",
    "FRAME_HEADER_SIZE",
    "MAGIC",
    "LedgerCorrupt",
    "LedgerDecoder",
    "LedgerReplay",
    "compact_ledger",
    "compact_ledger_chunks",
    "decode_ledger",
    "encode_record",
    "encode_records",
    "new_ledger",
]

MAGIC = b"RVCMLDG1"
"""The first eight bytes of every ledger file."""
FORMAT_VERSION = 1
"""Version stored in the header record; a reader refuses versions it does not know."""
_HEADER_KIND = "header"


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


_frame = CRC_LENGTH.encode


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
    return b"".join(compact_ledger_chunks(state, created))


def compact_ledger_chunks(
    state: LedgerState, created: float = 0.0, chunk_bytes: int = 1 << 20
) -> Iterator[bytes]:
    """:func:`compact_ledger` in pieces of about ``chunk_bytes``, made as they are asked for.

    A driver compacting a large ledger on a thread of its own writes each
    piece as it comes, so neither the whole file nor the whole record list
    is ever in memory at once. ``state`` must not change meanwhile: pass a
    :meth:`~rvasync.protocol.cm.ledger.LedgerState.copy`.
    """
    chunk: list[bytes] = [new_ledger(state.name, created)]
    size = 0
    for record in state.iter_records():
        frame = encode_record(record)
        chunk.append(frame)
        size += len(frame)
        if size >= chunk_bytes:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def _decode_body(body: bytes | memoryview, path: str, offset: int) -> tuple[str, dict[str, Any]]:
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
    data: bytes | memoryview,
    *,
    path: str = "<memory>",
    expected_name: str | None = None,
    keep_records: bool = True,
) -> LedgerReplay:
    """Replay a ledger file's bytes.

    ``path`` only names the file in errors. With ``expected_name``, a ledger
    that belongs to another correspondent raises
    :class:`~rvasync.errors.InvalidArgument` (two correspondents must never
    share a ledger). Damage raises :class:`LedgerCorrupt`, except a torn tail.
    ``keep_records=False`` leaves :attr:`LedgerReplay.records` empty: a driver
    that only needs the state does not hold every record replayed (removed
    messages included) until it is done. :class:`LedgerDecoder` does the
    same a piece at a time.
    """
    decoder = LedgerDecoder(path=path, expected_name=expected_name, keep_records=keep_records)
    decoder.feed(data)
    return decoder.finish()


class LedgerDecoder:
    """:func:`decode_ledger` fed a piece at a time (a large file need not be read whole).

    :meth:`feed` each piece in file order, then :meth:`finish`. Only what a
    frame cut by a piece's end needs is carried to the next piece, so a
    driver replaying a 229 MB ledger holds the state and one piece, not the
    file as well.
    """

    def __init__(
        self, *, path: str = "<memory>", expected_name: str | None = None, keep_records: bool = True
    ) -> None:
        self._path = path
        self._expected = expected_name
        self._keep = keep_records
        self._carry = b""
        self._base = 0
        """File offset where ``_carry`` starts (after the magic once it is checked)."""
        self._magic = False
        self._name: str | None = None
        self._created = 0.0
        self._state: LedgerState | None = None
        self._records: list[LedgerRecord] = []
        self._count = 0

    def feed(self, data: bytes | memoryview) -> None:
        """The next piece of the file."""
        buf: bytes | memoryview = self._carry + bytes(data) if self._carry else data
        start = 0
        if not self._magic:
            if len(buf) < len(MAGIC):
                self._check_magic(bytes(buf), complete=False)
                self._carry = bytes(buf)
                return
            self._check_magic(bytes(buf[: len(MAGIC)]), complete=True)
            self._magic = True
            start = len(MAGIC)
        frames = FrameScan(buf, start, path=self._path, layout=CRC_LENGTH, base=self._base)
        for offset, body in frames:
            self._record(offset, body)
        self._carry = bytes(buf[frames.end - self._base :])
        self._base = frames.end

    def _check_magic(self, head: bytes, *, complete: bool) -> None:
        good = head == MAGIC if complete else MAGIC.startswith(head)
        if not good:
            raise LedgerCorrupt(self._path, 0, "not a ledger file (the magic bytes are wrong)")

    def _record(self, offset: int, body: memoryview) -> None:
        kind, fields = _decode_body(body, self._path, offset)
        if self._state is None:
            name, self._created = _read_header(kind, fields, self._path, offset)
            if self._expected is not None and name != self._expected:
                raise InvalidArgument(
                    f"ledger file {self._path!r} belongs to correspondent {name!r}, "
                    f"not {self._expected!r}; each correspondent needs its own ledger file"
                )
            self._name = name
            self._state = LedgerState(name=name)
            return
        record = _read_record(kind, fields, self._path, offset)
        self._state.apply(record)
        self._count += 1
        if self._keep:
            self._records.append(record)

    def finish(self) -> LedgerReplay:
        """What the file held: the state, where intact data ends, the torn tail's size."""
        torn = len(self._carry)
        if self._state is None:
            # Empty, or a crash while the file was being created (magic or header cut).
            return LedgerReplay(None, 0.0, None, 0, 0, self._base + torn)
        return LedgerReplay(
            self._name,
            self._created,
            self._state,
            self._count,
            self._base,
            torn,
            self._records,
        )


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
