"""Relay agents on asyncio: RelayAgent and CmTransport(relay_agent=...) in one process.

The protocol rules are tested on the sans-IO cores (test_relay_core*.py);
these tests check what the drivers add: locating the agent by name,
messages and confirmations flowing through it, storage while disconnected,
advisories, the agent's ledger, and errors.
"""

from __future__ import annotations

import asyncio

import pytest
from cm_driver_support import FAST, Advisories, payloads, until

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.message import Message
from rvasync.protocol.relay import RelayTiming

WAIT = 10.0
QUICK = RelayTiming(
    locate_interval=0.1,
    retry=0.3,
    keepalive=0.5,
    agent_timeout=3.0,
    session_timeout=4.0,
    bye_timeout=2.0,
)


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


async def _relay_pair(t, tmp_path, *, sender_agent="RA", listener_agent="RA"):
    adv = Advisories(t)
    snd = CmTransport(t, "SND", relay_agent=sender_agent, timing=FAST, relay_timing=QUICK)
    lis = CmTransport(t, "LIS", relay_agent=listener_agent, timing=FAST, relay_timing=QUICK)
    await snd.add_listener("LIS", "foo")
    return adv, snd, lis


async def test_certified_messages_flow_through_the_agent_and_are_confirmed(t, tmp_path):
    async with rv.RelayAgent(t, "RA", ledger=tmp_path / "ra.ledger", timing=QUICK) as agent:
        adv, snd, lis = await _relay_pair(t, tmp_path)
        await until(
            lambda: snd.relay_state == "connected" and lis.relay_state == "connected",
            WAIT,
            "both connected",
        )
        assert len(adv.of("RELAY.CONNECTED")) == 2
        listener = lis.listen("foo")
        await until(
            lambda: any(c.name == "LIS" and ("foo", "data") in c.listens for c in agent.review()),
            WAIT,
            "agent listens for LIS",
        )
        for n in range(5):
            await snd.send(Message("foo", {"n": n}))
        got = [await listener.get(WAIT) for _ in range(5)]
        assert payloads(got) == list(range(5))
        with pytest.raises(asyncio.TimeoutError):
            await listener.get(0.2)  # the last one counts as taken now
        await until(lambda: snd.review_ledger("foo")[0].total_messages == 0, WAIT, "confirmed")
        await snd.close()
        await lis.close()


async def test_stored_while_disconnected_then_delivered_once(t, tmp_path):
    async with rv.RelayAgent(t, "RA", ledger=tmp_path / "ra.ledger", timing=QUICK) as agent:
        adv, snd, lis = await _relay_pair(t, tmp_path)
        listener = lis.listen("foo")
        await snd.send(Message("foo", {"n": 0}))
        assert payloads([await listener.get(WAIT)]) == [0]
        await until(lambda: snd.review_ledger("foo")[0].total_messages == 0, WAIT, "confirmed")
        # The listener goes away: the agent stores for it.
        await lis.disconnect_relay()
        await until(lambda: adv.of("RELAY.DISCONNECTED"), WAIT, "disconnected")
        for n in range(1, 6):
            await snd.send(Message("foo", {"n": n}))
        await until(lambda: agent.stored("LIS") >= 5, WAIT, "agent stores")
        # The sender goes away too: its confirmations will wait at the agent.
        await snd.disconnect_relay()
        await until(lambda: len(adv.of("RELAY.DISCONNECTED")) == 2, WAIT, "sender off")
        # A disconnected sender stops asking for confirmations (many intervals
        # of FAST pass while it is away): no DELIVERY.NO_RESPONSE for LIS then.
        asked_before = len(adv.fields("DELIVERY.NO_RESPONSE"))
        await lis.connect_relay()
        got = [await listener.get(WAIT) for _ in range(5)]
        assert payloads(got) == [1, 2, 3, 4, 5]
        with pytest.raises(asyncio.TimeoutError):
            await listener.get(0.5)  # nothing twice (and the last one counts as taken)
        await asyncio.sleep(0.5)
        assert snd.review_ledger("foo")[0].total_messages == 5  # confirmations wait at the agent
        assert agent.stored("SND") >= 1
        assert len(adv.fields("DELIVERY.NO_RESPONSE")) == asked_before
        await snd.connect_relay()
        await until(lambda: snd.review_ledger("foo")[0].total_messages == 0, WAIT, "confirmed")
        await snd.close()
        await lis.close()


