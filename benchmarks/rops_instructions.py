"""Instructions per remote-operation invocation on each side, counted by callgrind.

The method of :mod:`benchmarks.reqrep_instructions` (whose process helpers it
uses), applied to ``rv.RemoteOps``: an invoker and a performer process on the
in-process daemon (a free service port, 128 B arguments, an ``echo``
operation, no state file), one of them under ``valgrind --tool=callgrind``,
once for a short and once for a longer series of calls. The difference
divided by the extra calls cancels start-up and shut-down. ``--mode plain``
counts the same two processes doing ``send_request`` / ``send_reply``: the
figure a 2-way invocation is measured against.

Both sides run with ``reply_poll=0``: the count is the work of a call, not the
polling while it waits. Needs valgrind. Usage::

    python -m benchmarks.rops_instructions [--mode 2|3|plain] [--short 200] [--long 1200]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.procs import free_port
from benchmarks.reqrep_instructions import _callgrind, _collected

SIDE = r"""
import asyncio, sys
import uvloop
import rvasync as rv

port, role, count, mode = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]

async def main():
    t = rv.Transport(service=str(port), reply_poll=0)
    await t.open()
    if role == "performer":
        done = asyncio.Event()
        served = 0
        if mode == "plain":
            listener = t.listen("bench.request")
            print("ready", flush=True)
            async for request in listener:
                await t.send_reply(rv.Message(fields={"data": request["data"]}), request)
                served += 1
                if served == count:
                    break
        else:
            ops = await rv.RemoteOps(t, "BENCH_PERFORMER").open()

            def echo(msg):
                nonlocal served
                served += 1
                if served == count:
                    done.set()
                return rv.Message(fields={"data": msg["data"]})

            ops.perform("echo", echo)
            print("ready", flush=True)
            await asyncio.wait_for(done.wait(), 600)
            await asyncio.sleep(0.2)  # the last result (and acknowledgment) on their way
            await ops.close()
        await asyncio.sleep(0.2)
    else:
        msg = rv.Message("bench.request", {"data": b"x" * 128})
        if mode == "plain":
            for _ in range(count):
                await t.send_request(msg, 60)
        else:
            ops = await rv.RemoteOps(t, "BENCH_INVOKER").open()
            for _ in range(count):
                await ops.invoke("BENCH_PERFORMER", "echo", msg, handshake=int(mode), timeout=60)
            await asyncio.sleep(0.1)
            await ops.close()
    await t.close()

uvloop.run(main())
"""


def instructions(count: int, measured: str, mode: str, workdir: Path) -> int:
    """Instructions the ``measured`` side ran for ``count`` calls (whole process)."""
    script = workdir / "side.py"
    script.write_text(SIDE)
    port = str(free_port(socket.SOCK_DGRAM))

    def command(role: str) -> list[str]:
        base = [sys.executable, str(script), port, role, str(count), mode]
        if role != measured:
            return base
        return _callgrind(base, workdir / f"callgrind.{role}.{count}.out")

    performer = subprocess.Popen(
        command("performer"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert performer.stdout is not None and performer.stderr is not None
        if performer.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the performer did not start: {performer.stderr.read()}")
        invoker = subprocess.run(command("invoker"), capture_output=True, text=True, timeout=900)
        if invoker.returncode != 0:
            raise RuntimeError(f"the invoker failed: {invoker.stderr[-2000:]}")
        performer.wait(900)
        err = invoker.stderr if measured == "invoker" else performer.stderr.read()
    finally:
        if performer.poll() is None:
            performer.kill()
    return _collected(err, measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("2", "3", "plain"), default="2")
    parser.add_argument("--short", type=int, default=200, help="calls of the short run")
    parser.add_argument("--long", type=int, default=1200, help="calls of the long run")
    parser.add_argument("--side", choices=("invoker", "performer", "both"), default="both")
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    sides = ("invoker", "performer") if args.side == "both" else (args.side,)
    with tempfile.TemporaryDirectory() as tmp:
        for side in sides:
            short = instructions(args.short, side, args.mode, Path(tmp))
            long = instructions(args.long, side, args.mode, Path(tmp))
            per = (long - short) / (args.long - args.short)
            print(f"mode {args.mode}, {side}: {per:,.0f} instructions per call", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
