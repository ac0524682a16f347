"""rvasync certified ledger file for the compaction scenario.

The sender (``BENCH_LC``) runs on ``rv.process_transport()`` with a ledger
file in a temporary directory of the worker (removed when it closes) and
anticipates listener ``BENCH_ABSENT`` on the stored subject, which never
registers: every message stays in the ledger until the compaction.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.registry import adapter
from benchmarks.scenarios.ledger_compaction import LedgerCompaction
from benchmarks.systems.rvasync_api import missing, missing_module

NAME = "BENCH_LC"
STORED = "BENCH.LEDGER.STORED"
OTHER = "BENCH.LEDGER.OTHER"


@adapter
class RvLedgerCompaction(LedgerCompaction):
    system = "rvasync"
    capability = "ledger"

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("process_transport", "Message") or missing_module(
            "rvasync.cmdriver", "CmTransport"
        )

    async def open_sender(self) -> None:
        import rvasync as rv
        from rvasync.cmdriver import CmTransport

        self.rv = rv
        self.directory = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
        self.path = self.directory / "sender.ledger"
        self.transport = rv.process_transport()
        self.cm = CmTransport(self.transport, NAME, ledger=self.path)
        await self.cm.open()
        await self.cm.add_listener("BENCH_ABSENT", STORED)
        self.other = rv.Message(OTHER, {"n": 0})

    async def store(self, count: int, size: int) -> int:
        msg = self.rv.Message(STORED, {"data": os.urandom(size)})
        send = self.cm.send
        for i in range(count):
            await send(msg)
            if i % 500 == 499:
                await asyncio.sleep(0)
        await self.cm.sync()
        return self.path.stat().st_size

    async def send_other(self) -> None:
        await self.cm.send(self.other)

    async def compact(self) -> None:
        await self.cm.compact_ledger()

    async def close(self) -> None:
        cm: Any = getattr(self, "cm", None)
        try:
            if cm is not None:
                await cm.close()
        finally:
            directory = getattr(self, "directory", None)
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
