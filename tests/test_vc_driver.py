"""Virtual circuit terminals over every transport kind, in one process.

The invitation paradigm over the process transport, a network transport
with its in-process daemon, and a standalone daemon; ordered delivery both
ways, request/reply on a circuit, the advisories, the end of a circuit (a
deliberate close, the employed transport closing), exclusivity against a
third transport, and the error of every misuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest

import rvasync as rv
from rvasync.protocol.vc import Frame, FrameKind, frame_to_message

WAIT = 15.0
FAST = {"heartbeat": 0.2, "silence": 3.0}  # short, yet robust on a loaded machine


@contextlib.asynccontextmanager
async def employed(
    kind: str, rv_service: tuple[str, str], daemon: str | None
) -> AsyncIterator[tuple[rv.ProcessTransport | rv.Transport, rv.ProcessTransport | rv.Transport]]:
    """Two transports of one kind for the two terminals (the same one for the process kind).

    ``direct``: network transports with two-part services (direct communication).
    """
    if kind == "process":
        t = rv.process_transport()
        try:
            yield t, t
        finally:
            t.shutdown()
        return
    service, network = rv_service
    if kind == "direct":
        service += ":"  # both enabled: the circuit's frames travel directly
    async with (
        rv.Transport(service, network, daemon=daemon) as a,
        rv.Transport(service, network, daemon=daemon) as b,
    ):
        yield a, b
        if kind == "direct":
            assert a.direct is not None and b.direct is not None
            assert a.direct.sent > 0 and b.direct.sent > 0


@pytest.fixture(params=["process", "network", "standalone", "direct"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def daemon_arg(kind: str, request: pytest.FixtureRequest) -> str | None:
    if kind != "standalone":
        return None
    return str(request.getfixturevalue("rv_daemon"))


async def invite(
    ta: rv.ProcessTransport | rv.Transport, tb: rv.ProcessTransport | rv.Transport
) -> tuple[rv.VcTransport, rv.VcTransport, rv.Listener, rv.Listener]:
    """The spec's paradigm: A asks, B accepts and invites, A connects; both test it."""
    requests = tb.listen("VC.ASK")

    async def acceptor() -> tuple[rv.VcTransport, rv.Listener]:
        request = await requests.get(WAIT)
        vc = rv.VcTransport.accept(tb, **FAST)
        adv = vc.listen("_RV.*.SYSTEM.VC.>")
        invitation = rv.Message(fields={"welcome": 1}, reply_subject=vc.connect_subject)
        await tb.send_reply(invitation, request)
        return vc, adv

    accepting = asyncio.ensure_future(acceptor())
    invitation = await ta.send_request(rv.Message("VC.ASK", {}), WAIT)
    assert invitation.reply_subject is not None
    vc_a = rv.VcTransport.connect(ta, invitation.reply_subject, **FAST)
    adv_a = vc_a.listen("_RV.*.SYSTEM.VC.>")
    vc_b, adv_b = await asyncio.wait_for(accepting, WAIT)
    requests.close_now()
    for vc, adv in ((vc_a, adv_a), (vc_b, adv_b)):
        # The two-part test: the advisory, or (missed) wait_connected(0) succeeding.
        await vc.wait_connected(WAIT)
        await vc.wait_connected(0)
        assert (await adv.get(WAIT)).subject == "_RV.INFO.SYSTEM.VC.CONNECTED"
    return vc_a, vc_b, adv_a, adv_b


