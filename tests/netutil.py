"""Helpers for the network tests: event loops in threads, peer processes, bounded waits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

WAIT = 10.0
PEER_SCRIPT = Path(__file__).with_name("netpeer.py")


class LoopThread:
    """An event loop running in its own thread: a second 'program' inside the test process.

    Each such loop gets its own in-process daemon, exactly like another process would.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def run(self, coro: Coroutine[Any, Any, Any], timeout: float = WAIT) -> Any:
        """Run ``coro`` in this thread's loop; await its result from the caller's loop."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout)

    def stop(self) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT)
        self.loop.close()


class Peer:
    """A tests/netpeer.py process with its own transport and in-process daemon."""

    def __init__(self, proc: asyncio.subprocess.Process, hello: dict) -> None:
        self.proc = proc
        self.pid = hello["ready"]
        self.inbox_prefix = hello["inbox_prefix"]

    @classmethod
    async def start(cls, service: str, reliability: float | None = None) -> Peer:
        args = [sys.executable, str(PEER_SCRIPT), service]
        if reliability is not None:
            args.append(str(reliability))
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"peer process failed to start (exit {await proc.wait()})")
        return cls(proc, json.loads(line))

    async def call(self, wait: float = 2 * WAIT, **cmd: Any) -> dict:
        """Send one command; its answer within ``wait`` seconds (``timeout=`` goes to the peer)."""
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())  # type: ignore[union-attr]
        await self.proc.stdin.drain()  # type: ignore[union-attr]
        line = await asyncio.wait_for(self.proc.stdout.readline(), wait)  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"peer {self.pid} exited (code {await self.proc.wait()})")
        return json.loads(line)

    async def close(self) -> None:
        if self.proc.returncode is None:
            try:
                await self.call(op="exit")
                await asyncio.wait_for(self.proc.wait(), WAIT)
            except (RuntimeError, TimeoutError, BrokenPipeError, ConnectionResetError):
                self.kill()
        await self.proc.wait()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()


async def until(predicate: Any, timeout: float = WAIT, interval: float = 0.01) -> None:
    """Wait until ``predicate()`` is true (TimeoutError after ``timeout`` seconds)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(interval)


async def collect(listener: Any, count: int, timeout: float = WAIT) -> list:
    """The next ``count`` messages of ``listener`` (fewer if ``timeout`` passes)."""
    got: list = []
    try:
        async with asyncio.timeout(timeout):
            while len(got) < count:
                got.append(await listener.get())
    except TimeoutError:
        pass
    return got
