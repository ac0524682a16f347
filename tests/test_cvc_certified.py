"""``CmTransport.listen(subject, retained=True)``: certified listeners with the retained hand-over.

The hand-over's decisions are the core's (test_cvc_handover.py); here the
certified side: retained messages come first and uncertified (their label
keeps the sender, without a sequence, since they did not come through the
sender's certified stream), then the live stream certified as usual, each
message once; the deliveries the hand-over drops are confirmed, so the
sender does not keep them.
"""

from __future__ import annotations

import asyncio

import pytest
from cm_driver_support import FAST, until

import rvasync as rv
from rvasync.cmdriver import CmTransport
from rvasync.message import CmLabel, Message

WAIT = 20.0


def unconfirmed(cm: CmTransport, subject: str) -> int:
    reviews = cm.review_ledger(subject)
    return reviews[0].total_messages if reviews else 0


async def test_retained_first_uncertified_then_live_certified(rv_process_transport):
    t = rv_process_transport
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    async with rv.CurrentValueCache(t, "CR.>") as cache:
        await joe.send(Message("CR.A", {"n": 1}))
        await joe.send(Message("CR.B", {"n": 2}))
        await until(lambda: len(cache) == 2, WAIT, "cached")
        queue = rv.Queue()
        listener = sue.listen("CR.*", retained=True, queue=queue, correlation_id="state")
        first = [await queue.get(WAIT) for _ in range(2)]
        assert {(m.subject, m["n"]) for m in first} == {("CR.A", 1), ("CR.B", 2)}
        assert all(m.cm == CmLabel("JOE", None, 0.0) for m in first)  # uncertified
        assert all(m.listener is listener and m.correlation_id == "state" for m in first)
        await joe.send(Message("CR.A", {"n": 3}))
        await until(lambda: joe.review_ledger("CR.A")[0].listeners, WAIT, "registration")
        await joe.send(Message("CR.A", {"n": 4}))
        live = []
        while not live or live[-1]["n"] != 4:
            live.append(await listener.get(WAIT))
        assert [m["n"] for m in live] == [3, 4]  # once each, in order
        assert live[-1].cm.sequence is not None  # certified once registered
        await listener.close()  # the last one handed over counts as taken
        await until(lambda: unconfirmed(joe, "CR.A") == 0, WAIT, "every message confirmed")
        with pytest.raises(TimeoutError):
            await queue.get(0.2)
    await joe.close()
    await sue.close()


async def test_a_discarded_certified_delivery_is_confirmed(rv_process_transport):
    t = rv_process_transport
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    listener = sue.listen("CD.A", explicit_confirm=True)
    await joe.send(Message("CD.A", {"n": 1}))
    await until(lambda: joe.review_ledger("CD.A")[0].listeners, WAIT, "registration")
    assert (await listener.get(WAIT))["n"] == 1
    listener.intercept(listener.discard)  # what the hand-over does with a dropped copy
    await joe.send(Message("CD.A", {"n": 2}))
    await until(lambda: unconfirmed(joe, "CD.A") == 0, WAIT, "the dropped one confirmed")
    listener.intercept(None)
    await joe.send(Message("CD.A", {"n": 3}))
    got = await listener.get(WAIT)
    assert got["n"] == 3 and got.cm.sequence is not None
    await listener.confirm(got)
    await joe.close()
    await sue.close()


async def test_a_certified_send_stamps_one_origin_per_publication(rv_service):
    """JOE's send stamps the message's origin once: the certified delivery carries
    it, and a second send of the same message is a new publication."""
    service, network = rv_service
    async with rv.Transport(service, network) as a, rv.Transport(service, network) as b:
        joe = CmTransport(a, "JOE", timing=FAST)
        sue = CmTransport(b, "SUE", timing=FAST)
        listener = sue.listen("CO.A")
        await asyncio.sleep(0)  # (one in-process daemon: SUE's interest is there at once)
        msg = Message("CO.A", {"n": 1})
        await joe.send(msg)
        first = msg.origin
        await joe.send(msg)
        assert first is not None and msg.origin is not None and msg.origin > first
        got = [await listener.get(WAIT) for _ in range(2)]
        assert [m.origin for m in got] == [first, msg.origin]
        await listener.close()
        await joe.close()
        await sue.close()


async def test_retained_must_be_a_bool(rv_process_transport):
    sue = CmTransport(rv_process_transport, "SUE")
    with pytest.raises(rv.InvalidArgument, match="retained"):
        sue.listen("X", retained=1)  # type: ignore[arg-type]
    await sue.close()


async def test_joining_a_certified_stream_over_the_network(rv_service):
    """JOE sends on three subjects while SUE joins with retained=True on another
    transport: per subject every version from the first one SUE gets, once, in order."""
    service, network = rv_service
    subjects = [f"CB.S{n}" for n in range(3)]
    last = 60
    async with (
        rv.Transport(service, network) as cache_side,
        rv.Transport(service, network) as publisher,
        rv.Transport(service, network) as joiner,
        rv.CurrentValueCache(cache_side, "CB.>") as cache,
    ):
        joe = CmTransport(publisher, "JOE", timing=FAST)
        sue = CmTransport(joiner, "SUE", timing=FAST)
        listener = None
        for version in range(1, last + 1):
            for subject in subjects:
                await joe.send(Message(subject, {"v": version}))
            if version == 5:
                await until(lambda: len(cache) == len(subjects), WAIT, "cached")
            if version == last // 3:
                listener = sue.listen("CB.*", retained=True)
            await asyncio.sleep(0.005)
        assert listener is not None
        seen: dict[str, list[int]] = {s: [] for s in subjects}
        while any(not versions or versions[-1] < last for versions in seen.values()):
            msg = await listener.get(WAIT)
            seen[msg.subject].append(msg["v"])
        for subject, versions in seen.items():
            assert versions == list(range(versions[0], last + 1)), subject
            assert versions[0] <= last // 3 + 1, subject
        with pytest.raises(TimeoutError):
            await listener.get(0.5)  # nothing more: no duplicate
        await listener.close()
        await joe.close()
        await sue.close()
