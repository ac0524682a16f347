"""A slow asyncio consumer costs bounded memory, and what it loses is counted (issue 43 item 1).

A listener that awaits slow work used to make its process grow without bound
(39 to 321 MB in 10 s at 20,000 msg/s of 1 KB) with no advisory: the link kept
reading and decoding everything into the listener's queue. Now:

* through a standalone daemon, the link stops reading while the listener
  queues hold half their ``pending_limit``; the backlog waits in the daemon,
  whose consumer buffer bounds it and drops the oldest, counted by
  CLIENT.SLOWCONSUMER; the listener's queue itself never discards;
* in-process, the listener's own queue holds at most ``pending_limit``
  messages and drops the oldest, counted by QUEUE.LIMIT_EXCEEDED.

Each test runs a subscriber process that is slow for its first messages and
then drains; the test process publishes. The subscriber's peak RSS growth stays
within the documented bound (docs/daemon.md, "Slow consumers"), and every
message published is received or counted by an advisory.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap

import pytest

import rvasync as rv
from rvasync.testing import free_port

WAIT = 60.0
TOTAL = 40_000
SIZE = 1024
LIMIT = 2000
#: What the subscriber's peak RSS may grow by: its queues' bound (LIMIT messages of
#: about SIZE + 600 bytes, a few MB) with room for the allocator and the decoder;
#: without the bound it grew by about TOTAL * (SIZE + 600), some 65 MB.
GROWTH_BOUND = 20 * 1024 * 1024

SUBSCRIBER = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    import rvasync as rv

    service, daemon, total, limit, slow = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])

    def rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    async def main():
        t = rv.Transport(service, daemon=None if daemon == "-" else daemon, pending_limit=limit)
        await t.open()
        data = t.listen("SLOW.DATA")
        advisories = t.listen("_RV.*.SYSTEM.>")
        local = rv.process_transport().listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED")
        if daemon != "-":
            await t.link.ping(30)
        await asyncio.sleep(0.5)
        base = rss()
        print(json.dumps({"ready": True}), flush=True)
        got = dropped = discarded = lost = 0
        async with asyncio.timeout(120):
            while got + dropped + discarded + lost < total:
                msg = await data.get() if len(data) or not (len(advisories) or len(local)) else None
                while (adv := advisories.poll()) is not None:
                    if adv.subject.endswith("CLIENT.SLOWCONSUMER"):
                        dropped += adv["dropped"]
                    elif "DATALOSS" in adv.subject:
                        lost += adv.get("messages", 0)
                while (adv := local.poll()) is not None:
                    if adv["ADV_DESC"] == "listener:SLOW.DATA":
                        discarded += adv["count"]
                if msg is None:
                    continue
                got += 1
                if got <= slow:
                    await asyncio.sleep(0.002)  # slow work, the loop stays free
        print(json.dumps({"got": got, "dropped": dropped, "discarded": discarded,
                          "lost": lost, "queue_discarded": data.queue.discarded,
                          "growth": rss() - base}), flush=True)
        await t.close()

    asyncio.run(main())
    """
)


async def _run(tmp_path, service: str, daemon: str, publisher: rv.Transport) -> dict:
    script = tmp_path / "subscriber.py"
    script.write_text(SUBSCRIBER)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        service,
        daemon,
        str(TOTAL),
        str(LIMIT),
        "2000",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        assert json.loads(line) == {"ready": True}, (line, await proc.stderr.read())
        payload = bytes(SIZE)
        for n in range(TOTAL):
            await publisher.send(rv.Message("SLOW.DATA", {"n": n, "data": payload}))
            if n % 200 == 199:
                await asyncio.sleep(0)
        line = await asyncio.wait_for(proc.stdout.readline(), 2 * WAIT)
        assert line, await proc.stderr.read()
        return json.loads(line)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


