"""Several LANs in one lab: one bridge per site, and a WAN bridge between the sites' routers.

Each site is a :class:`~tests.lab.lab.Lab` of its own (its bridge, /24,
multicast group and hosts), so multicast never crosses from one site to
another: exactly the situation a routing daemon is for. Host 0 of every site
(and the next ones, with ``routers=``) is a router host: it gets a second
interface, ``eth1``, on a WAN bridge with an address of its own, over which
routers reach each other by TCP. A WAN link is cut with
``router_host.block(wan_address)`` and healed with ``unblock()``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
from pathlib import Path
from typing import Any

from tests.lab.lab import LAB_RANGE, Host, Lab, LabProcess, run

#: The routers' WAN port, inside each router host's own namespace.
ROUTER_PORT = 7600


class MultiLab:
    """``sites`` LANs of ``hosts`` hosts each, their routers joined by a WAN bridge.

    The first ``routers`` hosts of every site are router hosts (on the WAN too).
    """

    def __init__(self, sites: int = 3, hosts: int = 2, routers: int = 1) -> None:
        self.routers = routers
        self.sites: list[Lab] = []
        while len(self.sites) < sites:
            lan = Lab(hosts)
            if any(
                lan.tag == s.tag or lan.subnet == s.subnet or lan.group == s.group
                for s in self.sites
            ):
                continue
            self.sites.append(lan)
        self.tag = self.sites[0].tag
        self.wan_bridge = f"{self.tag}wan"
        taken = {s.subnet for s in self.sites}
        while True:
            base = int(LAB_RANGE.network_address) + random.randrange(512) * 256
            subnet = ipaddress.ip_network((base, 24))
            if subnet not in taken:
                break
        self.wan_subnet = subnet
        #: router host -> its WAN address
        self.wan: dict[Host, str] = {}
        self._wan_up = False

    def router_host(self, site: int, k: int = 0) -> Host:
        return self.sites[site].hosts[k]

    def wan_address(self, site: int, k: int = 0) -> str:
        return self.wan[self.router_host(site, k)]

    def up(self) -> MultiLab:
        try:
            for lan in self.sites:
                lan.up()
            run("ip", "link", "add", self.wan_bridge, "type", "bridge")
            self._wan_up = True
            run("ip", "link", "set", self.wan_bridge, "up")
            base = int(self.wan_subnet.network_address)
            for n, (i, k) in enumerate(
                (i, k) for i in range(len(self.sites)) for k in range(self.routers)
            ):
                host = self.sites[i].hosts[k]
                outer, inner = f"{self.tag}w{n}", f"{self.tag}x{n}"
                address = str(ipaddress.ip_address(base + 1 + n))
                run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
                run("ip", "link", "set", inner, "netns", host.netns)
                run("ip", "link", "set", outer, "master", self.wan_bridge, "up")
                run("ip", "link", "set", inner, "name", "eth1", netns=host.netns)
                run("ip", "addr", "add", f"{address}/24", "dev", "eth1", netns=host.netns)
                run("ip", "link", "set", "eth1", "up", netns=host.netns)
                self.wan[host] = address
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        if self._wan_up:
            self._wan_up = False
            for n in range(len(self.sites) * self.routers):
                run("ip", "link", "del", f"{self.tag}w{n}", check=False)
            run("ip", "link", "del", self.wan_bridge, check=False)
        for lan in self.sites:
            lan.down()

    async def __aenter__(self) -> MultiLab:
        return self.up()

    async def __aexit__(self, *exc: Any) -> None:
        for lan in self.sites:
            with contextlib.suppress(Exception):
                await lan.__aexit__(*exc)
        self.down()


def router_config(lab: MultiLab, site: int, service: str, neighbors: list[int]) -> str:
    """``rvasync router --config`` text for site ``site``'s router (named r<site>), attached
    to its LAN on ``service`` and linked to the routers of ``neighbors`` (the
    lower-numbered router of each link dials)."""
    host = lab.router_host(site)
    lines = [
        "[router]",
        f'name = "r{site}"',
        f'listen = "{lab.wan_address(site)}:{ROUTER_PORT}"',
        "retry_min = 0.1",
        "retry_max = 1.0",
        "heartbeat = 0.3",
        "neighbor_timeout = 2.0",
        "",
        "[[network]]",
        f'name = "lan{site}"',
        f'service = "{service}"',
        f'network = "{host.network()}"',
    ]
    for other in neighbors:
        lines += ["", "[[neighbor]]", f'name = "r{other}"', "cost = 1"]
        if other > site:  # the lower-numbered router dials
            lines.append(f'address = "{lab.wan_address(other)}:{ROUTER_PORT}"')
    return "\n".join(lines) + "\n"


async def start_routers(
    lab: MultiLab, tmp: Path, service: str, links: list[tuple[int, int]]
) -> list[LabProcess]:
    """One router per site (on its router host), linked as ``links`` (pairs of sites)."""
    procs = []
    for site in range(len(lab.sites)):
        neighbors = [b if a == site else a for a, b in links if site in (a, b)]
        path = tmp / f"r{site}.toml"
        path.write_text(router_config(lab, site, service, neighbors))
        proc = await lab.router_host(site).spawn("-m", "rvasync", "router", "--config", str(path))
        line = await proc.readline(30)
        assert b"ready" in line, line
        procs.append(proc)
    return procs
