"""Framing of the TCP link between two routers: msgpack arrays written back to back.

msgpack delimits its values itself, so a streaming unpacker on the reading
side splits the byte stream into frames with no length prefix, and hands
over every frame of one ``read`` at once. Frames are the core's (``LSA``,
``DATA``, ``BATCH``: several messages of one subject, ``ACK``) plus the
link's own: ``HELLO`` (``["HELLO", version, router name]``, the first frame
each way) and ``PING`` (keeps an idle link
known to be alive). ``DATA`` carries the message in rvasync's wire codec as
opaque bytes.
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = ["MAX_FRAME", "VERSION", "encode"]

VERSION = 3
#: Largest frame: a 64 MiB message plus the routing fields around it.
MAX_FRAME = 64 * 1024 * 1024 + 64 * 1024


def encode(frame: list[Any]) -> bytes:
    """One frame's bytes on the link."""
    data: bytes = msgpack.packb(frame, use_bin_type=True)
    return data
