"""A multi-host lab on one Linux machine: hosts as network namespaces on one bridge.

Rendezvous is about many hosts on a LAN, and its promises (every message or a
DATALOSS that counts the missing ones; certified delivery across crashes;
fault-tolerant fail-over) only mean something when packets are really lost
between real hosts. This module makes such hosts here, with no virtual machine:

- each host is a network namespace with one veth interface on a shared bridge,
  an address in 198.18.0.0/15 (the range reserved for network test labs), no
  default route (nothing can leave the machine) and real IP multicast between
  the hosts on 239.255.0.0/16;
- faults are injected while traffic flows: random loss (nftables ``numgen
  random`` drops on a host's input hook, from every host or from one),
  duplication (nftables ``dup`` on a host's output), reordering (a random share
  of a host's outgoing datagrams classified into a slow HTB class, so they
  arrive after later ones: netem is not available on these kernels), a
  partition (a host drops everything from and to the others) and its healing,
  kill -9 / restart of any process run in a host, and a host whose clock is
  far from the others' (a time namespace offsets a process's monotonic clock);
- every name carries a per-run tag, so two runs never collide, and everything
  is torn down at exit, also on failure, on Ctrl-C and on SIGTERM
  (``python tests/lab/lab.py clean`` removes what a killed run left behind).

It needs root, iproute2 and nftables (``apt-get install nftables``);
:func:`available` says why not where they are missing. Run ``python
tests/lab/lab.py up 3`` to get three hosts and a shell hint for each, or see
tests/lab/README.md for watching one scenario by hand.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Every lab object's name starts with this, so ``clean`` can find leftovers.
PREFIX = "rvl"
#: The test-lab range (RFC 2544); each run takes one /24 inside it.
LAB_RANGE = ipaddress.ip_network("198.18.0.0/15")
AGENT = Path(__file__).with_name("agent.py")
ROOT = Path(__file__).resolve().parents[2]
#: Seconds a lab command (ip, nft, tc) may take before it counts as hung.
COMMAND_TIMEOUT = 10.0
#: Longest line a lab process may print (an agent's report of a long run is one line).
LINE_LIMIT = 64 * 1024 * 1024


class LabError(RuntimeError):
    """A lab operation failed; the message names the command and what it printed."""


def available() -> tuple[bool, str]:
    """Whether this machine can make lab hosts, and if not, why (for a skip reason)."""
    if sys.platform != "linux":
        return False, "the lab needs Linux network namespaces"
    if os.geteuid() != 0:
        return False, "the lab needs root (network namespaces, veth pairs, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            return False, f"the lab needs {tool!r} (apt-get install {package})"
    probe = f"{PREFIX}probe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


def run(*argv: str, netns: str | None = None, check: bool = True) -> str:
    """Run one lab command (inside ``netns`` if given); its output, or LabError."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{' '.join(full)}: no answer in {COMMAND_TIMEOUT} s") from exc
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(full)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _run_tag() -> str:
    """Five characters unique to this run (pid and a random part)."""
    return f"{os.getpid() % 1000:03d}{random.randrange(36 * 36):02x}"[:5]


