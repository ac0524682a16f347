"""The retained messages of one answer part, packed into one OPAQUE field.

An answer for 10,000 subjects travels as a handful of messages, not 10,000:
each part's ``entries`` field is the concatenation of records
``<u32 length><f64 stamp><wire form of the message>`` (little endian), where
``stamp`` is when the answering cache stored the message (its clock; the
requester keeps the newest stamp when several caches hold a subject).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from rvasync.errors import MalformedMessage

__all__ = ["MAX_PART_BYTES", "pack_entries", "split_parts", "unpack_entries"]

_HEAD = struct.Struct("<Id")

#: An answer part holds about this many bytes of entries (far below the 64 MiB
#: message limit, so parts flow through the daemon without monopolising it).
MAX_PART_BYTES = 1 << 20


def pack_entries(entries: Iterable[tuple[float, bytes]]) -> bytes:
    """One ``entries`` field from ``(stamp, wire)`` pairs."""
    head = _HEAD.pack
    out: list[bytes] = []
    for stamp, wire in entries:
        out.append(head(len(wire), stamp))
        out.append(wire)
    return b"".join(out)


def split_parts(
    entries: Iterable[tuple[float, bytes]], max_bytes: int = MAX_PART_BYTES
) -> list[bytes]:
    """``entries`` packed into as many parts as needed, each about ``max_bytes`` at most.

    Always at least one part (an empty one when there is nothing), so every
    answer has a last part. A single entry larger than ``max_bytes`` gets a
    part of its own.
    """
    parts: list[bytes] = []
    current: list[tuple[float, bytes]] = []
    size = 0
    for stamp, wire in entries:
        if current and size + len(wire) + _HEAD.size > max_bytes:
            parts.append(pack_entries(current))
            current, size = [], 0
        current.append((stamp, wire))
        size += len(wire) + _HEAD.size
    parts.append(pack_entries(current))
    return parts


def unpack_entries(data: bytes) -> list[tuple[float, bytes]]:
    """The ``(stamp, wire)`` pairs of one ``entries`` field; MalformedMessage if truncated."""
    view = memoryview(data)
    out: list[tuple[float, bytes]] = []
    offset, end = 0, len(view)
    unpack = _HEAD.unpack_from
    while offset < end:
        if end - offset < _HEAD.size:
            raise MalformedMessage(f"retained entries truncated at byte {offset} of {end}")
        length, stamp = unpack(view, offset)
        offset += _HEAD.size
        if length > end - offset:
            raise MalformedMessage(
                f"retained entry of {length} bytes at byte {offset} overruns its {end}-byte field"
            )
        out.append((stamp, bytes(view[offset : offset + length])))
        offset += length
    return out
