"""A virtual clock for the running event loop: timer tests with exact counts, instantly.

Whenever the loop would sleep until its next deadline, virtual time jumps
there instead. Every wait is still bounded by ``asyncio.timeout``, which fires
in virtual time too, so a hang fails at once instead of stalling the run.
Tests get it as the ``clock`` fixture (``from virtualclock import virtual_clock``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


class VirtualClock:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._select = loop._selector.select
        self.now = loop.time()

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time on without running the loop (as a busy consumer would experience)."""
        self.now += seconds

    def select(self, timeout):
        if timeout is not None and timeout > 0:
            self.now += timeout
            timeout = 0
        elif timeout is None:
            timeout = 0.01  # nothing scheduled: poll for I/O without spinning hot
        return self._select(timeout)

    def install(self) -> None:
        self._loop.time = self.time
        self._loop._selector.select = self.select

    def uninstall(self) -> None:
        del self._loop.time
        self._loop._selector.select = self._select


@pytest.fixture(name="clock")
async def virtual_clock() -> AsyncIterator[VirtualClock]:
    """The running loop's time made virtual for the test (see the module's docstring)."""
    loop = asyncio.get_running_loop()
    if not hasattr(loop, "_selector"):
        pytest.skip("the virtual clock needs a selector event loop")
    virtual = VirtualClock(loop)
    virtual.install()
    try:
        yield virtual
    finally:
        virtual.uninstall()
