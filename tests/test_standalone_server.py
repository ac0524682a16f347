"""The client port and the TCP link, in one process, against a stand-in engine.

The stand-in (``MiniDaemon``) implements the engine's ``attach`` contract with
plain local matching, so these tests pin down what the server and the link do
themselves (framing, backlog and SLOWCONSUMER, garbage, reconnect,
FASTPRODUCER, liveness) over real loopback sockets, deterministically.
The same behaviour against the real engine, across processes, is in
test_standalone.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct

import pytest

import rvasync as rv
from rvasync.daemon import server as server_mod
from rvasync.daemon.server import start_server
from rvasync.daemon.service import check_client_subject
from rvasync.daemon.session import Payload
from rvasync.message import Message
from rvasync.protocol import clientproto as cp
from rvasync.subjects import subject_matches, validate_subject
from rvasync.transport import tcplink
from rvasync.transport.tcplink import TcpLink

WAIT = 10.0


class MiniSession:
    def __init__(self, daemon: MiniDaemon, owner, n: int, description: str | None) -> None:
        self.daemon = daemon
        self.owner = owner
        self.transport_id = f"7F000001.{n:08x}"
        self.inbox_prefix = f"_INBOX.{self.transport_id}."
        self.description = description
        self.interests: dict[str, int] = {}
        self.closed = False

    def add_interest(self, subject: str) -> None:
        self.interests[subject] = self.interests.get(subject, 0) + 1

    def remove_interest(self, subject: str) -> None:
        if self.interests.get(subject, 0) > 1:
            self.interests[subject] -= 1
        else:
            self.interests.pop(subject, None)

    def publish_wires(self, subjects: list[str], wires: list[bytes]) -> None:
        # What the engine gets from a client: subjects read from the bytes, bytes checked.
        for subject, wire in zip(subjects, wires, strict=True):
            assert Payload(data=wire).subject == subject
            payload = Payload(data=wire)
            for session in list(self.daemon.sessions):
                if any(subject_matches(p, subject) for p in session.interests):
                    session.owner.deliver(payload)

    def close(self) -> None:
        self.closed = True
        self.daemon.sessions.discard(self)


class MiniDaemon:
    """Enough of the engine's attach() contract to exercise the client port."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.sessions: set[MiniSession] = set()
        self.refuse = refuse
        self.attached: list[dict] = []
        self._n = 0

    def attach(self, owner, *, service, network, description=None, reliability=None, router=False):
        if self.refuse is not None:
            raise self.refuse
        self.attached.append({"service": service, "network": network, "reliability": reliability})
        self._n += 1
        session = MiniSession(self, owner, self._n, description)
        self.sessions.add(session)
        return session


class Hooks:
    """What rv.Transport gives a link: collects deliveries and advisories."""

    def __init__(self) -> None:
        self.messages: asyncio.Queue[Message] = asyncio.Queue()
        self.advisories: asyncio.Queue[Message] = asyncio.Queue()

    def link_deliver(self, msg: Message) -> None:
        self.messages.put_nowait(msg)

    def link_present(self, advisory: Message) -> None:
        self.advisories.put_nowait(advisory)

    async def next_message(self) -> Message:
        async with asyncio.timeout(WAIT):
            return await self.messages.get()

    async def advisory(self, name: str) -> Message:
        async with asyncio.timeout(WAIT):
            while True:
                adv = await self.advisories.get()
                if adv.subject.endswith(name):
                    return adv


@contextlib.asynccontextmanager
async def serving(daemon=None, port=0, **limits):
    daemon = daemon or MiniDaemon()
    server = await start_server(daemon, "127.0.0.1", port, **limits)
    try:
        yield daemon, server
    finally:
        await asyncio.wait_for(server.close(), WAIT)


@contextlib.asynccontextmanager
async def linked(port: int, **kw):
    hooks = Hooks()
    link = TcpLink(f"127.0.0.1:{port}", **kw)
    await asyncio.wait_for(link.open(hooks), WAIT)
    try:
        yield link, hooks
    finally:
        await asyncio.wait_for(link.close(), WAIT)


async def raw_client(port: int, *frames: cp.Frame, rcvbuf: int | None = None):
    sock = socket.socket()
    if rcvbuf is not None:  # before connecting, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    for frame in frames:
        writer.write(cp.encode(frame))
    await writer.drain()
    return reader, writer


