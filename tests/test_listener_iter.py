"""Listeners are async iterators themselves, and native modules import on their own (issue 16).

``await anext(listener)`` gives the next message and ends with
``StopAsyncIteration`` once the listener or its transport closes, whether
the listener's queue is its own or one the program shares.
``import rvasync_native.<name>`` in a fresh interpreter, before ``rvasync``,
must not meet a circular import.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rvasync as rv
from rvasync._accel import HOT_PATHS, native_module

ROOT = Path(__file__).resolve().parent.parent


async def test_anext_gives_messages_in_order() -> None:
    t = rv.process_transport()
    listener = t.listen("ITER.A")
    try:
        pending = asyncio.ensure_future(anext(listener))
        await t.send(rv.Message("ITER.A", {"n": 1}))
        await t.send(rv.Message("ITER.A", {"n": 2}))
        first = await asyncio.wait_for(pending, 5)
        second = await asyncio.wait_for(listener.__anext__(), 5)
        assert (first["n"], second["n"]) == (1, 2)
    finally:
        await listener.close()


async def test_anext_ends_after_close_own_queue() -> None:
    t = rv.process_transport()
    listener = t.listen("ITER.B")
    await listener.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(listener), 5)


async def test_get_on_a_closed_listener_raises_an_error_the_api_names() -> None:
    """Issue 43: ``get()`` after close raised QueueDestroyed, which the API's error list
    does not name; now ListenerClosed, a TransportClosed (and still a QueueDestroyed)."""
    t = rv.process_transport()
    own = t.listen("GET.CLOSED.A")
    shared = t.listen("GET.CLOSED.B", queue=rv.Queue())
    waiting = asyncio.ensure_future(own.get(5))
    await asyncio.sleep(0)
    await own.close()
    with pytest.raises(rv.TransportClosed, match="closed") as caught:
        await asyncio.wait_for(waiting, 5)
    assert isinstance(caught.value, rv.ListenerClosed | rv.QueueDestroyed)
    await shared.close()
    for listener in (own, shared):
        with pytest.raises(rv.ListenerClosed, match=r"GET\.CLOSED"):
            await asyncio.wait_for(listener.get(5), 5)


async def test_a_listener_has_poll_and_len_like_a_queue() -> None:
    t = rv.process_transport()
    listener = t.listen("POLL.LEN")
    try:
        assert listener.poll() is None and len(listener) == 0 and listener
        for n in range(3):
            await t.send(rv.Message("POLL.LEN", {"n": n}))
        assert len(listener) == 3
        assert [listener.poll()["n"] for _ in range(3)] == [0, 1, 2]
        assert listener.poll() is None and len(listener) == 0
        await t.send(rv.Message("POLL.LEN", {"n": 9}))
    finally:
        await listener.close()
    assert len(listener) == 0 and listener.poll() is None


async def test_anext_ends_after_close_shared_queue() -> None:
    t = rv.process_transport()
    queue = rv.Queue()
    listener = t.listen("ITER.C", queue=queue)
    other = t.listen("ITER.D", queue=queue)
    await listener.close()
    await t.send(rv.Message("ITER.D", {}))
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(listener), 5)
    # The queue lives on for the other listener.
    assert (await asyncio.wait_for(anext(other), 5)).subject == "ITER.D"
    await other.close()


async def test_anext_waiting_ends_when_transport_closes() -> None:
    t = rv.ProcessTransport(asyncio.get_running_loop())
    listener = t.listen("ITER.E")
    waiting = asyncio.ensure_future(anext(listener))
    await asyncio.sleep(0)
    t.shutdown()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 5)


@pytest.mark.parametrize("name", HOT_PATHS)
@pytest.mark.parametrize("pure", ["0", "1"])
def test_native_module_imports_alone(name: str, pure: str) -> None:
    if native_module(name) is None:
        pytest.skip(f"rvasync_native.{name} is not built")
    env = dict(os.environ, RVASYNC_PURE=pure, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", f"import rvasync_native.{name} as m; print(m.__name__)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rvasync_native.{name}"
