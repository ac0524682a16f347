"""CmTransport over the intra-process transport: labeled messages, the agreement, confirmation.

Every test runs whole correspondents in one event loop; the protocol rules
themselves are tested on the sans-IO core (test_cm_core*.py), so these tests
check what the driver adds: how messages travel, when deliveries count as
taken, advisories as messages, and the public API's arguments and errors.
"""

from __future__ import annotations

import asyncio

import pytest
from cm_driver_support import FAST, Advisories, payloads, until

import rvasync as rv
from rvasync.cmdriver import CmListener, CmTransport
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Message
from rvasync.queues import LimitPolicy, Queue

WAIT = 5.0


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


async def certified_pair(t, subject="FOO", *, explicit=False, **listen_kw):
    """JOE sending to SUE with an agreement on ``subject`` in place (message 1 delivered)."""
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    listener = sue.listen(subject, explicit_confirm=explicit, **listen_kw)
    await joe.send(Message(subject, {"n": 1}))
    await until(lambda: joe.review_ledger(subject)[0].listeners, what="registration")
    first = await listener.get(WAIT)
    assert first.cm == CmLabel("JOE", None, 0.0)  # sent before the agreement existed
    return joe, sue, listener


def unconfirmed(cm, subject="FOO"):
    reviews = cm.review_ledger(subject)
    return reviews[0].total_messages if reviews else 0


# --- labeled messages ------------------------------------------------------------------


async def test_ordinary_listener_gets_the_users_message_with_its_fields(t):
    joe = CmTransport(t, "JOE")
    async with t.listen("FOO") as plain:
        request = Message("FOO", {"n": 7, "text": "hi"}, reply_subject="ANSWERS")
        seq = await joe.send(request)
        msg = await plain.get(WAIT)
    assert seq == 1
    assert msg == request
    assert [f.name for f in msg] == ["n", "text"]
    assert msg.reply_subject == "ANSWERS"
    assert msg.cm == CmLabel("JOE", 1, 0.0)
    assert request.cm is None  # the program's message is left alone
    await joe.close()


async def test_sequence_numbers_count_per_subject(t):
    joe = CmTransport(t, "JOE")
    assert [await joe.send(Message(s)) for s in ("A", "B", "A", "A", "B")] == [1, 1, 2, 3, 2]
    await joe.close()


async def test_discovery_registration_and_certified_delivery_in_order(t):
    adv = Advisories(t)
    joe, sue, listener = await certified_pair(t)
    for n in range(2, 12):
        await joe.send(Message("FOO", {"n": n}), time_limit=30)
    got = [await listener.get(WAIT) for _ in range(10)]
    assert payloads(got) == list(range(2, 12))
    assert [m.cm.sequence for m in got] == list(range(2, 12))
    assert all(m.cm.sender == "JOE" and m.cm.time_limit == 30.0 for m in got)
    assert all(m.listener is listener for m in got)
    await listener.close()  # the last one handed over counts as taken
    await until(lambda: unconfirmed(joe) == 0, what="every message complete")
    assert adv.fields("REGISTRATION.DISCOVERY") == [{"subject": "FOO", "sender": "JOE"}]
    assert adv.fields("REGISTRATION.REQUEST") == [{"subject": "FOO", "listener": "SUE"}]
    certified = adv.of("REGISTRATION.CERTIFIED")
    assert certified[0].subject == "_RV.INFO.RVCM.REGISTRATION.CERTIFIED.FOO"
    assert certified[0].field("seqno_begin").type is FieldType.U64
    assert {f["seqno"] for f in adv.fields("DELIVERY.CONFIRM")} == set(range(2, 12))
    assert {f["seqno"] for f in adv.fields("DELIVERY.COMPLETE")} == set(range(2, 12))
    await adv.close()
    await joe.close()
    await sue.close()


# --- when a delivery counts as taken ------------------------------------------------------


