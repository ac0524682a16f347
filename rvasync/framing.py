"""Checksummed frames for append-only files, and the one rule that replays them.

Every append-only file the package writes (certified-delivery ledgers, relay
agent ledgers, the value cache's store) is a magic string followed by frames::

    frame = length:u32le  check:u32le  crc32(body):u32le  body[length]

``check`` protects the length on its own, so a reader trusts the length
before it trusts the body and a damaged length can never make it skip good
frames. Two checks exist, chosen per file kind (both are 12-byte headers):
:data:`CRC_LENGTH` (CRC-32 of the four length bytes: ledgers) and
:data:`COMPLEMENT_LENGTH` (the length's bitwise complement: the cache store).

The replay rule (:class:`FrameScan`), the same for every file:

* a frame **cut short** at the end of the file (its header or its body
  runs past the end) is a *torn tail*: an append a crash interrupted. It is
  dropped (the caller truncates the file there and warns);
* a frame that fails its checks with **nothing but zeros** after its first
  eight bytes (its length and length check) to the end of the file is a
  torn tail too: an append cut short inside its length, followed by blocks
  a crash left allocated but unwritten;
* a **complete** frame whose length check or body checksum fails is
  damage no crash explains (a flipped bit, a bad sector, an edit): it raises
  :class:`~rvasync.errors.LedgerCorrupt` with the file and the frame's
  offset, wherever it is, the last frame included. Nothing after it is
  silently dropped.

This module is pure (bytes in, bytes out), so the sans-IO cores can decode
their own files with it; :mod:`rvasync.driverkit.durable` does the file I/O.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rvasync.errors import LedgerCorrupt

__all__ = [
    "COMPLEMENT_LENGTH",
    "CRC_LENGTH",
    "FRAME_HEADER_SIZE",
    "FrameLayout",
    "FrameScan",
    "LedgerCorrupt",
]

_HEADER = struct.Struct("<III")
_LENGTH = struct.Struct("<I")
FRAME_HEADER_SIZE = _HEADER.size
"""Bytes before each frame's body: length, length check, body CRC."""


@dataclass(frozen=True, slots=True)
class FrameLayout:
    """How one file kind checks its frame lengths (``check(length)`` is stored after it).

    ``encode(body)`` is ``body`` as one frame, ready to append with a single
    write (a function of its own per layout: ledgers call it once per record).
    """

    name: str
    check: Callable[[int], int]
    encode: Callable[[bytes], bytes]


def _crc_of_length(length: int) -> int:
    return zlib.crc32(_LENGTH.pack(length))


def _encode_crc(body: bytes) -> bytes:
    length = _LENGTH.pack(len(body))
    return _HEADER.pack(len(body), zlib.crc32(length), zlib.crc32(body)) + body


def _complement(length: int) -> int:
    return length ^ 0xFFFFFFFF


def _encode_complement(body: bytes) -> bytes:
    return _HEADER.pack(len(body), len(body) ^ 0xFFFFFFFF, zlib.crc32(body)) + body


CRC_LENGTH = FrameLayout("crc32 of the length", _crc_of_length, _encode_crc)
"""Ledgers (certified delivery, relay agent): the length's own CRC-32."""
COMPLEMENT_LENGTH = FrameLayout("complement of the length", _complement, _encode_complement)
"""The value cache's store file: the length's bitwise complement."""


def _all_zero(data: bytes | memoryview, start: int) -> bool:
    return not any(memoryview(data)[start:])


class FrameScan:
    """The intact frames of ``data`` from ``start``: iterate for ``(offset, body)``.

    Iterating raises :class:`~rvasync.errors.LedgerCorrupt` (naming ``path``
    and the frame's offset) at a complete frame that fails its checks, and
    stops at a torn tail. Afterwards ``end`` is where the intact frames end
    (where appending resumes; a file offset, like every offset here) and
    ``torn`` how many bytes after it were dropped. Bodies are memoryviews into ``data`` (no copy).
    """

    __slots__ = ("_base", "_data", "_layout", "_path", "_start", "end", "torn")

    def __init__(
        self,
        data: bytes | memoryview,
        start: int,
        *,
        path: str,
        layout: FrameLayout = CRC_LENGTH,
        base: int = 0,
    ) -> None:
        self._data = data
        self._start = start
        self._path = path
        self._layout = layout
        self._base = base
        self.end = base + start
        self.torn = 0

    def __iter__(self) -> Iterator[tuple[int, memoryview]]:
        data = memoryview(self._data)
        size = len(data)
        offset = self._start
        check = self._layout.check
        crc32 = zlib.crc32
        unpack = _HEADER.unpack_from
        while offset + FRAME_HEADER_SIZE <= size:  # else: a header cut short
            length, stored_check, body_crc = unpack(data, offset)
            if check(length) != stored_check:
                if _all_zero(data, offset + 8):
                    break  # cut short in its length, the rest never written
                raise LedgerCorrupt(
                    self._path,
                    self._base + offset,
                    f"frame length fails its check ({self._layout.name})",
                )
            body_start = offset + FRAME_HEADER_SIZE
            end = body_start + length
            if end > size:
                break  # the body cut short
            body = data[body_start:end]
            actual = crc32(body)
            if actual != body_crc:
                if _all_zero(data, offset + 8):
                    break
                raise LedgerCorrupt(
                    self._path,
                    self._base + offset,
                    f"frame body fails its checksum (stored {body_crc:#010x}, computed "
                    f"{actual:#010x}): a complete frame that fails its checksum is damage, "
                    "not an interrupted write",
                )
            yield self._base + offset, body
            offset = end
            self.end = self._base + offset
        self.end = self._base + offset
        self.torn = size - offset
