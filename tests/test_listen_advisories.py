"""LISTEN.START and LISTEN.STOP can be used to track subscriptions (issue 43 item 5).

START used to be presented again for an existing listener every time any
daemon joined the service (1 listener and 3 short-lived senders gave 4
STARTs), and a listener whose process was killed -9 never got a STOP, only
UNREACHABLE.TRANSPORT. Now START says what is new only, a newcomer that wants
the existing interest asks for it (LISTEN.QUERY, answered with LISTEN.CURRENT),
and every daemon presents a STOP for every subject of a daemon it gave up on.
"""

from __future__ import annotations

import asyncio
import signal

import pytest
from netutil import LoopThread, Peer

import rvasync as rv
from rvasync.daemon.peerinterest import Heard, PeerInterest
from rvasync.testing import free_port

WAIT = 20.0
START = "_RV.INFO.SYSTEM.LISTEN.START"
STOP = "_RV.INFO.SYSTEM.LISTEN.STOP"


async def test_short_lived_senders_do_not_bring_starts_again():
    service = str(free_port())
    app = LoopThread()
    try:
        async with rv.Transport(service) as monitor:
            starts = monitor.listen(START)

            async def listener_program() -> rv.Transport:
                t = rv.Transport(service)
                await t.open()
                t.listen("TRACKED.ORDERS")
                return t

            listening = await app.run(listener_program())
            first = await starts.get(WAIT)
            assert first["sub"] == "TRACKED.ORDERS"
            for n in range(3):  # three senders, each its own daemon, come and go
                sender = LoopThread()
                try:

                    async def send_once(n: int = n) -> None:
                        async with rv.Transport(service) as t:
                            await t.send(rv.Message("TRACKED.ORDERS", {"n": n}))
                            await asyncio.sleep(0.3)  # the daemons hear each other

                    await sender.run(send_once())
                finally:
                    sender.stop()
            await asyncio.sleep(1.0)  # what the newcomers would have caused has arrived
            again = [m["sub"] for m in iter(starts.poll, None)]
            assert again == []  # was one START per daemon that joined
            await app.run(listening.close())
    finally:
        app.stop()


@pytest.mark.timeout(60)
async def test_a_killed_listener_gets_a_stop_for_each_of_its_subjects():
    """The listener's daemon dies with it; the others give up on it after peer_timeout
    and present a STOP for every subject it had announced."""
    daemon = rv.Daemon(heartbeat_interval=0.3, peer_timeout=1.5)
    await daemon.start()  # the loop's in-process daemon, with a short peer timeout
    service = str(free_port())
    try:
        async with rv.Transport(service) as monitor:
            events = monitor.listen("_RV.INFO.SYSTEM.LISTEN.>")
            peer = await Peer.start(service)
            try:
                for subject in ("KILLED.A", "KILLED.B.>"):
                    assert (await peer.call(op="listen", subject=subject))["ok"] == "listen"
                heard = set()
                async with asyncio.timeout(WAIT):
                    while heard != {"KILLED.A", "KILLED.B.>"}:
                        msg = await events.get()
                        if msg.subject == START:
                            heard.add(msg["sub"])
                peer.proc.send_signal(signal.SIGKILL)
                stopped = {}
                async with asyncio.timeout(WAIT):
                    while set(stopped) != {"KILLED.A", "KILLED.B.>"}:
                        msg = await events.get()
                        if msg.subject == STOP:
                            stopped[msg["sub"]] = msg
                assert {m["reason"] for m in stopped.values()} == {"daemon gone"}
                assert len({m["daemon"] for m in stopped.values()}) == 1
            finally:
                if peer.proc.returncode is None:
                    peer.proc.kill()
                await peer.proc.wait()
    finally:
        await daemon.stop()


def test_peer_interest_is_kept_per_daemon_and_bounded():
    interest = PeerInterest("OWN", limit=2)

    def adv(name: str, daemon: str, sub: str | None = None, to: str | None = None) -> rv.Message:
        fields = {"daemon": daemon}
        if sub is not None:
            fields["sub"] = sub
        if to is not None:
            fields["to"] = to
        return rv.Message(f"_RV.INFO.SYSTEM.LISTEN.{name}", fields)

    assert interest.heard(adv("START", "A", "X")) is Heard.NOTHING
    interest.heard(adv("CURRENT", "A", "Y"))
    interest.heard(adv("START", "B", "Z"))  # over the bound: not kept, counted
    interest.heard(adv("START", "OWN", "W"))  # our own: ignored
    assert interest.untracked == 1
    interest.heard(adv("STOP", "A", "Y"))
    assert interest.subjects("A") == {"X"}
    assert interest.heard(adv("QUERY", "B")) is Heard.ANSWER
    assert interest.heard(adv("QUERY", "B", to="OWN")) is Heard.ANSWER
    assert interest.heard(adv("QUERY", "B", to="C")) is Heard.NOTHING
    assert interest.gone("A") == ["X"] and interest.gone("A") == []
