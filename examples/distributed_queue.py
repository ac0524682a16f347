"""A distributed queue: one certified sender, three worker processes, one killed mid-run.

The parent starts three members of the distributed queue ``DEMO.WORKERS``
(this same file with ``--worker``), each a process of its own with worker
weights 3, 2 and 1. They elect a scheduler among themselves. The parent then
sends 60 certified tasks to the subject ``DEMO.JOBS.RESIZE`` with an ordinary
``rv.CmTransport``: it knows nothing of the group, it sees one listening
correspondent named ``DEMO.WORKERS``. Part-way through, the parent kills the
heaviest worker with SIGKILL while it holds a task; the scheduler notices the
silence and hands that worker's unfinished task to another one. The parent
waits until every task is confirmed and prints who did what.

Run: python examples/distributed_queue.py
"""

import asyncio
import json
import sys
from collections import Counter

import rvasync as rv
from rvasync.testing import LOOPBACK, free_port

QUEUE = "DEMO.WORKERS"
SUBJECT = "DEMO.JOBS.RESIZE"
TASKS = 60
INTERVALS = {"scheduler_heartbeat": 0.3, "scheduler_activation": 1.5}


async def worker(service: str, name: str, weight: int) -> None:
    """A queue member: processes each task it is assigned (50 ms of "work") and reports it."""
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    def say(event: str, **values: object) -> None:
        print(json.dumps({"event": event, "name": name, **values}), flush=True)

    async with rv.Transport(service, network=LOOPBACK) as transport:
        transport.listen(
            "_RV.INFO.RVCM.QUEUE.SCHEDULER.>",
            callback=lambda adv: say("scheduler", active=adv.subject.split(".")[5] == "ACTIVE"),
        )
        async with rv.CmQueueTransport(
            transport, QUEUE, worker_weight=weight, **INTERVALS
        ) as member:

            async def resize(task: rv.Message) -> None:
                say("start", n=task["n"])
                await asyncio.sleep(0.05)
                say("done", n=task["n"])
                # Returning confirms the task: the scheduler then confirms it to the sender.

            member.listen(SUBJECT, callback=resize)
            say("ready")
            await stdin.read()  # run until the parent closes our stdin


class Child:
    """The parent's handle on one worker process and what it reported."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name, self.proc = name, proc
        self.events: list[dict] = []
        self.reader = asyncio.create_task(self.read())

    async def read(self) -> None:
        async for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def done(self) -> list[int]:
        return [e["n"] for e in self.events if e["event"] == "done"]

    def holding(self) -> set[int]:
        started = {e["n"] for e in self.events if e["event"] == "start"}
        return started - set(self.done())

    def is_scheduler(self) -> bool:
        roles = [e["active"] for e in self.events if e["event"] == "scheduler"]
        return bool(roles) and roles[-1]


async def until(predicate, what: str, timeout: float = 40.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def parent() -> None:
    service = str(free_port())
    children = []
    for name, weight in (("heavy", 3), ("medium", 2), ("light", 1)):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--worker", service, name, str(weight),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        children.append(Child(name, proc))
    try:
        await until(lambda: all(c.events for c in children), "workers ready")
        await until(lambda: any(c.is_scheduler() for c in children), "a scheduler")
        scheduler = next(c.name for c in children if c.is_scheduler())
        print(f"scheduler elected: {scheduler}")
        async with rv.Transport(service, network=LOOPBACK) as transport:
            sender = rv.CmTransport(transport, "DEMO.SENDER")
            # Pre-register the queue: even the first task is certified.
            await sender.add_listener(QUEUE, SUBJECT)
            for n in range(TASKS):
                await sender.send(rv.Message(SUBJECT, {"n": n, "image": f"img-{n}.png"}))
            heavy = children[0]
            await until(lambda: len(heavy.done()) >= 3 and heavy.holding(), "heavy busy")
            print(f"kill -9 'heavy' while it holds task(s) {sorted(heavy.holding())}")
            heavy.proc.kill()

            def unconfirmed() -> int:
                reviews = sender.review_ledger(SUBJECT)
                return reviews[0].total_messages if reviews else 0

            await until(lambda: unconfirmed() == 0, "every task confirmed")
            await sender.close()
        done = Counter(n for c in children for n in c.done())
        for c in children:
            print(f"{c.name:>6}: {len(c.done())} tasks")
        missing = set(range(TASKS)) - set(done)
        twice = sorted(n for n, k in done.items() if k > 1)
        print(f"all {TASKS} tasks confirmed; missing: {sorted(missing)}; done twice: {twice}")
        assert not missing
    finally:
        for c in children:
            if c.proc.returncode is None:
                c.proc.stdin.close()
        for c in children:
            try:
                await asyncio.wait_for(c.proc.wait(), 10)
            except TimeoutError:
                c.proc.kill()
                await c.proc.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(worker(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        asyncio.run(parent())
