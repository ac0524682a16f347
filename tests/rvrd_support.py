"""Helpers for the routing daemon tests: programs on separate networks, a breakable TCP hop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import rvasync as rv
from rvasync.testing import LOOPBACK, free_port
from tests.netutil import LoopThread

WAIT = 15.0


def router_config(
    name: str,
    networks: list[tuple[str, str]],
    neighbors: list[tuple[str, int | None, int]],
    *,
    listen: bool = True,
) -> dict[str, Any]:
    """A router config dict: networks (name, service); neighbors (name, port or None, cost)."""
    return {
        "router": {
            "name": name,
            **({"listen": "127.0.0.1:0"} if listen else {}),
            "retry_min": 0.05,
            "retry_max": 0.5,
            "heartbeat": 0.2,
            "neighbor_timeout": 2.0,
        },
        "network": [{"name": n, "service": s, "network": LOOPBACK} for n, s in networks],
        "neighbor": [
            {"name": nb, "cost": cost, **({"address": f"127.0.0.1:{port}"} if port else {})}
            for nb, port, cost in neighbors
        ],
    }


class Program:
    """A program on one network: its own thread, loop and in-process daemon."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.thread = LoopThread()
        self.t: rv.Transport | None = None

    async def open(self) -> Program:
        async def mk() -> rv.Transport:
            t = rv.Transport(self.service, LOOPBACK)
            await t.open()
            return t

        self.t = await self.thread.run(mk())
        return self

    async def listen(self, subject: str) -> rv.Listener:
        async def go() -> rv.Listener:
            assert self.t is not None
            return self.t.listen(subject)

        result: rv.Listener = await self.thread.run(go())
        return result

    async def send(self, subject: str, **fields: Any) -> None:
        assert self.t is not None
        await self.thread.run(self.t.send(rv.Message(subject, fields)))

    async def request(self, subject: str, timeout: float = 5.0, **fields: Any) -> rv.Message:
        assert self.t is not None
        reply: rv.Message = await self.thread.run(
            self.t.send_request(rv.Message(subject, fields), timeout), timeout + 5
        )
        return reply

    async def serve(self, subject: str) -> None:
        """Answer requests on ``subject`` with ``{"answer": q * 2, "by": service}``."""

        async def go() -> None:
            t = self.t
            assert t is not None

            async def answer(msg: rv.Message) -> None:
                await t.send_reply(rv.Message(fields={"answer": msg["q"] * 2}), msg)

            t.listen(subject, callback=answer)

        await self.thread.run(go())

    async def next(self, listener: rv.Listener, timeout: float = WAIT) -> rv.Message:
        async def go() -> rv.Message:
            return await listener.get(timeout)

        result: rv.Message = await self.thread.run(go(), timeout + 5)
        return result

    async def close(self) -> None:
        if self.t is not None:
            with contextlib.suppress(Exception):
                await self.thread.run(self.t.close())
        self.thread.stop()


def services(n: int) -> list[str]:
    return [str(free_port()) for _ in range(n)]


class Hop:
    """A TCP relay between two routers that a test can cut and heal (a WAN link)."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> Hop:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._conns.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def cut(self) -> None:
        """Break every connection and refuse new ones."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for w in list(self._conns):
            w.transport.abort()
        self._conns.clear()

    async def heal(self) -> None:
        await self.start()

    async def close(self) -> None:
        await self.cut()
