"""A program the lab runs inside its hosts: one rv.Transport, driven by JSON lines.

``python tests/lab/agent.py SERVICE NETWORK [--reliability S] [--daemon HOST:PORT]``
opens a network transport on SERVICE and NETWORK (through its own in-process
daemon, or the standalone daemon at HOST:PORT), prints
``{"ready": pid, "inbox_prefix": ...}`` and then answers one JSON line per
command line on stdin:

- ``{"op": "listen", "subject": S}``: record every message of S (fields ``src``,
  ``i``) and every DATALOSS advisory of this transport -> ``{"ok": "listen"}``
- ``{"op": "send", "subject": S, "src": NAME, "n": N, "start": K, "pace": P}``: N
  messages, ``i`` = K.., a pause of P seconds after every 20 -> ``{"sent": N}``
- ``{"op": "report"}`` -> ``{"got": {src: [i ...]}, "dataloss": [fields ...],
  "advisories": [subject ...], "rvd": [[name, received so far] ...]}`` (each
  DATALOSS's fields: host, lost, messages; ``rvd``: each RVD.* advisory about the
  link to a standalone daemon, with how many messages had arrived when it came)
- ``{"op": "serve", "subject": S}``: reply to each request with its ``i``
- ``{"op": "request", "subject": S, "n": N, "timeout": T}``: N requests one after
  another -> ``{"replies": [i ...], "timeouts": [i ...]}``
- ``{"op": "exit"}``: close the transport and exit.

An error in a command answers ``{"failed": "..."}`` instead of killing the agent.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import signal
import sys
from collections import defaultdict
from typing import Any

import rvasync as rv
from rvasync.errors import RequestTimeout
from tests.lab.jsonlines import emit, serve, stdin_lines

DATALOSS = "_RV.ERROR.SYSTEM.DATALOSS.>"
RVD = ("_RV.WARN.SYSTEM.RVD.>", "_RV.INFO.SYSTEM.RVD.>", "_RV.ERROR.SYSTEM.RVD.>")


class Agent:
    def __init__(self, transport: rv.Transport) -> None:
        self.transport = transport
        self.got: dict[str, list[int]] = defaultdict(list)
        self.dataloss: list[dict[str, Any]] = []
        self.advisories: list[str] = []
        self.rvd: list[tuple[str, int]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self._watching = False

    def _start(self, coro: Any) -> None:
        self.tasks.append(asyncio.create_task(coro))

    async def _record(self, subject: str) -> None:
        async for msg in self.transport.listen(subject):
            self.got[str(msg["src"])].append(int(msg["i"]))

    async def _watch_dataloss(self) -> None:
        async for msg in self.transport.listen(DATALOSS):
            self.advisories.append(msg.subject)
            self.dataloss.append({f.name: _plain(f.value) for f in msg})

    async def _watch_rvd(self, subject: str) -> None:
        async for msg in self.transport.listen(subject):
            received = sum(len(v) for v in self.got.values())
            self.rvd.append((msg.subject.split(".SYSTEM.", 1)[1], received))

    async def listen(self, subject: str) -> dict[str, Any]:
        if not self._watching:
            self._watching = True
            self._start(self._watch_dataloss())
            for pattern in RVD:
                self._start(self._watch_rvd(pattern))
        self._start(self._record(subject))
        await asyncio.sleep(0.05)  # the interest reaches the daemon
        return {"ok": "listen"}

    async def send(self, subject: str, src: str, n: int, start: int = 0, pace: float = 0.0):
        for i in range(start, start + n):
            await self.transport.send(rv.Message(subject, {"src": src, "i": i}))
            if pace and i % 20 == 19:
                await asyncio.sleep(pace)
        return {"sent": n}

    async def _serve(self, subject: str) -> None:
        async for request in self.transport.listen(subject):
            await self.transport.send_reply(rv.Message(fields={"i": request["i"]}), request)

    async def serve(self, subject: str) -> dict[str, Any]:
        self._start(self._serve(subject))
        await asyncio.sleep(0.05)
        return {"ok": "serve"}

    async def request(self, subject: str, n: int, timeout: float = 5.0) -> dict[str, Any]:
        replies, timeouts = [], []
        for i in range(n):
            try:
                reply = await self.transport.send_request(rv.Message(subject, {"i": i}), timeout)
                replies.append(int(reply["i"]))
            except RequestTimeout:
                timeouts.append(i)
        return {"replies": replies, "timeouts": timeouts}

    def report(self) -> dict[str, Any]:
        return {
            "got": self.got,
            "dataloss": self.dataloss,
            "advisories": self.advisories,
            "rvd": self.rvd,
        }


def _plain(value: Any) -> Any:
    return value if isinstance(value, int | float | str | bool) or value is None else str(value)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("service")
    parser.add_argument("network")
    parser.add_argument("--reliability", type=float)
    parser.add_argument("--daemon")
    args = parser.parse_args()
    reader = await stdin_lines()
    options: dict[str, Any] = {}
    if args.reliability is not None:
        options["reliability"] = args.reliability
    if args.daemon:
        options["daemon"] = args.daemon
    async with rv.Transport(args.service, args.network, **options) as transport:
        agent = Agent(transport)
        emit({"ready": os.getpid(), "inbox_prefix": transport.link.inbox_prefix})

        async def handle(op: str, command: dict[str, Any]) -> Any:
            if op == "report":
                return agent.report()
            return await getattr(agent, op)(**command)

        await serve(reader, handle)
        for task in agent.tasks:
            task.cancel()
    emit({"ok": "exit"})


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, file=sys.stderr)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(main())