async def test_circuit_over_every_transport(
    kind: str, rv_service: tuple[str, str], daemon_arg: str | None
) -> None:
    async with employed(kind, rv_service, daemon_arg) as (ta, tb):
        vc_a, vc_b, _adv_a, adv_b = await invite(ta, tb)
        got_b = vc_b.listen("DATA.>")
        got_a = vc_a.listen("DATA.>")
        n = 300
        for i in range(n):
            await vc_a.send(rv.Message(f"DATA.{i % 3}", {"i": i}))
            await vc_b.send(rv.Message("DATA.B", {"i": -i}))
        assert [(await got_b.get(WAIT))["i"] for _ in range(n)] == list(range(n))
        assert [(await got_a.get(WAIT))["i"] for _ in range(n)] == [-i for i in range(n)]

        # Request/reply on the circuit: the reply comes back over it too.
        async def serve() -> None:
            async for request in vc_b.listen("SERVICE"):
                await vc_b.send_reply(rv.Message(fields={"twice": request["x"] * 2}), request)

        server = asyncio.ensure_future(serve())
        reply = await vc_a.send_request(rv.Message("SERVICE", {"x": 21}), WAIT)
        assert reply["twice"] == 42

        # A deliberate close: INFO on both sides, then the other side is closed for good.
        await vc_a.send(rv.Message("DATA.LAST", {"i": n}))
        await vc_a.close()
        adv = await adv_b.get(WAIT)
        assert adv.subject == "_RV.INFO.SYSTEM.VC.DISCONNECTED"
        assert adv["description"] == "closed by the other terminal"
        assert (await got_b.get(WAIT))["i"] == n  # sent before the close: delivered first
        with pytest.raises(rv.TransportClosed):
            await vc_b.send(rv.Message("DATA.X", {}))
        with pytest.raises(rv.TransportClosed):
            await vc_b.wait_connected(0)
        await asyncio.wait_for(server, WAIT)  # its listener's iteration ended
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(got_b), WAIT)
        with pytest.raises(rv.TransportClosed):
            await vc_a.send(rv.Message("DATA.X", {}))
        await vc_b.close()
        with pytest.raises(rv.NotPermitted):
            await vc_b.close()
        assert vc_a.disconnected and vc_b.disconnected


async def test_employed_transport_closing_breaks_the_circuit_with_errors(
    rv_service: tuple[str, str],
) -> None:
    service, network = rv_service
    async with rv.Transport(service, network) as tb:
        ta = rv.Transport(service, network)
        await ta.open()
        _vc_a, vc_b, adv_a, adv_b = await invite(ta, tb)
        data = vc_b.listen("DATA")
        await ta.close()
        adv = await adv_b.get(WAIT)
        assert adv.subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
        adv = await adv_a.get(WAIT)
        assert adv.subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
        assert "transport" in adv["description"]
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(data), WAIT)
        with pytest.raises(rv.TransportClosed):
            await vc_b.send(rv.Message("DATA", {}))


async def test_third_transport_cannot_inject(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network) as ta,
        rv.Transport(service, network) as tb,
        rv.Transport(service, network) as intruder,
    ):
        vc_a, vc_b, _, _ = await invite(ta, tb)
        got = vc_a.listen(">")
        forged_payload = rv.Message("DATA", {"forged": True})
        # A late connector, a plain message, and frames with guessed tokens,
        # all to the accept terminal's connect subject (the one public inbox).
        for frame in (
            Frame(FrameKind.CONNECT, b"", b"i" * 16, inbox=intruder.create_inbox()),
            Frame(FrameKind.DATA, b"x" * 16, b"i" * 16, seq=1, payload=[forged_payload.to_bytes()]),
            Frame(FrameKind.CLOSE, b"x" * 16, b"i" * 16, seq=0),
            Frame(FrameKind.ABORT, b"x" * 16, b"i" * 16, text="forged"),
        ):
            intruder.send_internal(frame_to_message(frame, vc_b.connect_subject))
        await intruder.send(rv.Message(vc_b.connect_subject, {"plain": True}))
        await vc_b.send(rv.Message("DATA", {"real": True}))
        msg = await got.get(WAIT)
        assert msg.get("real") is True
        for _ in range(100):  # the forged ones travel the same path; let them all land
            if vc_b.foreign >= 5:
                break
            await asyncio.sleep(0.02)
        assert vc_b.foreign == 5
        assert len(got.queue) == 0
        assert vc_a.connected and vc_b.connected
        await vc_a.close()
        await vc_b.close()


async def test_connector_without_acceptor_fails_loudly() -> None:
    t = rv.process_transport()
    try:
        vc = rv.VcTransport.connect(t, t.create_inbox(), heartbeat=0.05, silence=0.3)
        adv = vc.listen("_RV.*.SYSTEM.VC.>")
        with pytest.raises(TimeoutError):
            await vc.wait_connected(0)
        msg = await adv.get(WAIT)
        assert msg.subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
        assert "no answer" in msg["description"]
        with pytest.raises(rv.TransportClosed):
            await vc.wait_connected(WAIT)
    finally:
        t.shutdown()


