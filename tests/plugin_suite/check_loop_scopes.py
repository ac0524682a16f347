"""The asynchronous fixtures run in their test's loop, whatever its loop scope.

A network transport opened in another loop than the test's is attached to
that loop's in-process daemon, which does not run while the test does: a
transport the test opens on the same service never hears it. So every test
below has the fixture's transport send to a listener on a transport of the
test's own loop; the tests that share a wider loop also check that they
really got the same loop, and the process transport must be the test loop's.
"""

from __future__ import annotations

import asyncio

import pytest

import rvasync as rv

WAIT = 20.0
LOOPS: dict[str, set[int]] = {}


async def exchange(transport: rv.Transport, service: tuple[str, str], subject: str) -> None:
    async with rv.Transport(*service) as mine:
        listener = mine.listen(subject)
        await transport.send(rv.Message(subject, {"loop": id(asyncio.get_running_loop())}))
        msg = await listener.get(timeout=WAIT)
    assert msg["loop"] == id(asyncio.get_running_loop())


def seen(scope: str) -> set[int]:
    found = LOOPS.setdefault(scope, set())
    found.add(id(asyncio.get_running_loop()))
    return found


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("n", [1, 2])
async def test_module_loop(rv_service, rv_transport, rv_process_transport, n):
    await exchange(rv_transport, rv_service, f"SCOPE.MODULE.{n}")
    assert rv_process_transport is rv.process_transport()
    assert len(seen("module")) == 1


@pytest.mark.asyncio(loop_scope="class")
class TestClassLoop:
    @pytest.mark.parametrize("n", [1, 2])
    async def test_class_loop(self, rv_cm_transport, n):
        listener = rv_cm_transport.listen(f"SCOPE.CLASS.{n}")
        await rv_cm_transport.send(rv.Message(f"SCOPE.CLASS.{n}", {}))
        await listener.get(timeout=WAIT)
        assert len(seen("class")) == 1


@pytest.mark.asyncio(loop_scope="session")
async def test_session_loop(rv_service, rv_transport, rv_router_pair):
    await exchange(rv_transport, rv_service, "SCOPE.SESSION")
    async with rv.Transport(*rv_router_pair.right) as right:
        right.listen("SCOPE.ROUTED")
        await rv_router_pair.wait_listening("left", "SCOPE.ROUTED")


@pytest.mark.asyncio
async def test_function_loop(rv_service, rv_transport, rv_process_transport):
    await exchange(rv_transport, rv_service, "SCOPE.FUNCTION")
    assert rv_process_transport is rv.process_transport()
