"""Instructions per request/reply round trip on each side, counted by callgrind.

Wall-clock latency on a shared VM drifts by tens of percent between runs;
instruction counts do not. This runs a requester and a replier process (the
in-process daemon on a free service port, 128 B requests) with one of them
under ``valgrind --tool=callgrind``, once for a short and once for a longer
series of round trips. It prints the difference divided by the extra round
trips, which cancels start-up and shut-down.

Needs valgrind (``apt-get install valgrind``). Usage::

    python -m benchmarks.reqrep_instructions [--short 200] [--long 1200]
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.procs import free_port

SIDE = r"""
import asyncio, sys
import uvloop
import rvasync as rv

port, role, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])

async def main():
    # reply_poll=0: count the work of a round trip, not the polling while waiting.
    t = rv.Transport(service=str(port), reply_poll=0)
    await t.open()
    if role == "replier":
        listener = t.listen("bench.request")
        print("ready", flush=True)
        served = 0
        async for request in listener:
            await t.send_reply(rv.Message(fields={"data": request["data"]}), request)
            served += 1
            if served == count:
                break
        await asyncio.sleep(0.2)
    else:
        msg = rv.Message("bench.request", {"data": b"x" * 128})
        for _ in range(count):
            await t.send_request(msg, 60)
    await t.close()

uvloop.run(main())
"""

COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(count: int, measured: str, workdir: Path) -> int:
    """Instructions the ``measured`` side ran for ``count`` round trips (whole process)."""
    script = workdir / "side.py"
    script.write_text(SIDE)
    port = str(free_port(socket.SOCK_DGRAM))

    def command(role: str) -> list[str]:
        base = [sys.executable, str(script), port, role, str(count)]
        if role != measured:
            return base
        out = workdir / f"callgrind.{role}.{count}.out"
        return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *base]

    replier = subprocess.Popen(
        command("replier"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert replier.stdout is not None and replier.stderr is not None
        if replier.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the replier did not start: {replier.stderr.read()}")
        requester = subprocess.run(
            command("requester"), capture_output=True, text=True, timeout=900
        )
        replier.wait(900)
        err = requester.stderr if measured == "requester" else replier.stderr.read()
    finally:
        if replier.poll() is None:
            replier.kill()
    found = COLLECTED.search(err)
    if found is None:
        raise RuntimeError(f"no callgrind total in the {measured}'s output:\n{err[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=200, help="round trips of the short run")
    parser.add_argument("--long", type=int, default=1200, help="round trips of the long run")
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("requester", "replier"):
            short = instructions(args.short, side, Path(tmp))
            long = instructions(args.long, side, Path(tmp))
            per = (long - short) / (args.long - args.short)
            print(f"{side}: {per:,.0f} instructions per round trip")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