async def test_async_for_confirms_a_message_when_the_loop_asks_for_the_next(t):
    joe, sue, listener = await certified_pair(t)
    await joe.send(Message("FOO", {"n": 2}))
    seen = []
    async with asyncio.timeout(WAIT):
        async for msg in listener:
            seen.append(msg["n"])
            await asyncio.sleep(0.3)  # well past a confirmation round trip
            # Still in the body for message 2: it is not confirmed yet.
            assert joe.review_ledger("FOO")[0].listeners[0].last_confirmed == 1
            break
    with pytest.raises(TimeoutError):
        await listener.get(0.05)  # asking for the next one takes message 2
    await until(lambda: unconfirmed(joe) == 0)
    assert seen == [2]
    await joe.close()
    await sue.close()


async def test_leaving_an_async_for_loop_takes_the_last_message(t):
    joe, sue, listener = await certified_pair(t)
    for n in (2, 3):
        await joe.send(Message("FOO", {"n": n}))
    async with asyncio.timeout(WAIT):
        async for msg in listener:
            if msg["n"] == 3:
                break  # moving past message 3 without asking for another
    await until(lambda: unconfirmed(joe) == 0, what="3 confirmed after the break")

    async def failing() -> None:
        async for _msg in listener:
            raise RuntimeError("the loop body failed")

    await joe.send(Message("FOO", {"n": 4}))
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(failing(), WAIT)
    await until(lambda: unconfirmed(joe) == 0, what="an exception also moves past it")
    await joe.close()
    await sue.close()


async def test_get_takes_the_previous_message_and_close_takes_the_last(t):
    joe, sue, listener = await certified_pair(t)
    for n in (2, 3):
        await joe.send(Message("FOO", {"n": n}))
    assert (await listener.get(WAIT))["n"] == 2
    await asyncio.sleep(0.3)
    assert unconfirmed(joe) == 2
    assert (await listener.get(WAIT))["n"] == 3
    await until(lambda: unconfirmed(joe) == 1, what="2 taken by the second get")
    await listener.close()
    await until(lambda: unconfirmed(joe) == 0, what="3 taken when the listener closed")
    await joe.close()
    await sue.close()


async def test_callbacks_confirm_on_return_and_on_exception(t):
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    seen = []
    release = asyncio.Event()

    async def slow(msg):
        seen.append(msg["n"])
        if msg["n"] == 3:
            await release.wait()

    def failing(msg):
        raise RuntimeError("the program's callback failed")

    sue.listen("FOO", callback=slow)
    sue.listen("BAR", callback=failing)
    for n in (1, 2, 3):
        await joe.send(Message("FOO", {"n": n}))
        await joe.send(Message("BAR", {"n": n}))
        await asyncio.sleep(0.05)
    await until(lambda: seen == [1, 2, 3])
    await until(lambda: unconfirmed(joe, "BAR") == 0, what="raising callbacks took them")
    await asyncio.sleep(0.3)
    assert joe.review_ledger("FOO")[0].listeners[0].last_confirmed == 2  # 3 still running
    release.set()
    await until(lambda: unconfirmed(joe, "FOO") == 0)
    await joe.close()
    await sue.close()


async def test_explicit_confirmation_and_the_57_before_55_rule(t):
    joe, sue, listener = await certified_pair(t, explicit=True)
    for n in range(2, 6):
        await joe.send(Message("FOO", {"n": n}))
    msgs = [await listener.get(WAIT) for _ in range(4)]
    await asyncio.sleep(0.3)
    assert unconfirmed(joe) == 4  # taken, but explicit listeners confirm themselves
    await listener.confirm(msgs[3])  # 5 before 2..4: nothing reaches the sender
    await asyncio.sleep(0.3)
    assert joe.review_ledger("FOO")[0].listeners[0].last_confirmed == 1
    await listener.confirm(msgs[0])
    await until(lambda: joe.review_ledger("FOO")[0].listeners[0].last_confirmed == 2)
    await listener.confirm(msgs[1])
    await listener.confirm(msgs[2])
    await until(lambda: unconfirmed(joe) == 0)
    await listener.confirm(msgs[2])  # twice: nothing happens
    other = sue.listen("BAR")
    with pytest.raises(rv.InvalidArgument, match="this listener delivered"):
        await other.confirm(msgs[0])
    with pytest.raises(rv.InvalidArgument, match="takes a Message"):
        await listener.confirm("message 3")
    await joe.close()
    await sue.close()


