"""Work per routed message inside the two routers, counted by callgrind or cProfile.

The ``routed-*`` rows time a stream through two router processes on a shared
machine, where wall-clock figures drift by tens of percent between runs.
This counts instead what the routers themselves execute per message: two
``rvasync router --config`` processes join two services (as in the rows:
network A and network B on loopback, neighbors over TCP), both run under
``valgrind --tool=callgrind`` (or cProfile with ``--tool cprofile``), and
this process is the programs on both sides (publisher and subscriber,
requester and replier). Each measurement runs twice, a short and a long
series, and prints the difference divided by the extra messages, which
cancels start-up and shut-down.

* ``pubsub``: 128 B messages from A to B, sent in bursts of ``--burst``
  (each burst waits until the previous one arrived, so batches are about
  the same size whatever the speed of the machine);
* ``reqrep``: request/reply round trips from A to B and back (128 B).

Needs valgrind for the default tool (``apt-get install valgrind``). Usage::

    python -m benchmarks.routed_instructions [--mode pubsub|reqrep|both]
        [--short 400] [--long 2000] [--burst 50] [--tool callgrind|cprofile]

With ``--tool cprofile`` it prints, per router, the function calls per
message and the functions that made the most calls (cProfile's counts are
deterministic as well; its timings are not used).
"""

from __future__ import annotations

import argparse
import asyncio
import pstats
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.procs import LOOPBACK, free_ports

COLLECTED = re.compile(r"Collected : (\d+)")
ROUTERS = ("rnear", "rfar")
READY = "bench.ready"

CPROFILE = """
import cProfile, sys
from rvasync.cli import main
out, argv = sys.argv[1], sys.argv[2:]
profile = cProfile.Profile()
profile.enable()
try:
    main(argv)
finally:
    profile.disable()
    profile.dump_stats(out)
"""


def _config(workdir: Path, i: int, services: list[int], ports: list[int]) -> Path:
    name, other = ROUTERS[i], ROUTERS[1 - i]
    lines = [
        "[router]",
        f'name = "{name}"',
        f'listen = "{LOOPBACK}:{ports[i]}"',
        "[[network]]",
        f'name = "net{i}"',
        f'service = "{services[i]}"',
        f'network = "{LOOPBACK}"',
        "[[neighbor]]",
        f'name = "{other}"',
    ]
    if i == 1:
        lines.append(f'address = "{LOOPBACK}:{ports[0]}"')
    path = workdir / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _start_router(config: Path, tool: str, out: Path, loop: str | None) -> subprocess.Popen[str]:
    argv = ["router", "--config", str(config)]
    if loop is not None:
        argv += ["--loop", loop]
    if tool == "callgrind":
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "rvasync",
            *argv,
        ]
    else:
        command = [sys.executable, "-c", CPROFILE, str(out), *argv]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "ready" not in line:
        proc.kill()
        raise RuntimeError(f"router did not start: {line!r} {proc.communicate()[1][-2000:]}")
    return proc


async def _programs(services: list[int], mode: str, count: int, burst: int) -> None:
    import rvasync as rv

    near = rv.Transport(str(services[0]), LOOPBACK, reply_poll=0)
    far = rv.Transport(str(services[1]), LOOPBACK, reply_poll=0)
    await near.open()
    await far.open()
    got = 0
    arrived = asyncio.Event()

    def take(_msg: Any) -> None:
        nonlocal got
        got += 1
        arrived.set()

    async def reply(msg: Any) -> None:
        await far.send_reply(rv.Message(fields={"data": msg.get("data", b"")}), msg)

    far.listen("bench.data", callback=take)
    far.listen("bench.request", callback=reply)
    far.listen(READY, callback=reply)
    async with asyncio.timeout(600):
        while True:
            try:
                await near.send_request(rv.Message(READY, {}), 2.0)
                break
            except rv.RequestTimeout:
                continue
        data = b"x" * 128
        if mode == "pubsub":
            sent = 0
            while sent < count:
                n = min(burst, count - sent)
                for _ in range(n):
                    await near.send(rv.Message("bench.data", {"data": data}))
                sent += n
                while got < sent:
                    arrived.clear()
                    await arrived.wait()
        else:
            request = rv.Message("bench.request", {"data": data})
            for _ in range(count):
                await near.send_request(request, 60)
    await near.close()
    await far.close()


def measure(
    mode: str, count: int, burst: int, tool: str, workdir: Path, loop: str | None = None
) -> dict[str, Any]:
    """What each router ran for ``count`` messages (callgrind: instructions; cProfile: stats)."""
    import uvloop

    services = free_ports(2, socket.SOCK_DGRAM)
    ports = free_ports(2)
    procs: list[subprocess.Popen[str]] = []
    outs = [workdir / f"{tool}.{name}.{mode}.{count}.out" for name in ROUTERS]
    try:
        for i in range(2):
            procs.append(_start_router(_config(workdir, i, services, ports), tool, outs[i], loop))
        uvloop.run(_programs(services, mode, count, burst))
        results: dict[str, Any] = {}
        for name, proc, out in zip(ROUTERS, procs, outs, strict=True):
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=600)
            if tool == "callgrind":
                found = COLLECTED.search(err)
                if found is None:
                    raise RuntimeError(f"no callgrind total for {name}:\n{err[-2000:]}")
                results[name] = int(found.group(1))
            else:
                results[name] = pstats.Stats(str(out))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def _calls(stats: pstats.Stats) -> dict[str, int]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]  # pstats keeps it public-ish
    return {f"{f[0].rsplit('/', 2)[-1]}:{f[1]}({f[2]})": v[1] for f, v in raw.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("pubsub", "reqrep", "both"), default="both")
    parser.add_argument("--short", type=int, default=400, help="messages of the short run")
    parser.add_argument("--long", type=int, default=2000, help="messages of the long run")
    parser.add_argument("--burst", type=int, default=50, help="pubsub messages per burst")
    parser.add_argument("--tool", choices=("callgrind", "cprofile"), default="callgrind")
    parser.add_argument("--top", type=int, default=25, help="cprofile: functions listed")
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default=None, help="the routers' --loop"
    )
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("--short must be positive and below --long")
    modes = ("pubsub", "reqrep") if args.mode == "both" else (args.mode,)
    extra = args.long - args.short
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            unit = "message" if mode == "pubsub" else "round trip"
            short = measure(mode, args.short, args.burst, args.tool, Path(tmp), args.loop)
            long = measure(mode, args.long, args.burst, args.tool, Path(tmp), args.loop)
            for name in ROUTERS:
                if args.tool == "callgrind":
                    per = (long[name] - short[name]) / extra
                    print(f"{mode} {name}: {per:,.0f} instructions per {unit}")
                    continue
                a, b = _calls(short[name]), _calls(long[name])
                total = (sum(b.values()) - sum(a.values())) / extra
                print(f"{mode} {name}: {total:,.1f} function calls per {unit}")
                diff = sorted(
                    ((b[k] - a.get(k, 0)) / extra, k) for k in b if b[k] - a.get(k, 0) > 0
                )
                for per, key in reversed(diff[-args.top :]):
                    print(f"    {per:8.2f}  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