class Host:
    """One lab host: a namespace, its interface and address, and its faults."""

    def __init__(self, lab: Lab, index: int, address: str) -> None:
        self.lab = lab
        self.index = index
        self.address = address
        self.netns = f"{lab.tag}-h{index}"
        self.bridge_port = f"{lab.tag}b{index}"
        self.iface = "eth0"
        self._faults: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"Host({self.netns}, {self.address})"

    # ---------------------------------------------------------------- set-up

    def create(self) -> None:
        """Make the namespace and plug it into the lab's bridge."""
        run("ip", "netns", "add", self.netns)
        inner = f"{self.lab.tag}i{self.index}"
        run("ip", "link", "add", self.bridge_port, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", self.netns)
        run("ip", "link", "set", self.bridge_port, "master", self.lab.bridge, "up")
        ns = self.netns
        run("ip", "link", "set", inner, "name", self.iface, netns=ns)
        cidr = f"{self.address}/{self.lab.prefixlen}"
        run("ip", "addr", "add", cidr, "dev", self.iface, netns=ns)
        run("ip", "link", "set", self.iface, "up", netns=ns)
        run("ip", "link", "set", "lo", "up", netns=ns)
        # Multicast leaves through eth0 (there is no default route to choose it).
        run("ip", "route", "add", "224.0.0.0/4", "dev", self.iface, netns=ns)
        # One nftables table per host holds every fault; chains exist from the start.
        run("nft", "add", "table", "ip", "lab", netns=ns)
        run("nft", "add", "chain", "ip", "lab", "input",
            "{ type filter hook input priority 0; policy accept; }", netns=ns)  # fmt: skip
        run("nft", "add", "chain", "ip", "lab", "output",
            "{ type filter hook output priority 0; policy accept; }", netns=ns)  # fmt: skip
        # Reordering: HTB with a fast default class and a slow one that output rules
        # send a random share of datagrams to, so those arrive after later ones.
        run("tc", "qdisc", "add", "dev", self.iface, "root", "handle", "1:", "htb", "default",
            "10", "r2q", "100000", netns=ns)  # fmt: skip
        run("tc", "class", "add", "dev", self.iface, "parent", "1:", "classid", "1:10", "htb",
            "rate", "10gbit", netns=ns)  # fmt: skip
        run("tc", "class", "add", "dev", self.iface, "parent", "1:", "classid", "1:20", "htb",
            "rate", "4mbit", "ceil", "4mbit", netns=ns)  # fmt: skip

    def network(self, group: str | None = None) -> str:
        """The rvasync network parameter for this host: its address and the lab's group."""
        return f"{self.address};{group or self.lab.group}"

    # ----------------------------------------------------------------- faults

    def _rule(self, kind: str, chain: str, *expr: str) -> None:
        """Add one nftables rule, remembered under ``kind`` so it can be removed."""
        out = run("nft", "--echo", "--handle", "add", "rule", "ip", "lab", chain, *expr,
                  netns=self.netns)  # fmt: skip
        handle = out.rsplit("# handle", 1)[-1].strip()
        self._faults.setdefault(kind, []).append(f"{chain}:{handle}")

    def clear(self, kind: str | None = None) -> None:
        """Remove the faults of ``kind`` (loss, duplicate, reorder, partition), or all."""
        kinds = [kind] if kind else list(self._faults)
        for k in kinds:
            for entry in self._faults.pop(k, []):
                chain, handle = entry.split(":")
                run("nft", "delete", "rule", "ip", "lab", chain, "handle", handle,
                    netns=self.netns)  # fmt: skip

    def loss(self, percent: float, *, source: Host | None = None) -> None:
        """Drop ``percent`` % of the UDP datagrams arriving here (only ``source``'s, if given)."""
        match = ["ip", "saddr", source.address] if source else []
        self._rule("loss", "input", *match, "meta", "l4proto", "udp", "numgen", "random",
                   "mod", "10000", "<", str(int(percent * 100)), "counter", "drop")  # fmt: skip

    def duplicate(self, percent: float) -> None:
        """Send ``percent`` % of this host's multicast and unicast datagrams twice."""
        share = ["numgen", "random", "mod", "10000", "<", str(int(percent * 100))]
        self._rule("duplicate", "output", "meta", "l4proto", "udp", "ip", "daddr",
                   self.lab.group, *share, "counter", "dup", "to", self.lab.group, "device",
                   self.iface)  # fmt: skip
        for other in self.lab.hosts:
            if other is not self:
                self._rule("duplicate", "output", "meta", "l4proto", "udp", "ip", "daddr",
                           other.address, *share, "counter", "dup", "to", other.address,
                           "device", self.iface)  # fmt: skip

    def drop_first_unicast(self, source: Host) -> None:
        """Drop exactly the next unicast UDP datagram ``source`` sends to this host."""
        self._rule("loss", "input", "ip", "saddr", source.address, "meta", "pkttype", "host",
                   "meta", "l4proto", "udp", "numgen", "inc", "mod", "1000000000", "<", "1",
                   "counter", "drop")  # fmt: skip

    def reorder(self, percent: float) -> None:
        """Delay ``percent`` % of this host's outgoing UDP datagrams behind later ones."""
        self._rule("reorder", "output", "oifname", self.iface, "meta", "l4proto", "udp",
                   "numgen", "random", "mod", "10000", "<", str(int(percent * 100)),
                   "counter", "meta", "priority", "set", "1:20")  # fmt: skip

    def partition(self) -> None:
        """Cut this host off from every other lab host (both directions); see :meth:`heal`."""
        subnet = f"{self.lab.subnet}"
        self._rule("partition", "input", "ip", "saddr", subnet, "counter", "drop")
        self._rule("partition", "output", "ip", "daddr", subnet, "counter", "drop")
        self._rule("partition", "output", "ip", "daddr", "224.0.0.0/4", "counter", "drop")

    def heal(self) -> None:
        """End a :meth:`partition`."""
        self.clear("partition")

    def block(self, address: str) -> None:
        """Drop everything to and from ``address`` (a link cut between two hosts); see
        :meth:`unblock`. Used for the WAN links between routers (tests/lab/multilan.py)."""
        self._rule("block", "input", "ip", "saddr", address, "counter", "drop")
        self._rule("block", "output", "ip", "daddr", address, "counter", "drop")

    def unblock(self) -> None:
        """End every :meth:`block`."""
        self.clear("block")

    def packets(self, action: str = "drop") -> int:
        """How many packets this host's fault rules ending in ``action`` have matched."""
        total = 0
        for line in self.counters().splitlines():
            if f" {action}" in line and "counter packets" in line:
                total += int(line.split("counter packets", 1)[1].split()[0])
        return total

    def counters(self) -> str:
        """The fault rules with their packet counters (what a fault actually did)."""
        return run("nft", "list", "table", "ip", "lab", netns=self.netns)

    # -------------------------------------------------------------- processes

    async def spawn(
        self, *argv: str, env: dict[str, str] | None = None, clock_offset: float = 0.0
    ) -> LabProcess:
        """Start ``python argv...`` inside this host; its stdout is read line by line.

        ``clock_offset`` seconds are added to the process's monotonic and boot
        clocks (a Linux time namespace): a host whose clock is far from the
        others', which nothing in the protocols may compare across hosts.
        """
        return await self.lab.spawn(self, argv, env, clock_offset)

    async def agent(self, service: str, *extra: str, clock_offset: float = 0.0) -> LabAgent:
        """Start a tests/lab/agent.py in this host on ``service`` and the lab network."""
        proc = await self.spawn(
            str(AGENT), service, self.network(), *extra, clock_offset=clock_offset
        )
        agent = LabAgent(self, proc, (service, *extra))
        await agent.ready()
        return agent


class LabProcess:
    """A process running in a lab host (its own process group, killed at teardown)."""

    def __init__(self, host: Host, proc: asyncio.subprocess.Process, argv: Sequence[str]) -> None:
        self.host = host
        self.proc = proc
        self.argv = tuple(argv)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def readline(self, timeout: float) -> bytes:
        """One line of output within ``timeout`` seconds (b'' once the process has ended)."""
        assert self.proc.stdout is not None
        return await asyncio.wait_for(self.proc.stdout.readline(), timeout)

    async def write(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    def kill9(self) -> None:
        """kill -9 the process and everything it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def wait(self, timeout: float = 10.0) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)


class LabAgent:
    """Drives one tests/lab/agent.py: one JSON command a line, one JSON answer a line."""

    def __init__(self, host: Host, proc: LabProcess, args: Sequence[str]) -> None:
        self.host = host
        self.proc = proc
        self.args = tuple(args)
        self.hello: dict[str, Any] = {}

    async def ready(self, timeout: float = 30.0) -> None:
        line = await self.proc.readline(timeout)
        if not line:
            code = await self.proc.wait()
            raise LabError(f"agent on {self.host} exited ({code}) before it was ready")
        self.hello = json.loads(line)

    async def call(self, wait: float = 60.0, **command: Any) -> dict[str, Any]:
        """Send one command; its answer within ``wait`` seconds."""
        await self.proc.write(json.dumps(command))
        line = await self.proc.readline(wait)
        if not line:
            code = await self.proc.wait()
            raise LabError(f"agent on {self.host} exited ({code}) during {command['op']}")
        answer = json.loads(line)
        if "failed" in answer:
            raise LabError(f"agent on {self.host}: {command['op']} failed: {answer['failed']}")
        return answer

    async def close(self) -> None:
        if self.proc.proc.returncode is None:
            try:
                await self.call(op="exit", wait=15)
                await self.proc.wait(15)
            except (LabError, TimeoutError, BrokenPipeError, ConnectionResetError):
                self.proc.kill9()
                await self.proc.wait()


class Lab:
    """N hosts on one bridge; a context manager (sync or async) that always tears down."""

    def __init__(self, hosts: int = 3) -> None:
        if not 1 <= hosts <= 200:
            raise ValueError(f"hosts must be 1..200, got {hosts}")
        self.tag = f"{PREFIX}{_run_tag()}"
        self.bridge = f"{self.tag}br"
        third = random.randrange(512)
        base = int(LAB_RANGE.network_address) + third * 256
        self.subnet = ipaddress.ip_network((base, 24))
        self.prefixlen = 24
        self.group = f"239.255.{random.randrange(1, 255)}.{random.randrange(1, 255)}"
        self.hosts = [Host(self, i, str(ipaddress.ip_address(base + 1 + i))) for i in range(hosts)]
        self._processes: list[LabProcess] = []
        self._up = False

    # ---------------------------------------------------------------- life

    def up(self) -> Lab:
        ok, why = available()
        if not ok:
            raise LabError(why)
        atexit.register(self.down)
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._up = True
            # No IGMP snooping: the bridge floods multicast like a plain LAN switch.
            run("ip", "link", "set", self.bridge, "type", "bridge", "mcast_snooping", "0")
            run("ip", "link", "set", self.bridge, "up")
            for host in self.hosts:
                host.create()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process and remove every namespace and link (idempotent)."""
        for proc in self._processes:
            proc.kill9()
        self._processes.clear()
        if not self._up:
            return
        self._up = False
        for host in self.hosts:
            run("ip", "netns", "del", host.netns, check=False)
            run("ip", "link", "del", host.bridge_port, check=False)
        run("ip", "link", "del", self.bridge, check=False)
        with contextlib.suppress(Exception):
            atexit.unregister(self.down)

    def __enter__(self) -> Lab:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    async def __aenter__(self) -> Lab:
        return self.up()

    async def __aexit__(self, *exc: object) -> None:
        for proc in self._processes:
            proc.kill9()
        for proc in self._processes:
            with contextlib.suppress(Exception):
                await proc.wait(5)
        self.down()

    # ----------------------------------------------------------- processes

    async def spawn(
        self,
        host: Host,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        clock_offset: float = 0.0,
    ) -> LabProcess:
        environment = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        clock = []
        if clock_offset:
            offset = str(int(clock_offset))
            clock = ["unshare", "--time", "--monotonic", offset, "--boottime", offset]
        proc = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", host.netns, *clock, sys.executable, *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=environment,
            limit=LINE_LIMIT,
            start_new_session=True,  # its own process group: kill9 takes it all
        )  # fmt: skip
        lab_proc = LabProcess(host, proc, argv)
        self._processes.append(lab_proc)
        return lab_proc

    def heal_all(self) -> None:
        for host in self.hosts:
            host.clear()


def clean() -> list[str]:
    """Remove every lab namespace and link a killed run left behind; what was removed."""
    removed = []
    for line in run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(PREFIX):
            run("ip", "netns", "del", name, check=False)
            removed.append(name)
    for line in run("ip", "-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python tests/lab/lab.py", description="Make lab hosts by hand, or clean up."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create N hosts, print how to use them, wait for Ctrl-C")
    up.add_argument("hosts", type=int, nargs="?", default=3)
    sub.add_parser("clean", help="remove namespaces and links left by a killed run")
    args = parser.parse_args(argv)
    if args.command == "clean":
        removed = clean()
        print("removed: " + (", ".join(removed) if removed else "nothing"))
        return 0
    ok, why = available()
    if not ok:
        print(f"lab: {why}", file=sys.stderr)
        return 2
    if not 1 <= args.hosts <= 200:
        print(f"lab: hosts must be 1..200, got {args.hosts}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with Lab(args.hosts) as lab:
        print(f"lab {lab.tag}: bridge {lab.bridge}, subnet {lab.subnet}, group {lab.group}")
        for host in lab.hosts:
            print(
                f"  {host.netns}  {host.address}  "
                f"ip netns exec {host.netns} rvasync listen 'LAB.>' --service 7600 "
                f"--network '{host.network()}'"
            )
        print("Ctrl-C tears it down.")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