async def test_uncertified_and_plain_messages_reach_cm_listeners(t):
    sue = CmTransport(t, "SUE")
    listener = sue.listen("FOO.>")
    await t.send(Message("FOO.PLAIN", {"n": 1}))
    msg = await listener.get(WAIT)
    assert msg["n"] == 1 and msg.cm is None
    await sue.send(Message("FOO.OWN", {"n": 2}))  # a transport hears itself uncertified
    msg = await listener.get(WAIT)
    assert msg["n"] == 2 and msg.cm == CmLabel("SUE", None, 0.0)
    await sue.close()


async def test_overlapping_listeners_each_get_every_message_once(t):
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    wide = sue.listen("ORDERS.>")
    narrow = sue.listen("ORDERS.EU")
    for n in range(1, 6):
        await joe.send(Message("ORDERS.EU", {"n": n}))
        await asyncio.sleep(0.02)
    got_wide = [await wide.get(WAIT) for _ in range(5)]
    got_narrow = [await narrow.get(WAIT) for _ in range(5)]
    assert payloads(got_wide) == payloads(got_narrow) == [1, 2, 3, 4, 5]
    with pytest.raises(TimeoutError):
        await wide.get(0.1)
    await narrow.close()
    await wide.close()
    await until(lambda: unconfirmed(joe, "ORDERS.EU") == 0)
    await joe.close()
    await sue.close()


async def test_a_shared_queue_consumed_directly_confirms_what_left_it(t):
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    queue = Queue(name="work")
    listener = sue.listen("FOO", queue=queue, closure="mine")
    for n in range(1, 5):
        await joe.send(Message("FOO", {"n": n}))
        await asyncio.sleep(0.02)
    got = [await queue.get(WAIT) for _ in range(4)]
    assert payloads(got) == [1, 2, 3, 4]
    assert all(m.listener is listener and m.closure == "mine" for m in got)
    await until(lambda: unconfirmed(joe) == 0, what="the sweep confirmed them")
    await joe.close()
    await sue.close()


async def test_a_message_the_queue_discards_counts_as_taken(t):
    joe = CmTransport(t, "JOE", timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    queue = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="tiny")
    sue.listen("FOO", queue=queue)
    await joe.send(Message("FOO", {"n": 1}))
    await until(lambda: len(queue) == 1)
    queue.poll()
    await until(lambda: joe.review_ledger("FOO")[0].listeners)
    for n in (2, 3, 4):
        await joe.send(Message("FOO", {"n": n}))
    await until(lambda: len(queue) == 1)
    await asyncio.sleep(0.3)
    assert unconfirmed(joe) == 3  # 3 and 4 are taken, but 2 still waits in the queue
    assert queue.poll()["n"] == 2
    # Once 2 has left the queue, all three are confirmed: 3 and 4 were taken (discarded).
    await until(lambda: unconfirmed(joe) == 0)
    await joe.close()
    await sue.close()


# --- time limits, expiry, review ------------------------------------------------------------


