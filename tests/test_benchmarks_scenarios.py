"""Light tests of the scenarios added to the benchmark harness: raw intra-process
throughput, fault-tolerance failover, certified delivery (rvasync and JetStream).

Nothing here measures: the roles run with fake adapters or tiny counts, the
brokers are never started, and the one spawned process is a few lines of Python.
The end-to-end check is ``python -m benchmarks run --quick --only NAME``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.registry import Variant, discover  # noqa: E402
from benchmarks.scenarios import certified, failover, inproc_raw  # noqa: E402
from benchmarks.systems.nats_jetstream import (  # noqa: E402
    ASYNC,
    SYNC_ASYNC,
    JetStreamServer,
)
from benchmarks.systems.nats_peer import NatsServer  # noqa: E402
from benchmarks.systems.rvasync_failover import RvFailover  # noqa: E402
from benchmarks.systems.rvasync_inproc_raw import NATIVE, PURE, RvRawInproc  # noqa: E402

NEW_SCENARIOS = {
    "intraprocess-raw": "inproc-raw",
    "failover-kill": "failover",
    "failover-exit": "failover",
    "certified-1listener": "certified",
    "certified-5listeners": "certified",
    "certified-1listener-cold": "certified",
    "certified-5listeners-cold": "certified",
    "relay-drain": "relay",
}


# -- registration -----------------------------------------------------------------------


def test_new_scenarios_are_discovered_with_their_capabilities() -> None:
    registry = discover()
    for name, capability in NEW_SCENARIOS.items():
        scenario = registry.scenario(name)
        assert scenario.capability == capability
        for quick in (False, True):
            params = scenario.resolved_params(quick)
            assert params["timeout"] > 0
            assert all(g.role in scenario.roles for g in scenario.layout(params))


def test_rows_of_the_new_scenarios() -> None:
    registry = discover()
    labels: dict[str, list[tuple[str, str]]] = {}
    for name in NEW_SCENARIOS:
        scenario = registry.scenario(name)
        params = scenario.resolved_params(quick=True)
        labels[name] = [
            (plan.label, plan.status)
            for system in registry.ordered_systems()
            for plan in registry.plans(scenario, system, params)
        ]
        for plan_label, status in labels[name]:
            assert status in ("ok", "unavailable", "n/a"), plan_label
    raw = dict(labels["intraprocess-raw"])
    assert "rvasync (pure Python, RVASYNC_PURE=1)" in raw
    assert raw["NATS"] == "n/a"
    cm = [label for label, status in labels["certified-5listeners"] if status != "n/a"]
    assert [label for label in cm if label.startswith("rvasync")] == [
        "rvasync (file ledger)",
        "rvasync (process ledger)",
        "rvasync (file ledger, sync_ledger=True, 256 sends in flight)",
        "rvasync (file ledger, listener through a relay agent (in its process))",
    ]
    assert sum(1 for label in cm if label.startswith("NATS (JetStream")) == 4
    one = [label for label, status in labels["certified-1listener"] if status != "n/a"]
    # The loop's variations sit beside the plain loop's rows, with one listener.
    assert "rvasync (file ledger, one prebuilt message re-sent)" in one
    assert "rvasync (file ledger, explicit asyncio.sleep(0) every 1,000 sends)" in one
    assert sum(1 for label in one if label.startswith("NATS (JetStream")) == 5
    cold = [label for label, status in labels["certified-1listener-cold"] if status != "n/a"]
    assert cold == [
        "rvasync (file ledger)",
        "rvasync (process ledger)",
        "NATS (JetStream, file store, publish_async x256)",
        "NATS (JetStream, memory store, publish_async x256)",
    ]
    assert dict(labels["failover-kill"])["ZeroMQ"] == "n/a"


def test_pure_row_sets_the_environment_and_native_is_the_headline() -> None:
    assert PURE.env == {"RVASYNC_PURE": "1"} and not PURE.headline
    assert NATIVE.headline and not NATIVE.env


# -- raw intra-process --------------------------------------------------------------------


def _raw_adapter() -> RvRawInproc:
    from rvasync._accel import HOT_PATHS, native_module, pure_forced

    native = not pure_forced() and all(native_module(n) is not None for n in HOT_PATHS)
    return RvRawInproc({}, {}, NATIVE if native else PURE)


async def test_raw_rounds_count_every_message_both_ways() -> None:
    raw = _raw_adapter()
    try:
        rate = await inproc_raw.iterate_round(raw, 2_500, 128, timeout=20)
        assert rate > 0 and raw.listeners == []  # the round closed its listener
        assert await inproc_raw.callback_round(raw, 2_500, 128, timeout=20) > 0
        msg = raw.message("A.B", 128)
        assert msg["data"] == b"x" * 128
    finally:
        await raw.close()


def test_raw_combine_takes_medians_and_their_ratio() -> None:
    out = inproc_raw.combine(
        {"run": [{"iterate": [900.0, 1000.0, 1100.0], "callback": [500.0, 2000.0, 800.0]}]}, {}
    )
    assert out == {"iterate_per_s": 1000.0, "callback_per_s": 800.0, "iterate_vs_callback": 1.25}


# -- failover -------------------------------------------------------------------------------


def test_failover_combine_and_member_command_line() -> None:
    out = failover.combine({"run": [{"gaps_ms": [3.0, 1.0, 2.0, 10.0]}]}, {})
    assert out == {"failover_ms": 2.5, "min_ms": 1.0, "max_ms": 10.0}
    with pytest.raises(RuntimeError, match="no failover"):
        failover.combine({"run": [{"gaps_ms": []}]}, {})
    params = discover().scenario("failover-kill").resolved_params(quick=True)
    argv = RvFailover(params, {"ports": [7654]}, Variant()).member_argv("m1", "G.X")
    assert argv[1:3] == ["-m", "benchmarks.systems.rvasync_ft_member"]
    joined = " ".join(argv)
    assert "--service 7654" in joined and "--group G.X" in joined
    assert "--heartbeat 0.3" in joined and "--activation 1.0" in joined


_FAKE_MEMBER = """
import json, sys, time
def say(event, **kw):
    t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    print(json.dumps({"event": event, "t_ns": t, **kw}), flush=True)
