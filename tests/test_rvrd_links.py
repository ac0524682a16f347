"""The neighbor link's write order: what leaves at once, what waits for the end of the turn."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from rvasync.protocol.rvrd.frames import ACK, AckFrame, DataFrame
from rvasync.rvrd.links import NeighborLink


class _Wire:
    """A transport that records what is written, frame by frame."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.closing = False

    def write(self, data: bytes) -> None:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        self.events.extend(("wire", frame) for frame in unpacker)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closing = True


async def _link(events: list[Any]) -> tuple[NeighborLink, _Wire]:
    link = NeighborLink(
        "a1",
        on_hello=lambda link, name, incarnation: None,
        on_frame=lambda link, frame: None,
        on_lost=lambda link, reason: None,
        handshake_timeout=5.0,
    )
    wire = _Wire(events)
    link.connection_made(wire)  # type: ignore[arg-type]  # a stand-in transport
    await asyncio.sleep(0)  # the HELLO's turn ends
    events.clear()
    return link, wire


async def test_an_ack_leaves_after_the_deliveries_of_its_turn() -> None:
    """A router killed between its ACK and its daemon's flush would lose acknowledged
    messages silently: the ACK waits until after the flush the turn scheduled."""
    events: list[Any] = []
    link, _ = await _link(events)
    loop = asyncio.get_running_loop()
    # What a daemon does when a delivery is handed to it: flush at the end of the turn.
    loop.call_soon(events.append, "daemon flush")
    assert link.send(AckFrame(ACK, 64))
    assert events == []
    await asyncio.sleep(0)
    assert events == ["daemon flush", ("wire", [ACK, 64])]


async def test_a_data_frame_first_in_its_turn_still_leaves_at_once() -> None:
    events: list[Any] = []
    link, _ = await _link(events)
    frame = DataFrame("DATA", "lanB", "b1.1", 1, 1, "LAB.R", b"x")
    assert link.send(frame)
    assert events == [("wire", list(frame))]
    assert link.send(frame)  # the rest of the turn waits for its end
    assert len(events) == 1
    await asyncio.sleep(0)
    assert events == [("wire", list(frame)), ("wire", list(frame))]


async def test_an_ack_for_a_link_closed_meanwhile_is_not_written() -> None:
    events: list[Any] = []
    link, wire = await _link(events)
    assert link.send(AckFrame(ACK, 3))
    wire.closing = True
    await asyncio.sleep(0)
    assert events == []
    assert not link.send(AckFrame(ACK, 4))