async def test_time_limit_passes_delivery_failed_with_the_data(t):
    adv = Advisories(t)
    joe, sue, _listener = await certified_pair(t, explicit=True)
    await joe.send(Message("FOO", {"n": 2}), time_limit=0.2)
    await until(lambda: adv.of("DELIVERY.FAILED"), what="DELIVERY.FAILED")
    failed = adv.of("DELIVERY.FAILED")[0]
    assert failed.subject == "_RV.ERROR.RVCM.DELIVERY.FAILED.FOO"
    assert failed["seqno"] == 2 and failed.field("seqno").type is FieldType.U64
    assert failed.get_all("listener") == ["SUE"]
    data = failed["data"]
    assert isinstance(data, Message) and data["n"] == 2
    assert unconfirmed(joe) == 0
    await adv.close()
    await joe.close()
    await sue.close()


async def test_default_time_limit_and_expire_messages(t):
    adv = Advisories(t)
    joe = CmTransport(t, "JOE", default_time_limit=60, timing=FAST)
    sue = CmTransport(t, "SUE", timing=FAST)
    listener = sue.listen("FOO", explicit_confirm=True)
    await joe.send(Message("FOO", {"n": 1}))
    await until(lambda: joe.review_ledger("FOO")[0].listeners)
    for n in range(2, 6):
        await joe.send(Message("FOO", {"n": n}))
    msgs = [await listener.get(WAIT) for _ in range(5)]
    assert [m.cm.time_limit for m in msgs] == [60.0] * 5
    review = joe.review_ledger("*")[0] if joe.review_ledger("*") else None
    assert review is not None and review.subject == "FOO"
    assert (review.last_sent, review.total_messages) == (5, 4)
    assert review.total_size > 0
    assert review.listeners[0].name == "SUE" and review.listeners[0].unconfirmed == 4
    assert await joe.expire_messages("FOO", 3) == 2
    await until(lambda: len(adv.of("DELIVERY.FAILED")) == 2)
    assert [f["seqno"] for f in adv.fields("DELIVERY.FAILED")] == [2, 3]
    assert unconfirmed(joe) == 2
    await adv.close()
    await joe.close()
    await sue.close()


# --- ending and refusing agreements ------------------------------------------------------------


async def test_closing_a_listener_with_cancel_agreements(t):
    adv = Advisories(t)
    joe, sue, listener = await certified_pair(t)
    await listener.close(cancel_agreements=True)
    await until(lambda: adv.of("REGISTRATION.CLOSED"))
    assert adv.fields("REGISTRATION.CLOSED")[0]["listener"] == "SUE"
    await joe.send(Message("FOO", {"n": 2}))
    assert unconfirmed(joe) == 0  # nobody registered: not stored
    await adv.close()
    await joe.close()
    await sue.close()


async def test_closing_a_listener_keeps_the_agreement_and_redelivers(t):
    joe, sue, listener = await certified_pair(t, explicit=True)
    await joe.send(Message("FOO", {"n": 2}))
    assert (await listener.get(WAIT))["n"] == 2  # never confirmed
    await listener.close()
    await joe.send(Message("FOO", {"n": 3}))  # still stored for SUE
    assert unconfirmed(joe) == 2
    again = sue.listen("FOO")
    got = [await again.get(WAIT) for _ in range(2)]
    assert [(m["n"], m.cm.sequence) for m in got] == [(2, 2), (3, 3)]
    await again.close()
    await until(lambda: unconfirmed(joe) == 0)
    await joe.close()
    await sue.close()


async def test_remove_listener_makes_later_messages_uncertified(t):
    adv = Advisories(t)
    joe, sue, listener = await certified_pair(t)
    await joe.remove_listener("SUE", "FOO")
    await until(lambda: adv.of("REGISTRATION.NOT_CERTIFIED"))
    assert adv.of("REGISTRATION.CLOSED")
    await joe.send(Message("FOO", {"n": 2}))
    msg = await listener.get(WAIT)
    assert msg["n"] == 2 and msg.cm == CmLabel("JOE", None, 0.0)
    with pytest.raises(rv.InvalidArgument, match="not a registered listener"):
        await joe.remove_listener("SUE", "FOO")
    await adv.close()
    await joe.close()
    await sue.close()


