"""The chaos run: three networks joined by routers, every kind of traffic, faults all along.

Sites A, B and C are three LANs (tests/lab/multilan.py) whose routers ``r0``,
``r1``, ``r2`` are linked in a ring over the WAN bridge; every host loses 5 %
of the datagrams it receives. The programs:

========  ==========================================  ==========================
site      host 1                                      host 2
========  ==========================================  ==========================
A (lan0)  ``a``: publishes ``LAB.P``                   ``q``: requests ``LAB.SVC``;
                                                      certified sender ``JOE_PER``;
                                                      queue task sender; remote-
                                                      operation invoker ``SHOP``
B (lan1)  ``b``: listens to ``LAB.P``                  certified listener ``SUE_PER``;
                                                      performer ``ORDERS``
C (lan2)  ``c``: listens to ``LAB.P``, serves          queue scheduler ``sched-b``
          ``LAB.SVC``; queue scheduler ``sched-a``     (standby), worker ``w2``
          (weight 10), worker ``w1``
========  ==========================================  ==========================

so every kind crosses routers: pub/sub A to B and C, request/reply A to C
and back, certified A to B, queue tasks A to C, remote operations A to B.
Faults (:data:`FAULTS`) come one after another while the traffic flows: kill
-9 and restart of each router, a WAN link cut (nftables) and healed, the
certified sender and listener killed and restarted from their ledgers, a
queue worker and then the active scheduler killed, the performer killed and
restarted from its state file. The quick tier runs each once
(:data:`QUICK`); the long one 50 drawn at random. Every kind's traffic
flows until the last fault is over, however long a loaded machine takes
over them: the run then creates a file (``enough``) on which the senders
stop starting new work, and each says how much it sent.

:meth:`ChaosRun.verdicts` then accounts for every message of every kind
(one :class:`Verdict` each): pub/sub and request/reply messages are
delivered, or accounted for by a DATALOSS on the network that missed them
(tests/lab/routing.py, :func:`unaccounted`); certified messages, queue tasks
and remote operations are delivered exactly once (the certified listener
may see again only what its ledger had not confirmed when it was killed;
an operation whose handler a kill cut short ends ``interrupted``, having
taken effect at most once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.lab.lab import Host, LabAgent, LabProcess
from tests.lab.multilan import MultiLab
from tests.lab.routing import RouterSpec, site_routers, start_router, unaccounted, until_through
from tests.test_cm_driver_processes import confirmed_in, segments

TESTS = Path(__file__).resolve().parents[1]
LINKS = [(0, 1), (1, 2), (0, 2)]
QUEUE = "LAB.Q"
SUBJECT = "REMEMBER.THIS"

#: Every kind of fault; the quick tier runs each once, in this order.
QUICK = [
    "cut r0-r2",
    "kill r1",
    "kill cm-sender",
    "kill cm-listener",
    "kill worker",
    "kill r2",
    "kill scheduler",
    "kill performer",
    "kill r0",
]
#: The senders' counts: they stop when the faults are over (ChaosRun.enough), not here.
UNBOUNDED = 1_000_000
FAULTS = ["cut r0-r1", "cut r1-r2", "cut r0-r2", "kill r0", "kill r1", "kill r2",
          "kill cm-sender", "kill cm-listener", "kill worker", "kill scheduler",
          "kill performer"]  # fmt: skip


@dataclass
class Verdict:
    """What one kind of traffic came to: ``problems`` empty when every message is accounted
    for as promised."""

    kind: str
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


class Program:
    """A test program (tests/*.py) on a lab host, killed -9 and restarted with the same
    arguments; its output lines are read in the background (``lines``)."""

    def __init__(self, name: str, host: Host, script: str, args: list[str], ready: str) -> None:
        self.name = name
        self.host = host
        self.script = script
        self.args = args
        self.ready = ready
        self.proc: LabProcess | None = None
        self.lines: list[str] = []
        self.starts = 0
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = proc = await self.host.spawn(str(TESTS / self.script), *self.args)
        self.starts += 1
        mark = len(self.lines)
        self._reader = asyncio.create_task(self._read(proc))
        ok = await self.until(lambda: any(self.ready in line for line in self.lines[mark:]), 30)
        assert ok, f"{self.name} did not start: {self.lines[mark:]}"

    async def _read(self, proc: LabProcess) -> None:
        with contextlib.suppress(Exception):
            while line := await proc.readline(3600):
                self.lines.append(line.decode().strip())

    async def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill9()
            with contextlib.suppress(Exception):
                await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()

    async def until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait for ``predicate`` (True) or ``timeout`` seconds (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines printed so far (tests/cmqpeer.py, cmqsender.py)."""
        return [json.loads(line) for line in self.lines if line.startswith("{")]


class ChaosRun:
    """One chaos run on ``lab`` (MultiLab(3, hosts=3)), files in ``tmp``."""

    def __init__(self, lab: MultiLab, tmp: Path, service: str, faults: list[str]) -> None:
        self.lab = lab
        self.tmp = tmp
        self.service = service
        self.plan = faults
        self.routers: dict[str, LabProcess] = {}
        self.specs: dict[str, RouterSpec] = {}
        self.agents: dict[str, LabAgent] = {}
        self.programs: dict[str, Program] = {}
        self.faults: list[str] = []
        self.published = 0
        self.requested = 0
        self.wan_drops = 0
        self._stop = asyncio.Event()
        #: fault -> whether the traffic it was aimed at was still flowing when it struck
        self.hits: list[tuple[str, bool]] = []
        #: (time.monotonic() when it struck, fault): the clock every lab process shares
        self.struck: list[tuple[float, str]] = []
        #: Created when the faults are over: the certified sender, the task sender and the
        #: invoker start nothing new once it exists (their ``--enough``), so each kind's
        #: traffic flows through every fault however slowly a loaded machine runs them.
        self.enough = tmp / "enough"

    # ------------------------------------------------------------------ set-up

    def _host(self, site: int, k: int) -> Host:
        return self.lab.sites[site].hosts[k]

    async def start(self) -> None:
        lab = self.lab
        for site in lab.sites:
            for host in site.hosts:
                host.loss(5)
        self.specs = site_routers(lab, self.service, LINKS, state=self.tmp)
        for i in (2, 1, 0):
            self.routers[f"r{i}"] = await start_router(self.specs[f"r{i}"], self.tmp)
        names = {"a": (0, 1), "q": (0, 2), "b": (1, 1), "c": (2, 1)}
        for name, (site, k) in names.items():
            self.agents[name] = await self._host(site, k).agent(self.service)
        a, q, b, c = (self.agents[n] for n in "aqbc")
        for agent in (b, c):
            await agent.call(op="listen", subject="LAB.P")
        await q.call(op="listen", subject="LAB.NONE")  # q watches DATALOSS (replies)
        await c.call(op="serve", subject="LAB.SVC")
        await until_through(a, b, "LAB.P")
        await until_through(a, c, "LAB.P")
        self._define_programs()
        for name in ("sched-a", "sched-b", "w1", "w2", "cm-listener", "performer"):
            await self.programs[name].start()
        for name in ("cm-sender", "tasks", "invoker"):
            await self.programs[name].start()

    def _define_programs(self) -> None:
        tmp, service = self.tmp, self.service

        def on(site: int, k: int, name: str, script: str, *args: str, ready: str) -> None:
            host = self._host(site, k)
            full = ["--service", service, "--network", host.network(), *args]
            if script in ("cmpeer.py", "ropspeer.py"):
                full = [args[0], *full[:4], *args[1:]]  # the role comes first
            self.programs[name] = Program(name, host, script, full, ready)

        cm = ["--subject", SUBJECT]
        on(0, 2, "cm-sender", "cmpeer.py", "sender", *cm, "--name", "JOE_PER",
           "--ledger", str(tmp / "joe.ledger"), "--target", str(UNBOUNDED),
           "--pace", "0.02", "--enough", str(self.enough), ready="ready")  # fmt: skip
        on(1, 2, "cm-listener", "cmpeer.py", "listener", *cm, "--name", "SUE_PER",
           "--ledger", str(tmp / "sue.ledger"), "--out", str(tmp / "certified.txt"),
           ready="ready")  # fmt: skip
        member = ["--queue", QUEUE, "--heartbeat", "0.3", "--activation", "1.2"]
        on(2, 1, "sched-a", "cmqpeer.py", *member, "--name", "sched-a",
           "--scheduler-weight", "10", "--worker-tasks", "0", ready='"ready"')  # fmt: skip
        on(2, 2, "sched-b", "cmqpeer.py", *member, "--name", "sched-b",
           "--scheduler-weight", "5", "--worker-tasks", "0", ready='"ready"')  # fmt: skip
        for k, name in ((1, "w1"), (2, "w2")):
            on(2, k, name, "cmqpeer.py", *member, "--name", name, "--worker-tasks", "4",
               "--work", "0.02", ready='"ready"')  # fmt: skip
        on(0, 2, "tasks", "cmqsender.py", "--queue", QUEUE, "--count", str(UNBOUNDED),
           "--pace", "0.1", "--enough", str(self.enough), ready='"ready"')  # fmt: skip
        on(1, 2, "performer", "ropspeer.py", "performer", "--name", "ORDERS",
           "--state", str(tmp / "orders.state"), "--log", str(tmp / "effects.log"),
           "--hold", "0.02", ready="ready")  # fmt: skip
        on(0, 2, "invoker", "ropspeer.py", "invoker", "--name", "SHOP",
           "--state", str(tmp / "shop.state"), "--out", str(tmp / "placed.log"),
           "--peer", "ORDERS", "--orders", str(UNBOUNDED), "--handshake", "3", "--use-invoke",
           "--pace", "0.2", "--enough", str(self.enough), ready="ready")  # fmt: skip

    # ------------------------------------------------------------------ traffic

    async def _publish(self) -> None:
        """About 200 messages a second from ``a`` until the faults are over."""
        a = self.agents["a"]
        while not self._stop.is_set():
            await a.call(op="send", subject="LAB.P", src="a", n=100, start=self.published,
                         pace=0.1)  # fmt: skip
            self.published += 100

    async def _request(self) -> None:
        """Requests from ``q`` to ``c``'s server, one after another, until the faults are over."""
        q = self.agents["q"]
        while not self._stop.is_set():
            await q.call(op="request", subject="LAB.SVC", n=5, start=self.requested,
                         timeout=3.0, pace=0.05, record=True, wait=60)  # fmt: skip
            self.requested += 5

    async def run(self, rng: random.Random) -> None:
        """The traffic, and the planned faults one after another while it flows."""
        traffic = [asyncio.create_task(self._publish()), asyncio.create_task(self._request())]
        try:
            for fault in self.plan:
                await asyncio.sleep(rng.uniform(0.5, 1.5))
                self.hits.append((fault, self._flowing(fault)))
                self.struck.append((time.monotonic(), fault))
                await self.fault(fault)
                self.faults.append(fault)
            await asyncio.sleep(1.0)
        finally:
            self._stop.set()
            self.enough.touch()
            await asyncio.gather(*traffic, return_exceptions=True)

    async def fault(self, fault: str) -> None:
        verb, what = fault.split(" ", 1)
        if verb == "cut":
            one, other = (int(x[1:]) for x in what.split("-"))
            host = self.lab.router_host(one)
            host.block(self.lab.wan_address(other))
            await asyncio.sleep(3.0)  # past neighbor_timeout: both ends give the link up
            self.wan_drops += host.packets("drop")
            host.unblock()
        elif what.startswith("r"):
            self.routers[what].kill9()
            await asyncio.sleep(0.3)
            self.routers[what] = await start_router(self.specs[what], self.tmp)
        else:
            program = self.programs[self._victim(what)]
            await program.kill()
            await asyncio.sleep(0.3)
            await program.start()

    def _flowing(self, fault: str) -> bool:
        """Whether the traffic ``fault`` is aimed at still flows (else it tests nothing)."""
        programs = self.programs
        if "cm-" in fault:
            return not any(x.startswith("done ") for x in programs["cm-sender"].lines)
        if "worker" in fault or "scheduler" in fault:
            return not _seen(programs["tasks"], "sent")
        if "performer" in fault:
            return "finished" not in _text(self.tmp / "placed.log")
        return True

    def _aimed(self, verdict: Verdict, *words: str) -> None:
        """The faults aimed at one kind (named by ``words``): how many struck while its
        traffic flowed; a problem if none did (the run would have tested nothing)."""
        aimed = [hit for f, hit in self.hits if any(w in f for w in words)]
        verdict.figures.update(faults_aimed=len(aimed), faults_in_flight=sum(aimed))
        if aimed and not any(aimed):
            verdict.problems.append(f"no fault aimed at {verdict.kind} struck while it flowed")

    def _victim(self, what: str) -> str:
        if what == "worker":
            return "w1"
        if what == "scheduler":
            active = [n for n in ("sched-a", "sched-b") if self._scheduling(n)]
            return active[-1] if active else "sched-a"
        return what

    def _scheduling(self, name: str) -> bool:
        roles = [e["scheduler"] for e in self.programs[name].events() if e["event"] == "role"]
        return bool(roles) and roles[-1]

    # ------------------------------------------------------------------ the end

    async def finish(self) -> dict[str, Any]:
        """Let every kind settle; what each program reports, for :meth:`verdicts`."""
        a, q, b, c = (self.agents[n] for n in "aqbc")
        await until_through(a, b, "LAB.P", timeout=30, src="again")
        await until_through(a, c, "LAB.P", timeout=30, src="again-c")
        # The stream resumed: a last stretch of it must arrive whole.
        tail = set(range(self.published, self.published + 200))
        await a.call(op="send", subject="LAB.P", src="a", n=200, start=self.published, pace=0.1)
        self.published += 200
        final = await q.call(op="request", subject="LAB.SVC", n=5, start=self.requested,
                             timeout=3.0, record=True)  # fmt: skip
        self.requested += 5
        programs = self.programs
        sender, listener = programs["cm-sender"], programs["cm-listener"]
        await sender.until(lambda: any(x.startswith("done ") for x in sender.lines), 120)
        last = self._certified_last()
        out = self.tmp / "certified.txt"
        await listener.until(lambda: _highest(out) >= last > 0, 120)
        await programs["tasks"].until(lambda: _seen(programs["tasks"], "confirmed"), 120)
        placed = self.tmp / "placed.log"
        await programs["invoker"].until(lambda: "finished" in _text(placed), 180)
        await asyncio.sleep(1.0)  # a late duplicate would show up now
        reports = {name: await agent.call(op="report") for name, agent in self.agents.items()}
        return {"reports": reports, "tail": tail, "final": final}

    def _certified_last(self) -> int:
        for line in reversed(self.programs["cm-sender"].lines):
            if line.startswith("done "):
                return int(line.split()[1])
        return 0

    async def close(self) -> None:
        for agent in self.agents.values():
            with contextlib.suppress(Exception):
                await agent.close()
        for program in self.programs.values():
            await program.kill()

    # ------------------------------------------------------------------ verdicts

    def verdicts(self, end: dict[str, Any]) -> dict[str, Verdict]:
        return {
            "pubsub": self._pubsub(end),
            "reqrep": self._reqrep(end),
            "certified": self._certified(),
            "queue": self._queue(),
            "rops": self._rops(),
        }

    def _pubsub(self, end: dict[str, Any]) -> Verdict:
        verdict = Verdict("pubsub", figures={"published": self.published})
        for name, net in (("b", "lan1"), ("c", "lan2")):
            report = end["reports"][name]
            problems, counts = unaccounted(report, {"a": self.published}, net, "lan0")
            verdict.figures[name] = counts
            if problems:
                verdict.problems.append(f"{name}: unaccounted {problems[:10]} {counts}")
            missing_tail = end["tail"] - set(report["got"].get("a", []))
            if missing_tail:
                late = sorted(missing_tail)[:10]
                verdict.problems.append(f"{name}: the stream did not resume: {late}")
        return verdict

    def _reqrep(self, end: dict[str, Any]) -> Verdict:
        """Requests: delivered to ``c`` or accounted for on C; replies to the requests ``c``
        answered: delivered to ``q`` or accounted for on A."""
        reports = end["reports"]
        verdict = Verdict("reqrep", figures={"requests": self.requested})
        problems, counts = unaccounted(reports["c"], {"req": self.requested}, "lan2", "lan0")
        verdict.figures["requests_on_c"] = counts
        if problems:
            verdict.problems.append(f"requests: unaccounted {problems[:10]} {counts}")
        answered = set(reports["c"]["got"].get("req", []))
        problems, counts = unaccounted(reports["q"], {"rep": answered}, "lan0", "lan2")
        verdict.figures["replies_on_a"] = counts
        if problems:
            verdict.problems.append(f"replies: unaccounted {problems[:10]} {counts}")
        if end["final"]["timeouts"]:
            verdict.problems.append(f"requests after the faults timed out: {end['final']}")
        return verdict

    def _certified(self) -> Verdict:
        verdict = Verdict("certified")
        out = self.tmp / "certified.txt"
        seen = segments(out) if out.exists() else []
        last = self._certified_last()
        if not last:
            verdict.problems.append("the certified sender never finished sending")
            return verdict
        for number, values in enumerate(seen):
            if values != sorted(set(values)):
                verdict.problems.append(f"listener process {number}: out of order or twice")
        delivered = set().union(*map(set, seen)) if seen else set()
        first = min(delivered) if delivered else 1
        missing = sorted(set(range(first, last + 1)) - delivered)
        if missing:
            verdict.problems.append(f"certified messages never delivered: {missing[:20]}")
        ledger = self.tmp / "sue.ledger"
        confirmed = confirmed_in(ledger) if ledger.exists() else 0
        self._aimed(verdict, "cm-")
        verdict.figures.update(
            messages=last, listener_processes=len(seen),
            delivered_again=sum(len(v) for v in seen) - len(delivered),
            confirmed=confirmed, sender_starts=self.programs["cm-sender"].starts,
        )  # fmt: skip
        return verdict

    def _queue(self) -> Verdict:
        tasks = self._tasks_sent()
        verdict = Verdict("queue", figures={"tasks": tasks})
        if not _seen(self.programs["tasks"], "confirmed"):
            left = [e for e in self.programs["tasks"].events() if e["event"] == "unconfirmed"]
            verdict.problems.append(f"tasks never confirmed by the queue: {left[-1:]}")
        done: Counter[int] = Counter()
        started: Counter[int] = Counter()
        #: task -> (worker, when) of each completion
        completions: dict[int, list[tuple[str, float]]] = {}
        for name in ("w1", "w2"):
            for e in self.programs[name].events():
                if e["event"] == "done":
                    done[int(e["n"])] += 1
                    completions.setdefault(int(e["n"]), []).append((name, e["t"]))
                elif e["event"] == "start":
                    started[int(e["n"])] += 1
        self._aimed(verdict, "worker", "scheduler")
        never = [n for n in range(tasks) if not done[n]]
        twice = {n: k for n, k in done.items() if k > 1}
        if never:
            verdict.problems.append(f"tasks never completed: {never[:20]}")
        if twice:
            some = {n: self._story(completions[n]) for n in list(twice)[:10]}
            verdict.problems.append(f"tasks completed more than once: {some}")
            verdict.figures["twice_after"] = sorted({self._last_fault(completions[n][-1][1])
                                                     for n in twice})  # fmt: skip
            verdict.figures["twice_after_handover"] = sum(
                1 for n in twice if any(self._handovers(when) for _, when in completions[n])
            )
        verdict.figures.update(
            completed_twice=len(twice), started_twice=sum(1 for k in started.values() if k > 1)
        )
        return verdict

    def _tasks_sent(self) -> int:
        """How many tasks the sender sent (numbered from 0), once it stopped."""
        sent = [e["count"] for e in self.programs["tasks"].events() if e["event"] == "sent"]
        return int(sent[-1]) if sent else 0

    def _orders_placed(self) -> int:
        """How many orders the invoker placed (numbered from 0), once all are settled."""
        ends = [p for p in _lines(self.tmp / "placed.log") if p[0] == "finished"]
        return int(ends[-1][1]) if ends else 0

    def _last_fault(self, when: float) -> str:
        """The last fault that struck before ``when``."""
        before = [fault for at, fault in self.struck if at <= when]
        return before[-1] if before else "none"

    def _handovers(self, when: float) -> list[dict[str, Any]]:
        """The schedulers' role changes in the 3 s before ``when``."""
        return [
            e
            for name in ("sched-a", "sched-b")
            for e in self.programs[name].events()
            if e["event"] == "role" and 0 <= when - e["t"] <= 3.0
        ]

    def _story(self, completions: list[tuple[str, float]]) -> list[str]:
        """Each completion of a task: by which worker, after which fault (how long), and
        the schedulers' role changes in the 3 s before it."""
        out = []
        for worker, when in completions:
            before = [(at, f) for at, f in self.struck if at <= when]
            since = f"{when - before[-1][0]:.1f} s after {before[-1][1]}" if before else "first"
            roles = [
                f"{e['name']} {'on' if e['scheduler'] else 'off'} {when - e['t']:.1f} s before"
                for e in self._handovers(when)
            ]
            out.append(f"{worker} {since}; roles: {roles}")
        return out

    def _rops(self) -> Verdict:
        orders = self._orders_placed()
        verdict = Verdict("rops", figures={"orders": orders})
        executed = Counter(int(p[1]) for p in _lines(self.tmp / "effects.log") if p[0] == "exec")
        twice = {o: k for o, k in executed.items() if k > 1}
        if twice:
            verdict.problems.append(f"orders that took effect more than once: {twice}")
        done = {int(p[1]): p[2] for p in _lines(self.tmp / "placed.log") if p[0] == "done"}
        if not orders:
            verdict.problems.append("the invoker never finished placing its orders")
        elif sorted(done) != list(range(orders)):
            unsettled = sorted(set(range(orders)) - set(done))[:20]
            verdict.problems.append(f"orders never settled: {unsettled}")
        self._aimed(verdict, "performer")
        interrupted = 0
        for order, how in done.items():
            if how == "ok" and executed[order] != 1:
                verdict.problems.append(f"order {order} ok but took effect {executed[order]}x")
            elif how != "ok":
                interrupted += 1
                if how != "error:interrupted":
                    verdict.problems.append(f"order {order} ended {how}")
        verdict.figures.update(interrupted=interrupted)
        return verdict


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _lines(path: Path) -> list[list[str]]:
    return [line.split() for line in _text(path).splitlines() if line.strip()]


def _highest(out: Path) -> int:
    seen = segments(out) if out.exists() else []
    return max((max(s) for s in seen if s), default=0)


def _seen(program: Program, event: str) -> bool:
    return any(e["event"] == event for e in program.events())
