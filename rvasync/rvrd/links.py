"""A TCP link to a neighbor router: framing, the HELLO handshake, batching and liveness.

Each link is an :class:`asyncio.Protocol`: frames are handled inside
``data_received``, with no reader task to wake, which saves an event-loop
turn at every router a message crosses. Frames are msgpack arrays written
back to back (msgpack delimits them itself); a streaming unpacker splits
what arrives. The first frame of a loop turn is written at once; the rest of
a burst is gathered and leaves in one ``write`` at the end of the turn.

An ``ACK`` never leaves at once. It tells the neighbor that the messages it
counts are this router's to deliver, and the neighbor stops answering for
them (a link that breaks later reports only what was not acknowledged). The
deliveries of the same loop turn are still in the daemon's buffers, which it
sends at the end of the turn; an ``ACK`` written before them and a router
killed in between lose those messages with nobody counting them. So an
``ACK`` is written by a callback scheduled after those deliveries, which
runs after the daemon's flush.

Both ends send ``HELLO`` first (``["HELLO", version, router name,
incarnation]``: each start of a router is a new incarnation, so the other end
can tell a restarted neighbor from one whose link was only cut); the router
decides whether to accept the name. A ``PING`` every heartbeat keeps
an idle link known to be alive; the router fails a link silent for the
neighbor timeout (:meth:`NeighborLink.silent_for`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, cast

import msgpack

from rvasync.protocol.rvrd import frames
from rvasync.protocol.rvrd.frames import (
    ACK,
    BATCH,
    DATA,
    HELLO,
    PING,
    HelloFrame,
    LinkFrame,
    PingFrame,
)

__all__ = ["LinkError", "NeighborLink"]

#: A link whose unsent bytes grow past this is too slow: its data frames are refused (and
#: counted as lost) until it drains.
MAX_BACKLOG = 32 * 1024 * 1024

_pack = msgpack.Packer(use_bin_type=True).pack
#: Frames that carry messages (refused, and counted lost, when the link is too far behind).
_DATA_KINDS = (DATA, BATCH)
_PING = PingFrame(PING)


class LinkError(Exception):
    """The neighbor broke the protocol, went silent or closed."""


class NeighborLink(asyncio.Protocol):
    """One TCP connection to another router.

    ``on_hello(link, name, incarnation)`` returns None to accept the neighbor
    ``name`` (in its start ``incarnation``) or the reason to refuse it;
    ``on_frame(link, frame)`` takes each core frame (raising ValueError fails
    the link); ``on_lost(link, reason)`` is told
    once when an accepted link ends. :attr:`done` resolves to True when the
    link had been accepted, False otherwise, once the connection is gone.
    """

    def __init__(
        self,
        me: str,
        *,
        incarnation: int = 0,
        on_hello: Callable[[NeighborLink, str, int], str | None],
        on_frame: Callable[[NeighborLink, list[Any]], None],
        on_lost: Callable[[NeighborLink, str], None],
        handshake_timeout: float,
    ) -> None:
        self.me = me
        self.incarnation = incarnation
        self.name = ""
        #: The neighbor's incarnation (from its HELLO).
        self.peer_incarnation = 0
        self.cost = 1
        self._on_hello = on_hello
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._timeout = handshake_timeout
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._unpacker = msgpack.Unpacker(
            raw=False, max_buffer_size=frames.MAX_FRAME, strict_map_key=True
        )
        self._out: list[bytes] = []
        self._turn = False
        self._accepted = False
        self._timer: asyncio.TimerHandle | None = None
        self.reason: str | None = None
        self.last_heard = self._loop.time()
        self.closed = False
        self.done: asyncio.Future[bool] = self._loop.create_future()

    # ------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's TCPTransport (the router's loop when
        # installed) does not derive from asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self.send(HelloFrame(HELLO, frames.VERSION, self.me, self.incarnation))
        self._timer = self._loop.call_later(self._timeout, self._no_hello)

    def _no_hello(self) -> None:
        if not self._accepted:
            self.fail(f"no HELLO within {self._timeout:g} s")

    def data_received(self, data: bytes) -> None:
        self.last_heard = self._loop.time()
        try:
            self._unpacker.feed(data)
            for frame in self._unpacker:
                if self.closed:
                    return
                if not isinstance(frame, list) or not frame:
                    raise LinkError("a frame is a non-empty array")
                kind = frame[0]
                if kind == PING:
                    continue
                if not self._accepted:
                    self._hello(frame)
                    continue
                try:
                    self._on_frame(self, frame)
                except ValueError as exc:
                    raise LinkError(f"bad frame: {exc}") from None
        except LinkError as exc:
            self.fail(str(exc))
        except msgpack.BufferFull:
            self.fail("frame over the size limit")
        except Exception as exc:
            self.fail(f"undecodable frame: {exc}")

    def _hello(self, frame: list[Any]) -> None:
        if len(frame) >= 2 and frame[0] == HELLO and frame[1] != frames.VERSION:
            raise LinkError(f"neighbor speaks link version {frame[1]!r}, this one {frames.VERSION}")
        if len(frame) != len(HelloFrame.__annotations__) or frame[0] != HELLO:
            raise LinkError("the neighbor did not start with HELLO")
        hello = HelloFrame(*frame)
        if not isinstance(hello.router, str) or not isinstance(hello.incarnation, int):
            raise LinkError("malformed HELLO")
        self.name = hello.router
        self.peer_incarnation = hello.incarnation
        problem = self._on_hello(self, hello.router, hello.incarnation)
        if problem is not None:
            raise LinkError(problem)
        self._accepted = True
        if self._timer is not None:
            self._timer.cancel()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        reason = self.reason or (str(exc) if exc else "neighbor closed the link")
        if self._accepted:
            self._on_lost(self, reason)
        if not self.done.done():
            self.done.set_result(self._accepted)

    # ------------------------------------------------------------------ sending

    def send(self, frame: LinkFrame | HelloFrame | PingFrame) -> bool:
        """Queue a frame (a NamedTuple of rvasync.protocol.rvrd.frames); False if the link
        is closed (see :attr:`closed`) or too far behind (the frame is dropped)."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return False
        kind = frame.kind
        if kind in _DATA_KINDS and transport.get_write_buffer_size() > MAX_BACKLOG:
            return False
        if kind == ACK:
            # After everything this turn handed to the daemons so far (module docstring).
            self._loop.call_soon(self._write_late, _pack(frame))
            return True
        if self._turn:
            self._out.append(_pack(frame))
        else:
            # The turn's first frame leaves at once (latency); the rest of a burst is
            # gathered and leaves in one write at the end of the turn (throughput).
            self._turn = True
            self._loop.call_soon(self._flush)
            transport.write(_pack(frame))
        return True

    def _write_late(self, data: bytes) -> None:
        transport = self._transport
        if transport is not None and not self.closed and not transport.is_closing():
            transport.write(data)

    def _flush(self) -> None:
        self._turn = False
        out, self._out = self._out, []
        transport = self._transport
        if out and transport is not None and not self.closed and not transport.is_closing():
            transport.write(b"".join(out))

    def ping(self) -> None:
        self.send(_PING)

    # ------------------------------------------------------------------ ending

    def silent_for(self, now: float) -> float:
        return now - self.last_heard

    def fail(self, reason: str) -> None:
        """Close the link for ``reason`` (reported when it is gone)."""
        if self.reason is None:
            self.reason = reason
        self.close(abort=True)

    def close(self, abort: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        transport = self._transport
        if transport is None:
            return
        with contextlib.suppress(Exception):
            out, self._out = self._out, []
            if out and not abort:
                transport.write(b"".join(out))
        if abort:
            transport.abort()
        else:
            transport.close()