@pytest.mark.timeout(240)
async def test_through_a_standalone_daemon_the_daemon_holds_the_backlog(tmp_path):
    """The link stops reading; the daemon's consumer buffer (2 MB here) fills and
    CLIENT.SLOWCONSUMER counts the drops; the listener's queue discards nothing."""
    service = str(free_port())
    daemon = rv.Daemon(listen=0, max_consumer_buffer=2_000_000, host_status_interval=0)
    await daemon.start()
    try:
        where = f"127.0.0.1:{daemon.listen_port}"
        async with rv.Transport(service, daemon=where) as publisher:
            result = await _run(tmp_path, service, where, publisher)
    finally:
        await daemon.stop()
    assert result["got"] + result["dropped"] + result["lost"] == TOTAL, result
    assert result["dropped"] > 0, result  # the daemon dropped, and said so
    assert result["queue_discarded"] == 0 and result["discarded"] == 0, result
    assert result["growth"] < GROWTH_BOUND, result


@pytest.mark.timeout(240)
async def test_in_process_the_listener_queue_is_bounded_and_counts_its_drops(tmp_path):
    service = str(free_port())
    async with rv.Transport(service) as publisher:
        result = await _run(tmp_path, service, "-", publisher)
    assert result["got"] + result["discarded"] + result["lost"] == TOTAL, result
    assert result["discarded"] > 0 and result["discarded"] == result["queue_discarded"], result
    assert result["growth"] < GROWTH_BOUND, result


async def test_the_bound_applies_to_listeners_own_queues_only(rv_process_transport):
    t = rv_process_transport
    assert t.pending_limit == 20_000
    own = t.listen("BOUND.OWN")
    assert own.queue.limit == 20_000 and own.queue.policy is rv.LimitPolicy.DISCARD_FIRST
    shared = t.listen("BOUND.SHARED", queue=rv.Queue())  # the program's: its own rules
    assert shared.queue.limit == 0
    t.pending_limit = 0
    unbounded = t.listen("BOUND.NONE")
    assert unbounded.queue.limit == 0
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(rv.InvalidArgument, match="pending_limit"):
            rv.Transport(pending_limit=bad)
    t.pending_limit = None  # back to the default
    for listener in (own, shared, unbounded):
        await listener.close()


async def test_a_listener_nobody_reads_does_not_deafen_its_transport(monkeypatch):
    """A listener whose queue is never read (a forgotten advisory listener) holds the
    link only while the queues still drain: after STALL_AFTER seconds of no progress
    the link reads again, the listener's own bound drops its oldest (counted), and the
    transport's other listeners get their messages."""
    from rvasync.transport import backpressure

    monkeypatch.setattr(backpressure, "STALL_AFTER", 0.5)
    service = str(free_port())
    daemon = rv.Daemon(listen=0, host_status_interval=0)
    await daemon.start()
    try:
        where = f"127.0.0.1:{daemon.listen_port}"
        async with (
            rv.Transport(service, daemon=where, pending_limit=200) as t,
            rv.Transport(service, daemon=where) as publisher,
        ):
            forgotten = t.listen("STUCK.A")
            live = t.listen("LIVE.B")
            local = rv.process_transport().listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED")
            await t.link.ping(30)
            for n in range(1000):
                await publisher.send(rv.Message("STUCK.A", {"n": n}))
            for n in range(10):
                await publisher.send(rv.Message("LIVE.B", {"n": n}))
            got = [(await live.get(WAIT))["n"] for _ in range(10)]
            assert got == list(range(10))
            assert len(forgotten) <= 200
            assert forgotten.queue.discarded + len(forgotten) == 1000
            counted = 0
            async with asyncio.timeout(WAIT):
                while counted < forgotten.queue.discarded:
                    adv = await local.get(WAIT)
                    if adv["ADV_DESC"] == "listener:STUCK.A":
                        counted += adv["count"]
            assert counted == forgotten.queue.discarded
            await local.close()
    finally:
        await daemon.stop()
