"""Framing of the TCP link between two routers: a 4-byte length, then one msgpack array.

Frames are the core's (``LSA``, ``DATA``, ``ACK``) plus the link's own:
``HELLO`` (``["HELLO", version, router name]``, first frame each way) and
``PING`` (keeps an idle link known to be alive). ``DATA`` carries the
message in rvasync's wire codec as opaque bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

__all__ = ["HEADER", "MAX_FRAME", "VERSION", "decode_body", "encode", "frame_length"]

VERSION = 1
HEADER = struct.Struct(">I")
#: Largest frame: a 64 MiB message plus the routing fields around it.
MAX_FRAME = 64 * 1024 * 1024 + 64 * 1024


def encode(frame: list[Any]) -> bytes:
    body = msgpack.packb(frame, use_bin_type=True)
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """Length of the body announced by a 4-byte header; ValueError when too large."""
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME or length == 0:
        raise ValueError(f"frame of {length} bytes (limit {MAX_FRAME})")
    return int(length)


def decode_body(body: bytes) -> list[Any]:
    """The frame in ``body``; ValueError when it is not a msgpack array."""
    try:
        frame = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:
        raise ValueError(f"undecodable frame: {exc}") from None
    if not isinstance(frame, list) or not frame:
        raise ValueError("a frame is a non-empty array")
    return frame