async def test_disallow_and_allow(t):
    adv = Advisories(t)
    joe, sue, listener = await certified_pair(t)
    await joe.disallow_listener("SUE")
    await until(lambda: adv.of("REGISTRATION.NOT_CERTIFIED"))
    with pytest.raises(rv.NotPermitted, match="disallowed"):
        await joe.add_listener("SUE", "FOO")
    await joe.send(Message("FOO", {"n": 2}))
    assert (await listener.get(WAIT)).cm.sequence is None
    await joe.allow_listener("SUE")  # invites SUE back
    await until(lambda: joe.review_ledger("FOO")[0].listeners, what="SUE registered again")
    await joe.send(Message("FOO", {"n": 3}))
    msg = await listener.get(WAIT)
    assert msg["n"] == 3 and msg.cm.sequence == 3
    await adv.close()
    await joe.close()
    await sue.close()


async def test_add_listener_anticipates_db_per(t):
    jan = CmTransport(t, "JAN", timing=FAST)
    assert await jan.add_listener("DB_PER", "STORE.THIS") is True
    assert await jan.add_listener("DB_PER", "STORE.THIS") is False
    for n in range(1, 6):
        await jan.send(Message("STORE.THIS", {"n": n}))
    review = jan.review_ledger("STORE.THIS")[0]
    assert review.total_messages == 5 and review.listeners[0].anticipated
    db = CmTransport(t, "DB_PER", require_old=True, timing=FAST)
    listener = db.listen("STORE.THIS")
    await jan.send(Message("STORE.THIS", {"n": 6}))  # DB_PER discovers JAN
    got = [await listener.get(WAIT) for _ in range(6)]
    assert [(m["n"], m.cm.sequence) for m in got] == [(n, n) for n in range(1, 7)]
    await listener.close()
    await until(lambda: unconfirmed(jan, "STORE.THIS") == 0)
    await jan.close()
    await db.close()


async def test_an_anticipated_listener_gets_the_stored_messages_without_a_new_send(t):
    """The spec: when DB starts, JAN "automatically retransmits all the stored messages",
    even if JAN has nothing new to send (JAN hears DB's announcement and invites it)."""
    jan = CmTransport(t, "JAN", timing=FAST)
    await jan.add_listener("DB_PER", "STORE.THIS")
    for n in range(1, 6):
        await jan.send(Message("STORE.THIS", {"n": n}))
    db = CmTransport(t, "DB_PER", require_old=True, timing=FAST)
    listener = db.listen("STORE.THIS")
    got = [await listener.get(WAIT) for _ in range(5)]
    assert [(m["n"], m.cm.sequence) for m in got] == [(n, n) for n in range(1, 6)]
    await listener.close()
    await until(lambda: unconfirmed(jan, "STORE.THIS") == 0)
    await jan.close()
    await db.close()


async def test_a_restarted_listener_gets_back_its_unconfirmed_messages_from_a_quiet_sender(t):
    jan = CmTransport(t, "JAN", timing=FAST)
    db = CmTransport(t, "DB_PER", require_old=True, timing=FAST)
    first = db.listen("STORE.THIS", explicit_confirm=True)
    await jan.send(Message("STORE.THIS", {"n": 0}))  # discovery: registers DB_PER
    await until(lambda: jan.review_ledger("STORE.THIS")[0].listeners, what="registration")
    for n in range(1, 4):
        await jan.send(Message("STORE.THIS", {"n": n}))
    for _ in range(4):
        await first.get(WAIT)  # delivered, never confirmed
    await db.close()  # the instance goes away; its agreement stays with JAN
    assert unconfirmed(jan, "STORE.THIS") == 3
    again = CmTransport(t, "DB_PER", require_old=True, timing=FAST)
    listener = again.listen("STORE.THIS")
    got = [await listener.get(WAIT) for _ in range(3)]
    assert sorted(m["n"] for m in got) == [1, 2, 3]
    await listener.close()
    await until(lambda: unconfirmed(jan, "STORE.THIS") == 0)
    await jan.close()
    await again.close()


