"""rvasync relay agent: ``RelayAgent`` and ``CmTransport(relay_agent=...)`` over the network.

Every process opens ``rv.Transport(service=<the row's UDP port>)``. The
agent (``BENCH_RA``) has a ledger file; the listener (``BENCH_RL``) and the
sender (``BENCH_RS``) are persistent correspondents with ledger files, the
listener behind the agent, the sender direct. The sender anticipates the
listener (``add_listener``) so every message is certified. Ledger files live
in a temporary directory of each worker, removed when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.registry import adapter
from benchmarks.scenarios.relay import RelayDrain
from benchmarks.systems.rvasync_api import missing, missing_module

AGENT = "BENCH_RA"
LISTENER = "BENCH_RL"
SENDER = "BENCH_RS"
CONTROL = "BENCH.RELAY.CTL"


@adapter
class RvRelayDrain(RelayDrain):
    system = "rvasync"
    capability = "relay"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message", "RelayAgent") or missing_module(
            "rvasync.cmdriver", "CmTransport"
        )

    async def _open(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.directory = Path(tempfile.mkdtemp(prefix="bench-relay-"))
        self.transport = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)
        self.heard_events: set[str] = set()
        self.changed = asyncio.Event()
        self.transport.listen(CONTROL, callback=self._on_control)
        self.announcing: asyncio.Task[None] | None = None

    def _on_control(self, msg: Any) -> None:
        self.heard_events.add(msg["what"])
        self.changed.set()

    async def announce(self, what: str) -> None:
        async def repeat() -> None:
            while True:
                await self.transport.send(self.rv.Message(CONTROL, {"what": what}))
                await asyncio.sleep(0.2)

        self.announcing = asyncio.ensure_future(repeat())

    async def heard(self, what: str, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while what not in self.heard_events:
                self.changed.clear()
                await self.changed.wait()

    # --- agent ------------------------------------------------------------------------

    async def open_agent(self) -> None:
        await self._open()
        self.agent = self.rv.RelayAgent(
            self.transport, AGENT, ledger=self.directory / "agent.ledger"
        )
        await self.agent.start()

    async def stored(self) -> int:
        return self.agent.stored(LISTENER)

    # --- listener -----------------------------------------------------------------------

    async def open_listener(self, subject: str) -> None:
        from rvasync.cmdriver import CmTransport

        await self._open()
        self.relay_events: list[str] = []
        self.transport.listen(
            f"_RV.INFO.RVCM.RELAY.*.{AGENT}",
            callback=lambda msg: self.relay_events.append(msg.subject.split(".")[4]),
        )
        self.cm = CmTransport(
            self.transport,
            LISTENER,
            ledger=self.directory / "listener.ledger",
            require_old=True,
            relay_agent=AGENT,
        )
        await asyncio.wait_for(self.cm.open(), 30)
        self.listener = self.cm.listen(subject)

    async def consume(self, sink: Callable[[bytes], None]) -> None:
        async for msg in self.listener:
            sink(msg["data"])

    async def disconnect(self) -> None:
        await self.cm.disconnect_relay()
        async with asyncio.timeout(30):
            while "DISCONNECTED" not in self.relay_events:
                await asyncio.sleep(0.01)

    async def reconnect(self) -> None:
        await self.cm.connect_relay()

    # --- sender ---------------------------------------------------------------------------

    async def open_sender(self, subject: str) -> None:
        from rvasync.cmdriver import CmTransport

        await self._open()
        self.subject = subject
        self.cm = CmTransport(self.transport, SENDER, ledger=self.directory / "sender.ledger")
        await asyncio.wait_for(self.cm.open(), 30)
        await self.cm.add_listener(LISTENER, subject)
        self.last = 0

    async def send_new(self, subject: str, data: bytes) -> None:
        self.last = await self.cm.send(self.rv.Message(subject, {"data": data}))

    async def confirmed(self) -> bool:
        reviews = self.cm.review_ledger(self.subject)
        if not reviews:
            return False
        return any(r.last_confirmed >= self.last for r in reviews[0].listeners)

    async def close(self) -> None:
        try:
            if self.announcing is not None:
                self.announcing.cancel()
            for name in ("listener", "cm", "agent", "transport"):
                thing = getattr(self, name, None)
                if thing is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(thing.close(), 30)
        finally:
            directory = getattr(self, "directory", None)
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
