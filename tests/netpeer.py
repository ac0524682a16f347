"""A network peer process for the multi-process tests: one rv.Transport, driven by JSON lines.

Run ``python tests/netpeer.py SERVICE [RELIABILITY]``. It opens a transport on
SERVICE with its own in-process daemon, prints ``{"ready": pid, "inbox_prefix": ...}``
and then executes one command per stdin line, answering each with one JSON line:

- ``{"op": "listen", "subject": S}`` -> ``{"ok": "listen"}``
- ``{"op": "send", "subject": S, "n": N, "start": K}``: N messages with field ``i`` = K..
- ``{"op": "collect", "subject": S, "n": N, "timeout": T}`` -> ``{"got": [i ...]}`` from the
  listener opened by ``listen`` (at most N, whatever arrived within T seconds)
- ``{"op": "serve", "subject": S}``: answer requests on S with ``{"echo": i, "pid": pid}``
- ``{"op": "request", "subject": S, "i": K, "timeout": T}`` -> ``{"reply": {...}}`` or
  ``{"error": "timeout"}``
- ``{"op": "inbox"}`` -> ``{"inbox": name}`` (listened to; collect it with its name)
- ``{"op": "exit"}`` closes the transport and exits.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rvasync.errors import RequestTimeout
from rvasync.message import Message
from rvasync.transport.network import Transport


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def serve(transport: Transport, subject: str) -> None:
    async for request in transport.listen(subject):
        reply = Message(fields={"echo": request["i"], "pid": os.getpid()})
        await transport.send_reply(reply, request)


async def main() -> None:
    service = sys.argv[1]
    reliability = float(sys.argv[2]) if len(sys.argv) > 2 else None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    listeners = {}
    tasks = []
    async with Transport(service, reliability=reliability) as transport:
        emit({"ready": os.getpid(), "inbox_prefix": transport.link.inbox_prefix})
        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "listen":
                listeners[cmd["subject"]] = transport.listen(cmd["subject"])
                emit({"ok": "listen"})
            elif op == "inbox":
                inbox = transport.create_inbox()
                listeners[inbox] = transport.listen(inbox)
                emit({"inbox": inbox})
            elif op == "send":
                start = cmd.get("start", 0)
                for i in range(start, start + cmd["n"]):
                    await transport.send(Message(cmd["subject"], {"i": i}))
                emit({"ok": "sent"})
            elif op == "collect":
                listener = listeners[cmd["subject"]]
                got = []
                try:
                    async with asyncio.timeout(cmd.get("timeout", 10)):
                        while len(got) < cmd["n"]:
                            msg = await listener.get()
                            got.append(msg["i"])
                except TimeoutError:
                    pass
                emit({"got": got})
            elif op == "serve":
                tasks.append(asyncio.create_task(serve(transport, cmd["subject"])))
                await asyncio.sleep(0)
                emit({"ok": "serve"})
            elif op == "request":
                try:
                    reply = await transport.send_request(
                        Message(cmd["subject"], {"i": cmd["i"]}), cmd.get("timeout", 5)
                    )
                    emit({"reply": {"echo": reply["echo"], "pid": reply["pid"]}})
                except RequestTimeout:
                    emit({"error": "timeout"})
            elif op == "exit":
                break
        for task in tasks:
            task.cancel()
    emit({"ok": "exit"})


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, file=sys.stderr)  # stack dump on demand, to debug
    asyncio.run(main())
