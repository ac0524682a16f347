"""A TCP link to a neighbor router: framing, the HELLO handshake and liveness.

Both ends send ``HELLO`` first and then read the other's, so dialing and
accepting run the same code. After that, :meth:`NeighborLink.read` yields the
core's frames; a ``PING`` every heartbeat keeps an idle link known to be
alive, and a link silent for the neighbor timeout is declared broken.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from rvasync.protocol.rvrd import frames

__all__ = ["LinkError", "NeighborLink", "handshake"]

PING = "PING"
HELLO = "HELLO"
#: A link whose unsent bytes grow past this is too slow: its data frames are refused (and
#: counted as lost) until it drains.
MAX_BACKLOG = 32 * 1024 * 1024


class LinkError(Exception):
    """The neighbor broke the protocol, went silent or closed."""


async def read_frame(reader: asyncio.StreamReader, timeout: float) -> list[Any]:
    try:
        async with asyncio.timeout(timeout):
            header = await reader.readexactly(frames.HEADER.size)
            length = frames.frame_length(header)
            body = await reader.readexactly(length)
    except TimeoutError:
        raise LinkError(f"neighbor silent for {timeout} s") from None
    except asyncio.IncompleteReadError:
        raise LinkError("neighbor closed the link") from None
    except (OSError, ValueError) as exc:
        raise LinkError(str(exc)) from None
    try:
        return frames.decode_body(body)
    except ValueError as exc:
        raise LinkError(str(exc)) from None


async def handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, me: str, timeout: float
) -> str:
    """Exchange HELLO; the neighbor's router name."""
    writer.write(frames.encode([HELLO, frames.VERSION, me]))
    frame = await read_frame(reader, timeout)
    if len(frame) != 3 or frame[0] != HELLO or not isinstance(frame[2], str):
        raise LinkError("the neighbor did not start with HELLO")
    if frame[1] != frames.VERSION:
        raise LinkError(f"neighbor speaks link version {frame[1]!r}, this router {frames.VERSION}")
    return frame[2]


class NeighborLink:
    """An established link to router ``name`` (path cost ``cost``)."""

    def __init__(
        self,
        name: str,
        cost: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        timeout: float,
    ) -> None:
        self.name = name
        self.cost = cost
        self._reader = reader
        self._writer = writer
        self._timeout = timeout
        self.closed = False

    def send(self, frame: list[Any]) -> bool:
        """Queue a frame; False if the link is closed or too far behind (the frame is dropped)."""
        if self.closed or self._writer.is_closing():
            return False
        transport = self._writer.transport
        if frame[0] == "DATA" and transport.get_write_buffer_size() > MAX_BACKLOG:
            return False
        self._writer.write(frames.encode(frame))
        return True

    def ping(self) -> None:
        self.send([PING])

    async def read(self) -> list[Any]:
        """The next core frame (PINGs are absorbed); LinkError when the link ends."""
        while True:
            frame = await read_frame(self._reader, self._timeout)
            if frame[0] != PING:
                return frame

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self._writer.close()