# --- names, moves, collisions --------------------------------------------------------------------


async def test_a_sender_that_restarts_is_noticed_as_moved(t):
    adv = Advisories(t)
    joe, sue, listener = await certified_pair(t)
    await joe.close()
    joe2 = CmTransport(t, "JOE", timing=FAST)  # process ledger: it starts over
    await joe2.send(Message("FOO", {"n": 10}))
    await until(lambda: adv.of("REGISTRATION.MOVED"), what="SUE noticed JOE moved")
    assert adv.fields("REGISTRATION.MOVED")[0] == {"name": "JOE"}
    await until(lambda: joe2.review_ledger("FOO")[0].listeners, what="SUE registered again")
    await joe2.send(Message("FOO", {"n": 11}))
    msg = await listener.get(WAIT)
    while msg["n"] != 11:
        msg = await listener.get(WAIT)
    assert msg.cm.sender == "JOE" and msg.cm.sequence is not None
    await adv.close()
    await joe2.close()
    await sue.close()


async def test_two_live_transports_with_one_name_collide(t):
    adv = Advisories(t)
    first = CmTransport(t, "TWIN")
    second = CmTransport(t, "TWIN")
    await until(lambda: len(adv.of("REGISTRATION.COLLISION")) == 2, what="both collide")
    assert adv.fields("REGISTRATION.COLLISION")[0] == {"name": "TWIN"}
    assert adv.of("REGISTRATION.COLLISION")[0].subject.startswith("_RV.ERROR.")
    await adv.close()
    await first.close()
    await second.close()


async def test_transient_names_are_generated(t):
    a = CmTransport(t)
    b = CmTransport(t)
    assert a.name != b.name and a.name.startswith("_RVCM_T.")
    assert not a.persistent
    listener = b.listen("X")
    await a.send(Message("X", {"n": 1}))
    await a.send(Message("X", {"n": 2}))
    got = [await listener.get(WAIT) for _ in range(2)]
    assert [m.cm.sender for m in got] == [a.name, a.name]
    await a.close()
    await b.close()


# --- requests and replies ------------------------------------------------------------------------


async def test_send_request_and_send_reply(t):
    joe = CmTransport(t, "JOE")
    sue = CmTransport(t, "SUE")

    async def answer(msg):
        await sue.send_reply(Message(None, {"answer": msg["q"] * 2}), msg)

    sue.listen("ASK", callback=answer)
    reply = await joe.send_request(Message("ASK", {"q": 21}), timeout=WAIT)
    assert reply["answer"] == 42
    assert reply.cm is not None and reply.cm.sender == "SUE"
    with pytest.raises(rv.RequestTimeout):
        await joe.send_request(Message("NOBODY"), timeout=0.05)
    with pytest.raises(rv.InvalidArgument, match="no reply subject"):
        await sue.send_reply(Message(None), Message("X"))
    with pytest.raises(rv.InvalidArgument, match="timeout"):
        await joe.send_request(Message("ASK"), timeout=0)
    await joe.close()
    await sue.close()


# --- arguments and errors -------------------------------------------------------------------------


