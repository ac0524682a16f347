"""Standalone daemons over real loopback: processes, auto-start, restart, bad and slow clients.

Every daemon and client here is a real process (or a transport of the test's
own loop) talking TCP on 127.0.0.1. Every wait is bounded and every process
is killed (its whole process group) when the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

import rvasync as rv
from rvasync.message import Message
from rvasync.protocol import clientproto as cp
from rvasync.pytest_plugin import _await_ready, stop_process_group
from rvasync.testing import free_port
from rvasync.transport import tcplink
from rvasync.transport.network import Transport

WAIT = 20.0

# A client program: one transport on a standalone daemon, driven by argv.
PEER = textwrap.dedent(
    """
    import asyncio, json, sys
    from rvasync.jsonform import to_jsonable
    from rvasync.message import Message
    from rvasync.queues import Queue
    from rvasync.transport.network import Transport

    async def main(role, daemon, service, subject, count):
        async with Transport(service, daemon=daemon, description=role) as t:
            if role == "listen":
                queue = Queue()  # messages and advisories, in arrival order
                t.listen(subject, queue=queue)
                t.listen("_RV.*.SYSTEM.>", queue=queue)
                await t.link.ping()
                print("READY", flush=True)
                got = 0
                while got < count:
                    msg = await queue.get(60)
                    print(json.dumps(to_jsonable(msg)), flush=True)
                    if not msg.subject.startswith("_RV."):
                        got += 1
            elif role == "serve":
                listener = t.listen(subject)
                await t.link.ping()
                print("READY", flush=True)
                for _ in range(count):
                    request = await listener.get(60)
                    await t.send_reply(Message(fields={"n": request["n"] + 1}), request)
                await t.link.ping()
            elif role == "request":
                for n in range(count):
                    reply = await t.send_request(Message(subject, {"n": n}), 10)
                    print(json.dumps({"n": n, "reply": reply["n"]}), flush=True)
        return 0

    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
                              int(sys.argv[5]))))
    """
)


@contextlib.contextmanager
def processes():
    """Start processes in their own groups; kill every group on exit."""
    started: list[subprocess.Popen] = []

    def start(*args: str, stdout=subprocess.PIPE) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            stop_process_group(proc)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


async def read_line(proc: subprocess.Popen, timeout: float = WAIT) -> str:
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if not line:
        err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
        raise AssertionError(f"process ended early (status {proc.poll()}): {err}")
    return line.decode().strip()


async def wait_exit(proc: subprocess.Popen, timeout: float = WAIT) -> int:
    return await asyncio.wait_for(asyncio.to_thread(proc.wait), timeout)


@pytest.fixture
def peer(tmp_path):
    path = tmp_path / "peer.py"
    path.write_text(PEER)
    return str(path)


def start_daemon(start, port: int = 0, *extra: str) -> tuple[subprocess.Popen, int]:
    proc = start("-m", "rvasync", "daemon", "--listen", str(port), *extra)
    return proc, _await_ready(proc, _Errors(proc))


class _Errors:
    """Lets _await_ready report a daemon's stderr from a pipe."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    def seek(self, _: int) -> None:
        pass

    def read(self) -> bytes:
        return self.proc.stderr.read() if self.proc.poll() is not None else b""


async def test_two_client_processes_exchange_messages_and_requests(rv_daemon, rv_service, peer):
    service = rv_service[0]
    with processes() as start:
        listener = start(peer, "listen", rv_daemon, service, "ORDERS.>", "3")
        server = start(peer, "serve", rv_daemon, service, "PRICE", "5")
        assert await read_line(listener) == "READY"
        assert await read_line(server) == "READY"
        async with Transport(service, daemon=rv_daemon) as sender:
            for n in range(3):
                await sender.send(Message(f"ORDERS.{n}", {"n": n}))
        got = []
        while len(got) < 3:
            form = json.loads(await read_line(listener))
            if not form["subject"].startswith("_RV."):  # the sender's UNREACHABLE, for one
                got.append(form)
        assert [m["subject"] for m in got] == ["ORDERS.0", "ORDERS.1", "ORDERS.2"]
        assert [m["fields"][0]["value"] for m in got] == [0, 1, 2]
        requester = start(peer, "request", rv_daemon, service, "PRICE", "5")
        replies = [json.loads(await read_line(requester)) for _ in range(5)]
        assert replies == [{"n": n, "reply": n + 1} for n in range(5)]
        for proc in (listener, server, requester):
            assert await wait_exit(proc) == 0


