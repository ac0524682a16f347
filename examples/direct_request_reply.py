"""Request/reply with direct communication between two processes.

Both programs open their transport with a two-part service, ``"<port>:"``:
the daemons use the first part, and each transport binds an ephemeral UDP
port of its own (the empty second part) for point-to-point messages. The
requests go to a public subject, so they travel through the daemons; the
replies go to the client's inbox, so once the client's direct address has
answered the server's HELLO they travel straight from server to client.

Run: python examples/direct_request_reply.py
"""

import asyncio
import subprocess
import sys

import rvasync as rv
from rvasync.testing import free_port


async def server(service: str) -> None:
    async with rv.Transport(service, description="direct server") as t:
        requests = t.listen("QUOTE.REQUEST")
        stop = t.listen("QUOTE.STOP")
        print("ready", flush=True)

        async def answer() -> None:
            async for request in requests:
                reply = rv.Message(fields={"symbol": request["symbol"], "price": 101.25})
                await t.send_reply(reply, request)

        task = asyncio.create_task(answer())
        done = await stop.get(60)
        assert t.direct is not None
        await t.send_reply(rv.Message(fields={"direct_replies": t.direct.sent}), done)
        task.cancel()


async def client(service: str) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--server", service], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        async with rv.Transport(service, description="direct client") as t:
            print(f"direct communication enabled: {t.direct_enabled}")
            first = None
            while first is None:  # the server's daemon may still be meeting ours
                try:
                    first = await t.send_request(rv.Message("QUOTE.REQUEST", {"symbol": "ACME"}), 1)
                except rv.RequestTimeout:
                    pass
            for _ in range(49):
                await t.send_request(rv.Message("QUOTE.REQUEST", {"symbol": "ACME"}), 5)
            summary = await t.send_request(rv.Message("QUOTE.STOP", {}), 5)
            assert t.direct is not None
            print(f"50 quotes answered; the server sent {summary['direct_replies']} of its")
            print("replies over the direct channel (the first went through the daemons while")
            print("the client's direct address was being proven); the client received")
            print(f"{t.direct.received} messages directly, the summary included")
        if child.wait(30) != 0:
            raise SystemExit("the server failed")
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--server"]:
        asyncio.run(server(sys.argv[2]))
    else:
        asyncio.run(client(f"{free_port()}:"))
