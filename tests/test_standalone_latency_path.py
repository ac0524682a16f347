"""The latency path of a standalone daemon and its client link (issue #23).

What a request and its reply cost between two clients of one daemon is
mostly how many loop turns and system calls stand between a frame coming in
and the frame going out. These tests pin down the order, not the timing:

* a message a client publishes is written to the local client that takes it
  before the daemon's read handler returns (no loop turn in between);
* its copy for the network leaves after that write, still in the same turn
  (the local receiver does not wait behind a ``sendto``, and the network copy
  is not lost or late);
* a reply to a local inbox is written before the read handler returns, with
  nothing sent to the network;
* a client link writes a request or a reply at once when it is the first
  message of its loop turn, and a plain publication at the end of the turn.

The daemon side runs the real engine with its connections' transports
replaced by recorders (no sockets between the clients and the daemon); the
link side talks to a bare TCP socket that plays the daemon.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import rvasync as rv
from rvasync import codec
from rvasync.daemon import Daemon
from rvasync.daemon.server import ClientConnection
from rvasync.protocol import clientproto as cp
from rvasync.transport.tcplink import TcpLink

WAIT = 10.0


class RecordingTransport:
    """A stream transport that keeps what is written (what the client would read)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def writelines(self, buffers: list[bytes]) -> None:
        self.written.append(b"".join(buffers))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True


class Client:
    """One client of the daemon: its connection there, and the frames it was sent."""

    def __init__(self, server: Any) -> None:
        self.transport = RecordingTransport()
        self.conn = ClientConnection(server)
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]  # a recorder
        self.proto = cp.Connection(cp.Role.CLIENT)
        self.inbox_prefix = ""

    def send(self, frame: cp.Frame) -> None:
        self.conn.data_received(self.proto.send(frame))

    def publish(self, msg: rv.Message) -> None:
        self.conn.data_received(b"".join(self.proto.send_messages([codec.encode(msg)])))

    def frames(self) -> list[cp.Frame]:
        out: list[cp.Frame] = []
        for chunk in self.transport.written:
            out += self.proto.receive_data(chunk)
        self.transport.written.clear()
        return out

    def delivered(self) -> list[rv.Message]:
        return [
            codec.decode(wire)
            for frame in self.frames()
            if isinstance(frame, cp.Deliver)
            for wire in frame.messages
        ]


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _daemon_and_clients() -> tuple[Daemon, Client, Client, Any]:
    daemon = Daemon(listen=0, host="127.0.0.1", host_status_interval=0)
    await daemon.start()
    service = str(_free_udp_port())
    clients = []
    for _ in range(2):
        client = Client(daemon.client_server)
        client.send(cp.Hello(service=service))
        welcome = [f for f in client.frames() if isinstance(f, cp.Welcome)]
        assert welcome, "no WELCOME"
        client.inbox_prefix = welcome[0].inbox_prefix
        clients.append(client)
    requester, replier = clients
    replier.send(cp.Listen("lat.request"))
    await asyncio.sleep(0)
    requester.frames()
    replier.frames()
    endpoint = daemon.services[int(service)]
    return daemon, requester, replier, endpoint


async def test_a_request_reaches_the_local_replier_before_its_datagram_leaves():
    daemon, requester, replier, endpoint = await _daemon_and_clients()
    try:
        stats = endpoint.core.stats
        request = rv.Message("lat.request", {"n": 1})
        request.reply_subject = requester.inbox_prefix + "1"
        sent_before = stats.datagrams_sent
        requester.publish(request)
        # Written to the replier by the read handler itself, before any loop turn ...
        got = replier.delivered()
        assert [m.subject for m in got] == ["lat.request"]
        assert got[0]["n"] == 1
        # ... and the network copy is not out yet: it leaves after that write,
        assert stats.datagrams_sent == sent_before
        assert endpoint.driver.flush_scheduled
        # ... at the end of the same loop turn.
        await asyncio.sleep(0)
        assert stats.datagrams_sent > sent_before  # (with anything else the turn packed)
        assert not endpoint.driver.flush_scheduled
    finally:
        await daemon.stop()


