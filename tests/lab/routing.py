"""Routers in the lab: their configuration files, starting them, and checking what a stream lost.

Shared by tests/lab/test_lab_routing.py, test_lab_router_restart.py and the
chaos tier. A router host runs ``rvasync router --config`` (host 0 of a site,
see tests/lab/multilan.py); programs run tests/lab/agent.py on other hosts.

:func:`unaccounted` is the rule every routing lab test checks a listener's
stream against: a message is delivered, or an advisory accounts for it.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.lab.lab import Host, LabAgent, LabProcess
from tests.lab.multilan import MultiLab

ROUTER_PORT = 7600  # inside each router host's own namespace
ROUTER_DATALOSS = "_RV.ERROR.SYSTEM.DATALOSS.ROUTER"


@dataclass
class RouterSpec:
    """One router of a lab: where it runs and what it joins."""

    name: str
    host: Host
    wan: str
    network: str
    service: str
    #: (neighbor name, its WAN address to dial, or None to wait for it to dial in)
    neighbors: Sequence[tuple[str, str | None]]
    state: Path | None = None

    def toml(self) -> str:
        lines = [
            "[router]",
            f'name = "{self.name}"',
            f'listen = "{self.wan}:{ROUTER_PORT}"',
            "retry_min = 0.1",
            "retry_max = 1.0",
            "heartbeat = 0.3",
            "neighbor_timeout = 2.0",
        ]
        if self.state is not None:
            lines.append(f'state = "{self.state}"')
        lines += [
            "",
            "[[network]]",
            f'name = "{self.network}"',
            f'service = "{self.service}"',
            f'network = "{self.host.network()}"',
        ]
        for other, address in self.neighbors:
            lines += ["", "[[neighbor]]", f'name = "{other}"', "cost = 1"]
            if address is not None:
                lines.append(f'address = "{address}:{ROUTER_PORT}"')
        return "\n".join(lines) + "\n"


def site_routers(
    lab: MultiLab, service: str, links: Sequence[tuple[int, int]], state: Path | None = None
) -> dict[str, RouterSpec]:
    """Router ``r<i>`` on host 0 of every site of ``lab``, joined to its LAN ``lan<i>`` and
    linked to the sites ``links`` name (the lower-numbered end dials); with ``state``, each
    router's state file in that folder."""
    specs = {}
    for i in range(len(lab.sites)):
        others = [b if a == i else a for a, b in links if i in (a, b)]
        neighbors = [(f"r{o}", lab.wan_address(o) if o > i else None) for o in others]
        specs[f"r{i}"] = RouterSpec(
            f"r{i}",
            lab.router_host(i),
            lab.wan_address(i),
            f"lan{i}",
            service,
            neighbors,
            state=None if state is None else state / f"r{i}.state",
        )
    return specs


async def start_router(spec: RouterSpec, workdir: Path) -> LabProcess:
    """Write ``spec``'s configuration and run the router until it says it is ready."""
    path = workdir / f"{spec.name}.toml"
    path.write_text(spec.toml())
    proc = await spec.host.spawn("-m", "rvasync", "router", "--config", str(path))
    line = await proc.readline(30)
    assert b"ready" in line, line
    return proc


async def until_through(
    sender: LabAgent, receiver: LabAgent, subject: str, timeout: float = 30, src: str = "probe"
) -> None:
    """Send probes until one arrives: interest has propagated and the links are up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    n = 0
    while loop.time() < deadline:
        await sender.call(op="send", subject=subject, src=src, n=1, start=n)
        n += 1
        await asyncio.sleep(0.3)
        report = await receiver.call(op="report")
        if report["got"].get(src):
            return
    raise AssertionError(f"nothing crossed on {subject} in {timeout:g} s")


async def wait_all(receiver: LabAgent, src: str, total: int, timeout: float = 20) -> list[int]:
    """What ``receiver`` got from ``src`` once it has ``total`` of them (or after ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = (await receiver.call(op="report"))["got"].get(src, [])
        if len(got) >= total or loop.time() > deadline:
            return list(got)
        await asyncio.sleep(0.2)


async def wait_for(receiver: LabAgent, src: str, wanted: set[int], timeout: float = 20) -> set[int]:
    """What ``receiver`` got from ``src`` once it holds all of ``wanted`` (or after
    ``timeout``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = set((await receiver.call(op="report"))["got"].get(src, []))
        if wanted <= got or loop.time() > deadline:
            return got
        await asyncio.sleep(0.2)


def _concerns(adv: dict[str, Any], network: str, origin: str | None) -> bool:
    """Whether a DATALOSS advisory may count messages of ``origin`` missed on ``network``."""
    if "router" not in adv:
        return True  # the listener's own daemon: any stream through that daemon
    if adv.get("network") not in (None, network):
        return False
    return origin is None or adv.get("origin") in (None, origin)


def unaccounted(
    report: dict[str, Any],
    streams: dict[str, int | Collection[int]],
    network: str,
    origin: str | None = None,
    *,
    start: int = 0,
) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """Messages of ``streams`` (src -> how many were sent, numbered from 0, or which numbers
    were sent) that ``report`` (an agent's) neither delivered nor accounts for by an
    advisory; and the figures.
    Only what arrived from ``start`` on (an index in the report's log) is looked at.

    An advisory accounts for messages in one of two ways:

    * a count (``exact`` true, or a daemon's DATALOSS): together such advisories
      must count at least as many messages as are missing outside the windows
      below;
    * a window (``exact`` false, ``lost`` a lower bound): a router could not
      count, and says so in the stream itself; it covers a missing message when
      it arrived between the last message of that source received before the
      missing one and the first received after it.

    Only advisories that concern ``network`` (and ``origin``, the publishers'
    network, when given) count. A message delivered twice is reported too.
    """
    log = report["log"][start:]
    dataloss = report["dataloss"]
    windows: list[int] = []
    counted = 0
    for at, entry in enumerate(log):
        if entry[0] != "d":
            continue
        adv = dataloss[entry[1]]
        if not _concerns(adv, network, origin):
            continue
        if adv.get("exact", True):
            counted += int(adv.get("lost", 0))
        else:
            windows.append(at)
    problems: list[tuple[str, int]] = []
    uncovered: list[tuple[str, int]] = []
    missing = 0
    for src, sent in streams.items():
        expected = sorted(range(sent) if isinstance(sent, int) else sent)
        where: dict[int, int] = {}
        seen: Counter[int] = Counter()
        for at, entry in enumerate(log):
            if entry[0] == "m" and entry[1] == src:
                seen[entry[2]] += 1
                where.setdefault(entry[2], at)
        problems += [(src, i) for i, n in seen.items() if n > 1]
        got = sorted(where)
        for i in expected:
            if i in where:
                continue
            k = bisect.bisect_left(got, i)
            start = where[got[k - 1]] if k > 0 else -1
            end = where[got[k]] if k < len(got) else len(log)
            first = bisect.bisect_right(windows, start)
            if first == len(windows) or windows[first] >= end:
                uncovered.append((src, i))
        missing += len([i for i in expected if i not in where])
    if len(uncovered) > counted:
        problems += uncovered[counted:]
    figures = {
        "missing": missing,
        "in_windows": missing - len(uncovered),
        "counted": counted,
        "windows": len(windows),
    }
    return problems, figures
