"""A standalone daemon killed and restarted under its clients, on a lab host."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.lab import Lab, LabProcess

pytestmark = pytest.mark.lab

DAEMON_PORT = "7700"  # inside the host's own namespace: no other run shares it


async def start_daemon(lab: Lab) -> LabProcess:
    daemon = await lab.hosts[0].spawn("-m", "rvasync", "daemon", "--listen", DAEMON_PORT)
    # The daemon says it is ready on stdout; bounded wait.
    line = await daemon.readline(30)
    assert line, "the standalone daemon did not start"
    return daemon


async def test_daemon_kill_9_and_restart_under_a_listener(
    lab2: Lab, figures: dict[str, Any]
) -> None:
    """RVD.DISCONNECTED marks the gap, RVD.CONNECTED its end; nothing out of order or twice."""
    listener_host, sender_host = lab2.hosts
    service = str(free_port())
    daemon = await start_daemon(lab2)
    listener = await listener_host.agent(service, "--daemon", f"127.0.0.1:{DAEMON_PORT}")
    sender = await sender_host.agent(service)
    total = 1200
    try:
        await listener.call(op="listen", subject="LAB.MC")

        async def outage() -> None:
            await asyncio.sleep(1.0)
            daemon.kill9()
            await daemon.wait()
            await asyncio.sleep(1.0)
            await start_daemon(lab2)

        await asyncio.gather(
            sender.call(op="send", subject="LAB.MC", src="s", n=total, pace=0.08),
            outage(),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while True:
            report = await listener.call(op="report")
            got = report["got"].get("s", [])
            if (got and got[-1] == total - 1) or loop.time() > deadline:
                break
            await asyncio.sleep(0.2)
        names = [name for name, _ in report["rvd"]]
        assert names[:1] == ["RVD.DISCONNECTED"] and "RVD.CONNECTED" in names, names
        cut = dict((name, at) for name, at in reversed(report["rvd"]))
        before, after = got[: cut["RVD.DISCONNECTED"]], got[cut["RVD.CONNECTED"] :]
        assert got == sorted(set(got)), "out of order or twice"
        assert before == list(range(len(before))), "a gap before the daemon went away"
        assert after and after == list(range(after[0], total)), "a gap after it came back"
        # Whatever is missing fell inside the reported outage.
        assert set(range(total)) - set(got) <= set(range(len(before), after[0]))
        assert len(before) > 0
        figures.update(
            hosts=2, daemon_kills=1, sent=total, delivered=len(got),
            inside_reported_outage=total - len(got),
        )  # fmt: skip
    finally:
        await asyncio.gather(listener.close(), sender.close(), return_exceptions=True)
