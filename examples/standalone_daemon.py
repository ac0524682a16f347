"""Two programs talking through a standalone daemon process.

This program starts ``rvasync daemon`` on a free TCP port (in production the
first transport with ``daemon="7500"`` would start it by itself), listens
through it, and has a second process, ``rvasync send``, publish to it. It
prints what arrives, asks the daemon for a round trip, and stops everything.

Run: python examples/standalone_daemon.py
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import rvasync as rv

SERVICE = "17471"  # the UDP service the daemon uses for these transports


async def start_daemon() -> tuple[subprocess.Popen[str], str]:
    """Run ``rvasync daemon --listen 0`` and return it with its daemon parameter."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "daemon", "--listen", "0"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: we stop it as a whole
    )
    line = await asyncio.wait_for(asyncio.to_thread(daemon.stdout.readline), 20)
    found = re.search(r"listening on (\S+:\d+)", line)
    if found is None:
        raise SystemExit(f"the daemon did not start: {line!r}")
    print(f"daemon: {line.strip()}")
    return daemon, found.group(1)


async def main() -> None:
    daemon, where = await start_daemon()
    try:
        async with rv.Transport(SERVICE, daemon=where, description="example listener") as t:
            quotes = t.listen("QUOTES.>")
            await t.link.ping()  # the daemon has our interest now
            sender = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "rvasync", "send", "QUOTES.ACME",
                "price=101.25", "size:U32=300", "--count", "3",
                "--service", SERVICE, "--daemon", where,
            )  # fmt: skip
            for _ in range(3):
                msg = await quotes.get(timeout=10)
                print(f"received {msg.subject}: price={msg['price']} size={msg['size']}")
            await asyncio.wait_for(sender.wait(), 20)
            print(f"round trip to the daemon: {await t.link.ping() * 1e6:.0f} µs")
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(10)
        print(f"daemon stopped (status {daemon.returncode})")


if __name__ == "__main__":
    asyncio.run(main())
