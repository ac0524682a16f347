"""LISTEN.START / LISTEN.STOP: daemons announce their interest so that routers can learn it."""

from __future__ import annotations

import asyncio

import rvasync as rv
from rvasync.daemon.interestadv import ROUTER_MARK, InterestAnnouncer
from rvasync.testing import LOOPBACK, free_port
from tests.netutil import LoopThread


async def _events(listener: rv.Listener, count: int) -> list[tuple[str, str]]:
    out = []
    async with asyncio.timeout(10):
        async for msg in listener:
            if msg.subject.endswith(".QUERY"):  # a daemon asking for everyone's interest
                continue
            out.append((msg.subject.rsplit(".", 1)[1], msg["sub"]))
            if len(out) == count:
                return out
    return out


async def test_announced_once_per_daemon_and_withdrawn() -> None:
    service = str(free_port())
    router = rv.Transport(service, LOOPBACK, description=ROUTER_MARK + "t", router=True)
    await router.open()
    adv = router.listen("_RV.INFO.SYSTEM.LISTEN.>")
    app = rv.Transport(service, LOOPBACK)
    await app.open()
    try:
        first = app.listen("ORDERS.>")
        second = app.listen("ORDERS.>")
        router.listen("NOT.ANNOUNCED")  # a router's own interest is never announced
        app.create_inbox()
        assert await _events(adv, 1) == [("START", "ORDERS.>")]
        await first.close()
        await second.close()
        assert await _events(adv, 1) == [("STOP", "ORDERS.>")]
    finally:
        await app.close()
        await router.close()


async def test_other_daemons_announce_to_a_new_one() -> None:
    """A router's daemon that starts late still hears what the others listen to."""
    service = str(free_port())
    other = LoopThread()
    try:

        async def program() -> rv.Transport:
            t = rv.Transport(service, LOOPBACK)
            await t.open()
            t.listen("PRICES.*")
            return t

        app = await other.run(program())
        await asyncio.sleep(0.3)  # its START has gone out before the router's daemon exists
        router = rv.Transport(service, LOOPBACK, description=ROUTER_MARK + "t", router=True)
        await router.open()
        adv = router.listen("_RV.INFO.SYSTEM.LISTEN.>")
        try:
            # Restated for the newcomer as CURRENT (START says only what is new).
            assert ("CURRENT", "PRICES.*") in await _events(adv, 1)
        finally:
            await router.close()
            await other.run(app.close())
    finally:
        other.stop()


def test_announcer_counts_and_filters() -> None:
    a = InterestAnnouncer("7F0000011234")
    assert [m["sub"] for m in a.added(False, "A")] == ["A"]
    assert a.added(False, "A") == []
    assert a.added(False, "_INBOX.x.y.z") == []
    assert a.added(False, "_LOCAL.x") == []
    assert a.added(True, "B") == []
    assert a.removed(False, "A") == []
    assert [m.subject for m in a.removed(False, "A")] == ["_RV.INFO.SYSTEM.LISTEN.STOP"]
    assert a.removed(False, "A") == []
    a.added(False, "C")
    # Listening to the announcements asks every daemon for its interest, and restates
    # this one's as LISTEN.CURRENT (never START again).
    out = a.added(True, "_RV.INFO.SYSTEM.>")
    assert [m.subject.rsplit(".", 1)[1] for m in out] == ["QUERY", "CURRENT"]
    assert out[1]["sub"] == "C" and "to" not in out[0]
    assert a.watchers == 1
    assert a.removed(True, "_RV.INFO.SYSTEM.>") == [] and a.watchers == 0
