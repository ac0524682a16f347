"""HOST.STATUS: every field the spec's appendix lists that has a meaning here, and
each daemon's identity, so a monitor can follow every daemon of a host.

Two daemons run in the test's loop on one service: the in-process daemon, and
an embedded standalone one reached over TCP. Both publish
``_RV.INFO.SYSTEM.HOST.STATUS.<hostid>`` with the same hostid (one host).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket

import pytest

import rvasync as rv
from rvasync.daemon.engine import running_in_process_daemon
from rvasync.daemon.stats import os_code
from rvasync.fieldtypes import FieldType as FT
from rvasync.testing import free_port

WAIT = 20.0
SUBJECT = "_RV.INFO.SYSTEM.HOST.STATUS.>"

#: The spec's fields (appendix, HOST.STATUS) with their types, and rvasync's additions.
SPEC_FIELDS = {
    "hostaddr": FT.IPADDR32,
    "sn": FT.U32,
    "os": FT.U8,
    "ver": FT.STRING,
    "httpaddr": FT.IPADDR32,
    "httpport": FT.IPPORT16,
    "hsaddr": FT.IPADDR32,
    "hsport": FT.IPPORT16,
    "time": FT.DATETIME,
    "up": FT.U32,
    "cc": FT.U32,
    "ms": FT.U64,
    "bs": FT.U64,
    "mr": FT.U64,
    "br": FT.U64,
    "ps": FT.U64,
    "pr": FT.U64,
    "rx": FT.U64,
    "pm": FT.U64,
    "idl": FT.U64,
    "odl": FT.U64,
    "irrs": FT.U64,
    "orrs": FT.U64,
    "ipport": FT.IPPORT16,
    "service": FT.STRING,
    "network": FT.STRING,
    "cid": FT.U16,
    "scid": FT.U16,
}
IDENTITY = {"daemon": FT.STRING, "pid": FT.U32, "session": FT.U64}


async def statuses(listener, count: int) -> list[rv.Message]:
    got = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            got.append(await listener.get())
    return got


async def test_host_status_has_the_spec_fields_and_names_its_daemon(rv_service):
    service = rv_service[0]
    async with rv.Transport(service) as t:
        listener = t.listen(SUBJECT)
        running_in_process_daemon().publish_host_status()
        [msg] = await statuses(listener, 1)
        for name, kind in {**SPEC_FIELDS, **IDENTITY}.items():
            assert msg.field(name).type == kind, name
        assert msg["sn"] == 0 and msg["os"] == os_code() and os_code() == 1  # Linux
        assert msg["httpport"] == 0 and msg["hsport"] == 0  # no status page here
        assert msg["scid"] == int(service) and msg["pid"] == os.getpid()
        endpoint = running_in_process_daemon().services[int(service)]
        assert msg["cid"] == endpoint.address[1]
        assert msg["daemon"] == endpoint.address_hex
        assert t.transport_id.startswith(msg["daemon"] + ".")


async def test_two_daemons_of_one_host_can_be_told_apart():
    """Issue 43 item 7: every in-process daemon of a host published on the same subject
    with ipport=0 and nothing naming the process or the daemon."""
    service = str(free_port())
    async with rv.Transport(service) as local:  # the loop's in-process daemon, first
        standalone = rv.Daemon(listen=0, host_status_interval=0)
        await standalone.start()
        try:
            where = f"127.0.0.1:{standalone.listen_port}"
            async with rv.Transport(service, daemon=where) as remote:
                listener = local.listen(SUBJECT)
                await remote.link.ping(WAIT)
                await asyncio.sleep(0.3)  # the daemons hear each other
                running_in_process_daemon().publish_host_status()
                standalone.publish_host_status()
                got = await statuses(listener, 2)
                assert len({m.subject for m in got}) == 1  # one host: one hostid
                assert len({m["daemon"] for m in got}) == 2
                assert len({m["cid"] for m in got}) == 2
                assert len({m["session"] for m in got}) == 2
                assert sorted(m["ipport"] for m in got) == [0, standalone.listen_port]
        finally:
            await standalone.stop()


async def test_a_daemon_serving_its_status_page_advertises_it(rv_service):
    aiohttp = pytest.importorskip("aiohttp")  # noqa: F841
    from rvasync.daemon.status_http import StatusServer

    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    page = StatusServer(daemon, port=0)
    await page.start()
    try:
        async with rv.Transport(rv_service[0], daemon=f"127.0.0.1:{daemon.listen_port}") as t:
            listener = t.listen(SUBJECT)
            await t.link.ping(WAIT)
            daemon.publish_host_status()
            [msg] = await statuses(listener, 1)
            assert msg["httpaddr"] == ipaddress.IPv4Address("127.0.0.1")
            assert msg["httpport"] == page.port and msg["hsport"] == 0
            await page.stop()
            daemon.publish_host_status()
            [msg] = await statuses(listener, 1)
            assert msg["httpport"] == 0
    finally:
        await page.stop()
        await daemon.stop()


async def test_forged_heartbeats_cannot_pin_the_loss_counters(rv_service):
    """Issue 34 item 6: three heartbeats each claiming a stream of 2**64-2 datagrams, on
    a service without a key, pinned pm and idl at 2**64-1 for the daemon's life. A claim
    no sender could make is dropped and counted (``implausible``)."""
    from rvasync import _accel

    frame = _accel.load("rmframe")
    service = rv_service[0]
    async with rv.Transport(service) as t:
        endpoint = running_in_process_daemon().services[int(service)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
            for session in (5, 6, 7):
                liar = frame.build_heartbeat(session, 0, [(0, 0, 0, 1, 1, 2**64 - 2, 1)])
                forger.sendto(liar, endpoint.address)
        async with asyncio.timeout(WAIT):
            while endpoint.core.stats.implausible < 3:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # NAK and give-up timers would have run by now
        status = running_in_process_daemon().host_status(service)
        assert status["implausible"] == 3
        assert status["pm"] == status["idl"] == 0
        assert t.transport_id  # the transport is unaffected