async def test_a_reply_to_a_local_inbox_is_written_at_once_and_not_sent_to_the_network():
    daemon, requester, replier, endpoint = await _daemon_and_clients()
    try:
        stats = endpoint.core.stats
        await asyncio.sleep(0)
        sent_before = stats.datagrams_sent
        replier.publish(rv.Message(requester.inbox_prefix + "7", {"answer": 42}))
        got = requester.delivered()
        assert [m["answer"] for m in got] == [42]
        await asyncio.sleep(0)
        assert stats.datagrams_sent == sent_before
    finally:
        await daemon.stop()


async def test_several_messages_of_one_read_share_one_write_in_order():
    daemon, requester, replier, _ = await _daemon_and_clients()
    try:
        wires = [codec.encode(rv.Message("lat.request", {"n": n})) for n in range(5)]
        requester.conn.data_received(b"".join(requester.proto.send_messages(wires)))
        assert len(replier.transport.written) == 1  # one write for the whole read
        assert [m["n"] for m in replier.delivered()] == [0, 1, 2, 3, 4]
    finally:
        await daemon.stop()


class _Hooks:
    def __init__(self) -> None:
        self.advisories: list[rv.Message] = []

    def link_deliver(self, msg: rv.Message) -> object:
        return None

    def link_present(self, advisory: rv.Message) -> None:
        self.advisories.append(advisory)


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


async def test_the_link_writes_a_request_first_in_its_turn_at_once_and_batches_the_rest():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    link = TcpLink(f"127.0.0.1:{port}")
    try:
        async with asyncio.timeout(WAIT):
            played = asyncio.ensure_future(_play_daemon(listener))
            await link.open(_Hooks())
            sock, proto = await played
        # No await between the publish and the read: the bytes were written by publish.
        link.publish(rv.Message("lat.first", {"n": 0}, reply_subject="_INBOX.X.1"))
        first = proto.receive_data(sock.recv(65536))
        assert [type(f) for f in first] == [cp.Publish]
        assert [codec.decode(w).subject for w in first[0].messages] == ["lat.first"]
        # The rest of the turn waits for its end, and goes as one frame.
        for n in range(1, 4):
            link.publish(rv.Message("lat.rest", {"n": n}))
        try:
            early = sock.recv(65536)
        except BlockingIOError:
            early = b""
        assert early == b""
        await asyncio.sleep(0)
        rest: list[cp.Frame] = []
        async with asyncio.timeout(WAIT):
            while not rest:
                rest = proto.receive_data(await asyncio.get_running_loop().sock_recv(sock, 65536))
        assert [type(f) for f in rest] == [cp.Publish]
        assert [codec.decode(w)["n"] for w in rest[0].messages] == [1, 2, 3]
        sock.close()
    finally:
        await link.close()
        listener.close()


async def test_the_link_writes_a_reply_at_once_and_a_plain_publication_at_the_turns_end():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    link = TcpLink(f"127.0.0.1:{port}")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(WAIT):
            played = asyncio.ensure_future(_play_daemon(listener))
            await link.open(_Hooks())
            sock, proto = await played
        # A plain publication first in its turn waits for the end of the turn (a stream
        # of publications is written once per turn, not once per message).
        link.publish(rv.Message("lat.stream", {"n": 0}))
        try:
            early = sock.recv(65536)
        except BlockingIOError:
            early = b""
        assert early == b""
        stream: list[cp.Frame] = []
        async with asyncio.timeout(WAIT):
            while not stream:
                stream = proto.receive_data(await loop.sock_recv(sock, 65536))
        assert [codec.decode(w).subject for w in stream[0].messages] == ["lat.stream"]
        await asyncio.sleep(0)  # a new turn
        # A reply (to an inbox) first in its turn is written by publish itself.
        link.publish(rv.Message("_INBOX.7F00000112340000.9.1", {"n": 1}))
        reply = proto.receive_data(sock.recv(65536))
        assert [codec.decode(w).subject for w in reply[0].messages] == [
            "_INBOX.7F00000112340000.9.1"
        ]
        sock.close()
    finally:
        await link.close()
        listener.close()
