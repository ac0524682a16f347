"""A TCP link to a neighbor router: framing, the HELLO handshake, batching and liveness.

Frames are msgpack arrays written back to back (msgpack delimits them
itself); a streaming unpacker reads them, so one ``read`` call hands over
every frame that arrived together. The first frame of an event-loop turn
is written at once; the rest of a burst is gathered and leaves in one
``write`` at the end of the turn. Both ends send ``HELLO`` first and then read
the other's, so dialing and accepting run the same code. A ``PING`` every
heartbeat keeps an idle link known to be alive; the router declares a link
silent for the neighbor timeout broken (:meth:`NeighborLink.silent_for`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgpack

from rvasync.protocol.rvrd import frames

__all__ = ["LinkError", "NeighborLink", "handshake"]

PING = "PING"
HELLO = "HELLO"
#: A link whose unsent bytes grow past this is too slow: its data frames are refused (and
#: counted as lost) until it drains.
MAX_BACKLOG = 32 * 1024 * 1024
READ_SIZE = 256 * 1024

_pack = msgpack.Packer(use_bin_type=True).pack


class LinkError(Exception):
    """The neighbor broke the protocol, went silent or closed."""


class NeighborLink:
    """A TCP connection to another router; after :func:`handshake`, router ``name``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.name = ""
        self.cost = 1
        self._reader = reader
        self._writer = writer
        self._unpacker = msgpack.Unpacker(
            raw=False, max_buffer_size=frames.MAX_FRAME, strict_map_key=True
        )
        self._out: list[bytes] = []
        self._turn = False
        self._pending: list[list[Any]] = []
        #: Why the router closed the link (silence), if it did.
        self.reason: str | None = None
        self._loop = asyncio.get_running_loop()
        self.last_heard = self._loop.time()
        self.closed = False

    # ------------------------------------------------------------------ sending

    def send(self, frame: list[Any]) -> bool:
        """Queue a frame for this loop turn; False if the link is closed or too far behind."""
        if self.closed or self._writer.is_closing():
            return False
        if frame[0] == "DATA" and self._writer.transport.get_write_buffer_size() > MAX_BACKLOG:
            return False
        if self._turn:
            self._out.append(_pack(frame))
        else:
            # The turn's first frame leaves at once (latency); the rest of a burst is
            # gathered and leaves in one write at the end of the turn (throughput).
            self._turn = True
            self._loop.call_soon(self._flush)
            self._writer.write(_pack(frame))
        return True

    def _flush(self) -> None:
        self._turn = False
        out, self._out = self._out, []
        if out and not self.closed and not self._writer.is_closing():
            self._writer.write(b"".join(out))

    def ping(self) -> None:
        self.send([PING])

    # ------------------------------------------------------------------ receiving

    async def read(self) -> list[list[Any]]:
        """The core frames that arrived (PINGs absorbed); LinkError when the link ends."""
        if self._pending:
            batch, self._pending = self._pending, []
            return batch
        while True:
            batch = []
            try:
                for frame in self._unpacker:
                    if not isinstance(frame, list) or not frame:
                        raise LinkError("a frame is a non-empty array")
                    if frame[0] != PING:
                        batch.append(frame)
            except LinkError:
                raise
            except Exception as exc:
                raise LinkError(f"undecodable frame: {exc}") from None
            if batch:
                return batch
            try:
                data = await self._reader.read(READ_SIZE)
            except OSError as exc:
                raise LinkError(str(exc)) from None
            if not data:
                raise LinkError("neighbor closed the link")
            self.last_heard = self._loop.time()
            try:
                self._unpacker.feed(data)
            except msgpack.BufferFull:
                raise LinkError("frame over the size limit") from None

    def keep(self, frames_read: list[list[Any]]) -> None:
        """Frames read ahead (during the handshake), returned first by :meth:`read`."""
        self._pending = frames_read + self._pending

    def silent_for(self, now: float) -> float:
        return now - self.last_heard

    def fail(self, reason: str) -> None:
        """Close the link for ``reason`` (its reader then ends with it)."""
        self.reason = reason
        self.close()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self._flush()
        with contextlib.suppress(Exception):
            self._writer.close()


async def handshake(link: NeighborLink, me: str, timeout: float) -> str:
    """Exchange HELLO; the neighbor's router name (also set as ``link.name``)."""
    link.send([HELLO, frames.VERSION, me])
    try:
        async with asyncio.timeout(timeout):
            batch = await link.read()
    except TimeoutError:
        raise LinkError(f"no HELLO within {timeout} s") from None
    frame = batch[0]
    if len(frame) != 3 or frame[0] != HELLO or not isinstance(frame[2], str):
        raise LinkError("the neighbor did not start with HELLO")
    if frame[1] != frames.VERSION:
        raise LinkError(f"neighbor speaks link version {frame[1]!r}, this router {frames.VERSION}")
    link.keep(batch[1:])  # the neighbor's first records may come in the same read
    link.name = frame[2]
    return frame[2]