def shrink_daemon_side(server, writer) -> None:
    """Pin the daemon-side send buffer of this client small (no kernel autotuning), so
    that a client that does not read fills the daemon's backlog quickly."""
    local = writer.get_extra_info("sockname")
    for conn in server.sessions:
        if conn.peer == f"{local[0]}:{local[1]}":
            conn._transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, 8192
            )
            return
    raise AssertionError("no daemon-side connection for this client")


async def read_frames(reader: asyncio.StreamReader, until, limit: float = WAIT) -> list:
    decoder = cp.FrameDecoder()
    frames: list = []
    async with asyncio.timeout(limit):
        while not until(frames):
            data = await reader.read(65536)
            if not data:
                break
            frames += decoder.feed(data)
    return frames


def illegal_of(frames: list) -> list[Message]:
    """The CLIENT.ILLEGAL_PUBLISH advisories among ``frames``."""
    advisories = [Message.from_bytes(f.message) for f in frames if type(f) is cp.Advisory]
    return [a for a in advisories if a.subject.endswith("CLIENT.ILLEGAL_PUBLISH")]


def illegal_counted(frames: list) -> int:
    """Illegal publishes the advisories among ``frames`` report: one advisory a second per
    client and subject stands for all of them (``count``)."""
    return sum(a["count"] for a in illegal_of(frames))


async def test_round_trip_between_two_links_and_hello_fields():
    async with (
        serving() as (daemon, server),
        linked(server.port, service="7777", description="one", reliability=3.0) as (a, _ha),
        linked(server.port) as (b, hb),
    ):
        assert a.inbox_prefix.startswith("_INBOX.") and a.inbox_prefix != b.inbox_prefix
        assert a.daemon_info["port"] == server.port and a.daemon_info["pid"] > 0
        assert daemon.attached[0] == {"service": "7777", "network": None, "reliability": 3.0}
        b.add_interest("A.>")
        await b.ping()
        a.publish_many([Message("A.B", {"n": n}) for n in range(100)])
        a.publish(Message("A.C", {"s": "x" * 70000}))
        got = [await hb.next_message() for _ in range(101)]
        assert [m["n"] for m in got[:100]] == list(range(100))
        assert got[100]["s"] == "x" * 70000
        b.remove_interest("A.>")
        await b.ping()
        a.publish(Message("A.B", {"n": -1}))
        await a.ping()
        await b.ping()
        assert hb.messages.empty()
        assert len(server.sessions) == 2


async def test_illegal_subject_gets_an_advisory_not_a_drop():
    async with serving() as (_, server):
        wire = Message("_RV.FAKE.ADVISORY", {"x": 1}).to_bytes()
        reader, writer = await raw_client(server.port, cp.Hello(), cp.Publish([wire]), cp.Ping(5))
        frames = await read_frames(reader, lambda fs: any(type(f) is cp.Pong for f in fs))
        advisories = [Message.from_bytes(f.message) for f in frames if type(f) is cp.Advisory]
        assert advisories[0].subject == "_RV.ERROR.SYSTEM.CLIENT.ILLEGAL_PUBLISH"
        assert advisories[0]["sub"] == "_RV.FAKE.ADVISORY"
        assert server.stats.illegal_publish == 1 and server.stats.dropped_protocol == 0
        writer.close()


def decode_verdict(wire: bytes) -> str:
    """The server's verdict on one published message as it was when it decoded every
    message in full: "protocol" (ERROR and close), "illegal" (ILLEGAL_PUBLISH) or "ok"."""
    subject = Payload(data=wire).subject
    if not subject:
        return "protocol"
    try:
        validate_subject(subject, wildcards=True)
        check_client_subject(subject)
    except (rv.InvalidSubject, rv.NotPermitted):
        return "illegal"
    try:
        Message.from_bytes(wire)
    except rv.MalformedMessage:
        return "protocol"
    return "ok"


