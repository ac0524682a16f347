"""Two processes on a service protected by a service key, and a forger who is not heard.

Both processes open ``rv.Transport(service, service_key=KEY)``: every datagram
their daemons exchange carries a keyed MAC. A third party then sends a
well-formed datagram of the reliable protocol, carrying a message on the
same subject, straight to the parent's daemon. That is what anyone who can
reach the UDP port could do. Without the key it would be delivered. With it,
it is dropped and counted (``unauth`` in HOST.STATUS), while the child's
genuine messages arrive.

Run: python examples/service_key.py
"""

import asyncio
import os
import socket
import subprocess
import sys

import rvasync as rv
from rvasync import _accel
from rvasync.testing import free_port

# In real use: a secret from a file only the daemons' owners can read.
KEY = b"example-service-key-0123456789"


async def child(service: str) -> None:
    async with rv.Transport(service, service_key=KEY, description="keyed child") as t:
        control = t.listen("CONTROL.>")
        print("ready", flush=True)  # the parent waits for this line
        async for command in control:
            if command.subject == "CONTROL.SEND":
                for n in range(3):
                    await t.send(rv.Message("NEWS", {"from": "child", "n": n}))
            elif command.subject == "CONTROL.STOP":
                break


def forge(service: str, address: tuple[str, int]) -> None:
    """A forger's datagram: valid framing, a valid message, an invented session, no tag."""
    frame = _accel.load("rmframe")
    packer = frame.Packer(1400, int.from_bytes(os.urandom(8), "little") | 1, 0)
    packer.add(rv.Message("NEWS", {"from": "forger"}).to_bytes())
    packer.flush()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(packer.take()[0], address)


async def parent() -> None:
    service = str(free_port())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", service, stdout=subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"ready", line
        # This process's daemon, started explicitly so we can read its statistics
        # (transports of this loop attach to it).
        daemon = rv.Daemon(reliability=5.0)
        await daemon.start()
        async with rv.Transport(service, service_key=KEY, description="parent") as t:
            news = t.listen("NEWS")
            forge(service, daemon.services[int(service)].address)
            await t.send(rv.Message("CONTROL.SEND"))
            got = [await news.get(10) for _ in range(3)]
            print("received:", [(m["from"], m["n"]) for m in got])
            assert all(m["from"] == "child" for m in got)
            for _ in range(100):  # the forged datagram went to another socket: wait for it
                unauth = daemon.host_status(service)["unauth"]
                if unauth:
                    break
                await asyncio.sleep(0.02)
            print(f"datagrams dropped for a missing or wrong tag (HOST.STATUS unauth): {unauth}")
            assert unauth >= 1
            await t.send(rv.Message("CONTROL.STOP"))
        await daemon.stop()
        await asyncio.wait_for(proc.wait(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        asyncio.run(child(sys.argv[2]))
    else:
        asyncio.run(parent())
