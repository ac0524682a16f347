"""One role of the scale measurements in a lab host, driven by JSON lines (benchmarks/scale/lab.py).

``python tests/lab/scalepeer.py`` prints ``{"ready": pid}`` and answers one JSON
line per command line on stdin; one process can take several roles in turn:

- ``{"op": "daemon", "port": P}``: a standalone daemon in this process, its
  client port on 127.0.0.1:P (the publisher host's daemon, whose CPU is measured
  apart from its client's) -> ``{"ok": ...}``
- ``{"op": "subscribe", "system": "rvasync", "service": S, "network": N, "subject": X}``
  or ``{..., "system": "nats", "url": U}``: count every message of X (its index
  must come in order, once) and, for rvasync, every DATALOSS of this transport
- ``{"op": "publish", "system": ..., "subject": X, "n": N, "size": B, "rate": R,
  "daemon": "127.0.0.1:P" | "url": U}``: N messages of B bytes at R msg/s (0: as fast
  as the transport takes them) -> ``{"sent": N, "seconds": ...}``
- ``{"op": "report"}`` -> what was received (count, first and last arrival on the
  host's monotonic clock, out-of-order, duplicates, DATALOSS messages), this
  process's CPU seconds, and the reliable core's counters of each open service
- ``{"op": "interest", "subject": X, "count": K, "service": S, "network": N}``:
  K listeners on X.0 ... X.(K-1), each counting what it gets (many subjects)
- ``{"op": "spray", "prefixes": [X, ...], "per_prefix": K, "n": N, "rate": R, ...}``:
  N messages round-robin over the subjects X.0 ... X.(K-1) of every prefix
- ``{"op": "stream", "subject": X, "interval": T, ...}``: from now on a message on
  X every T seconds (until ``stop``); ``{"op": "first", "subject": X, "timeout": T}``:
  listen to X and answer the milliseconds until its first message
- ``{"op": "requests", "subject": X, "n": N, "timeout": T}`` / ``{"op": "serve",
  "subject": X}``: N sequential requests (round trips per second), or reply to each
- ``{"op": "stop"}``: close every transport and connection of this process;
  ``{"op": "exit"}``.

An error in a command answers ``{"failed": "..."}`` instead of ending the peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import time
from dataclasses import asdict, dataclass
from typing import Any

import rvasync as rv
from rvasync.daemon.engine import running_in_process_daemon
from tests.lab.jsonlines import emit, serve, stdin_lines

DATALOSS = "_RV.ERROR.SYSTEM.DATALOSS.>"
_INDEX = struct.Struct("<Q")


@dataclass
class Tally:
    """Messages of one subject: each carries its index; they must come in order, once."""

    count: int = 0
    next: int = 0
    disorder: int = 0
    duplicates: int = 0
    first: float = 0.0
    last: float = 0.0
    dataloss: int = 0
    #: longest time between two arrivals, ms (a failover's gap)
    max_gap_ms: float = 0.0

    def take(self, data: bytes) -> None:
        (index,) = _INDEX.unpack_from(data)
        now = time.monotonic()
        if not self.count:
            self.first = now
        elif now - self.last > self.max_gap_ms / 1000:
            self.max_gap_ms = 1000 * (now - self.last)
        self.last = now
        self.count += 1
        if index < self.next:
            self.duplicates += 1
        elif index > self.next:
            self.disorder += 1
        self.next = max(self.next, index + 1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def lost_messages(msg: rv.Message) -> int:
    """Messages a DATALOSS advisory says will never come.

    A daemon's advisories count them in ``messages`` (INBOUND: lost on the way here;
    OUTBOUND to an unknown address: not sent); a router's (DATALOSS.ROUTER) counts the
    messages it could not forward in ``lost``. An OUTBOUND advisory without ``messages``
    counts datagrams another host asked for in vain (``lost`` is datagrams, not
    messages): that loss is reported, as messages, by the host that missed them.
    """
    subject = msg.subject or ""
    field = "lost" if subject.endswith(".DATALOSS.ROUTER") else "messages"
    return int(msg.get(field, 0) or 0)


class Peer:
    def __init__(self) -> None:
        self.daemon: Any = None
        self.transports: list[rv.Transport] = []
        self.nats: list[Any] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.tally = Tally()
        self.listeners: list[Any] = []

    async def daemon_op(self, port: int) -> dict[str, Any]:
        from rvasync.daemon.engine import Daemon

        self.daemon = Daemon(listen=port, host="127.0.0.1")
        await self.daemon.start()
        return {"ok": "daemon", "port": port}

    async def subscribe(self, system: str, subject: str, **where: Any) -> dict[str, Any]:
        self.tally = Tally()
        if system == "nats":
            import nats

            conn = await nats.connect(where["url"], max_reconnect_attempts=3)
            self.nats.append(conn)

            async def on_msg(msg: Any) -> None:
                self.tally.take(msg.data)

            await conn.subscribe(subject, cb=on_msg)
            await conn.flush(timeout=10)
            return {"ok": "subscribe"}
        transport = await self._transport(where)
        self.tasks.append(asyncio.create_task(self._count(transport, subject)))
        self.tasks.append(asyncio.create_task(self._losses(transport)))
        await asyncio.sleep(0.2)  # the listener's interest reaches the daemon
        return {"ok": "subscribe"}

    async def _count(self, transport: rv.Transport, subject: str) -> None:
        take = self.tally.take
        async for msg in transport.listen(subject):
            take(msg["d"])

    async def _losses(self, transport: rv.Transport) -> None:
        async for msg in transport.listen(DATALOSS):
            self.tally.dataloss += lost_messages(msg)

    async def publish(
        self,
        system: str,
        subject: str,
        n: int,
        size: int,
        rate: float,
        warmup: float = 0.0,
        **where: Any,
    ) -> dict[str, Any]:
        """``warmup``: seconds between opening the transport and the first message (the
        daemons hear each other's heartbeats first)."""
        pad = bytes(max(0, size - _INDEX.size))
        if system == "nats":
            import nats

            conn = await nats.connect(where["url"], max_reconnect_attempts=3)
            self.nats.append(conn)

            async def send(i: int) -> None:
                await conn.publish(subject, _INDEX.pack(i) + pad)

            await conn.flush(timeout=10)
            await asyncio.sleep(warmup)
            started = await _paced(send, n, rate)
            await conn.flush(timeout=60)
        else:
            transport = await self._transport(where)
            # Losses on the way may be reported on the publishing side (a router that
            # could not forward): counted in this peer's tally.
            self.tasks.append(asyncio.create_task(self._losses(transport)))

            async def send(i: int) -> None:
                await transport.send(rv.Message(subject, {"d": _INDEX.pack(i) + pad}))

            await asyncio.sleep(warmup)
            started = await _paced(send, n, rate)
        return {"sent": n, "seconds": time.monotonic() - started}

    async def _transport(self, where: dict[str, Any]) -> rv.Transport:
        options = {"daemon": where["daemon"]} if where.get("daemon") else {}
        transport = rv.Transport(where["service"], where["network"], **options)
        await transport.open()
        self.transports.append(transport)
        return transport

    async def interest(self, subject: str, count: int, **where: Any) -> dict[str, Any]:
        """``count`` listeners on distinct subjects (their cost is what is measured)."""
        transport = await self._transport(where)
        tally = self.tally

        def got(msg: Any) -> None:
            tally.count += 1

        started = time.monotonic()
        cpu = _cpu()
        for i in range(count):
            self.listeners.append(transport.listen(f"{subject}.{i}", callback=got))
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await asyncio.sleep(0.5)
        return {
            "listeners": count,
            "seconds": time.monotonic() - started,
            "cpu": _cpu() - cpu,
        }

    async def spray(
        self, prefixes: list[str], per_prefix: int, n: int, rate: float, **where: Any
    ) -> dict[str, Any]:
        transport = await self._transport(where)
        subjects = [f"{p}.{i}" for i in range(per_prefix) for p in prefixes]
        await asyncio.sleep(where.get("warmup", 2.0))

        async def send(i: int) -> None:
            await transport.send(rv.Message(subjects[i % len(subjects)], {"d": _INDEX.pack(i)}))

        started = await _paced(send, n, rate)
        return {"sent": n, "seconds": time.monotonic() - started}

    async def stream(self, subject: str, interval: float, **where: Any) -> dict[str, Any]:
        transport = await self._transport(where)

        async def run() -> None:
            i = 0
            while True:
                await transport.send(rv.Message(subject, {"d": _INDEX.pack(i)}))
                i += 1
                await asyncio.sleep(interval)

        self.tasks.append(asyncio.create_task(run()))
        return {"ok": "stream"}

    async def first(self, subject: str, timeout: float, **where: Any) -> dict[str, Any]:
        transport = self.transports[-1] if not where else await self._transport(where)
        started = time.monotonic()
        listener = transport.listen(subject)
        try:
            await asyncio.wait_for(listener.queue.get(), timeout)
        except TimeoutError:
            return {"ms": None}
        finally:
            await listener.close()
        return {"ms": 1000 * (time.monotonic() - started)}

    async def serve(self, subject: str, **where: Any) -> dict[str, Any]:
        transport = await self._transport(where)

        async def run() -> None:
            async for request in transport.listen(subject):
                await transport.send_reply(rv.Message(fields={"d": request["d"]}), request)

        self.tasks.append(asyncio.create_task(run()))
        await asyncio.sleep(0.2)
        return {"ok": "serve"}

    async def requests(self, subject: str, n: int, timeout: float, **where: Any) -> dict[str, Any]:
        transport = await self._transport(where)
        answered = 0
        started = time.monotonic()
        for i in range(n):
            with contextlib.suppress(rv.RequestTimeout):
                await transport.send_request(rv.Message(subject, {"d": _INDEX.pack(i)}), timeout)
                answered += 1
        return {"answered": answered, "seconds": time.monotonic() - started}

    def report(self) -> dict[str, Any]:
        services = {}
        daemon = self.daemon or running_in_process_daemon()
        if daemon is not None:
            for port, endpoint in daemon.services.items():
                services[str(port)] = endpoint.core.stats.as_dict()
        return {
            "tally": self.tally.as_dict(),
            "cpu": _cpu(),
            "rss_kib": _rss_kib(),
            "services": services,
            "listeners": len(self.listeners),
        }

    async def stop(self) -> dict[str, Any]:
        for task in self.tasks:
            task.cancel()
        self.tasks.clear()
        self.listeners.clear()  # closed with their transport
        self.tally = Tally()
        for transport in self.transports:
            await transport.close()
        self.transports.clear()
        for conn in self.nats:
            await conn.close()
        self.nats.clear()
        return {"ok": "stop"}


async def _paced(send: Any, n: int, rate: float) -> float:
    """Call ``send(i)`` for i < n at ``rate`` per second (0: as fast as it returns)."""
    started = time.monotonic()
    for i in range(n):
        await send(i)
        if rate:
            ahead = started + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            elif i % 64 == 63:
                await asyncio.sleep(0)
    return started


def _cpu() -> float:
    """This process's CPU seconds, every thread, to the nanosecond (schedstat)."""
    total = 0
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def main() -> None:
    reader = await stdin_lines()
    peer = Peer()
    emit({"ready": os.getpid()})

    async def handle(op: str, command: dict[str, Any]) -> Any:
        if op == "report":
            return peer.report()
        if op == "daemon":
            return await peer.daemon_op(**command)
        return await getattr(peer, op)(**command)

    await serve(reader, handle)
    await peer.stop()
    if peer.daemon is not None:
        await peer.daemon.stop()
    emit({"ok": "exit"})


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
