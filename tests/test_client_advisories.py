"""System advisories of the spec's appendix that rvasync presents where they apply.

* RETRANSMISSION.INBOUND.REQUEST_NOT_SENT: a daemon holds back its own NAKs to
  sources nobody has vouched for once this interval's budget is spent.
* CLIENT.IP_MISMATCH: a standalone client reconnected to a daemon at another address.
* CLIENT.DEFUNCT: the daemon refused a reconnection for good (its service is now
  bound to another network there); the transport stops.
* CLIENT.NOMEMORY: no memory for an inbound message; the link drops the
  connection and reconnects.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

import rvasync as rv
from rvasync import _accel
from rvasync.daemon.engine import running_in_process_daemon
from rvasync.protocol.clientproto import parse_daemon
from rvasync.protocol.reliable import ReliableEndpoint
from rvasync.protocol.reliable_events import RetransmissionNotRequested
from rvasync.transport import tcplink

WAIT = 15.0


def forged(frame, session: int, seq: int) -> bytes:
    packer = frame.Packer(1400, session, 0)
    for _ in range(seq):
        packer.add(rv.Message("NEWS", {"forged": 1}).to_bytes())
        packer.flush()
    return packer.take()[-1]


@pytest.mark.parametrize("frame", _accel.implementations("rmframe"), ids=lambda m: m.__name__)
def test_a_held_back_nak_is_an_event_counting_the_missing_datagrams(frame) -> None:
    b = ReliableEndpoint(now=0.0, session_id=2, frame=frame, max_new_peers=10, probation_naks=1)
    for n in range(3):
        b.receive_datagram(forged(frame, 100 + n, 4), ("x", n), 0.0)
    b.events()
    b.handle_timer(0.05)
    held = [e for e in b.events() if isinstance(e, RetransmissionNotRequested)]
    assert len(held) == 2 == b.stats.naks_deferred
    assert {e.datagrams for e in held} == {3}  # datagrams 1..3 missing before 4
    assert {e.session for e in held} <= {100, 101, 102}


async def test_the_daemon_presents_request_not_sent(rv_service) -> None:
    service, network = rv_service
    async with rv.Transport(service, network) as t:
        held = t.listen("_RV.INFO.SYSTEM.RETRANSMISSION.INBOUND.REQUEST_NOT_SENT")
        daemon = running_in_process_daemon()
        assert daemon is not None
        endpoint = daemon.services[int(service)]
        frame = _accel.load("rmframe")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # More new sessions with gaps than the per-interval NAK budget (64).
            for n in range(100):
                s.sendto(forged(frame, 1_000_000 + n, 3), endpoint.address)
        async with asyncio.timeout(WAIT):
            advisory = await held.get()
        assert str(advisory["host"]) == endpoint.address[0]  # this daemon: the receiver
        assert advisory["lost"] == 2


# -- the standalone client's advisories ------------------------------------------------------


async def _advisory(listener: rv.Listener, name: str) -> rv.Message:
    async with asyncio.timeout(WAIT):
        while True:
            msg = await listener.get()
            if msg.subject.endswith(name):
                return msg


async def test_ip_mismatch_after_reconnecting_to_a_daemon_elsewhere(rv_service) -> None:
    service, network = rv_service
    first = rv.Daemon(listen=0)
    await first.start()
    second = rv.Daemon(listen=0, host="127.0.0.2")
    await second.start()
    try:
        async with rv.Transport(
            service, network, f"127.0.0.1:{first.listen_port}", description="mismatch"
        ) as t:
            system = t.listen("_RV.*.SYSTEM.>")
            # A redirector would answer the same name with another daemon: the same here.
            t.link.address = parse_daemon(f"127.0.0.2:{second.listen_port}")
            await first.stop()
            advisory = await _advisory(system, "CLIENT.IP_MISMATCH")
            assert advisory.subject == "_RV.ERROR.SYSTEM.CLIENT.IP_MISMATCH"
            assert advisory["tport"] == t.transport_id and advisory["descr"] == "mismatch"
            # The transport goes on: multicast still flows.
            news = t.listen("NEWS")
            await t.link.ping()
            await t.send(rv.Message("NEWS", {"n": 1}))
            async with asyncio.timeout(WAIT):
                assert (await news.get())["n"] == 1
    finally:
        await first.stop()
        await second.stop()


async def test_defunct_when_the_daemon_refuses_the_reconnection(rv_service) -> None:
    service, network = rv_service
    daemon = rv.Daemon(listen=0)
    await daemon.start()
    port = daemon.listen_port
    try:
        t = rv.Transport(service, network, f"127.0.0.1:{port}", description="victim")
        await t.open()
        system = t.listen("_RV.*.SYSTEM.>")
        await daemon.stop()
        # The daemon comes back, and another client binds the service to another network.
        daemon = rv.Daemon(listen=port)
        await daemon.start()

        class Owner:
            def deliver(self, payload: object) -> None: ...

            def present(self, advisory: object) -> None: ...

        daemon.attach(Owner(), service=service, network="127.0.0.1;239.255.82.99")
        advisory = await _advisory(system, "CLIENT.DEFUNCT")
        assert advisory.subject == "_RV.ERROR.SYSTEM.CLIENT.DEFUNCT"
        assert advisory["descr"] == "victim" and "another network" in advisory["reason"]
        with pytest.raises(rv.TransportClosed, match="defunct"):
            await t.send(rv.Message("NEWS", {"n": 1}))
        await t.close()
    finally:
        await daemon.stop()


async def test_no_memory_for_an_inbound_message(rv_service, monkeypatch) -> None:
    service, network = rv_service
    daemon = rv.Daemon(listen=0)
    await daemon.start()
    try:
        async with rv.Transport(service, network, f"127.0.0.1:{daemon.listen_port}") as t:
            system = t.listen("_RV.*.SYSTEM.>")
            news = t.listen("NEWS")
            await t.link.ping()
            real = tcplink._decode
            failures = [1]

            def starved(wire: bytes) -> rv.Message:
                if failures:
                    failures.pop()
                    raise MemoryError
                return real(wire)

            monkeypatch.setattr(tcplink, "_decode", starved)
            await t.send(rv.Message("NEWS", {"n": 1}))
            assert (await _advisory(system, "CLIENT.NOMEMORY"))["reason"]
            disconnected = await _advisory(system, "RVD.DISCONNECTED")
            assert "NOMEMORY" in disconnected["reason"]
            await _advisory(system, "RVD.CONNECTED")  # and it reconnects
            await t.link.ping()
            await t.send(rv.Message("NEWS", {"n": 2}))
            async with asyncio.timeout(WAIT):
                assert (await news.get())["n"] == 2
    finally:
        await daemon.stop()
