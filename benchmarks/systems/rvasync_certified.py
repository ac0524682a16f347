"""rvasync certified delivery: ``CmTransport`` over the network transport, three ledgers.

Every process opens ``rv.Transport(service=<the row's UDP port>, network=None)``
(its in-process daemon) and a ``CmTransport`` with a reusable name unique to
the process (a listener's is ``BENCH_L<index>_<port>``, which the sender of a
cold start names in ``add_listener``). Each send is
``await cm.send(rv.Message(subject, {"data": data}))``, a new message as a
program builds it. Rows: a ledger file (written behind the sends,
group-committed; the headline); the same re-sending one prebuilt message, and
the same with an explicit ``asyncio.sleep(0)`` every 1,000 sends (both beside
the plain loop, never the headline); a process ledger; each listener behind a
relay agent running in the listener's process (``relay``); a ledger file with
``sync_ledger=True`` (a send returns once its record is fsynced). Awaited one
at a time, synchronous sends would each wait for an fsync of their own;
concurrent sends share them (group commit), so that row keeps
:data:`SYNC_WINDOW` sends in flight, the way a program needing throughput with
that guarantee sends. Listeners use the same kind of ledger as the sender, so
each row is one durability level end to end. Ledger files live in a
temporary directory of the worker, removed when it closes.

The sender learns confirmations from ``review_ledger`` (each listener's last
confirmed sequence number), the public way to ask.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.registry import Params, Scenario, Variant, adapter
from benchmarks.scenarios.certified import YIELD_EVERY, Certified
from benchmarks.systems.rvasync_api import missing, missing_module

PROCESS = Variant(name="process", label="process ledger", headline=False)
FILE = Variant(name="file", label="file ledger", headline=True)
FILE_PREBUILT = Variant(
    name="file-prebuilt", label="file ledger, one prebuilt message re-sent", headline=False
)
FILE_YIELD = Variant(
    name="file-yield",
    label=f"file ledger, explicit asyncio.sleep(0) every {YIELD_EVERY:,} sends",
    headline=False,
)
#: Concurrent sends of the synchronous-ledger row.
SYNC_WINDOW = 256

RELAY = Variant(
    name="relay",
    label="file ledger, listener through a relay agent (in its process)",
    headline=False,
)
"""Each listener's CM transport names a relay agent that runs in its own process
(with a ledger file of its own): every message and confirmation goes through it."""

FILE_SYNC = Variant(
    name="file-sync",
    label=f"file ledger, sync_ledger=True, {SYNC_WINDOW} sends in flight",
    headline=False,
)


#: The rows that change the sender's loop (beside the plain one, one listener, warm).
LOOP_VARIANTS = frozenset({FILE_PREBUILT.name, FILE_YIELD.name})


def listener_name(role: str, port: int) -> str:
    """A listener's correspondent name: known to the sender, unique to the row's service."""
    return f"BENCH_{role}_{port}"


@adapter
class RvCertified(Certified):
    """``CmTransport.send`` to CM listeners consumed with ``async for`` (auto-confirm)."""

    system = "rvasync"
    capability = "certified"
    environment = UdpPort

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message") or missing_module("rvasync.cmdriver", "CmTransport")

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (FILE, FILE_PREBUILT, FILE_YIELD, PROCESS, FILE_SYNC, RELAY)

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        if params.get("cold") and variant.name not in (FILE.name, PROCESS.name):
            return "the cold start is measured with the plain file and process ledgers"
        if variant.name in LOOP_VARIANTS and int(params["listeners"]) != 1:
            return "the loop's variations are measured with one listener"
        return None

    async def _open(self, role: str) -> None:
        import rvasync as rv
        from rvasync.cmdriver import CmTransport

        self.rv = rv
        self.directory = Path(tempfile.mkdtemp(prefix="bench-cm-"))
        self.transport = rv.Transport(service=str(self.env["ports"][0]), network=None)
        await asyncio.wait_for(self.transport.open(), 30)
        name = (
            f"BENCH_{role}_{secrets.token_hex(4).upper()}"
            if role == "S"
            else listener_name(role, self.env["ports"][0])
        )
        ledger = None if self.variant.name == PROCESS.name else self.directory / f"{name}.ledger"
        relay = None
        if self.variant.name == RELAY.name and role != "S":
            relay = f"{name}_RA"
            self.agent = rv.RelayAgent(self.transport, relay, ledger=self.directory / "ra.ledger")
            await asyncio.wait_for(self.agent.start(), 30)
        self.cm = CmTransport(
            self.transport,
            name,
            ledger=ledger,
            sync_ledger=self.variant.name == FILE_SYNC.name,
            relay_agent=relay,
            require_old=role != "S" and bool(self.params.get("cold")),
        )
        await asyncio.wait_for(self.cm.open(), 30)

    # --- sender -----------------------------------------------------------------------

    async def open_sender(self, subject: str) -> None:
        await self._open("S")
        self.subject = subject
        self.last = 0
        self.slots = asyncio.Semaphore(SYNC_WINDOW)
        self.in_flight: set[asyncio.Future[None]] = set()
        self.prebuilt: dict[bytes, Any] = {}
        self.plain = self.variant.name not in (FILE_PREBUILT.name, FILE_SYNC.name)

    async def anticipate(self, listeners: int) -> None:
        port = self.env["ports"][0]
        for index in range(listeners):
            await self.cm.add_listener(listener_name(f"L{index}", port), self.subject)

    def yield_every(self) -> int:
        return YIELD_EVERY if self.variant.name == FILE_YIELD.name else 0

    async def send_new(self, subject: str, data: bytes) -> None:
        if self.plain:  # the usual row: what a program's loop does, nothing more
            self.last = await self.cm.send(self.rv.Message(subject, {"data": data}))
            return
        if self.variant.name == FILE_PREBUILT.name:
            msg = self.prebuilt.get(data)
            if msg is None:
                msg = self.prebuilt[data] = self.rv.Message(subject, {"data": data})
            self.last = await self.cm.send(msg)
            return
        msg = self.rv.Message(subject, {"data": data})
        if self.variant.name != FILE_SYNC.name:
            self.last = await self.cm.send(msg)
            return
        await self.slots.acquire()
        task = asyncio.ensure_future(self._send_one(msg))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _send_one(self, handle: Any) -> None:
        try:
            sequence = await self.cm.send(handle)
            self.last = max(self.last, sequence)
        finally:
            self.slots.release()

    async def flush(self) -> None:
        if self.in_flight:
            await asyncio.gather(*self.in_flight)

    async def confirmed_by(self) -> int:
        reviews = self.cm.review_ledger(self.subject)
        if not reviews:
            return 0
        last = self.last
        return sum(
            1 for r in reviews[0].listeners if not r.anticipated and r.last_confirmed >= last
        )

    # --- listener ---------------------------------------------------------------------

    async def open_listener(self, subject: str) -> None:
        await self._open(f"L{self.index}")
        self.listener = self.cm.listen(subject)

    async def consume(self, sink: Callable[[bytes], None]) -> None:
        async for msg in self.listener:
            sink(msg["data"])

    async def close(self) -> None:
        for task in getattr(self, "in_flight", ()):
            task.cancel()
        try:
            listener = getattr(self, "listener", None)
            if listener is not None:
                await asyncio.wait_for(listener.close(), 10)
            cm = getattr(self, "cm", None)
            if cm is not None:
                await asyncio.wait_for(cm.close(), 30)
            agent = getattr(self, "agent", None)
            if agent is not None:
                await asyncio.wait_for(agent.close(), 30)
            transport = getattr(self, "transport", None)
            if transport is not None:
                await asyncio.wait_for(transport.close(), 30)
        finally:
            directory = getattr(self, "directory", None)
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
