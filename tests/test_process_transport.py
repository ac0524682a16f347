"""The intra-process transport: send/listen, wildcards, queues, callbacks, request/reply."""

import asyncio

import pytest

import rvasync as rv
from rvasync.message import Message
from rvasync.queues import LimitPolicy, Queue, QueueGroup
from rvasync.transport.process import process_transport

WAIT = 5.0


async def test_one_per_loop(rv_process_transport):
    assert process_transport() is rv_process_transport


def test_needs_running_loop():
    with pytest.raises(rv.NotPermitted, match="running event loop"):
        process_transport()


async def test_send_and_async_for(rv_process_transport):
    t = rv_process_transport
    async with t.listen("ORDERS.>") as orders:
        for n in range(5):
            await t.send(Message(f"ORDERS.EU.{n}", {"n": n}))
        got = []
        async with asyncio.timeout(WAIT):
            async for msg in orders:
                got.append(msg["n"])
                assert msg.listener is orders
                if len(got) == 5:
                    break
    assert got == [0, 1, 2, 3, 4]


async def test_wildcards_and_non_matching(rv_process_transport):
    t = rv_process_transport
    star = t.listen("RUN.*")
    tail = t.listen("RUN.>")
    for subject in ("RUN.AWAY", "RUN.SWIM.BIKE", "Run.away", "HOME.RUN"):
        await t.send(Message(subject, {"x": 1}))
    assert [star.queue.poll().subject] == ["RUN.AWAY"]
    assert star.queue.poll() is None
    assert [tail.queue.poll().subject, tail.queue.poll().subject] == ["RUN.AWAY", "RUN.SWIM.BIKE"]
    assert tail.queue.poll() is None


async def test_each_listener_gets_its_own_message_object(rv_process_transport):
    t = rv_process_transport
    a = t.listen("X", closure="a")
    b = t.listen("X", closure="b")
    sent = Message("X", {"v": 1})
    await t.send(sent)
    ma, mb = a.queue.poll(), b.queue.poll()
    assert ma is not mb and ma is not sent
    assert (ma.closure, mb.closure) == ("a", "b")
    assert (ma.listener, mb.listener) == (a, b)
    # A listener changing its copy changes nobody else's, nor the sender's.
    ma["v"] = 2
    assert mb["v"] == 1 and sent["v"] == 1
    sent["v"] = 3
    assert mb["v"] == 1


async def test_send_rules(rv_process_transport):
    t = rv_process_transport
    with pytest.raises(rv.InvalidArgument, match="subject"):
        await t.send(Message(None, {"x": 1}))
    with pytest.raises(rv.InvalidSubject):
        await t.send(Message("A..B"))
    for reserved in ("_RV.INFO.SYSTEM.X", "_FOO.BAR"):
        with pytest.raises(rv.NotPermitted):
            await t.send(Message(reserved))
    await t.send(Message("_LOCAL.A"))
    await t.send(Message(t.create_inbox()))


async def test_listen_rules(rv_process_transport):
    t = rv_process_transport
    with pytest.raises(rv.InvalidSubject):
        t.listen("A.>.B")
    with pytest.raises(rv.InvalidArgument, match="queue"):
        t.listen("A", queue=object())
    with pytest.raises(rv.InvalidArgument, match="callable"):
        t.listen("A", callback=42)


async def test_closed_listener_discards_and_stops(rv_process_transport):
    t = rv_process_transport
    lis = t.listen("A")
    await t.send(Message("A"))
    await lis.close()
    assert lis.closed
    await t.send(Message("A"))
    assert len(lis.queue) == 0
    got = [m async for m in lis]  # iteration of a closed listener ends
    assert got == []


async def test_shared_queue_close_discards_only_that_listeners_messages(rv_process_transport):
    t = rv_process_transport
    q = Queue(name="shared")
    a = t.listen("A", queue=q)
    t.listen("B", queue=q)
    for s in ("A", "B", "A", "B"):
        await t.send(Message(s))
    await a.close()
    assert [q.poll().subject, q.poll().subject] == ["B", "B"]
    assert q.poll() is None


async def test_callbacks_plain_and_async(rv_process_transport):
    t = rv_process_transport
    plain, coro = [], []
    done = asyncio.Event()

    def on_plain(msg):
        plain.append(msg["n"])

    async def on_async(msg):
        await asyncio.sleep(0)
        coro.append((msg["n"], msg.closure))
        if len(coro) == 3:
            done.set()

    t.listen("CB", callback=on_plain)
    t.listen("CB", callback=on_async, closure="c")
    for n in range(3):
        await t.send(Message("CB", {"n": n}))
    await asyncio.wait_for(done.wait(), WAIT)
    assert plain == [0, 1, 2]
    assert coro == [(0, "c"), (1, "c"), (2, "c")]


