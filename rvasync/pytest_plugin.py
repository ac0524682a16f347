"""pytest fixtures for programs that use rvasync (registered through the ``pytest11`` entry point).

Installing rvasync makes these fixtures available to every test suite, with no
conftest set-up:

- ``rv_service``: a ``(service, network)`` pair on loopback that no other test
  uses, so tests running side by side never hear each other.
- ``rv_process_transport``: the intra-process transport of the test's event loop,
  shut down (listeners closed) when the test ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rvasync.testing import LOOPBACK, free_port

__all__ = ["rv_process_transport", "rv_service"]


@pytest.fixture
def rv_service() -> tuple[str, str]:
    """A free loopback service for this test, as ``(service, network)``."""
    return str(free_port()), LOOPBACK


@pytest.fixture
async def rv_process_transport() -> AsyncIterator[object]:
    """The process transport of the running loop; its listeners are closed afterwards."""
    from rvasync.transport.process import process_transport

    transport = process_transport()
    try:
        yield transport
    finally:
        transport._shutdown()
