"""Instructions per request/reply round trip on each side, counted by callgrind.

Wall-clock latency on a shared VM drifts by tens of percent between runs;
instruction counts do not. This runs a requester and a replier process (the
in-process daemon on a free service port, 128 B requests) with one of them
under ``valgrind --tool=callgrind``, once for a short and once for a longer
series of round trips. It prints the difference divided by the extra round
trips, which cancels start-up and shut-down.

With ``--standalone`` both sides are clients of one standalone daemon process
(``rvasync daemon``), which is measured as a third side: the deployment whose
latency the client link decides.

Needs valgrind (``apt-get install valgrind``). Usage::

    python -m benchmarks.reqrep_instructions [--short 200] [--long 1200] [--standalone] [--direct]

``--direct`` gives both sides a two-part service (an ephemeral direct port) and
sends the requests to an inbox of the replier, so requests and replies take
the direct channels (the ``reqrep-latency`` row's ``ipm-direct`` variant).
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.procs import free_port

SIDE = r"""
import asyncio, sys
import uvloop
import rvasync as rv

port, role, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
daemon = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
direct = len(sys.argv) > 5 and sys.argv[5] == "direct"
WARMUP = 20

async def main():
    # reply_poll=0: count the work of a round trip, not the polling while waiting.
    service = f"{port}:" if direct else str(port)
    t = rv.Transport(service=service, reply_poll=0, daemon=daemon)
    await t.open()
    if role == "replier":
        if direct:
            # Requests come to an inbox of this transport (the direct path); the
            # requester asks where it is once.
            inbox = t.create_inbox()
            where = t.listen("bench.request")
            listener = t.listen(inbox)
        else:
            listener = t.listen("bench.request")
        print("ready", flush=True)
        if direct:
            ask = await where.get(600)
            await t.send_reply(rv.Message(fields={"inbox": inbox}), ask)
        served = 0
        async for request in listener:
            await t.send_reply(rv.Message(fields={"data": request["data"]}), request)
            served += 1
            if served == count + (WARMUP if direct else 0):
                break
        await asyncio.sleep(0.2)
    else:
        msg = rv.Message("bench.request", {"data": b"x" * 128})
        if direct:
            answer = await t.send_request(rv.Message("bench.request", {}), 600)
            msg.subject = answer["inbox"]
            for _ in range(WARMUP):  # the direct path opens once the first HELLO is answered
                await t.send_request(msg, 60)
        for _ in range(count):
            await t.send_request(msg, 60)
    await t.close()

uvloop.run(main())
"""

COLLECTED = re.compile(r"Collected : (\d+)")


def _callgrind(argv: list[str], out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv]


def _collected(err: str, side: str) -> int:
    found = COLLECTED.search(err)
    if found is None:
        raise RuntimeError(f"no callgrind total in the {side}'s output:\n{err[-2000:]}")
    return int(found.group(1))


def _start_daemon(port: int, measured: bool, out: Path) -> subprocess.Popen[str]:
    """A standalone daemon on ``port``, returned once it accepts connections."""
    argv = [sys.executable, "-m", "rvasync", "daemon", "--host", "127.0.0.1", "--listen", str(port)]
    proc = subprocess.Popen(
        _callgrind(argv, out) if measured else argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the daemon did not listen on {port} within 120 s")


def instructions(
    count: int, measured: str, workdir: Path, standalone: bool = False, direct: bool = False
) -> int:
    """Instructions the ``measured`` side ran for ``count`` round trips (whole process)."""
    script = workdir / "side.py"
    script.write_text(SIDE)
    port = str(free_port(socket.SOCK_DGRAM))
    daemon: subprocess.Popen[str] | None = None
    extra: list[str] = []
    if standalone:
        daemon_port = free_port()
        out = workdir / f"callgrind.daemon.{count}.out"
        daemon = _start_daemon(daemon_port, measured == "daemon", out)
        extra = [f"127.0.0.1:{daemon_port}"]
    if direct:
        extra = [extra[0] if extra else "-", "direct"]

    def command(role: str) -> list[str]:
        base = [sys.executable, str(script), port, role, str(count), *extra]
        if role != measured:
            return base
        return _callgrind(base, workdir / f"callgrind.{role}.{count}.out")

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
        if measured == "requester":
            err = requester.stderr
        elif measured == "replier":
            err = replier.stderr.read()
        else:
            assert daemon is not None and daemon.stderr is not None
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(300)
            err = daemon.stderr.read()
    finally:
        for proc in (replier, daemon):
            if proc is not None and proc.poll() is None:
                proc.kill()
    return _collected(err, measured)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=200, help="round trips of the short run")
    parser.add_argument("--long", type=int, default=1200, help="round trips of the long run")
    parser.add_argument(
        "--standalone", action="store_true", help="both sides are clients of a standalone daemon"
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="direct communication: two-part services, requests to the replier's inbox",
    )
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    sides = ("requester", "replier", "daemon") if args.standalone else ("requester", "replier")
    with tempfile.TemporaryDirectory() as tmp:
        for side in sides:
            short = instructions(args.short, side, Path(tmp), args.standalone, args.direct)
            long = instructions(args.long, side, Path(tmp), args.standalone, args.direct)
            per = (long - short) / (args.long - args.short)
            print(f"{side}: {per:,.0f} instructions per round trip")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