say("ready")
say("action", action="ACTIVATE")
for line in sys.stdin:
    if line.strip() == "exit":
        break
say("action", action="DEACTIVATE")
say("exited")
"""


async def test_member_process_follows_the_line_protocol() -> None:
    argv = [sys.executable, "-c", _FAKE_MEMBER]
    member = await failover.MemberProcess.start("fake", argv, timeout=20)
    try:
        await failover.until([member], lambda: member.active, "ACTIVATE", 20)
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        assert member.actions()[0][1] <= before  # one clock for both processes
        member.command("exit")
        assert await asyncio.wait_for(member.process.wait(), 20) == 0
        await member.kill()
        assert [a for a, _ in member.actions()] == ["ACTIVATE", "DEACTIVATE"]
        assert not member.active and member.seen("exited")
    finally:
        await member.kill()


async def test_member_process_sigkill_and_until_timeout() -> None:
    member = await failover.MemberProcess.start("fake", [sys.executable, "-c", _FAKE_MEMBER], 20)
    try:
        with pytest.raises(TimeoutError, match="never"):
            await failover.until([member], lambda: False, "never", 0.2)
        member.sigkill()
        assert await asyncio.wait_for(member.process.wait(), 20) < 0
    finally:
        await member.kill()


# -- certified ------------------------------------------------------------------------------


class _Bus:
    """What the fake certified adapters share inside one test."""

    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[tuple[int, bytes]]] = []
        self.confirmed: list[int] = []


class _FakeCertified(certified.Certified):
    """In-memory certified delivery: every send reaches every listener's queue."""

    system = "fake"
    capability = "certified"

    def __init__(self, bus: _Bus, index: int = 0, every: int = 0) -> None:
        super().__init__({}, {}, Variant(), index)
        self.bus = bus
        self.last = 0
        self.every = every
        self.anticipated = 0
        self.sent: list[bytes] = []

    async def open_sender(self, subject: str) -> None:
        self.subject = subject

    async def anticipate(self, listeners: int) -> None:
        self.anticipated = listeners

    def yield_every(self) -> int:
        return self.every

    async def send_new(self, subject: str, data: bytes) -> None:
        self.last += 1
        self.sent.append(data)
        for queue in self.bus.queues:
            queue.put_nowait((self.last, data))

    async def confirmed_by(self) -> int:
        return sum(1 for c in self.bus.confirmed if c >= self.last)

    async def open_listener(self, subject: str) -> None:
        self.slot = len(self.bus.queues)
        self.bus.queues.append(asyncio.Queue())
        self.bus.confirmed.append(0)

    async def consume(self, sink: Callable[[bytes], None]) -> None:
        queue = self.bus.queues[self.slot]
        while True:
            sequence, data = await queue.get()
            sink(data)
            self.bus.confirmed[self.slot] = sequence


class _Context:
    """The parts of WorkerContext the roles use; stop comes from the test."""

    def __init__(self, params: dict[str, Any], adapter: Any) -> None:
        self.params = params
        self.adapter = adapter
        self.stop = asyncio.Event()

    async def ready(self) -> None:
        pass

    async def go(self) -> None:
        pass

    async def stopped(self) -> None:
        await self.stop.wait()