async def test_bare_port_auto_starts_a_daemon_and_two_part_does_not(rv_service, monkeypatch):
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.2)
    port = free_port(socket.SOCK_STREAM)
    with pytest.raises(rv.DaemonUnavailable, match=f"127.0.0.1:{port}"):
        await Transport(rv_service[0], daemon=f"127.0.0.1:{port}").open()
    transport = Transport(rv_service[0], daemon=str(port))
    pid = None
    try:
        await asyncio.wait_for(transport.open(), WAIT)
        link = transport.link
        pid = link.started_daemon_pid
        assert pid is not None and pid != os.getpid()
        assert link.daemon_info["pid"] == pid and link.daemon_info["port"] == port
        listener = transport.listen("AUTO")
        await transport.send(Message("AUTO", {"ok": True}))
        assert (await listener.get(WAIT))["ok"] is True
        # A second transport finds the running daemon and starts none.
        async with Transport(rv_service[0], daemon=str(port)) as second:
            assert second.link.started_daemon_pid is None
            assert second.link.daemon_info["pid"] == pid
        # The daemon dies: the transport starts another one by itself and carries on.
        status = transport.listen("_RV.*.SYSTEM.RVD.>")
        os.killpg(pid, signal.SIGKILL)
        assert (await status.get(WAIT)).subject == "_RV.WARN.SYSTEM.RVD.DISCONNECTED"
        assert (await status.get(WAIT)).subject == "_RV.INFO.SYSTEM.RVD.CONNECTED"
        pid = link.started_daemon_pid
        assert pid is not None and link.daemon_info["pid"] == pid
        await transport.send(Message("AUTO", {"again": True}))
        assert (await listener.get(WAIT))["again"] is True
    finally:
        await transport.close()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


async def test_daemon_killed_and_restarted_client_reconnects_and_resumes(rv_service, monkeypatch):
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.2)
    service = rv_service[0]
    port = free_port(socket.SOCK_STREAM)
    where = f"127.0.0.1:{port}"
    with processes() as start:
        daemon, _ = start_daemon(start, port)
        async with Transport(service, daemon=where) as client:
            data = client.listen("FEED")
            status = client.listen("_RV.*.SYSTEM.RVD.>")
            await client.link.ping()
            os.killpg(daemon.pid, signal.SIGKILL)
            down = await status.get(WAIT)
            assert down.subject == "_RV.WARN.SYSTEM.RVD.DISCONNECTED"
            with pytest.raises(rv.DaemonUnavailable):
                await client.send(Message("FEED", {"lost": True}))
            start_daemon(start, port)
            up = await status.get(WAIT)
            assert up.subject == "_RV.INFO.SYSTEM.RVD.CONNECTED"
            await client.link.ping()
            # Interests came back with the link: another client's message arrives.
            async with Transport(service, daemon=where) as other:
                await other.send(Message("FEED", {"n": 1}))
            assert (await data.get(WAIT))["n"] == 1
            # And the client can send, request and make inboxes again.
            await client.send(Message("FEED", {"n": 2}))
            assert (await data.get(WAIT))["n"] == 2
            assert client.create_inbox().startswith(client.link.inbox_prefix)


async def test_one_frame_of_mixed_messages_arrives_in_order(rv_daemon, rv_service):
    """A PUBLISH frame mixing messages for one client alone (batched by the daemon), for
    two clients, and to the client's inbox reaches that client in the order sent."""
    host, port = rv_daemon.split(":")
    async with (
        Transport(rv_service[0], daemon=rv_daemon) as mine,
        Transport(rv_service[0], daemon=rv_daemon) as other,
    ):
        queue = rv.Queue()
        inbox = mine.create_inbox()
        for subject in ("ORD.X", "ORD.BOTH", inbox):
            mine.listen(subject, queue=queue)
        shared = other.listen("ORD.BOTH")
        await mine.link.ping()
        await other.link.ping()
        subjects = ["ORD.X", "ORD.X", inbox, "ORD.X", "ORD.BOTH", "ORD.X", inbox, "ORD.X"]
        wires = [Message(s, {"n": n}).to_bytes() for n, s in enumerate(subjects)]
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(cp.encode(cp.Hello(service=rv_service[0])) + cp.encode(cp.Publish(wires)))
        await writer.drain()
        got = [await queue.get(WAIT) for _ in subjects]
        assert [(m.subject, m["n"]) for m in got] == [
            (subject, n) for n, subject in enumerate(subjects)
        ]
        assert (await shared.get(WAIT))["n"] == 4
        writer.close()


async def test_garbage_client_is_dropped_and_others_keep_working(rv_daemon, rv_service):
    host, port = rv_daemon.split(":")
    async with Transport(rv_service[0], daemon=rv_daemon) as good:
        listener = good.listen("STILL.OK")
        await good.link.ping()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(cp.encode(cp.Hello(service=rv_service[0])))
        writer.write(b"\x00\x00\x00\x09\x06garbage!")  # a PUBLISH that is not msgpack
        decoder = cp.FrameDecoder()
        frames = []
        async with asyncio.timeout(WAIT):
            while chunk := await reader.read(4096):
                frames += decoder.feed(chunk)
        writer.close()
        assert [type(f) for f in frames] == [cp.Welcome, cp.Error, cp.Bye]
        assert frames[1].code == "PROTOCOL"
        # A client cut off in the middle of a frame harms nobody either.
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(cp.encode(cp.Hello(service=rv_service[0])) + b"\x00\x10\x00\x00\x06abc")
        await writer.drain()
        writer.close()
        await good.send(Message("STILL.OK", {"n": 1}))
        assert (await listener.get(WAIT))["n"] == 1