def mutated_wires(wire: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        buf = bytearray(wire)
        kind = rng.randrange(3)
        if kind == 0:
            for _ in range(rng.randint(1, 2)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif kind == 1:
            del buf[rng.randrange(len(buf)) :]
        else:
            pos = rng.randrange(len(buf))
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        out.append(bytes(buf))
    return out


async def test_the_server_refuses_what_a_full_decode_refused():
    """The server checks a published message with codec.check instead of decoding it:
    on mutations of a message (subject, names, values, lengths) it refuses exactly what
    the decode refused, and passes the rest on byte for byte."""
    base = Message("ORDERS.X", {"payload": b"x" * 16, "n": 5, "s": "h\u00e9llo"}).to_bytes()
    # The verdict on a subject comes before the check of the rest (illegal, then malformed).
    advisory = Message("_RV.FAKE", {"x": 1}).to_bytes()
    empty_element = base.replace(b"ORDERS.X", b"ORDERS..")
    bad_inbox = base.replace(b"ORDERS.X", b"_INBOX..")  # a reply's subject, checked apart
    illegal = [advisory, advisory[:-2], empty_element, empty_element[:-2], bad_inbox]
    inbox = base.replace(b"ORDERS.X", b"_INBOX.X")
    wires = [base, inbox, inbox[:-2], *illegal, *mutated_wires(base, random.Random(20261124), 80)]
    verdicts = {decode_verdict(w) for w in wires}
    assert verdicts == {"ok", "illegal", "protocol"}  # the mutations reach every outcome
    async with serving() as (_, server):
        for wire in wires:
            expected = decode_verdict(wire)
            reader, writer = await raw_client(
                server.port, cp.Hello(), cp.Listen(">"), cp.Publish([wire]), cp.Ping(7)
            )
            frames = await read_frames(
                reader, lambda fs: any(type(f) in (cp.Pong, cp.Error) for f in fs)
            )
            writer.close()
            errors = [f for f in frames if type(f) is cp.Error]
            advisories = [Message.from_bytes(f.message) for f in frames if type(f) is cp.Advisory]
            illegal = [a for a in advisories if a.subject.endswith("CLIENT.ILLEGAL_PUBLISH")]
            delivered = [m for f in frames if type(f) is cp.Deliver for m in f.messages]
            if expected == "protocol":
                assert [e.code for e in errors] == ["PROTOCOL"], wire
            elif expected == "illegal":
                assert not errors and len(illegal) == 1, wire
            else:
                assert not errors and not illegal, wire
                subject = Payload(data=wire).subject
                assert delivered == ([wire] if subject_matches(">", subject) else []), wire


async def test_every_illegal_publish_is_refused_also_when_its_verdict_is_remembered():
    """The server remembers its verdict per subject: the second and third publish to the
    same illegal subject are refused and reported like the first, legal ones pass."""
    async with serving() as (_, server):
        bad = Message("_RV.FAKE.ADVISORY", {"x": 1}).to_bytes()
        good = Message("A.B", {"x": 1}).to_bytes()
        reader, writer = await raw_client(
            server.port, cp.Hello(), cp.Publish([bad, good, bad]), cp.Publish([bad]), cp.Ping(5)
        )
        frames = await read_frames(reader, lambda fs: illegal_counted(fs) >= 3)
        illegal = illegal_of(frames)
        assert {a["sub"] for a in illegal} == {"_RV.FAKE.ADVISORY"}
        assert illegal_counted(frames) == 3 and len(illegal) == 2  # the first, then the rest
        assert server.stats.illegal_publish == 3
        writer.close()


async def test_a_run_of_one_subject_is_checked_message_by_message():
    """A run of one subject skips the subject's checks after its first message, not the
    rest: an illegal subject inside a run, or a malformed message of the run's subject,
    is still refused; the legal messages are delivered in order."""
    async with serving() as (_, server):
        good = [Message("RUN.A", {"n": n}).to_bytes() for n in range(6)]
        bad = Message("_RV.FAKE.ADVISORY", {"x": 1}).to_bytes()
        reader, writer = await raw_client(
            server.port,
            cp.Hello(),
            cp.Listen("RUN.>"),
            cp.Publish([good[0], good[1], bad, bad, good[2], good[3]]),
            cp.Ping(5),
        )
        frames = await read_frames(reader, lambda fs: illegal_counted(fs) >= 2)
        delivered = [m for f in frames if type(f) is cp.Deliver for m in f.messages]
        assert delivered == good[:4]
        assert {a["sub"] for a in illegal_of(frames)} == {"_RV.FAKE.ADVISORY"}
        assert illegal_counted(frames) == 2
        writer.close()
        # A malformed message of the run's subject, in the middle of the run.
        reader, writer = await raw_client(
            server.port,
            cp.Hello(),
            cp.Publish([good[4], good[5], good[5][:-2], good[5]]),
            cp.Ping(6),
        )
        frames = await read_frames(
            reader, lambda fs: any(type(f) in (cp.Pong, cp.Error) for f in fs)
        )
        assert [f.code for f in frames if type(f) is cp.Error] == ["PROTOCOL"]
        writer.close()


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00\x00\x00\x05\x63hello",  # unknown frame type
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # not the protocol at all
        cp.encode(cp.Hello()) + struct.pack(">IB", 3, cp.FrameType.LISTEN) + b"\x92\x01",
        cp.encode(cp.Hello()) + cp.encode(cp.Publish([b"not a message"])),
        cp.encode(cp.Listen("A.B")),  # before HELLO
        cp.encode(cp.Hello()) + cp.encode(cp.Hello()),  # a second HELLO
        cp.encode(cp.Hello()) + cp.encode(cp.Deliver([])),  # a frame only daemons send
    ],
)
async def test_garbage_drops_only_that_client(junk):
    async with serving() as (daemon, server), linked(server.port) as (good, hooks):
        good.add_interest("OK")
        await good.ping()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(junk)
        frames = await read_frames(reader, lambda fs: False)  # until the server closes
        assert any(type(f) is cp.Error and f.code == "PROTOCOL" for f in frames)
        writer.close()
        assert server.stats.dropped_protocol == 1
        assert len(daemon.sessions) == 1  # the bad client's session (if any) is gone
        good.publish(Message("OK", {"still": True}))
        assert (await hooks.next_message())["still"] is True


