"""Correlation ids: listeners sharing a queue tell their deliveries apart, on every transport.

The id is the listener's (chosen by the program or made by rvasync); every
message delivered through a listener answers ``msg.correlation_id`` with it.
Checked on the process transport, a network transport on the in-process
daemon, a network transport on a standalone daemon process, and certified
(CM) listeners; plus the argument rules.
"""

from __future__ import annotations

import asyncio

import pytest

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.correlation import check_correlation_id, new_correlation_id
from rvasync.message import Message
from rvasync.queues import Queue

WAIT = 20.0


async def shared_queue_deliveries(transport) -> None:
    """Three listeners on one queue (two on the same subject): every delivery names its own."""
    queue = Queue()
    by_id = {
        "orders": transport.listen("ORDERS.>", queue=queue, correlation_id="orders"),
        b"new": transport.listen("ORDERS.NEW", queue=queue, correlation_id=b"new"),
        7: transport.listen("ORDERS.NEW", queue=queue, correlation_id=7),
    }
    chosen = transport.listen("ORDERS.OLD", queue=queue)  # rvasync picks its id
    await asyncio.sleep(0.05)  # interests reach the daemon (in-process: at once)
    ping = getattr(getattr(transport, "link", None), "ping", None)
    if ping is not None:
        await ping()
    await transport.send(Message("ORDERS.NEW", {"n": 1}))
    await transport.send(Message("ORDERS.OLD", {"n": 2}))
    got = [await queue.get(WAIT) for _ in range(5)]
    seen = sorted((repr(m.correlation_id), m["n"]) for m in got)
    assert seen == sorted(
        [
            ("'orders'", 1),
            ("b'new'", 1),
            ("7", 1),
            ("'orders'", 2),
            (repr(chosen.correlation_id), 2),
        ]
    )
    for msg in got:
        assert msg.correlation_id == msg.listener.correlation_id
        if msg.correlation_id in by_id:
            assert msg.listener is by_id[msg.correlation_id]
    assert chosen.correlation_id not in by_id
    for listener in [*by_id.values(), chosen]:
        await listener.close()


async def test_process_transport(rv_process_transport):
    await shared_queue_deliveries(rv_process_transport)


async def test_network_transport_on_in_process_daemon(rv_service):
    async with rv.Transport(rv_service[0], rv_service[1]) as transport:
        await shared_queue_deliveries(transport)


async def test_network_transport_on_standalone_daemon(rv_daemon, rv_service):
    async with rv.Transport(rv_service[0], rv_service[1], rv_daemon) as transport:
        await shared_queue_deliveries(transport)


async def test_callback_listeners_see_their_own_ids(rv_process_transport):
    t = rv_process_transport
    seen: list[tuple[object, int]] = []
    done = asyncio.Event()

    def record(msg: Message) -> None:
        seen.append((msg.correlation_id, msg["n"]))
        if len(seen) == 2:
            done.set()

    queue = Queue()
    t.listen("A", queue=queue, callback=record, correlation_id="first")
    t.listen("A", queue=queue, callback=record, correlation_id="second")
    await t.send(Message("A", {"n": 1}))
    await asyncio.wait_for(done.wait(), WAIT)
    assert sorted(seen) == [("first", 1), ("second", 1)]


async def test_certified_listeners_carry_their_ids(rv_process_transport):
    t = rv_process_transport
    joe = CmTransport(t, "JOE")
    sue = CmTransport(t, "SUE")
    queue = Queue()
    certified = sue.listen("FOO", queue=queue, correlation_id="cm")
    plain = t.listen("FOO", queue=queue, correlation_id="plain")
    await joe.send(Message("FOO", {"n": 1}))
    got = {m.correlation_id: m for m in [await queue.get(WAIT) for _ in range(2)]}
    assert set(got) == {"cm", "plain"}
    assert got["cm"].listener is certified and got["cm"].cm is not None
    assert got["plain"].listener is plain
    assert isinstance(sue.listen("BAR").correlation_id, str)
    with pytest.raises(rv.InvalidArgument, match="correlation_id"):
        sue.listen("BAR", correlation_id=0)
    await joe.close()
    await sue.close()


async def test_copies_keep_it_and_undelivered_messages_have_none(rv_process_transport):
    t = rv_process_transport
    listener = t.listen("X", correlation_id="x")
    await t.send(Message("X"))
    msg = await listener.get(WAIT)
    assert msg.copy().correlation_id == "x"
    assert Message("X").correlation_id is None


@pytest.mark.parametrize("bad", [0, "", b"", b"\0\0", True, 1.5, None.__class__, ["a"]])
async def test_bad_ids_are_refused_with_a_clear_error(rv_process_transport, bad):
    with pytest.raises(rv.InvalidArgument, match="correlation_id"):
        rv_process_transport.listen("X", correlation_id=bad)
    assert not rv_process_transport.interested("X")  # nothing registered


def test_chosen_ids_are_unique_and_valid():
    ids = {new_correlation_id() for _ in range(1000)}
    assert len(ids) == 1000
    for value in ids:
        assert check_correlation_id(value) == value