async def _run_certified(params: dict[str, Any], sender: _FakeCertified) -> list[dict[str, Any]]:
    bus = sender.bus
    contexts = [_Context(params, _FakeCertified(bus, i)) for i in range(params["listeners"])]
    listeners = [asyncio.ensure_future(certified.listener(c)) for c in contexts]  # type: ignore[arg-type]
    async with asyncio.timeout(30):
        while len(bus.queues) < params["listeners"]:
            await asyncio.sleep(0.001)
        sent = await certified.sender(_Context(params, sender))  # type: ignore[arg-type]
        for c in contexts:
            c.stop.set()
        return [sent, *await asyncio.gather(*listeners)]


async def test_certified_roles_warm_up_send_and_combine() -> None:
    params = {"size": 64, "listeners": 3, "messages": 500, "timeout": 30, "ready_timeout": 30}
    fake = _FakeCertified(_Bus())
    sent, *reports = await _run_certified(params, fake)
    assert [r["count"] for r in reports] == [500, 500, 500]  # warm-ups are not counted
    assert fake.sent[0] == certified.WARM_UP and fake.anticipated == 0
    out = certified.combine({"sender": [sent], "listener": reports}, params)
    assert out["confirmed_per_s"] > 0 and out["sent_per_s"] >= out["confirmed_per_s"]
    assert out["delivered_per_s"] > 0
    with pytest.raises(RuntimeError, match="received"):
        certified.combine({"sender": [sent], "listener": [{**reports[0], "count": 499}]}, params)


async def test_certified_cold_start_anticipates_and_streams_at_once() -> None:
    params = {"size": 64, "listeners": 2, "messages": 300, "timeout": 30, "ready_timeout": 30}
    fake = _FakeCertified(_Bus())
    _sent, *reports = await _run_certified({**params, "cold": True}, fake)
    assert fake.anticipated == 2
    assert fake.sent == [b"x" * 64] * 300  # no warm-up: the data is the first send
    assert [r["count"] for r in reports] == [300, 300]


async def test_certified_explicit_yield_rows_yield_every_n_sends() -> None:
    fake = _FakeCertified(_Bus(), every=10)
    turns = 0

    def tick() -> None:
        nonlocal turns
        turns += 1

    # The fake's sends never suspend: only the loop's own sleep(0) lets a callback run.
    loop = asyncio.get_running_loop()
    original = fake.send_new

    async def send_new(subject: str, data: bytes) -> None:
        loop.call_soon(tick)
        await original(subject, data)

    fake.send_new = send_new  # type: ignore[method-assign]
    await certified._stream(fake, b"x" * 64, 100)
    assert turns == 100  # each of the ten yields let the callbacks of its ten sends run
    fake.every = 0
    turns = 0
    await certified._stream(fake, b"x" * 64, 100)
    assert turns == 0  # a plain loop of sends that never suspend: nothing else ran


async def test_certified_wait_gives_up_after_its_timeout() -> None:
    bus = _Bus()
    fake = _FakeCertified(bus)
    bus.confirmed.append(0)
    fake.last = 5
    with pytest.raises(TimeoutError):
        await certified._wait_confirmed(fake, 1, timeout=0.1)
    bus.confirmed[0] = 5
    await certified._wait_confirmed(fake, 1, timeout=5)


def test_certified_layout_starts_passive_listeners_first() -> None:
    groups = certified.layout({"listeners": 5})
    assert [(g.role, g.count, g.passive) for g in groups] == [
        ("listener", 5, True),
        ("sender", 1, False),
    ]


def test_jetstream_server_adds_jetstream_options_only_there(tmp_path: Path) -> None:
    plain = NatsServer({}, tmp_path)
    assert plain.extra_args() == [] and plain.extra_config() == []
    js = JetStreamServer({}, tmp_path, ASYNC)
    js.store = tmp_path / "store"
    assert js.extra_args() == ["-js", "-sd", str(tmp_path / "store")]
    assert js.extra_config() == []
    synced = JetStreamServer({}, tmp_path, SYNC_ASYNC)
    assert "  sync_interval: always" in synced.extra_config()


# -- request/reply: a new request per round trip ---------------------------------------------


async def test_the_requester_builds_a_new_request_for_every_round_trip() -> None:
    from benchmarks.interfaces import ReqRep
    from benchmarks.scenarios import reqrep

    class Echo(ReqRep):
        system = "fake"
        capability = "reqrep"
        prepared = 0

        async def connect(self) -> None:
            pass

        async def serve(self, subject: str) -> None:
            pass

        def prepare(self, subject: str, payload: bytes) -> Any:
            self.prepared += 1
            return payload

        async def request(self, handle: Any, timeout: float) -> bytes:
            return bytes(handle)

    params = {"size": 32, "requests": 50, "warmup": 5, "request_timeout": 1.0}
    client = Echo(params, {}, Variant())
    result = await reqrep.requester(_Context(params, client))  # type: ignore[arg-type]
    assert client.prepared == 55  # the default request_new: one request built per call
    assert result["round_trips_per_s"] > 0