async def test_stopped_client_is_a_slow_consumer_others_are_unaffected(rv_service, peer):
    service = rv_service[0]
    total, blob = 4000, "x" * 10000  # 40 MB: more than every socket buffer on the way
    with processes() as start:
        _, port = start_daemon(start, 0, "--max-consumer-buffer", "65536")
        where = f"127.0.0.1:{port}"
        slow = start(peer, "listen", where, service, "BULK", str(total))
        assert await read_line(slow) == "READY"
        os.kill(slow.pid, signal.SIGSTOP)
        try:
            async with (
                Transport(service, daemon=where) as fast,
                Transport(service, daemon=where) as sender,
            ):
                bulk = fast.listen("BULK")
                await fast.link.ping()
                # Paced by the fast consumer (one batch in flight), so only the stopped
                # client falls behind: the tiny limit would catch a flooded one too.
                got: list[int] = []
                for start_n in range(0, total, 20):
                    await sender.send_many(
                        [Message("BULK", {"n": n, "p": blob}) for n in range(start_n, start_n + 20)]
                    )
                    got += [(await bulk.get(WAIT))["n"] for _ in range(20)]
                assert got == list(range(total))
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        numbers: list[int] = []
        advisory = None
        async with asyncio.timeout(WAIT):
            while not numbers or numbers[-1] != total - 1:
                form = json.loads(await read_line(slow))
                if form["subject"] == "_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER":
                    advisory = advisory or {f["name"]: f["value"] for f in form["fields"]}
                elif form["subject"] == "BULK":
                    numbers.append(form["fields"][0]["value"])
        assert advisory is not None
        assert advisory["reason"] == "size limit" and advisory["dropped"] > 0
        assert numbers == sorted(numbers) and len(numbers) < total


def test_a_client_on_uvloop_talks_to_a_standalone_daemon(rv_daemon, rv_service):
    """The client link runs on uvloop too (its TCP transport is not an asyncio.Transport)."""
    uvloop = pytest.importorskip("uvloop")
    service, network = rv_service

    async def exchange() -> int:
        async with rv.Transport(service, network, rv_daemon) as transport:
            listener = transport.listen("UVLOOP.CHECK")
            await transport.link.ping()
            await transport.send(rv.Message("UVLOOP.CHECK", {"n": 7}))
            msg = await listener.get(10)
            return int(msg["n"])

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(exchange()) == 7


async def test_a_killed_daemon_reports_what_may_have_been_lost_with_it(rv_service, monkeypatch):
    """Issue #24 item 8: messages send() accepted but the daemon never confirmed are counted
    on RVD.DISCONNECTED (``unconfirmed``); every other message arrives or is reported lost."""
    monkeypatch.setattr(tcplink, "RECONNECT_MAX_DELAY", 0.2)
    service = rv_service[0]
    port = free_port(socket.SOCK_STREAM)
    with processes() as start:
        daemon, _ = start_daemon(start, port)
        async with (
            Transport(service) as receiver,  # its own in-process daemon, on the service
            Transport(service, daemon=f"127.0.0.1:{port}") as sender,
        ):
            feed = receiver.listen("FEED")
            losses = receiver.listen("_RV.ERROR.SYSTEM.DATALOSS.>")
            status = sender.listen("_RV.*.SYSTEM.RVD.>")
            await sender.send(Message("FEED", {"n": -1}))
            assert (await feed.get(WAIT))["n"] == -1  # both daemons know each other
            sent = 0
            killed = False
            while True:
                try:
                    await sender.send(Message("FEED", {"n": sent}))
                except rv.DaemonUnavailable:
                    break
                sent += 1
                if sent == 300 and not killed:
                    os.killpg(daemon.pid, signal.SIGKILL)
                    killed = True
                if sent % 50 == 0:
                    await asyncio.sleep(0)  # let the link flush and notice the loss
            down = await status.get(WAIT)
            assert down.subject == "_RV.WARN.SYSTEM.RVD.DISCONNECTED"
            unconfirmed = down["unconfirmed"]
            assert 0 <= unconfirmed <= sent + 1  # + the first message (n = -1)
            got = [m async for m in _until_quiet(feed)]
            reported = sum(
                m.get("messages", 0) or 0 for m in [m async for m in _until_quiet(losses)]
            )
            assert len(got) + unconfirmed + reported >= sent, (len(got), unconfirmed, sent)


async def _until_quiet(listener, quiet: float = 1.0):
    """What ``listener`` gets until nothing more comes for ``quiet`` seconds."""
    while True:
        try:
            yield await listener.get(quiet)
        except TimeoutError:
            return
