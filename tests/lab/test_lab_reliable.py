"""Reliable multicast and point-to-point traffic between lab hosts, under real faults.

The promise under test: every listener gets every message exactly once in each
sender's order, or a DATALOSS advisory that counts exactly the messages that
did not arrive. Never a silent gap.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rvasync.daemon.service import REANNOUNCE_HEARTBEATS
from rvasync.testing import free_port
from tests.lab.conftest import long_run
from tests.lab.lab import Host, Lab, LabAgent

pytestmark = pytest.mark.lab

SUBJECT = "LAB.MC"


async def agents(lab: Lab, service: str, *extra: str) -> list[LabAgent]:
    return list(await asyncio.gather(*(host.agent(service, *extra) for host in lab.hosts)))


async def close_all(started: list[LabAgent]) -> None:
    await asyncio.gather(*(agent.close() for agent in started), return_exceptions=True)


def lost_from(report: dict[str, Any], host: Host) -> int:
    """Messages a DATALOSS advisory says ``host`` will never deliver to this listener."""
    return sum(
        int(fields.get("messages", 0))
        for fields in report["dataloss"]
        if str(fields.get("host")) == host.address
    )


def check_stream(report: dict[str, Any], src: Host, sent: range) -> tuple[int, int]:
    """Exactly once, in order, or counted: (delivered, reported lost)."""
    got = report["got"].get(src.netns, [])
    assert got == sorted(got), f"out of order from {src}: {got[:50]}"
    assert len(got) == len(set(got)), f"duplicates from {src}"
    assert set(got) <= set(sent), f"messages never sent from {src}"
    missing = len(sent) - len(got)
    reported = lost_from(report, src)
    assert reported == missing, (
        f"from {src}: {missing} missing but DATALOSS counts {reported} ({report['dataloss']})"
    )
    return len(got), reported


async def settle(listeners: list[LabAgent], expect: int, timeout: float) -> list[dict[str, Any]]:
    """Reports once every listener holds ``expect`` messages (or ``timeout`` passed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        reports = [await agent.call(op="report") for agent in listeners]
        done = all(
            sum(len(v) for v in r["got"].values()) + sum(int(f.get("messages", 0))
                                                         for f in r["dataloss"]) >= expect
            for r in reports
        )  # fmt: skip
        if done or loop.time() > deadline:
            return reports
        await asyncio.sleep(0.25)


@pytest.mark.parametrize("loss", [1, 10, 20] if long_run() else [10])
async def test_multicast_under_loss_duplication_and_reordering(
    lab3: Lab, loss: int, figures: dict[str, Any]
) -> None:
    count = 3000 if long_run() else 400
    h0, h1, _h2 = lab3.hosts
    service = str(free_port())
    started = await agents(lab3, service)
    try:
        for agent in started:
            await agent.call(op="listen", subject=SUBJECT)
        # Every host loses a share of what reaches it; two senders duplicate and reorder.
        for host in lab3.hosts:
            host.loss(loss)
        h0.duplicate(5)
        h1.reorder(10)
        h1.duplicate(5)
        await asyncio.gather(
            started[0].call(op="send", subject=SUBJECT, src=h0.netns, n=count, pace=0.002),
            started[1].call(op="send", subject=SUBJECT, src=h1.netns, n=count, pace=0.002),
        )
        reports = await settle(started, 2 * count, timeout=30)
        delivered = lost = 0
        for report in reports:
            for src in (h0, h1):
                got, reported = check_stream(report, src, range(count))
                delivered, lost = delivered + got, lost + reported
        assert all(host.packets("drop") > 0 for host in lab3.hosts), "no loss was injected"
        figures.update(
            hosts=3, loss_percent=loss, sent=2 * count, deliveries=delivered,
            reported_lost=lost, datagrams_dropped=sum(h.packets("drop") for h in lab3.hosts),
            datagrams_duplicated=sum(h.packets("dup") for h in lab3.hosts),
            datagrams_reordered=sum(h.packets("1:20") for h in lab3.hosts),
        )  # fmt: skip
    finally:
        await close_all(started)


async def test_first_point_to_point_datagram_lost_is_recovered(
    lab2: Lab, figures: dict[str, Any]
) -> None:
    """The first reply to an inbox on another daemon is lost on the wire: it still arrives.

    A new point-to-point stream must be recognised by the receiver as one that
    began while it listened, so it asks for datagram 1 again instead of joining
    the stream mid-way and losing the request without a word.
    """
    server_host, client_host = lab2.hosts
    service = str(free_port())
    server, client = await agents(lab2, service)
    try:
        await server.call(op="serve", subject="LAB.SVC")
        await client.call(op="listen", subject="LAB.UNUSED")  # watch DATALOSS too
        # Drop exactly the first unicast datagram from the server's daemon to the client's:
        # the first reply, the first datagram of that point-to-point stream.
        client_host.drop_first_unicast(server_host)
        answer = await client.call(op="request", subject="LAB.SVC", n=5, timeout=8, wait=60)
        assert client_host.packets("drop") == 1, "the first datagram was not dropped"
        assert answer["timeouts"] == [], answer
        assert answer["replies"] == list(range(5))
        figures.update(hosts=2, requests=5, first_datagram_dropped=1, replies=5)
    finally:
        await close_all([server, client])


async def test_partition_longer_than_reliability_is_reported_exactly(
    lab3: Lab, figures: dict[str, Any]
) -> None:
    """A host cut off past the reliability interval gets a DATALOSS counting each lost message."""
    h0, _h1, h2 = lab3.hosts
    service = str(free_port())
    started = await agents(lab3, service, "--reliability", "1")
    sender = started[0]
    try:
        for agent in started:
            await agent.call(op="listen", subject=SUBJECT)
        # The daemons announce their interest to one another again a few heartbeats after
        # they met (rvasync.daemon.service.REANNOUNCE_HEARTBEATS); announcements lost in the
        # cut would count in its DATALOSS too: the cut comes after them.
        await asyncio.sleep(REANNOUNCE_HEARTBEATS[-1] * 1.0 + 0.5)
        await sender.call(op="send", subject=SUBJECT, src=h0.netns, n=100, pace=0.01)
        h2.partition()
        await sender.call(op="send", subject=SUBJECT, src=h0.netns, n=200, start=100, pace=0.02)
        await asyncio.sleep(2.5)  # past the reliability interval: those are gone for good
        h2.heal()
        await sender.call(op="send", subject=SUBJECT, src=h0.netns, n=100, start=300, pace=0.01)
        reports = await settle(started, 400, timeout=20)
        delivered, reported = check_stream(reports[2], h0, range(400))
        assert reported > 0, "a partition past the reliability interval lost nothing?"
        assert delivered >= 200
        figures.update(
            hosts=3, partitions=1, sent=400, cut_host_delivered=delivered,
            cut_host_reported_lost=reported,
        )  # fmt: skip
        # The hosts that stayed connected lost nothing.
        for report in reports[:2]:
            assert check_stream(report, h0, range(400)) == (400, 0)
    finally:
        await close_all(started)


async def test_hosts_with_clocks_a_month_apart(lab3: Lab, figures: dict[str, Any]) -> None:
    """Ages and timers are local: a sender whose clock is 30 days ahead loses nothing."""
    h0, h1, _ = lab3.hosts
    service = str(free_port())
    month = 30 * 86400.0
    started = [
        await h0.agent(service, clock_offset=month),
        await h1.agent(service),
        await lab3.hosts[2].agent(service, clock_offset=2 * month),
    ]
    try:
        for agent in started:
            await agent.call(op="listen", subject=SUBJECT)
        for host in lab3.hosts:
            host.loss(10)
        await asyncio.gather(
            started[0].call(op="send", subject=SUBJECT, src=h0.netns, n=300, pace=0.002),
            started[2].call(op="send", subject=SUBJECT, src=lab3.hosts[2].netns, n=300, pace=0.002),
        )
        reports = await settle(started, 600, timeout=30)
        for report in reports:
            assert check_stream(report, h0, range(300)) == (300, 0)
            assert check_stream(report, lab3.hosts[2], range(300)) == (300, 0)
        # The first reply from the far-off clock's daemon arrives as well.
        await started[0].call(op="serve", subject="LAB.SVC")
        answer = await started[1].call(op="request", subject="LAB.SVC", n=3, timeout=8)
        assert answer == {"replies": [0, 1, 2], "timeouts": []}
        figures.update(hosts=3, clock_offsets_days=[30, 0, 60], sent=600, deliveries=1800)
    finally:
        await close_all(started)


@pytest.mark.parametrize("loss", [5, 20] if long_run() else [10])
async def test_requests_and_replies_under_loss(
    lab3: Lab, loss: int, figures: dict[str, Any]
) -> None:
    """Point-to-point traffic (replies to inboxes) under loss: every reply, exactly once."""
    count = 400 if long_run() else 60
    server_host = lab3.hosts[0]
    service = str(free_port())
    started = await agents(lab3, service)
    try:
        await started[0].call(op="serve", subject="LAB.SVC")
        for agent in started[1:]:
            await agent.call(op="listen", subject="LAB.UNUSED")  # and DATALOSS
        for host in lab3.hosts:
            host.loss(loss)
        answers = await asyncio.gather(
            *(agent.call(op="request", subject="LAB.SVC", n=count, timeout=10, wait=600)
              for agent in started[1:])
        )  # fmt: skip
        for agent, answer in zip(started[1:], answers, strict=True):
            report = await agent.call(op="report")
            assert answer["timeouts"] == [] or lost_from(report, server_host) > 0, answer
            assert answer == {"replies": list(range(count)), "timeouts": []}
        figures.update(
            hosts=3, loss_percent=loss, requests=2 * count, replies=2 * count,
            datagrams_dropped=sum(h.packets("drop") for h in lab3.hosts),
        )  # fmt: skip
    finally:
        await close_all(started)
