"""The lab's many-subjects and routers measurements (see benchmarks/scale/lab.py).

**Many subjects** (``--only subjects``): ``--subjects`` (100,000) subjects with
listeners spread over ``--subject-hosts`` (8) hosts, one program each (an
in-process daemon); host 0 publishes round-robin over all of them. Per
daemon: memory before and after its listeners, CPU per listener and per
message sent on the service, and the time a new listener takes to get its
first message of a subject being published.

**Routers** (``--only routers``): a chain of 5 sites (1 to 4 hops) and a mesh
of 6 (tests/lab/multilan.py), one ``rvasync router`` per site; interest
propagation time, WAN packets per interest change, pub/sub and request/reply
rates per hop count, and the failover gap when a WAN link on the path is cut.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.scale import results
from benchmarks.scale.lab import Peer, interface


async def subjects(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tests.lab.lab import Lab

    hosts = args.subject_hosts
    per_host = args.subjects // hosts
    messages = args.messages or 20_000
    async with Lab(hosts + 1) as lab:
        publisher = await Peer.start(lab.hosts[0])
        peers = list(await asyncio.gather(*(Peer.start(h) for h in lab.hosts[1:])))
        service = "7700"
        where = [{"service": service, "network": h.network()} for h in lab.hosts]
        before = [await p.call(op="report") for p in peers]
        setups = await asyncio.gather(*(
            p.call(op="interest", subject=f"SCALE.S{i}", count=per_host, wait=900, **where[i + 1])
            for i, p in enumerate(peers)
        ))  # fmt: skip
        after_setup = [await p.call(op="report") for p in peers]
        await publisher.call(
            op="spray", prefixes=[f"SCALE.S{i}" for i in range(hosts)], per_prefix=per_host,
            n=messages, rate=args.rate or 2000.0, wait=900, **where[0],
        )  # fmt: skip
        await asyncio.sleep(2.0)
        after_traffic = [await p.call(op="report") for p in peers]
        latencies = await _new_listener(publisher, peers[0], where, trials=10)
        await asyncio.gather(publisher.call(op="stop"), *(p.call(op="stop") for p in peers))
    cpu = [(a["cpu"] - b["cpu"]) * 1e6 / messages for a, b in zip(after_traffic, after_setup,
                                                                   strict=True)]  # fmt: skip
    got = sum(a["tally"]["count"] for a in after_traffic)
    return [{
        "hosts": hosts, "subjects": per_host * hosts, "listeners_per_host": per_host,
        "setup_seconds_max": round(max(s["seconds"] for s in setups), 2),
        "rss_mib_before": round(statistics.median(b["rss_kib"] for b in before) / 1024, 1),
        "rss_mib_after": round(statistics.median(a["rss_kib"] for a in after_setup) / 1024, 1),
        "cpu_us_per_listener": round(
            1e6 * statistics.median(s["cpu"] for s in setups) / per_host, 1),
        "messages": messages,
        "cpu_us_per_msg_median": round(statistics.median(cpu), 2),
        "cpu_us_per_msg_max": round(max(cpu), 2),
        "new_listener_ms_median": _median(latencies),
        "new_listener_ms_max": max((x for x in latencies if x is not None), default=None),
        "missing": messages - got,
    }]  # fmt: skip


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 2) if present else None


async def _new_listener(
    publisher: Peer, listener: Peer, where: list[dict[str, Any]], trials: int
) -> list[float | None]:
    """Milliseconds from a new listener to its first message of a subject streaming now."""
    out = []
    for k in range(trials):
        subject = f"SCALE.NEW.{k}"
        await publisher.call(op="stream", subject=subject, interval=0.002, **where[0])
        await asyncio.sleep(0.3)
        answer = await listener.call(op="first", subject=subject, timeout=10.0, **where[1])
        out.append(None if answer["ms"] is None else round(answer["ms"], 2))
    return out


TOPOLOGIES = {
    "chain": (5, [(0, 1), (1, 2), (2, 3), (3, 4)]),
    "mesh": (6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3), (1, 4)]),
}


async def routers(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tests.lab.multilan import MultiLab, start_routers

    rows: list[dict[str, Any]] = []
    for topology, (sites, links) in TOPOLOGIES.items():
        async with MultiLab(sites, hosts=2) as lab:
            with tempfile.TemporaryDirectory() as tmp:
                service = "7800"
                await start_routers(lab, Path(tmp), service, links)
                peers = [await Peer.start(lan.hosts[1]) for lan in lab.sites]
                where = [{"service": service, "network": lan.hosts[1].network()}
                         for lan in lab.sites]  # fmt: skip
                far = [1, 2, 3, 4] if topology == "chain" else [3]
                for site in far:
                    rows.append(await _hops(lab, peers, where, topology, site))
                    results.progress(f"lab routers {topology} to site {site}: {rows[-1]}")
                if topology == "mesh":
                    rows[-1].update(await _failover(lab, peers, where))
                for peer in peers:
                    await peer.call(op="stop")
    return rows


def _wan_packets(lab: Any) -> int:
    return sum(interface(lab.router_host(i), "eth1")["tx_packets"] for i in range(len(lab.sites)))


async def _hops(
    lab: Any, peers: list[Peer], where: list[dict[str, Any]], topology: str, site: int
) -> dict[str, Any]:
    """Interest propagation, WAN packets per change, pub/sub and request/reply to ``site``."""
    sender, receiver = peers[0], peers[site]
    subject = f"SCALE.R{site}"
    listen_packets = await _interest_packets(lab, receiver, where[site], f"SCALE.I{site}")
    await sender.call(op="stream", subject=subject, interval=0.005, **where[0])
    first = await receiver.call(op="first", subject=subject, timeout=30.0, **where[site])
    await sender.call(op="stop")
    await receiver.call(op="stop")
    rate = 1000.0
    await receiver.call(op="subscribe", system="rvasync", subject=subject + ".P", **where[site])
    await asyncio.sleep(2.0)
    sent = await sender.call(op="publish", system="rvasync", subject=subject + ".P", n=5000,
                             size=128, rate=rate, warmup=0.5, wait=300, **where[0])  # fmt: skip
    await asyncio.sleep(2.0)
    tally = (await receiver.call(op="report"))["tally"]
    await receiver.call(op="serve", subject=subject + ".Q", **where[site])
    await asyncio.sleep(2.0)
    answered = await sender.call(op="requests", subject=subject + ".Q", n=200, timeout=5.0,
                                 wait=600, **where[0])  # fmt: skip
    await sender.call(op="stop")
    await receiver.call(op="stop")
    span = tally["last"] - tally["first"]
    return {
        "topology": topology, "networks": len(lab.sites), "hops": _hop_count(topology, site),
        "interest_ms": None if first["ms"] is None else round(first["ms"], 1),
        "wan_packets_per_interest": listen_packets, "offered_msg_s": rate,
        "pubsub_msg_s": round((tally["count"] - 1) / span, 1) if span > 0 else None,
        "pubsub_delivered": tally["count"], "pubsub_sent": sent["sent"],
        "reqrep_per_s": round(answered["answered"] / answered["seconds"], 1),
    }  # fmt: skip


async def _interest_packets(lab: Any, peer: Peer, where: dict[str, Any], subject: str) -> int:
    """WAN packets a listen and its unlisten cause, over what 2 s idle cost (heartbeats)."""
    start = _wan_packets(lab)
    await asyncio.sleep(2.0)
    idle = _wan_packets(lab) - start
    start = _wan_packets(lab)
    await peer.call(op="interest", subject=subject, count=1, **where)
    await asyncio.sleep(1.0)
    await peer.call(op="stop")
    await asyncio.sleep(1.0)
    return max(0, _wan_packets(lab) - start - idle)


def _hop_count(topology: str, site: int) -> int:
    if topology == "chain":
        return site
    return 1  # mesh: site 3 is linked to site 0 directly (0-3 chord)


async def _failover(lab: Any, peers: list[Peer], where: list[dict[str, Any]]) -> dict[str, Any]:
    """A 500 msg/s stream from site 0 to site 3; the direct 0-3 WAN link is cut."""
    sender, receiver = peers[0], peers[3]
    subject = "SCALE.FAILOVER"
    await receiver.call(op="subscribe", system="rvasync", subject=subject, **where[3])
    await asyncio.sleep(2.0)
    publish = asyncio.create_task(sender.call(
        op="publish", system="rvasync", subject=subject, n=5000, size=128, rate=500.0,
        warmup=0.5, wait=300, **where[0],
    ))  # fmt: skip
    await asyncio.sleep(4.0)
    cut_from, cut_to = lab.router_host(0), lab.wan_address(3)
    cut_from.block(cut_to)
    await publish
    await asyncio.sleep(12.0)
    tally = (await receiver.call(op="report"))["tally"]
    reported = tally["dataloss"] + (await sender.call(op="report"))["tally"]["dataloss"]
    cut_from.unblock()
    await sender.call(op="stop")
    await receiver.call(op="stop")
    sent = 5000
    return {
        "failover_ms": round(tally["max_gap_ms"], 1),
        "failover_lost": reported,
        "failover_missing_unreported": max(0, sent - tally["count"] - reported),
        "failover_delivered": tally["count"],
    }


def main(args: argparse.Namespace, argv: list[str], only: set[str]) -> int:
    if "subjects" in only:
        stamped = results.stamp(argv)
        results.store("lab.subjects", stamped, asyncio.run(subjects(args)), args.results)
    if "routers" in only:
        stamped = results.stamp(argv)
        results.store("lab.routers", stamped, asyncio.run(routers(args)), args.results)
    return 0