async def test_cut_mid_frame_is_counted_and_harmless():
    async with serving() as (daemon, server), linked(server.port) as (good, hooks):
        good.add_interest("OK")
        wire = Message("OK", {"n": 1}).to_bytes()
        frame = cp.encode(cp.Publish([wire]))
        _reader, writer = await raw_client(server.port, cp.Hello())
        writer.write(frame[: len(frame) // 2])
        await writer.drain()
        await good.ping()
        writer.close()
        async with asyncio.timeout(WAIT):
            while server.stats.cut_mid_frame == 0:
                await asyncio.sleep(0.01)
        assert len(daemon.sessions) == 1
        good.publish(Message("OK", {"n": 2}))
        assert (await hooks.next_message())["n"] == 2  # the half message never arrived


async def test_refused_hello_raises_the_daemon_reason():
    refusing = MiniDaemon(refuse=rv.NotPermitted("service 7500 is bound to another network"))
    async with serving(refusing) as (_, server):
        link = TcpLink(f"127.0.0.1:{server.port}")
        with pytest.raises(rv.NotPermitted, match="bound to another network"):
            await asyncio.wait_for(link.open(Hooks()), WAIT)
        assert server.stats.refused == 1


async def test_wrong_version_is_refused():
    async with serving() as (_, server):
        reader, writer = await raw_client(server.port, cp.Hello(version=99))
        frames = await read_frames(reader, lambda fs: False)
        assert frames[0].code == "VERSION" and "99" in frames[0].text
        writer.close()


async def test_nothing_listening_names_host_and_port():
    port = tcplink_free_port()
    link = TcpLink(f"127.0.0.1:{port}")
    with pytest.raises(rv.DaemonUnavailable, match=f"127.0.0.1:{port}"):
        await asyncio.wait_for(link.open(Hooks()), WAIT)


def tcplink_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_slow_consumer_loses_oldest_and_hears_it_first():
    limit = 64 * 1024
    async with (
        serving(max_consumer_buffer=limit) as (_, server),
        linked(server.port) as (
            publisher,
            _,
        ),
        linked(server.port) as (fast, fast_hooks),
    ):
        reader, writer = await raw_client(
            server.port, cp.Hello(), cp.Listen("DATA"), cp.Ping(1), rcvbuf=4096
        )
        await read_frames(reader, lambda fs: any(type(f) is cp.Pong for f in fs))
        shrink_daemon_side(server, writer)
        fast.add_interest("DATA")
        await fast.ping()
        total = 3000
        payload = "x" * 1000
        for start in range(0, total, 100):
            publisher.publish_many(
                [Message("DATA", {"n": n, "p": payload}) for n in range(start, start + 100)]
            )
            await asyncio.sleep(0)
        # The fast consumer gets everything, in order.
        got = [(await fast_hooks.next_message())["n"] for _ in range(total)]
        assert got == list(range(total))
        async with asyncio.timeout(WAIT):
            while server.stats.messages_dropped == 0:
                await asyncio.sleep(0.01)
        # The slow one now reads: whatever reached its socket first, then the advisory,
        # then the newest messages; the oldest of the backlog are gone.
        frames = await read_frames(
            reader,
            lambda fs: any(
                type(f) is cp.Deliver and Message.from_bytes(f.messages[-1])["n"] == total - 1
                for f in fs
            ),
        )
        numbers = []
        advisory_at = None
        reported = 0
        for f in frames:
            if type(f) is cp.Advisory:
                adv = Message.from_bytes(f.message)
                assert adv.subject == "_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER"
                advisory_at = len(numbers) if advisory_at is None else advisory_at
                assert adv["reason"] == "size limit"
                assert adv["bytes_dropped"] > 0
                reported += adv["dropped"]
            elif type(f) is cp.Deliver:
                numbers += [Message.from_bytes(w)["n"] for w in f.messages]
        assert advisory_at is not None
        assert numbers == sorted(numbers) and numbers[-1] == total - 1
        assert reported == server.stats.messages_dropped
        assert len(numbers) + server.stats.messages_dropped == total
        writer.close()


async def test_messages_waiting_too_long_are_dropped_for_time(monkeypatch):
    async with (
        serving(max_consumer_buffer=1 << 30, consumer_time_limit=0.2) as (
            _,
            server,
        ),
        linked(server.port) as (publisher, _),
    ):
        reader, writer = await raw_client(
            server.port, cp.Hello(), cp.Listen("T"), cp.Ping(1), rcvbuf=4096
        )
        await read_frames(reader, lambda fs: any(type(f) is cp.Pong for f in fs))
        shrink_daemon_side(server, writer)
        blob = "y" * 4000
        for _ in range(40):
            publisher.publish_many([Message("T", {"p": blob}) for _ in range(50)])
            await publisher.ping()
        async with asyncio.timeout(WAIT):
            while server.stats.messages_dropped == 0:
                await asyncio.sleep(0.05)
        frames = await read_frames(reader, lambda fs: any(type(f) is cp.Advisory for f in fs))
        adv = Message.from_bytes(next(f.message for f in frames if type(f) is cp.Advisory))
        assert adv["reason"] == "time limit"
        writer.close()


async def test_reconnect_presents_disconnected_then_connected_and_relistens(monkeypatch):
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.1)
    async with serving() as (_, server):
        port = server.port
        async with linked(port) as (link, hooks), linked(port) as (other, _):
            link.add_interest("R.>")
            await link.ping()
            await server.close()
            down = await hooks.advisory("RVD.DISCONNECTED")
            assert down.subject == "_RV.WARN.SYSTEM.RVD.DISCONNECTED"
            assert down["daemon"] == f"127.0.0.1:{port}"
            with pytest.raises(rv.DaemonUnavailable, match="reconnecting"):
                link.publish(Message("R.X"))
            async with serving(port=port) as (daemon2, _server2):
                up = await hooks.advisory("RVD.CONNECTED")
                assert up.subject == "_RV.INFO.SYSTEM.RVD.CONNECTED"
                assert link.reconnects == 1
                (session,) = [s for s in daemon2.sessions if s.owner is not None][:1]
                await link.ping()
                async with asyncio.timeout(WAIT):
                    while not other.connected:
                        await asyncio.sleep(0.02)
                other.publish(Message("R.Y", {"back": 1}))
                assert (await hooks.next_message())["back"] == 1
                assert session is not None


async def test_close_while_disconnected_stops_reconnecting(monkeypatch):
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.05)
    async with serving() as (_, server):
        hooks = Hooks()
        link = TcpLink(f"127.0.0.1:{server.port}")
        await link.open(hooks)
    await hooks.advisory("RVD.DISCONNECTED")
    await asyncio.wait_for(link.close(), WAIT)
    assert link.closed
    with pytest.raises(rv.TransportClosed):
        link.publish(Message("A"))


