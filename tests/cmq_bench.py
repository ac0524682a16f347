"""Ad-hoc measurement (not a test, not part of the benchmark harness) of distributed queues.

Throughput: one certified sender (this process), a dedicated scheduler, a
backup scheduler and four worker processes (``tests/cmqpeer.py``, trivial
tasks) on a loopback service; after a warm-up, the time from the first send
until the sender's ledger is empty, and the CPU time each process spent per
task (a figure that load from other programs on the machine changes little).
Failover: with a trickle of tasks flowing, kill -9 the
scheduler and time its successor's SCHEDULER.ACTIVE and the first task a
worker starts after it.

Usage: python tests/cmq_bench.py [TASKS [CAPACITY [quiet]]]

``quiet``: the workers report nothing per task (as in the benchmark harness's
queue-tasks row), and the failover part is skipped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import rvasync as rv
from rvasync.testing import LOOPBACK, free_port

sys.path.insert(0, str(Path(__file__).parent))
from cmqpeer import net_counters  # the script's own directory

PEER = str(Path(__file__).with_name("cmqpeer.py"))


async def _net(
    procs: dict[str, asyncio.subprocess.Process], events: dict[str, list[dict[str, Any]]]
) -> dict[str, dict[str, int]]:
    """Every process's network counters now (the members report them on SIGUSR1)."""
    seen = {name: sum(e["event"] == "net" for e in events[name]) for name in procs}
    for proc in procs.values():
        proc.send_signal(signal.SIGUSR1)
    async with asyncio.timeout(30):
        while any(sum(e["event"] == "net" for e in events[n]) == seen[n] for n in procs):
            await asyncio.sleep(0.01)
    counts = {"sender": net_counters()}
    for name in procs:
        counts[name] = [e for e in events[name] if e["event"] == "net"][-1]
    return counts


def _cpu(procs: dict[str, asyncio.subprocess.Process]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process and each member's."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {"sender": time.process_time()}
    for name, proc in procs.items():
        with open(f"/proc/{proc.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        used[name] = (int(fields[11]) + int(fields[12])) / tick
    return used


async def main(tasks: int, capacity: str, quiet: bool) -> None:
    service = str(free_port())
    procs: dict[str, asyncio.subprocess.Process] = {}
    events: dict[str, list[dict[str, Any]]] = {}
    readers = []

    async def start(name: str, *opts: str) -> None:
        argv = [PEER, "--service", service, "--network", LOOPBACK, "--queue", "BENCH.Q"]
        argv += ["--name", name, "--heartbeat", "0.25", "--activation", "1.0", *opts]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-u", *argv, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        procs[name], events[name] = proc, []

        async def read() -> None:
            assert proc.stdout is not None
            async for line in proc.stdout:
                events[name].append(json.loads(line))

        readers.append(asyncio.create_task(read()))

    def role(name: str) -> bool:
        roles = [e["scheduler"] for e in events[name] if e["event"] == "role"]
        return bool(roles) and roles[-1]

    await start("sched", "--scheduler-weight", "9", "--worker-tasks", "0")
    await start("backup", "--scheduler-weight", "5", "--worker-tasks", "0")
    for i in range(4):
        await start(f"w{i}", "--worker-tasks", capacity, *(["--quiet"] if quiet else []))
    async with asyncio.timeout(60):
        while not role("sched") or not all(
            any(e["event"] == "ready" for e in ev) for ev in events.values()
        ):
            await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    try:
        async with rv.Transport(service, network=LOOPBACK) as transport:
            sender = rv.CmTransport(transport, "BENCH.SENDER")
            await sender.add_listener("BENCH.Q", "JOBS.RUN")

            def unconfirmed() -> int:
                reviews = sender.review_ledger("JOBS.RUN")
                return reviews[0].total_messages if reviews else 0

            # Warm-up: the scheduler's agreement with the sender is in place before timing.
            for n in range(-50, 0):
                await sender.send(rv.Message("JOBS.RUN", {"n": n}))
                await asyncio.sleep(0.01)
            async with asyncio.timeout(60):
                while unconfirmed():
                    await asyncio.sleep(0.01)
            net_before = await _net(procs, events)
            cpu_before = _cpu(procs)
            began = time.monotonic()
            for n in range(tasks):
                await sender.send(rv.Message("JOBS.RUN", {"n": n}))
            async with asyncio.timeout(120):
                while unconfirmed():
                    await asyncio.sleep(0.005)
            took = time.monotonic() - began
            cpu_after = _cpu(procs)
            net_after = await _net(procs, events)
            per_task = {k: round((cpu_after[k] - cpu_before[k]) / tasks * 1e6) for k in cpu_after}
            print(f"CPU per task: {sum(per_task.values())} us, by process (us): {per_task}")
            for key, label in (
                ("datagrams_sent", "datagrams sent"),
                ("retransmitted", "datagrams retransmitted"),
                ("naks_sent", "NAKs sent"),
                ("datagrams_received", "datagrams received"),
                ("bytes_sent", "bytes sent"),
            ):
                each = {
                    k: round((net_after[k][key] - net_before[k][key]) / tasks, 3) for k in net_after
                }
                print(f"{label} per task: {round(sum(each.values()), 3)}, by process: {each}")
            changes = {
                name: [e["scheduler"] for e in events[name] if e["event"] == "role"]
                for name in procs
            }
            print(f"scheduler role changes (ACTIVE True / INACTIVE False), by process: {changes}")
            print(f"throughput: {tasks} tasks in {took:.2f} s = {tasks / took:.0f} tasks/s "
                  f"(4 workers, capacity {capacity} each)")  # fmt: skip

            if quiet:
                return

            async def trickle() -> None:
                n = tasks
                while True:
                    await sender.send(rv.Message("JOBS.RUN", {"n": n}))
                    n += 1
                    await asyncio.sleep(0.01)

            trickling = asyncio.create_task(trickle())
            await asyncio.sleep(1.0)
            killed = time.monotonic()
            procs["sched"].kill()
            async with asyncio.timeout(30):
                while not role("backup"):
                    await asyncio.sleep(0.005)
                active = next(
                    e["t"] for e in events["backup"] if e["event"] == "role" and e["scheduler"]
                )
                while True:
                    after = [
                        e["t"]
                        for name, evs in events.items()
                        if name.startswith("w")
                        for e in evs
                        if e["event"] == "start" and e["t"] > active
                    ]
                    if after:
                        break
                    await asyncio.sleep(0.005)
            first = min(after) - killed
            print(
                f"failover: successor active {active - killed:.2f} s after kill -9, first task "
                f"started {first:.2f} s after (activation 1.0 s, heartbeat 0.25 s)"
            )
            trickling.cancel()
    finally:
        for proc in procs.values():
            if proc.returncode is None and proc.stdin is not None:
                proc.stdin.close()  # a member leaves when its stdin closes
        for proc in procs.values():
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    asyncio.run(
        main(
            int(arguments[0]) if arguments else 2000,
            arguments[1] if arguments[1:] else "8",
            arguments[2:3] == ["quiet"],
        )
    )