async def test_callback_exception_is_logged_and_dispatch_goes_on(rv_process_transport, capsys):
    t = rv_process_transport
    seen = []
    done = asyncio.Event()

    def flaky(msg):
        if msg["n"] == 0:
            raise RuntimeError("boom")
        seen.append(msg["n"])
        done.set()

    t.listen("F", callback=flaky)
    await t.send(Message("F", {"n": 0}))
    await t.send(Message("F", {"n": 1}))
    await asyncio.wait_for(done.wait(), WAIT)
    assert seen == [1]
    assert "boom" in capsys.readouterr().err


async def test_queue_modes_cannot_mix(rv_process_transport):
    t = rv_process_transport
    q = Queue()
    t.listen("A", queue=q, callback=lambda m: None)
    with pytest.raises(rv.InvalidArgument, match="dispatched"):
        t.listen("B", queue=q)
    q2 = Queue()
    t.listen("A", queue=q2)
    with pytest.raises(rv.InvalidArgument, match="iterated"):
        t.listen("B", queue=q2, callback=lambda m: None)


async def test_request_reply(rv_process_transport):
    t = rv_process_transport

    async def server():
        async with t.listen("SVC.ADD") as requests:
            async for req in requests:
                await t.send_reply(Message(fields={"sum": req["a"] + req["b"]}), req)

    task = asyncio.create_task(server())
    await asyncio.sleep(0)
    request = Message("SVC.ADD", {"a": 2, "b": 3})
    reply = await t.send_request(request, timeout=WAIT)
    assert reply["sum"] == 5
    assert request.reply_subject is None  # the caller's message is left alone
    task.cancel()


async def test_request_timeout(rv_process_transport):
    t = rv_process_transport
    with pytest.raises(rv.RequestTimeout):
        await t.send_request(Message("NOBODY.HOME"), timeout=0.05)
    with pytest.raises(TimeoutError):  # RequestTimeout is a TimeoutError too
        await t.send_request(Message("NOBODY.HOME"), timeout=0.05)
    with pytest.raises(rv.InvalidArgument):
        await t.send_request(Message("X"), timeout=0)


async def test_send_reply_needs_reply_subject(rv_process_transport):
    with pytest.raises(rv.InvalidArgument, match="reply subject"):
        await rv_process_transport.send_reply(Message(), Message("X"))


async def test_inboxes_are_unique(rv_process_transport):
    t = rv_process_transport
    inboxes = {t.create_inbox() for _ in range(1000)}
    assert len(inboxes) == 1000
    assert all(i.startswith("_INBOX.") for i in inboxes)


async def test_queue_limit_advisory(rv_process_transport):
    t = rv_process_transport
    adv = t.listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED")
    q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="tiny")
    t.listen("Q", queue=q)
    await t.send(Message("Q", {"n": 1}))
    await t.send(Message("Q", {"n": 2}))
    advisory = await adv.get(WAIT)
    assert advisory.subject == "_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED"
    assert advisory["ADV_DESC"] == "tiny"
    assert q.poll()["n"] == 1


async def test_unheard_limit_advisory_is_logged(rv_process_transport, capsys):
    t = rv_process_transport
    q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="lonely")
    t.listen("Q", queue=q)
    await t.send(Message("Q"))
    await t.send(Message("Q"))
    err = capsys.readouterr().err
    assert "QUEUE.LIMIT_EXCEEDED" in err and "lonely" in err


async def test_limit_advisory_listener_overflowing_does_not_recurse(rv_process_transport):
    t = rv_process_transport
    adv_q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="adv")
    t.listen("_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED", queue=adv_q)
    q = Queue(limit=1, policy=LimitPolicy.DISCARD_NEW, name="data")
    t.listen("D", queue=q)
    for _ in range(10):
        await t.send(Message("D"))
    assert len(adv_q) == 1


async def test_queue_group_with_listeners(rv_process_transport):
    t = rv_process_transport
    hi, lo = Queue(priority=5), Queue(priority=1)
    group = QueueGroup(hi, lo)
    t.listen("LO", queue=lo)
    t.listen("HI", queue=hi)
    await t.send(Message("LO"))
    await t.send(Message("HI"))
    assert (await group.get(WAIT)).subject == "HI"
    assert (await group.get(WAIT)).subject == "LO"


async def test_process_transport_close_is_a_no_op(rv_process_transport):
    t = rv_process_transport
    async with t:
        pass
    await t.close()
    lis = t.listen("STILL.OPEN")
    await t.send(Message("STILL.OPEN"))
    assert lis.queue.poll() is not None


async def test_many_listeners_one_match(rv_process_transport):
    t = rv_process_transport
    listeners = [t.listen(f"S.{i}") for i in range(2000)]
    await t.send(Message("S.1234"))
    assert [i for i, lis in enumerate(listeners) if len(lis.queue)] == [1234]