async def _fake_daemon_that_never_reads(port_holder: list, ready: asyncio.Event):
    """A daemon stand-in that welcomes, then neither reads nor answers."""

    async def handle(reader, writer):
        decoder = cp.FrameDecoder()
        while True:
            frames = decoder.feed(await reader.read(4096))
            if any(type(f) is cp.Hello for f in frames):
                break
        writer.write(cp.encode(cp.Welcome("_INBOX.FAKE.", {"pid": 0})))
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await asyncio.sleep(3600)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port_holder.append(server.sockets[0].getsockname()[1])
    ready.set()
    return server


async def test_fast_producer_waits_and_is_told(monkeypatch):
    monkeypatch.setattr(tcplink, "FAST_PRODUCER_AFTER", 0.2)
    ports: list[int] = []
    server = await _fake_daemon_that_never_reads(ports, asyncio.Event())
    try:
        async with linked(ports[0]) as (link, hooks):
            blob = b"z" * 65536
            waiter = None
            async with asyncio.timeout(WAIT):
                while waiter is None:
                    waiter = link.publish(Message("F", {"b": blob}))
                    await asyncio.sleep(0)
            adv = await hooks.advisory("CLIENT.FASTPRODUCER")
            assert adv.subject == "_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER"
            assert adv["waiting"] >= 1
            assert not waiter.done()
    finally:
        server.close()


