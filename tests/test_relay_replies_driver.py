"""Reply name substitution over real sockets: requests and replies through relay agents.

Every party has its own network transport on a standalone daemon process
(TCP). The relay agent puts a surrogate inbox of its own in place of the
inbox a client names as reply subject, so a reply sent while the client is
disconnected waits at the agent and reaches the client's inbox listener,
with the original inbox as subject, when it reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import pytest
from cm_driver_support import FAST, Advisories, until
from test_relay_driver import QUICK, WAIT

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.message import Message

QUERY = "svc.query"


@pytest.fixture
async def nets(rv_service, rv_daemon):
    """A factory of network transports on the daemon process; all closed afterwards."""
    service, network = rv_service
    made: list[rv.Transport] = []

    async def make(description: str) -> rv.Transport:
        transport = rv.Transport(service, network, daemon=rv_daemon, description=description)
        await transport.open()
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.close()


async def _requester(net, adv, *, timing=QUICK) -> CmTransport:
    req = CmTransport(net, "REQ", relay_agent="RA", timing=FAST, relay_timing=timing)
    await until(lambda: req.relay_state == "connected", WAIT, "requester connected")
    return req


async def _settle(requests, sender: rv.Transport) -> None:
    """Wait until ``requests`` (a listener on QUERY) hears messages sent from ``sender``.

    Interest travels to the daemon asynchronously; probe until it arrived.
    """
    for _ in range(int(WAIT / 0.2)):
        await sender.send(Message(QUERY, {"probe": 1}))
        try:
            await requests.get(0.2)
        except TimeoutError:
            continue
        with contextlib.suppress(asyncio.TimeoutError):
            while True:
                await requests.get(0.1)  # later probes
        return
    raise AssertionError("the replier never heard a probe")


async def _away(req: CmTransport, adv: Advisories) -> None:
    before = len(adv.of("RELAY.DISCONNECTED"))
    await req.disconnect_relay()
    await until(lambda: len(adv.of("RELAY.DISCONNECTED")) > before, WAIT, "disconnected")


async def test_reply_sent_while_the_requester_is_away_arrives_on_its_inbox_later(nets):
    agent_net, req_net, rep_net = await nets("agent"), await nets("requester"), await nets("rep")
    async with rv.RelayAgent(agent_net, "RA", timing=QUICK) as agent:
        adv = Advisories(req_net)
        req = await _requester(req_net, adv)
        requests = rep_net.listen(QUERY)
        inbox = req_net.create_inbox()
        answers = req_net.listen(inbox)
        await _settle(requests, agent_net)
        await req.send(Message(QUERY, {"q": 1}, reply_subject=inbox))
        request = await requests.get(WAIT)
        surrogate = request.reply_subject
        assert surrogate is not None and surrogate != inbox
        assert surrogate.startswith("_INBOX.")
        assert agent.surrogates == 1
        await _away(req, adv)
        await rep_net.send_reply(Message(None, {"a": 1}), request)
        await until(lambda: agent.stored("REQ") >= 1, WAIT, "the agent stores the reply")
        with pytest.raises(asyncio.TimeoutError):
            await answers.get(0.3)  # nothing reaches the inbox while away
        await req.connect_relay()
        reply = await answers.get(WAIT)
        assert reply.subject == inbox
        assert reply["a"] == 1
        with pytest.raises(asyncio.TimeoutError):
            await answers.get(0.3)  # once
        await until(lambda: agent.stored("REQ") == 0, WAIT, "acknowledged")
        assert not adv.of("RELAY.REPLY_LOST")
        await req.close()


async def test_send_request_survives_a_disconnection_and_a_certified_reply(nets):
    agent_net, req_net, rep_net = await nets("agent"), await nets("requester"), await nets("rep")
    async with rv.RelayAgent(agent_net, "RA", timing=QUICK):
        adv = Advisories(req_net)
        req = await _requester(req_net, adv)
        replier = CmTransport(rep_net, "REPLIER", timing=FAST)
        requests = replier.listen(QUERY)
        await _settle(requests, agent_net)
        pending = asyncio.ensure_future(
            req.send_request(Message(QUERY, {"q": 7}), timeout=WAIT * 3)
        )
        request = await requests.get(WAIT)
        await _away(req, adv)
        await replier.send_reply(Message(None, {"a": 49}), request)  # labeled (certified) reply
        await asyncio.sleep(0.3)
        assert not pending.done()
        await req.connect_relay()
        reply = await asyncio.wait_for(pending, WAIT)
        assert reply["a"] == 49
        assert reply.subject is not None and reply.subject.startswith("_INBOX.")
        assert reply.subject != request.reply_subject  # the original inbox, not the surrogate
        await replier.close()
        await req.close()


async def test_a_replier_behind_a_relay_answers_a_requester_without_one(nets):
    agent_net, rep_net, req_net = await nets("agent"), await nets("rep"), await nets("requester")
    async with rv.RelayAgent(agent_net, "RA", timing=QUICK) as agent:
        replier = CmTransport(rep_net, "REPLIER", relay_agent="RA", timing=FAST, relay_timing=QUICK)
        requests = replier.listen(QUERY)
        await until(
            lambda: any(("svc.query", "data") in c.listens for c in agent.review()),
            WAIT,
            "the agent listens for the replier",
        )

        async def serve() -> None:
            while True:
                request = await requests.get(WAIT)
                await replier.send_reply(Message(None, {"a": request["q"] * 2}), request)

        server = asyncio.ensure_future(serve())
        # The agent's interest reaches the daemon asynchronously: ask until answered.
        for _ in range(int(WAIT)):
            try:
                reply = await req_net.send_request(Message(QUERY, {"q": 21}), 1.0)
                break
            except rv.RequestTimeout:
                continue
        else:
            raise AssertionError("the replier behind the relay never answered")
        assert reply["a"] == 42
        server.cancel()
        assert agent.surrogates == 0  # a reply has no inbox reply subject of its own
        await replier.close()


async def test_a_reply_after_the_surrogate_expired_is_reported_by_the_agent(nets):
    agent_net, req_net, rep_net = await nets("agent"), await nets("requester"), await nets("rep")
    timing = dataclasses.replace(QUICK, reply_lifetime=0.5)
    async with rv.RelayAgent(agent_net, "RA", timing=timing) as agent:
        agent_adv = Advisories(agent_net)
        req = await _requester(req_net, Advisories(req_net), timing=timing)
        requests = rep_net.listen(QUERY)
        inbox = req_net.create_inbox()
        answers = req_net.listen(inbox)
        await _settle(requests, agent_net)
        await req.send(Message(QUERY, {"q": 1}, reply_subject=inbox))
        request = await requests.get(WAIT)
        await until(lambda: agent.surrogates == 0, WAIT, "the surrogate expires")
        await rep_net.send_reply(Message(None, {"a": 1}), request)
        await until(lambda: agent_adv.of("RELAY.REPLY_LOST"), WAIT, "the late reply reported")
        (fields,) = agent_adv.fields("RELAY.REPLY_LOST")
        assert fields["subject"] == request.reply_subject and fields["lost"] == 1
        with pytest.raises(asyncio.TimeoutError):
            await answers.get(0.3)
        await req.close()


async def test_agent_restart_and_closed_inbox_are_reported_to_the_requester(nets, tmp_path):
    agent_net, req_net, rep_net = await nets("agent"), await nets("requester"), await nets("rep")
    ledger = tmp_path / "ra.ledger"
    adv = Advisories(req_net)
    requests = rep_net.listen(QUERY)
    first, second = req_net.create_inbox(), req_net.create_inbox()
    answers = req_net.listen(first)
    async with rv.RelayAgent(agent_net, "RA", ledger=ledger, timing=QUICK):
        req = await _requester(req_net, adv)
        await _settle(requests, agent_net)
        await req.send(Message(QUERY, {"q": 1}, reply_subject=first))
        await req.send(Message(QUERY, {"q": 2}, reply_subject=second))
        one, two = await requests.get(WAIT), await requests.get(WAIT)
        await _away(req, adv)
        # Request 1 is answered before the agent stops; nobody listens on inbox 2.
        await rep_net.send_reply(Message(None, {"a": 1}), one)
        await asyncio.sleep(0.5)
    async with rv.RelayAgent(agent_net, "RA", ledger=ledger, timing=QUICK) as again:
        assert again.surrogates == 0  # the old process's inboxes died with it
        await rep_net.send_reply(Message(None, {"a": 2}), two)  # goes nowhere
        await req.connect_relay()
        reply = await answers.get(WAIT)
        assert reply.subject == first and reply["a"] == 1  # stored before the restart
        await until(lambda: len(adv.of("RELAY.REPLY_LOST")) == 2, WAIT, "both reported")
        lost = {f["inbox"]: f for f in adv.fields("RELAY.REPLY_LOST")}
        assert set(lost) == {first, second}
        assert all("restarted" in f["reason"] for f in lost.values())
        assert sorted(f["lost"] for f in lost.values()) == [1, 2]
        # A reply relayed to an inbox nobody listens on any more is reported too.
        answers.close_now()
        inbox = req_net.create_inbox()
        await req.send(Message(QUERY, {"q": 3}, reply_subject=inbox))
        three = await requests.get(WAIT)
        await rep_net.send_reply(Message(None, {"a": 3}), three)
        await until(lambda: len(adv.of("RELAY.REPLY_LOST")) == 3, WAIT, "unclaimed reported")
        last = adv.fields("RELAY.REPLY_LOST")[-1]
        assert last["inbox"] == inbox and "listens" in last["reason"]
        await req.close()
