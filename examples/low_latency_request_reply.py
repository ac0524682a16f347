"""Request/reply between two processes: sleeping, polling for the reply, busy polling.

The parent starts an echo server in a child process (this file with
``--child``); both use their in-process daemons on one loopback service. The
parent times 2,000 round trips three ways and prints the median and 99th
percentile of each:

- ``reply_poll=0``: the requester's loop sleeps while its request is out and is
  woken when the reply lands;
- the default: ``send_request`` keeps the loop polling for its reply, for
  0.5 ms at most (``reply_poll``), so the reply is picked up as it lands, at
  the cost of the requester's CPU while it waits;
- ``busy_poll=0.001`` on both sides: each loop also keeps polling for 1 ms
  after any traffic, so the echo server is awake when the next request comes
  (a busy CPU core on each side while requests flow).

See docs/transports.md, "Polling instead of sleeping".

Run: python examples/low_latency_request_reply.py
"""

import asyncio
import statistics
import subprocess
import sys
import time

import uvloop

import rvasync as rv
from rvasync.testing import free_port

ROUND_TRIPS = 2000


async def child(service: str, busy_poll: float) -> None:
    async with rv.Transport(service, busy_poll=busy_poll) as t:
        requests = t.listen("ECHO")
        print("ready", flush=True)  # the parent waits for this line
        async for request in requests:
            if request.get("stop"):
                break
            await t.send_reply(rv.Message(fields={"data": request["data"]}), request)


async def time_round_trips(service: str, busy_poll: float, reply_poll: float | None) -> list[float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--child", service, str(busy_poll), stdout=subprocess.PIPE
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip() == b"ready", line
        async with rv.Transport(service, busy_poll=busy_poll, reply_poll=reply_poll) as t:
            request = rv.Message("ECHO", {"data": b"x" * 128})
            for _ in range(200):  # warm-up: both daemons know each other
                await t.send_request(request, timeout=5)
            times = []
            for _ in range(ROUND_TRIPS):
                start = time.perf_counter()
                reply = await t.send_request(request, timeout=5)
                times.append(time.perf_counter() - start)
                assert reply["data"] == b"x" * 128
            await t.send(rv.Message("ECHO", {"stop": True}))
        await asyncio.wait_for(proc.wait(), 10)
        return times
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def summary(times: list[float]) -> str:
    times = sorted(times)
    p99 = times[int(len(times) * 0.99)]
    return f"median {statistics.median(times) * 1e6:6.1f} µs, p99 {p99 * 1e6:6.1f} µs"


async def parent() -> None:
    for label, busy_poll, reply_poll in (
        ("reply_poll=0", 0.0, 0.0),
        ("default", 0.0, None),
        ("busy_poll=1 ms", 0.001, None),
    ):
        times = await time_round_trips(str(free_port()), busy_poll, reply_poll)
        print(f"{label:>15}: {ROUND_TRIPS} round trips, {summary(times)}")


if __name__ == "__main__":
    # uvloop, as in the benchmarks: the default asyncio loop adds its own latency.
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        uvloop.run(child(sys.argv[2], float(sys.argv[3])))
    else:
        uvloop.run(parent())