async def test_silent_daemon_is_taken_for_dead(monkeypatch):
    monkeypatch.setattr(tcplink, "HEARTBEAT_INTERVAL", 0.05)
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.05)
    ports: list[int] = []
    server = await _fake_daemon_that_never_reads(ports, asyncio.Event())
    try:
        async with linked(ports[0]) as (_link, hooks):
            down = await hooks.advisory("RVD.DISCONNECTED")
            assert "silent" in down["reason"]
    finally:
        server.close()


async def test_timer_batch_mode_sends_later_in_one_frame():
    async with serving() as (_, server), linked(server.port, batch=True) as (link, hooks):
        assert link.batch == tcplink.TIMER_BATCH_INTERVAL
        link.add_interest("B")
        for n in range(10):
            link.publish(Message("B", {"n": n}))
        got = [(await hooks.next_message())["n"] for _ in range(10)]
        assert got == list(range(10))
    with pytest.raises(rv.InvalidArgument, match="batch"):
        TcpLink("127.0.0.1:7500", batch=5)


async def test_server_close_says_bye_and_counts(monkeypatch):
    monkeypatch.setattr(server_mod, "HELLO_TIMEOUT", 0.1)
    async with serving() as (_, server):
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        frames = await read_frames(reader, lambda fs: False)
        assert frames[0].code == "PROTOCOL" and "HELLO" in frames[0].text
        assert type(frames[-1]) is cp.Bye
        writer.close()


async def test_messages_published_just_before_close_still_go_out():
    async with serving() as (_, server), linked(server.port) as (_receiver, hooks):
        _receiver.add_interest("LAST")
        await _receiver.ping()
        link = TcpLink(f"127.0.0.1:{server.port}")
        await link.open(Hooks())
        link.publish(Message("LAST", {"n": 1}))
        await link.close()
        assert (await hooks.next_message())["n"] == 1


async def test_a_message_of_the_maximum_size_crosses_the_client_port():
    from rvasync._wire import MAX_MESSAGE_SIZE

    async with serving() as (_, server), linked(server.port) as (link, hooks):
        link.add_interest("BIG")
        blob = bytes(MAX_MESSAGE_SIZE - 200)
        link.publish(Message("BIG", {"b": blob}))
        got = await hooks.next_message()
        assert len(got["b"]) == len(blob)
        with pytest.raises(rv.MessageTooLarge):
            link.publish(Message("BIG", {"b": bytes(MAX_MESSAGE_SIZE)}))
        adv = await hooks.advisory("DATALOSS.MSG_TOO_LARGE")
        assert adv.subject == "_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE"
        assert str(adv["host"]) == "127.0.0.1" and adv["lost"] > 1000


async def test_daemon_max_consumer_buffer_is_a_validated_parameter():
    daemon = rv.Daemon(listen=0, max_consumer_buffer=4096)
    await daemon.start()
    try:
        assert daemon._server.max_consumer_buffer == 4096
        assert daemon._server.info()["version"] == rv.__version__
    finally:
        await asyncio.wait_for(daemon.stop(), WAIT)
    for bad in (0, -1, 1.5, True, "4096"):
        with pytest.raises(rv.InvalidArgument, match="max_consumer_buffer"):
            rv.Daemon(listen=0, max_consumer_buffer=bad)