async def test_sender_stores_outbound_while_disconnected(t, tmp_path):
    async with rv.RelayAgent(t, "RA", timing=QUICK):
        adv, snd, lis = await _relay_pair(t, tmp_path)
        listener = lis.listen("foo")
        await until(lambda: snd.relay_state == "connected", WAIT)
        await snd.disconnect_relay()
        await until(lambda: adv.of("RELAY.DISCONNECTED"), WAIT, "disconnected")
        for n in range(4):
            await snd.send(Message("foo", {"n": n}))
        with pytest.raises(asyncio.TimeoutError):
            await listener.get(0.5)
        await snd.connect_relay()
        got = [await listener.get(WAIT) for _ in range(4)]
        assert payloads(got) == [0, 1, 2, 3]
        await snd.close()
        await lis.close()


async def test_no_agent_gives_no_response_advisory_and_keeps_trying(t):
    adv = Advisories(t)
    cm = CmTransport(t, "LONELY", relay_agent="NOBODY", timing=FAST, relay_timing=QUICK)
    await until(lambda: adv.of("DELIVERY.NO_RESPONSE"), WAIT, "no response")
    assert cm.relay_state == "locating"
    async with rv.RelayAgent(t, "NOBODY", timing=QUICK):
        await until(lambda: cm.relay_state == "connected", WAIT, "found later")
    await cm.close()


async def test_second_agent_with_the_same_name_is_refused(t, tmp_path):
    async with rv.RelayAgent(t, "RA", timing=QUICK):
        with pytest.raises(rv.NotPermitted, match="already running"):
            await rv.RelayAgent(t, "RA", timing=QUICK).start()


async def test_corrupt_ledger_is_a_clear_error(t, tmp_path):
    path = tmp_path / "ra.ledger"
    async with rv.RelayAgent(t, "RA", ledger=path, timing=QUICK):
        pass
    data = path.read_bytes()
    path.write_bytes(data[:8] + b"\xff" * 4 + data[12:] + b"garbage after it" * 4)
    with pytest.raises(rv.LedgerCorrupt):
        await rv.RelayAgent(t, "RA", ledger=path, timing=QUICK).start()
    path.write_bytes(b"not a ledger at all")
    with pytest.raises(rv.LedgerCorrupt, match="bad magic"):
        await rv.RelayAgent(t, "RA", ledger=path, timing=QUICK).start()


async def test_bad_arguments(t):
    with pytest.raises(rv.InvalidArgument):
        rv.RelayAgent(t, "RA", ledger=123)  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidSubject):
        rv.RelayAgent(t, "bad..name")
    with pytest.raises(rv.InvalidArgument):
        CmTransport(t, "X", relay_agent="RA", relay_timing="fast")  # type: ignore[arg-type]
    with pytest.raises(rv.NotPermitted, match="reusable name"):
        CmTransport(t, None, relay_agent="RA")
    cm = CmTransport(t, "PLAIN")
    with pytest.raises(rv.NotPermitted, match="no relay agent"):
        await cm.connect_relay()
    await cm.close()


async def test_a_listener_program_that_ends_is_stored_for_until_it_runs_again(t, tmp_path):
    """The cron-job case: each run is a new CM transport; the agent stores in between.

    A new run asks its sender to resume their agreement and holds what the
    agent pushes until the sender answers (the agent does not accept on a
    sender's behalf), so the sender comes back during the second run here.
    """
    ledger = tmp_path / "job.ledger"
    async with rv.RelayAgent(t, "RA", ledger=tmp_path / "ra.ledger", timing=QUICK) as agent:
        snd = CmTransport(t, "SND", relay_agent="RA", timing=FAST, relay_timing=QUICK)
        await snd.add_listener("JOB", "foo")
        job_args = {
            "ledger": ledger,
            "require_old": True,
            "relay_agent": "RA",
            "timing": FAST,
            "relay_timing": QUICK,
        }
        async with CmTransport(t, "JOB", **job_args) as job:
            listener = job.listen("foo")
            await snd.send(Message("foo", {"n": 1}))
            assert payloads([await listener.get(WAIT)]) == [1]
        # The job ended (implicit disconnect): the agent goes on listening for it.
        for n in (2, 3, 4):
            await snd.send(Message("foo", {"n": n}))
        await until(lambda: agent.stored("JOB") >= 3, WAIT, "the agent stores for the job")
        await snd.disconnect_relay()
        await until(lambda: snd.relay_state == "disconnected", WAIT)
        async with CmTransport(t, "JOB", **job_args) as job:
            listener = job.listen("foo")
            # The agent hands over what it stored as soon as the job connects ...
            await until(lambda: agent.stored("JOB") == 0, WAIT, "the store drained to the job")
            # ... and the messages are delivered once the sender accepts the resumption.
            await snd.connect_relay()
            got = [await listener.get(WAIT) for _ in range(3)]
            assert payloads(got) == [2, 3, 4]
            with pytest.raises(asyncio.TimeoutError):
                await listener.get(0.3)  # nothing twice
        await until(lambda: snd.review_ledger("foo")[0].total_messages == 0, WAIT, "confirmed")
        await snd.close()
