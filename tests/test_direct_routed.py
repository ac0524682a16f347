"""Direct communication stops at a routing daemon.

Two networks (services) joined by routers, every program with direct
communication enabled. Whatever inbox a program learns from the other
network (a rewritten reply subject, or an inbox hidden in a data field),
its messages never take the direct path: the routers are the only way
between the networks, and a message that cannot go through them is reported
lost (DATALOSS.OUTBOUND.PTP), never slipped past them over UDP.
"""

from __future__ import annotations

import asyncio

import rvasync as rv
from rvasync.protocol.direct import DirectPeers
from rvasync.rvrd import Router
from tests.rvrd_support import WAIT, Program, router_config, services


async def _routed() -> tuple[Program, Program, Router, Router]:
    sa, sb = services(2)
    ra = await Router(router_config("ra", [("A", sa)], [("rb", None, 1)])).start()
    rb = await Router(router_config("rb", [("B", sb)], [("ra", ra.port, 1)], listen=False)).start()
    await ra.wait_for(lambda: ra.neighbors == ["rb"] and rb.neighbors == ["ra"], WAIT)
    pa = await Program(f"{sa}:").open()
    pb = await Program(f"{sb}:").open()
    return pa, pb, ra, rb


def _direct(program: Program) -> rv.transport.direct.DirectChannel:
    assert program.t is not None and program.t.direct is not None
    return program.t.direct


async def test_no_direct_path_across_a_router() -> None:
    pa, pb, ra, rb = await _routed()
    try:
        da, db = _direct(pa), _direct(pb)
        # Request/reply across the routers: the reply subject names the router's inbox
        # on A, so the reply goes to the router (daemon path), not straight to B.
        await pa.serve("SVC.A")
        await rb.wait_for(lambda: "SVC.A" in rb.listening("B"), WAIT)
        for q in range(5):
            assert (await pb.request("SVC.A", q=q))["answer"] == 2 * q
        # An inbox of B learned out of band (a data field): A's transport could reach
        # its direct port over loopback, but B is behind a router. No HELLO goes, no
        # message goes direct; the daemon cannot send there either, and says so.
        assert pb.t is not None
        inbox = await pb.thread.run(_create_inbox(pb.t))
        got = await pb.listen(inbox)
        lost = await pa.listen("_RV.ERROR.SYSTEM.DATALOSS.OUTBOUND.PTP")
        for i in range(5):
            await pa.send(inbox, i=i)
            await asyncio.sleep(0.05)
        advisory = await pa.next(lost)
        assert advisory["messages"] >= 1
        assert da.sent == 0 and db.received == 0
        assert len(got.queue) == 0
        # A HELLO from another service reaches B's direct port (a transport that still
        # tried): B does not answer it.
        asker = DirectPeers(service=int(pa.service.rstrip(":")), daemon=("127.0.0.1", 1))
        hello = asker.hello_for(("127.0.0.1", db.port), 0.0)
        assert hello is not None
        await asyncio.to_thread(_send_udp, hello, db.port)
        async with asyncio.timeout(WAIT):
            while db.foreign_hellos == 0:
                await asyncio.sleep(0.01)
    finally:
        await pa.close()
        await pb.close()
        await rb.close()
        await ra.close()


async def _create_inbox(t: rv.Transport) -> str:
    return t.create_inbox()


def _send_udp(data: bytes, port: int) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(data, ("127.0.0.1", port))