async def test_misuse_gives_clear_errors() -> None:
    t = rv.process_transport()
    try:
        acceptor = rv.VcTransport.accept(t)
        with pytest.raises(rv.NotPermitted, match="not connected yet"):
            await acceptor.send(rv.Message("X", {}))
        with pytest.raises(TimeoutError):
            await acceptor.wait_connected(0)
        with pytest.raises(TimeoutError):
            await acceptor.wait_connected(0.01)
        for bad in (-1, "1", float("nan"), True):
            with pytest.raises(rv.InvalidArgument):
                await acceptor.wait_connected(bad)  # type: ignore[arg-type]
        for subject in ("A.B", "_INBOX.*", "_INBOX.", "", "a..b"):
            with pytest.raises(rv.InvalidSubject):
                rv.VcTransport.connect(t, subject)
        with pytest.raises(rv.InvalidArgument):
            rv.VcTransport.connect(t, 42)  # type: ignore[arg-type]
        with pytest.raises(rv.InvalidArgument):
            rv.VcTransport.accept("not a transport")  # type: ignore[arg-type]
        with pytest.raises(rv.InvalidArgument):
            rv.VcTransport.accept(acceptor)
        with pytest.raises(rv.InvalidArgument):
            rv.VcTransport.accept(t, heartbeat=0)
        with pytest.raises(rv.InvalidArgument):
            rv.VcTransport.accept(t, heartbeat=2, silence=1)
        connector = rv.VcTransport.connect(t, acceptor.connect_subject)
        with pytest.raises(rv.NotPermitted, match="already connecting"):
            rv.VcTransport.connect(t, acceptor.connect_subject)
        await connector.wait_connected(WAIT)
        await connector.close()
        with pytest.raises(rv.NotPermitted, match="already closed"):
            await connector.close()
        closed = rv.Transport("7500")
        with pytest.raises(rv.TransportClosed):
            rv.VcTransport.accept(closed)  # never opened
        await acceptor.close()
    finally:
        t.shutdown()


def test_needs_a_running_loop() -> None:
    with pytest.raises(rv.NotPermitted):
        rv.VcTransport.accept(rv.Transport("7500"))


async def test_circuit_under_loss_is_complete_or_loud(rv_service: tuple[str, str]) -> None:
    """10% of the direct channels' datagrams lost both ways: in order and complete, or ERROR."""
    service, network = rv_service
    async with (
        rv.Transport(f"{service}:", network) as ta,
        rv.Transport(f"{service}:", network) as tb,
    ):
        vc_a, vc_b, _adv_a, adv_b = await invite(ta, tb)
        assert ta.direct is not None and tb.direct is not None
        rng = random.Random(16)
        ta.direct.drop = tb.direct.drop = lambda _data: rng.random() < 0.1
        got = vc_b.listen("DATA")
        n = 500
        for i in range(n):
            await vc_a.send(rv.Message("DATA", {"i": i}))
        received: list[int] = []
        while len(received) < n:
            try:
                received.append((await got.get(WAIT))["i"])
            except (TimeoutError, rv.QueueDestroyed):
                break
        assert received == list(range(len(received))), "a gap or a reordering"
        if len(received) < n:  # not complete: it must have said so
            assert (await adv_b.get(WAIT)).subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
        else:
            assert vc_a.connected and vc_b.connected
        ta.direct.drop = tb.direct.drop = None


async def test_a_burst_arrives_whole_and_later_changes_do_not_travel() -> None:
    """A burst (one loop turn) travels as a few frames and arrives in order; a message
    changed by its sender after send arrives as it was sent (the process transport hands
    the frames over in memory, so a missing snapshot would show)."""
    t = rv.process_transport()
    try:
        vc_a, vc_b, _adv_a, _adv_b = await invite(t, t)
        got = vc_b.listen("BURST")
        msgs = [rv.Message("BURST", {"i": i}) for i in range(1000)]
        for msg in msgs:
            await vc_a.send(msg)
        for msg in msgs:
            msg["i"] = -1
            msg.subject = "CHANGED"
        assert [(await got.get(WAIT))["i"] for _ in range(1000)] == list(range(1000))
        await vc_a.close()
        await vc_b.close()
    finally:
        t.shutdown()
