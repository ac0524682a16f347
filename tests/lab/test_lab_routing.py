"""Routing daemons between separate LANs: a line of three sites, and a ring with a WAN cut.

Each site is its own bridge (no multicast between sites); every site's host 0
runs ``rvasync router --config`` attached to its LAN and linked over a WAN
bridge to other sites' routers; host 1 runs a program (tests/lab/agent.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rvasync.testing import free_port
from tests.lab.conftest import _require_lab
from tests.lab.lab import LabAgent, LabProcess
from tests.lab.multilan import MultiLab
from tests.lab.routing import (
    RouterSpec,
    site_routers,
    start_router,
    unaccounted,
    until_through,
    wait_all,
    wait_for,
)

pytestmark = pytest.mark.lab


@pytest.fixture
async def sites3() -> AsyncIterator[MultiLab]:
    _require_lab()
    async with MultiLab(3, hosts=2) as lab:
        yield lab


async def _routers(
    lab: MultiLab, tmp: Path, service: str, links: list[tuple[int, int]]
) -> list[LabProcess]:
    """Router ``r<i>`` on every site's host 0; the lower-numbered end of a link dials."""
    specs = site_routers(lab, service, links)
    return [await start_router(spec, tmp) for spec in specs.values()]


async def _agents(lab: MultiLab, service: str) -> list[LabAgent]:
    return [await lan.hosts[1].agent(service) for lan in lab.sites]