async def test_bad_sends_are_refused(t):
    joe = CmTransport(t, "JOE")
    with pytest.raises(rv.NotPermitted, match="wildcard"):
        await joe.send(Message("FOO.*"))
    with pytest.raises(rv.NotPermitted):
        await joe.send(Message("_RV.INFO.X"))
    with pytest.raises(rv.InvalidSubject):
        await joe.send(Message("FOO..BAR"))
    with pytest.raises(rv.InvalidArgument, match="without a subject"):
        await joe.send(Message())
    with pytest.raises(rv.InvalidArgument, match="takes a Message"):
        await joe.send({"n": 1})
    with pytest.raises(rv.InvalidArgument, match="time_limit"):
        await joe.send(Message("FOO"), time_limit=-1)
    await joe.close()
    with pytest.raises(rv.TransportClosed):
        await joe.send(Message("FOO"))
    with pytest.raises(rv.TransportClosed):
        joe.listen("FOO")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"name": "A.*"}, rv.InvalidSubject, "wildcard"),
        ({"name": "_RV.X"}, rv.InvalidSubject, "reserved"),
        ({"name": ""}, rv.InvalidSubject, "empty"),
        ({"name": ".".join(["NAMEPART"] * 28)}, rv.InvalidSubject, "too long"),
        ({"name": "A", "require_old": 1}, rv.InvalidArgument, "require_old"),
        ({"name": "A", "default_time_limit": float("nan")}, rv.InvalidArgument, "time_limit"),
        ({"relay_agent": "RELAY"}, rv.NotPermitted, "relay agent"),
        ({"name": "A", "relay_agent": "RE..LAY"}, rv.InvalidSubject, "relay agent"),
        ({"name": "A", "ledger": 42}, rv.InvalidArgument, "ledger"),
        ({"name": "A", "timing": 2.0}, rv.InvalidArgument, "CmTiming"),
    ],
)
async def test_bad_arguments_name_the_problem(t, kwargs, error, match):
    with pytest.raises(error, match=match):
        CmTransport(t, **kwargs)


async def test_listen_arguments(t):
    sue = CmTransport(t, "SUE")
    with pytest.raises(rv.InvalidSubject):
        sue.listen("FOO..BAR")
    with pytest.raises(rv.InvalidArgument, match="explicit_confirm"):
        sue.listen("FOO", explicit_confirm="yes")
    with pytest.raises(rv.InvalidArgument, match="Queue"):
        sue.listen("FOO", queue=[])
    with pytest.raises(rv.InvalidArgument, match="callable"):
        sue.listen("FOO", callback=3)
    listener = sue.listen("FOO", closure=7)
    assert isinstance(listener, CmListener)
    assert (listener.subject, listener.closure, listener.transport) == ("FOO", 7, sue)
    async with listener:
        assert not listener.closed
    assert listener.closed
    await sue.close()


async def test_not_a_transport_and_no_loop():
    with pytest.raises(rv.InvalidArgument, match="rvasync transport"):
        CmTransport("localhost:7500", "JOE")


def test_needs_a_running_loop():
    async def make():
        return rv.process_transport()

    loop = asyncio.new_event_loop()
    try:
        transport = loop.run_until_complete(make())
    finally:
        loop.close()
    with pytest.raises(rv.NotPermitted, match="running event loop"):
        CmTransport(transport, "JOE")


async def test_over_a_network_transport(rv_service):
    from rvasync.transport.network import Transport

    service, network = rv_service
    async with Transport(service, network) as near, Transport(service, network) as far:
        joe = CmTransport(near, "JOE", timing=FAST)
        sue = CmTransport(far, "SUE", timing=FAST)
        wide = sue.listen("NET.>")
        narrow = sue.listen("NET.A")  # overlapping: each still gets each message once
        plain = far.listen("NET.A")
        for n in range(1, 6):
            await joe.send(Message("NET.A", {"n": n}))
            await asyncio.sleep(0.01)
        got = [await wide.get(WAIT) for _ in range(5)]
        assert [(m["n"], m.cm.sequence) for m in got][1:] == [(n, n) for n in range(2, 6)]
        assert payloads([await narrow.get(WAIT) for _ in range(5)]) == [1, 2, 3, 4, 5]
        assert payloads([await plain.get(WAIT) for _ in range(5)]) == [1, 2, 3, 4, 5]
        await wide.close()
        await narrow.close()
        await until(lambda: unconfirmed(joe, "NET.A") == 0)
        await joe.close()
        await sue.close()
