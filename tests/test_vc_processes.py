"""Virtual circuits between two real processes, each with its own in-process daemon.

The child (tests/vcpeer.py) accepts, the test process asks and connects (the
spec's invitation paradigm); data echoes in order over real UDP between the
two daemons. Then the partner either closes on purpose (INFO on both sides)
or is killed with SIGKILL (ERROR on the survivor, within its disconnect
time; every wait here is bounded far above it), over the daemons and over
direct communication (two-part services on both sides).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import rvasync as rv
from rvasync.pytest_plugin import _await_ready, stop_process_group

PEER = Path(__file__).with_name("vcpeer.py")
WAIT = 30.0
HEARTBEAT, SILENCE = 0.2, 2.0


@contextlib.asynccontextmanager
async def peer(service: str, network: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEER),
        service,
        network,
        str(HEARTBEAT),
        str(SILENCE),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), WAIT)


async def line(proc: asyncio.subprocess.Process) -> dict:
    raw = await asyncio.wait_for(proc.stdout.readline(), WAIT)  # type: ignore[union-attr]
    assert raw, f"peer ended early (status {await proc.wait()})"
    return json.loads(raw)


async def connect(
    t: rv.Transport, proc: asyncio.subprocess.Process
) -> tuple[rv.VcTransport, rv.Listener]:
    assert "ready" in await line(proc)
    invitation = None
    for _ in range(30):  # the peer's daemon may still be meeting ours: ask again
        try:
            invitation = await t.send_request(rv.Message("VC.REQUEST", {}), 1.0)
            break
        except rv.RequestTimeout:
            continue
    assert invitation is not None and invitation.reply_subject
    vc = rv.VcTransport.connect(t, invitation.reply_subject, heartbeat=HEARTBEAT, silence=SILENCE)
    adv = vc.listen("_RV.*.SYSTEM.VC.>")
    await vc.wait_connected(WAIT)
    assert (await adv.get(WAIT)).subject == "_RV.INFO.SYSTEM.VC.CONNECTED"
    assert await line(proc) == {"connected": True}
    return vc, adv


async def echo(vc: rv.VcTransport, n: int) -> None:
    back = vc.listen("BACK.>")
    for i in range(n):
        await vc.send(rv.Message(f"ECHO.{i}", {"i": i}))
    got = [(await back.get(WAIT))["i"] for _ in range(n)]
    assert got == list(range(n))
    back.close_now()


@pytest.mark.parametrize("direct", [False, True], ids=["daemons", "direct"])
async def test_partner_killed_disconnects_the_survivor(
    rv_service: tuple[str, str], direct: bool
) -> None:
    service, network = rv_service
    if direct:
        service += ":"  # both enabled: the frames travel over the direct channels
    async with rv.Transport(service, network) as t, peer(service, network) as proc:
        vc, adv = await connect(t, proc)
        await echo(vc, 200)
        if direct:
            assert t.direct is not None and t.direct.sent > 0 and t.direct.received > 0
        data = vc.listen("BACK.>")
        proc.send_signal(signal.SIGKILL)
        msg = await adv.get(WAIT)
        assert msg.subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
        assert "heartbeat" in msg["description"] or "acknowledged" in msg["description"]
        try:
            await vc.send(rv.Message("ECHO.X", {"i": 0}))
        except rv.TransportClosed:
            pass
        else:
            raise AssertionError("a send after the disconnect must raise TransportClosed")
        try:
            await asyncio.wait_for(anext(data), WAIT)
        except StopAsyncIteration:
            pass
        else:
            raise AssertionError("the terminal's listener must end after the disconnect")


async def test_partner_closes_on_purpose(rv_service: tuple[str, str]) -> None:
    service, network = rv_service
    async with rv.Transport(service, network) as t, peer(service, network) as proc:
        vc, adv = await connect(t, proc)
        await echo(vc, 50)
        await vc.send(rv.Message("EXIT", {}))
        msg = await adv.get(WAIT)
        assert msg.subject == "_RV.INFO.SYSTEM.VC.DISCONNECTED"
        assert msg["description"] == "closed by the other terminal"
        assert await line(proc) == {
            "advisory": "_RV.INFO.SYSTEM.VC.DISCONNECTED",
            "description": "closed by this terminal",
        }
        assert await line(proc) == {"exit": True}
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0
        await vc.close()


async def test_daemon_killed_disconnects_both_terminals(rv_service: tuple[str, str]) -> None:
    """Both terminals on one standalone daemon; SIGKILL the daemon: both present ERROR."""
    service, network = rv_service
    with tempfile.TemporaryFile() as errors:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )
        try:
            where = f"127.0.0.1:{_await_ready(daemon, errors)}"
            async with (
                rv.Transport(service, network, daemon=where) as ta,
                rv.Transport(service, network, daemon=where) as tb,
            ):
                acceptor = rv.VcTransport.accept(tb, heartbeat=HEARTBEAT, silence=SILENCE)
                connector = rv.VcTransport.connect(
                    ta, acceptor.connect_subject, heartbeat=HEARTBEAT, silence=SILENCE
                )
                advisories = [
                    vc.listen("_RV.*.SYSTEM.VC.DISCONNECTED") for vc in (acceptor, connector)
                ]
                await connector.wait_connected(WAIT)
                await acceptor.wait_connected(WAIT)
                daemon.kill()
                for adv in advisories:
                    msg = await adv.get(WAIT)
                    assert msg.subject == "_RV.ERROR.SYSTEM.VC.DISCONNECTED"
                assert acceptor.disconnected and connector.disconnected
        finally:
            stop_process_group(daemon)
            if daemon.stdout is not None:
                daemon.stdout.close()
