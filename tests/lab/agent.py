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
  "advisories": [subject ...], "rvd": [[name, received so far] ...], "log": [...]}``
  (each DATALOSS's fields: host, lost, messages, or a router's fields; ``rvd``:
  each RVD.* advisory about the link to a standalone daemon, with how many
  messages had arrived when it came; ``log``: messages and DATALOSS advisories in
  the order they arrived, ``["m", src, i]`` and ``["d", index in dataloss]``: the
  recorded subjects and the advisories share one queue, so the order is the
  transport's)
- ``{"op": "serve", "subject": S}``: reply to each request with its ``i`` (requests
  carrying ``src`` are recorded like listened messages, in ``got`` and ``log``)
- ``{"op": "request", "subject": S, "n": N, "timeout": T, "start": K, "record": R}``:
  N requests one after another (``i`` = K..) -> ``{"replies": [i ...], "timeouts":
  [i ...]}``; with R, requests carry ``src`` = ``req`` and replies are recorded as
  ``["m", "rep", i]`` (the report's ``sent``: how many messages each ``src``, and
  ``req``, sent so far)
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
        self.log: list[list[Any]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self._watching = False
        self._served: set[str] = set()
        self.sent: dict[str, int] = defaultdict(int)
        #: The recorded subjects and the DATALOSS advisories: one queue, one arrival order.
        self._recorded = rv.Queue()
        self._start(self._consume())

    def _start(self, coro: Any) -> None:
        self.tasks.append(asyncio.create_task(coro))

    async def _consume(self) -> None:
        async for msg in self._recorded:
            if msg.subject.startswith("_RV.ERROR.SYSTEM.DATALOSS."):
                self.advisories.append(msg.subject)
                self.log.append(["d", len(self.dataloss)])
                self.dataloss.append({f.name: _plain(f.value) for f in msg})
            else:
                if "src" in msg:
                    self._note(str(msg["src"]), int(msg["i"]))
                if msg.subject in self._served and msg.reply_subject:
                    reply = rv.Message(fields={"i": msg["i"]})
                    self._start(self.transport.send_reply(reply, msg))

    def _note(self, src: str, i: int) -> None:
        self.got[src].append(i)
        self.log.append(["m", src, i])

    async def _watch_rvd(self, subject: str) -> None:
        async for msg in self.transport.listen(subject):
            received = sum(len(v) for v in self.got.values())
            self.rvd.append((msg.subject.split(".SYSTEM.", 1)[1], received))

    async def listen(self, subject: str) -> dict[str, Any]:
        if not self._watching:
            self._watching = True
            self.transport.listen(DATALOSS, queue=self._recorded)
            for pattern in RVD:
                self._start(self._watch_rvd(pattern))
        self.transport.listen(subject, queue=self._recorded)
        await asyncio.sleep(0.05)  # the interest reaches the daemon
        return {"ok": "listen"}

    async def send(self, subject: str, src: str, n: int, start: int = 0, pace: float = 0.0):
        for i in range(start, start + n):
            await self.transport.send(rv.Message(subject, {"src": src, "i": i}))
            self.sent[src] += 1
            if pace and i % 20 == 19:
                await asyncio.sleep(pace)
        return {"sent": n}

    async def serve(self, subject: str) -> dict[str, Any]:
        self._served.add(subject)
        await self.listen(subject)
        return {"ok": "serve"}

    async def request(
        self,
        subject: str,
        n: int,
        timeout: float = 5.0,
        pace: float = 0.0,
        record: bool = False,
        start: int = 0,
    ) -> dict[str, Any]:
        replies, timeouts = [], []
        for i in range(start, start + n):
            fields: dict[str, Any] = {"src": "req", "i": i} if record else {"i": i}
            try:
                reply = await self.transport.send_request(rv.Message(subject, fields), timeout)
                replies.append(int(reply["i"]))
                if record:
                    self._note("rep", int(reply["i"]))
            except RequestTimeout:
                timeouts.append(i)
            self.sent["req"] += 1
            if pace:
                await asyncio.sleep(pace)
        return {"replies": replies, "timeouts": timeouts}

    def report(self) -> dict[str, Any]:
        return {
            "got": self.got,
            "dataloss": self.dataloss,
            "advisories": self.advisories,
            "rvd": self.rvd,
            "log": self.log,
            "sent": self.sent,
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
