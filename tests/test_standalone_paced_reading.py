"""A client link hands a daemon's backlog to its transport a share per loop turn (issue #23).

When a subscriber falls behind, its daemon's socket is full and every read
brings a thousand messages or more; an event loop reads again and again while
data is there. Handing all of it over at once left tens of thousands of decoded
messages alive in a listener's queue, and the garbage collector's passes over
them cost the subscriber more than the messages. The link now hands over at
most ``_TURN_MESSAGES`` per loop turn, pauses reading while the rest waits,
and keeps every frame in order. These tests pin that down with a bare socket
playing the daemon:

* one big read is handed over in shares of at most ``_TURN_MESSAGES``, every
  message once and in order, with an advisory between two DELIVER frames
  keeping its place;
* messages waiting when the connection breaks (a write fails while reading is
  paused) are delivered, in order, before the link presents ``RVD.DISCONNECTED``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import rvasync as rv
from rvasync import codec
from rvasync.advisories import AdvisoryClass, build_advisory
from rvasync.protocol import clientproto as cp
from rvasync.transport import tcplink
from rvasync.transport.tcplink import TcpLink

WAIT = 10.0


class _Turns:
    """Counts loop turns: a task that goes round once per turn."""

    def __init__(self) -> None:
        self.turn = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turn += 1

    def stop(self) -> None:
        self._task.cancel()


class _Hooks:
    """Records what the link hands over: ("msg", n, turn) and ("adv", name, turn)."""

    def __init__(self, turns: _Turns) -> None:
        self.turns = turns
        self.events: list[tuple[str, object, int]] = []
        self.on_first: Callable[[], None] | None = None  # called on the first message

    def link_deliver(self, msg: rv.Message) -> object:
        self.events.append(("msg", msg["n"], self.turns.turn))
        on_first, self.on_first = self.on_first, None
        if on_first is not None:
            on_first()
        return None

    def link_present(self, advisory: rv.Message) -> None:
        self.events.append(("adv", advisory.subject, self.turns.turn))

    def messages(self) -> list[int]:
        return [n for kind, n, _ in self.events if kind == "msg" and isinstance(n, int)]


async def _play_daemon(listener: socket.socket) -> tuple[socket.socket, cp.Connection]:
    """Accept the link's connection and welcome it, as a daemon does."""
    loop = asyncio.get_running_loop()
    sock, _ = await loop.sock_accept(listener)
    sock.setblocking(False)
    proto = cp.Connection(cp.Role.DAEMON)
    frames: list[cp.Frame] = []
    while not frames:
        frames = proto.receive_data(await loop.sock_recv(sock, 65536))
    assert isinstance(frames[0], cp.Hello)
    await loop.sock_sendall(sock, proto.send(cp.Welcome("_INBOX.7F00000112340000.1.", {})))
    return sock, proto


async def _linked(hooks: _Hooks) -> tuple[TcpLink, socket.socket, cp.Connection, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    link = TcpLink(f"127.0.0.1:{listener.getsockname()[1]}")
    async with asyncio.timeout(WAIT):
        played = asyncio.ensure_future(_play_daemon(listener))
        await link.open(hooks)  # type: ignore[arg-type]  # the two hooks the link calls here
        sock, proto = await played
    return link, sock, proto, listener


def _wires(first: int, count: int) -> list[bytes]:
    return [codec.encode(rv.Message("paced.data", {"n": n})) for n in range(first, first + count)]


async def _wait_for(predicate: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.001)


async def test_a_big_read_is_handed_over_a_share_per_turn_in_order():
    turns = _Turns()
    hooks = _Hooks(turns)
    link, sock, proto, listener = await _linked(hooks)
    loop = asyncio.get_running_loop()
    try:
        share = tcplink._TURN_MESSAGES
        big = 8 * share + 3
        mark = build_advisory(AdvisoryClass.INFO, "PACED.MARK", {})
        data = b"".join(
            [
                *proto.send_messages(_wires(0, big)),
                proto.send(cp.Advisory(mark.to_bytes())),
                *proto.send_messages(_wires(big, 5)),
            ]
        )
        await loop.sock_sendall(sock, data)
        await _wait_for(lambda: len(hooks.messages()) == big + 5)
        assert hooks.messages() == list(range(big + 5))  # each once, in order
        per_turn: dict[int, int] = {}
        for kind, _, turn in hooks.events:
            if kind == "msg":
                per_turn[turn] = per_turn.get(turn, 0) + 1
        assert max(per_turn.values()) <= share
        assert len(per_turn) >= big // share  # spread over several turns
        # The advisory kept its place between the two DELIVER frames.
        order = [(kind, n) for kind, n, _ in hooks.events if kind == "msg" or n == mark.subject]
        assert order.index(("adv", mark.subject)) == big
        # Reading resumed once everything was handed over: the link still hears the daemon.
        await loop.sock_sendall(sock, b"".join(proto.send_messages(_wires(big + 5, 1))))
        await _wait_for(lambda: len(hooks.messages()) == big + 6)
        sock.close()
    finally:
        turns.stop()
        await link.close()
        listener.close()


async def test_messages_waiting_when_the_connection_breaks_are_delivered_before_the_disconnect():
    turns = _Turns()
    hooks = _Hooks(turns)
    link, sock, proto, listener = await _linked(hooks)
    loop = asyncio.get_running_loop()

    def break_the_connection() -> None:
        # While the rest of the read waits for later turns: the daemon resets the
        # connection, and the link's next write fails (reading is paused, so that
        # write is how the link learns it).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        link.publish(rv.Message("paced.out", {"n": -1}))

    hooks.on_first = break_the_connection
    try:
        big = 6 * tcplink._TURN_MESSAGES
        await loop.sock_sendall(sock, b"".join(proto.send_messages(_wires(0, big))))
        await _wait_for(
            lambda: any(kind == "adv" and "DISCONNECTED" in str(n) for kind, n, _ in hooks.events)
        )
        names = [n for _, n, _ in hooks.events]
        gone = next(i for i, n in enumerate(names) if "DISCONNECTED" in str(n))
        assert hooks.messages() == list(range(big))
        assert gone == big  # every message came before the disconnection
    finally:
        turns.stop()
        await link.close()
        listener.close()