async def test_line_of_three_sites(
    sites3: MultiLab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """A - B - C: pub/sub and request/reply from site A to site C through two routers."""
    service = str(free_port())
    await _routers(sites3, tmp_path, service, [(0, 1), (1, 2)])
    a, b, c = await _agents(sites3, service)
    try:
        await c.call(op="listen", subject="LAB.R")
        await c.call(op="serve", subject="LAB.SVC")
        await b.call(op="listen", subject="LAB.OTHER")
        await until_through(a, c, "LAB.R")
        total = 300
        await a.call(op="send", subject="LAB.R", src="a", n=total, pace=0.01)
        got = await wait_all(c, "a", total)
        assert got == list(range(total))
        # B's program does not listen to LAB.R: nothing of it was delivered there.
        assert (await b.call(op="report"))["got"] == {}
        replies = await a.call(op="request", subject="LAB.SVC", n=20, timeout=5.0)
        assert replies["replies"] == list(range(20)) and replies["timeouts"] == []
        figures.update(sites=3, topology="line", sent=total, delivered=len(got), requests=20)
    finally:
        await asyncio.gather(*(x.close() for x in (a, b, c)), return_exceptions=True)


async def test_ring_of_three_with_a_wan_cut_and_heal(
    sites3: MultiLab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """A-B-C-A: the A-C link is cut under a stream from A to C, then healed.

    Every message arrives at most once; what did not arrive is accounted for
    on C, where it was missed (counted by A's router, whose count travels to C
    round through B, or inside the window C's router presents when its link
    to A breaks), and reported on A too; after the cut the stream flows round
    through B, and after the heal it still flows.
    """
    service = str(free_port())
    await _routers(sites3, tmp_path, service, [(0, 1), (1, 2), (0, 2)])
    a, _b, c = await _agents(sites3, service)
    ra = sites3.router_host(0)
    dropped = []
    try:
        await a.call(op="listen", subject="LAB.NONE")  # A watches DATALOSS advisories
        await c.call(op="listen", subject="LAB.R")
        await until_through(a, c, "LAB.R")
        total = 600

        async def cut_and_heal() -> None:
            await asyncio.sleep(1.0)
            ra.block(sites3.wan_address(2))
            await asyncio.sleep(4.0)
            dropped.append(ra.packets("drop"))
            ra.unblock()

        await asyncio.gather(
            a.call(op="send", subject="LAB.R", src="a", n=total, pace=0.2, wait=120),
            cut_and_heal(),
        )
        got = sorted(await wait_for(c, "a", set(range(total - 40, total))))
        report = await a.call(op="report")
        lost = sum(int(d.get("lost", 0)) for d in report["dataloss"])
        assert set(got) <= set(range(total))
        assert len(got) + lost >= total, (len(got), lost, report["dataloss"])
        problems, counts = unaccounted(await c.call(op="report"), {"a": total}, "lan2", "lan0")
        assert not problems, (problems[:20], counts)
        assert dropped[0] > 0, "the cut dropped nothing"
        # The tail, sent after the heal, all arrived.
        assert set(range(total - 40, total)) <= set(got)
        # After the heal a fresh batch crosses too.
        await a.call(op="send", subject="LAB.R", src="after", n=50)
        assert await wait_all(c, "after", 50) == list(range(50))
        figures.update(
            sites=3, topology="ring", sent=total, delivered=len(got), reported_lost=lost,
            cut_seconds=4.0, on_c=counts,
        )  # fmt: skip
    finally:
        await asyncio.gather(a.close(), _b.close(), c.close(), return_exceptions=True)


@pytest.fixture
async def two_sites_redundant() -> AsyncIterator[MultiLab]:
    _require_lab()
    async with MultiLab(2, hosts=3, routers=2) as lab:
        yield lab


async def test_two_routers_on_one_lan_one_killed(
    two_sites_redundant: MultiLab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """Site A has two routers (a1, a2), both linked to site B's router b.

    A stream from B to A arrives once per message (never twice, though both
    routers of A could deliver it); a1 is killed -9 in the middle: the rest
    goes through a2, and what was in flight is counted as DATALOSS at B.
    """
    lab = two_sites_redundant
    service = str(free_port())
    site_a, site_b = lab.sites
    procs: dict[str, LabProcess] = {}
    plan = [
        ("b", lab.router_host(1, 0), "lanB", [("a1", None), ("a2", None)]),
        ("a1", lab.router_host(0, 0), "lanA", [("b", lab.wan_address(1, 0))]),
        ("a2", lab.router_host(0, 1), "lanA", [("b", lab.wan_address(1, 0))]),
    ]
    for name, host, lan, neighbors in plan:
        # Each router joins its LAN through its own address.
        spec = RouterSpec(name, host, lab.wan[host], lan, service, neighbors)
        procs[name] = await start_router(spec, tmp_path)
    # Host 2 of each site runs the program.
    a = await site_a.hosts[2].agent(service)
    b = await site_b.hosts[2].agent(service)
    try:
        await a.call(op="listen", subject="LAB.R")
        await b.call(op="listen", subject="LAB.NONE")  # B watches DATALOSS advisories
        await until_through(b, a, "LAB.R")
        await asyncio.sleep(1.0)  # both routers of A known to b before the stream starts
        total = 400

        async def kill_a1() -> None:
            await asyncio.sleep(1.5)
            procs["a1"].kill9()

        await asyncio.gather(
            b.call(op="send", subject="LAB.R", src="b", n=total, pace=0.1, wait=120),
            kill_a1(),
        )
        got = await wait_for(a, "b", set(range(total - 40, total)))
        report = await b.call(op="report")
        lost = sum(int(d.get("lost", 0)) for d in report["dataloss"])
        assert len(got) + lost >= total, (len(got), lost, report["dataloss"])
        assert set(range(total - 40, total)) <= got, "the survivor did not take over"
        # Accounted for on A, where the listener missed them (never twice, too).
        problems, counts = unaccounted(await a.call(op="report"), {"b": total}, "lanA", "lanB")
        assert not problems, (problems[:20], counts)
        figures.update(sites=2, routers=3, sent=total, delivered=len(got), reported_lost=lost,
                       on_a=counts)  # fmt: skip
    finally:
        await asyncio.gather(a.close(), b.close(), return_exceptions=True)


async def test_two_routers_on_one_lan_without_a_link_between_them(
    two_sites_redundant: MultiLab, tmp_path: Path, figures: dict[str, Any]
) -> None:
    """Each site has two routers; a1-b1 and a2-b2 are linked, nothing else.

    a1 and a2 (and b1 and b2) reach each other only through the LAN they
    share: they find each other there, so a stream from B to A arrives once
    per message (without that, both paths would deliver it). a1 is killed -9
    in the middle: the rest goes through b2 and a2, and what was in flight is
    counted as DATALOSS at B.
    """
    lab = two_sites_redundant
    service = str(free_port())
    site_a, site_b = lab.sites
    procs: dict[str, LabProcess] = {}
    plan = [
        ("b1", lab.router_host(1, 0), "lanB", [("a1", None)]),
        ("b2", lab.router_host(1, 1), "lanB", [("a2", None)]),
        ("a1", lab.router_host(0, 0), "lanA", [("b1", lab.wan_address(1, 0))]),
        ("a2", lab.router_host(0, 1), "lanA", [("b2", lab.wan_address(1, 1))]),
    ]
    for name, host, lan, neighbors in plan:
        spec = RouterSpec(name, host, lab.wan[host], lan, service, neighbors)
        procs[name] = await start_router(spec, tmp_path)
    a = await site_a.hosts[2].agent(service)
    b = await site_b.hosts[2].agent(service)
    try:
        await a.call(op="listen", subject="LAB.R")
        await b.call(op="listen", subject="LAB.NONE")  # B watches DATALOSS advisories
        await until_through(b, a, "LAB.R")
        await asyncio.sleep(2.0)  # the LAN peers have heard each other and agree
        total = 400

        async def kill_a1() -> None:
            await asyncio.sleep(1.5)
            procs["a1"].kill9()

        await asyncio.gather(
            b.call(op="send", subject="LAB.R", src="b", n=total, pace=0.1, wait=120),
            kill_a1(),
        )
        got = await wait_for(a, "b", set(range(total - 40, total)))
        report = await b.call(op="report")
        lost = sum(int(d.get("lost", 0)) for d in report["dataloss"])
        assert len(got) + lost >= total, (len(got), lost, report["dataloss"])
        assert set(range(total - 40, total)) <= got, "the survivor did not take over"
        # Accounted for on A, where the listener missed them (never twice, too).
        problems, counts = unaccounted(await a.call(op="report"), {"b": total}, "lanA", "lanB")
        assert not problems, (problems[:20], counts)
        figures.update(sites=2, routers=4, sent=total, delivered=len(got), reported_lost=lost,
                       on_a=counts)  # fmt: skip
    finally:
        await asyncio.gather(a.close(), b.close(), return_exceptions=True)
