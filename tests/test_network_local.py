"""rv.Transport on one in-process daemon: sending, listening, inboxes, advisories, errors."""

import asyncio

import pytest
from netutil import WAIT, collect

import rvasync as rv
from rvasync.daemon.engine import MAX_RELIABILITY, Daemon, running_in_process_daemon
from rvasync.message import Message
from rvasync.transport.network import Transport


@pytest.fixture
def service(rv_service):
    return rv_service[0]


def counters(transport):
    return transport.link.session._service.counters


async def test_send_and_listen_between_transports_of_one_daemon(service):
    async with Transport(service) as a, Transport(service) as b:
        on_b = b.listen("ORDERS.>")
        on_a = a.listen("ORDERS.*")
        sent = Message("ORDERS.NEW", {"id": 7})
        await a.send(sent)
        got_b = await on_b.get(WAIT)
        got_a = await on_a.get(WAIT)  # the sender's own daemon delivers to it too
        assert got_b["id"] == got_a["id"] == 7
        assert got_b is not sent and got_a is not got_b
        assert got_b.listener is on_b
        assert a.link.session.service_key == b.link.session.service_key
        assert running_in_process_daemon().session_count == 2


async def test_local_subjects_stay_in_the_daemon(service):
    async with Transport(service) as a, Transport(service) as b:
        local = b.listen("_LOCAL.>")
        before = counters(a).messages_out
        await a.send(Message("_LOCAL.NOTE", {"x": 1}))
        assert (await local.get(WAIT))["x"] == 1
        assert counters(a).messages_out == before  # nothing went to the network


async def test_daemon_hands_a_session_only_its_interests(service):
    async with Transport(service) as a, Transport(service) as b:
        b.listen("WANTED")
        await a.send(Message("OTHER", {"x": 1}))
        await a.send(Message("WANTED", {"x": 2}))
        await asyncio.sleep(0)
        session_b = b.link.session
        assert session_b.interests() == ["WANTED"]
        # One delivery for WANTED (to b); OTHER matched nobody and was not handed out.
        assert counters(a).deliveries == 1


async def test_request_reply_and_timeout(service):
    async with Transport(service) as client, Transport(service) as server:
        requests = server.listen("PRICE")

        async def answer():
            async for request in requests:
                await server.send_reply(Message(fields={"p": request["s"] * 2}), request)

        task = asyncio.create_task(answer())
        try:
            request = Message("PRICE", {"s": 21})
            reply = await client.send_request(request, WAIT)
            assert reply["p"] == 42
            assert request.reply_subject is None  # the caller's message is unchanged
            assert reply.subject.startswith(client.link.inbox_prefix)
            with pytest.raises(rv.RequestTimeout):
                await client.send_request(Message("NOBODY", {"s": 1}), 0.05)
            with pytest.raises(rv.InvalidArgument, match="positive"):
                await client.send_request(request, 0)
        finally:
            task.cancel()


async def test_inbox_listened_to_directly(service):
    async with Transport(service) as a, Transport(service) as b:
        inbox = a.create_inbox()
        assert inbox.startswith("_INBOX.") and inbox.startswith(a.link.inbox_prefix)
        listener = a.listen(inbox)
        await b.send(Message(inbox, {"n": 1}))
        assert (await listener.get(WAIT))["n"] == 1


async def test_first_send_of_a_turn_leaves_at_once_and_the_rest_is_packed(service):
    async with Transport(service) as a:
        core = a.link.session._service.core
        await asyncio.sleep(0.01)  # a turn of its own
        before = core.retained_datagrams()
        await a.send(Message("TURN.FIRST", {"i": 0}))
        assert core.retained_datagrams() == before + 1, "sent alone, before the turn ends"
        for i in range(1, 30):
            await a.send(Message("TURN.REST", {"i": i}))
        assert core.retained_datagrams() == before + 1, "the rest waits for the end of the turn"
        await asyncio.sleep(0)
        assert core.retained_datagrams() == before + 2, "packed into one datagram"
        assert core.stats.messages_sent >= 30


async def test_send_many_and_batch_mode(service):
    async with Transport(service, batch=True) as a, Transport(service) as b:
        listener = b.listen("MANY.*")
        await a.send_many([Message(f"MANY.{i}", {"i": i}) for i in range(50)])
        got = await collect(listener, 50)
        assert [m["i"] for m in got] == list(range(50))
        with pytest.raises(rv.InvalidArgument, match="without a subject"):
            await a.send_many([Message("MANY.1"), Message()])
        with pytest.raises(rv.NotPermitted):
            await a.send_many([Message("_RV.X")])


async def test_batch_mode_messages_reach_other_daemons(service):
    other = Daemon(reliability=1.0)
    # A second daemon in this loop is not the in-process one; attach to it directly.
    await other.start()
    try:
        received = []

        class Owner:
            def deliver(self, payload):
                received.append(payload.message())

            def present(self, advisory):
                pass

        session = other.attach(Owner(), service=service, network=None)
        session.add_interest("BATCHED")
        async with Transport(service, batch=True) as a:
            for i in range(5):
                await a.send(Message("BATCHED", {"i": i}))
            async with asyncio.timeout(WAIT):
                while len(received) < 5:
                    await asyncio.sleep(0.005)
        assert [m["i"] for m in received] == list(range(5))
    finally:
        await other.stop()


async def test_message_too_large_is_refused_and_reported(service):
    async with Transport(service) as a:
        advisories = a.listen("_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE")
        huge = Message("BIG", {"blob": b"\0" * (64 * 1024 * 1024)})
        with pytest.raises(rv.MessageTooLarge):
            await a.send(huge)
        adv = await advisories.get(WAIT)
        assert str(adv["host"]) == "127.0.0.1"
        assert adv["lost"] > 1000
        assert counters(a).messages_too_large == 1


async def test_host_status_fields(service):
    async with Transport(service, description="status test") as a:
        listener = a.listen("_RV.INFO.SYSTEM.HOST.STATUS.>")
        await a.send(Message("COUNTED", {"x": 1}))
        endpoint = a.link.session._service
        adv = endpoint.publish_host_status()
        got = await listener.get(WAIT)
        assert got.subject == adv.subject == "_RV.INFO.SYSTEM.HOST.STATUS.7F000001"
        for name in (
            "hostaddr",
            "ver",
            "time",
            "up",
            "cc",
            "ms",
            "bs",
            "mr",
            "br",
            "ps",
            "pr",
            "rx",
            "pm",
            "idl",
            "odl",
            "irrs",
            "orrs",
            "ipport",
            "service",
            "network",
        ):
            assert name in got, name
        assert got["cc"] == 1 and got["ms"] >= 1 and got["service"] == service
        status = running_in_process_daemon().host_status(service)
        assert status["ms"] >= 1 and status["service"] == service
        running_in_process_daemon().publish_host_status()
        assert (await listener.get(WAIT))["cc"] == 1


async def test_one_network_per_service_per_daemon(service):
    async with Transport(service):
        other = Transport(service, network="127.0.0.1;239.255.1.2")
        with pytest.raises(rv.NotPermitted, match="already bound"):
            await other.open()
        # the default and an explicit loopback network are the same network
        async with Transport(service, network="127.0.0.1"):
            pass


async def test_a_lingering_service_says_when_it_can_move_to_another_network(service):
    """Issue 43: for a few seconds after its last transport closes a service stays open
    (retransmissions) and "already bound" gave no hint that it would clear."""
    async with Transport(service, reliability=3.0) as t:
        await t.send(rv.Message("LINGER.DATA", {}))
    other = Transport(service, network="127.0.0.1;239.255.1.2")
    with pytest.raises(rv.NotPermitted, match=r"already bound.*stays open \d+\.\d s more"):
        await other.open()
    await other.close()


async def test_the_in_process_daemon_retains_at_most_32_mib_per_service(service):
    """Issue 43: every publishing process kept up to 256 MiB per service for
    retransmission, even with no listener; the in-process daemon's default is now
    32 MiB (docs/daemon.md), a standalone daemon's stays 256 MiB."""
    async with Transport(service) as t:
        daemon = running_in_process_daemon()
        assert daemon.max_retention == 32 * 1024 * 1024
        endpoint = daemon.services[int(service)]
        assert endpoint.core.max_retention == 32 * 1024 * 1024
        payload = bytes(60_000)
        for n in range(700):  # 42 MB sent, nobody listening
            await t.send(Message("RETAIN.BULK", {"data": payload}))
            if n % 20 == 19:
                await asyncio.sleep(0)
        assert endpoint.core.retained_bytes() <= 32 * 1024 * 1024
    assert Daemon().max_retention == 256 * 1024 * 1024


async def test_reliability_the_larger_wins(service):
    async with Transport(service, reliability=2.0) as a:
        endpoint = a.link.session._service
        assert endpoint.reliability == 2.0
        async with Transport(service, reliability=9.0):
            assert endpoint.reliability == 9.0
        # The session that asked for more left: the interval falls back (issue #24).
        assert endpoint.reliability == 2.0
        async with Transport(service, reliability=1.0):
            assert endpoint.reliability == 2.0  # the larger of those attached wins


async def test_reliability_requests_are_bounded(service):
    for bad in (1e308, MAX_RELIABILITY + 1, float("inf"), -1, "5"):
        with pytest.raises(rv.InvalidArgument, match="reliability"):
            Transport(service, reliability=bad)


async def test_reliability_raised_from_zero_replaces_the_core(service):
    async with Transport(service, reliability=0) as a:
        endpoint = a.link.session._service
        first = endpoint.core
        async with Transport(service, reliability=3.0) as b:
            assert endpoint.reliability == 3.0 and endpoint.core is not first
            listener = b.listen("AFTER")
            await a.send(Message("AFTER", {"ok": True}))
            assert (await listener.get(WAIT))["ok"] is True


async def test_not_open_and_closed_errors(service):
    t = Transport(service)
    with pytest.raises(rv.TransportClosed, match="not open"):
        await t.send(Message("X", {}))
    with pytest.raises(rv.TransportClosed, match="not open"):
        t.listen("X")
    with pytest.raises(rv.TransportClosed, match="not open"):
        t.create_inbox()
    await t.open()
    listener = t.listen("X")
    await t.close()
    assert listener.closed
    with pytest.raises(rv.TransportClosed):
        await t.send(Message("X", {}))
    with pytest.raises(rv.TransportClosed):
        await t.open()
    await t.close()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"service": 7500}, "service must be a str"),
        ({"daemon": "ssl:x:1"}, "not supported"),
        ({"reliability": -1}, "reliability"),
        ({"reliability": "5"}, "reliability"),
        ({"batch": 1}, "batch"),
    ],
)
def test_bad_transport_arguments(kwargs, match):
    with pytest.raises(rv.InvalidArgument, match=match):
        Transport(**kwargs)


async def test_bad_service_reported_at_open():
    with pytest.raises(rv.InvalidArgument, match="no UDP service"):
        await Transport("no-such-service-xyz").open()


async def test_subject_rules_apply(service):
    async with Transport(service) as a:
        with pytest.raises(rv.NotPermitted):
            await a.send(Message("_RV.INFO.FAKE", {}))
        with pytest.raises(rv.InvalidSubject):
            await a.send(Message("A..B", {}))
        with pytest.raises(rv.InvalidArgument):
            await a.send(Message())


async def test_unreachable_transport_when_a_transport_closes(service):
    async with Transport(service) as watcher:
        advisories = watcher.listen("_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.>")
        leaving = await Transport(service, description="leaver").open()
        tid = leaving.link.session.transport_id
        await leaving.close()
        adv = await advisories.get(WAIT)
        assert adv.subject == f"_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.{tid}"
        assert adv["descr"] == "leaver"


async def test_configured_daemon_serves_the_loop(service):
    daemon = Daemon(reliability=7.0, host_status_interval=0)
    await daemon.start()
    try:
        assert running_in_process_daemon() is daemon
        async with Transport(service) as t:
            assert t.link.session._service.reliability == 7.0
    finally:
        await daemon.stop()
    assert running_in_process_daemon() is None
    await daemon.wait_stopped()


async def test_callbacks_and_queues_work_as_on_every_transport(service):
    async with Transport(service) as a:
        seen = []
        done = asyncio.Event()

        async def on_msg(msg):
            seen.append(msg["n"])
            if len(seen) == 3:
                done.set()

        a.listen("CB", callback=on_msg)
        for n in range(3):
            await a.send(Message("CB", {"n": n}))
        await asyncio.wait_for(done.wait(), WAIT)
        assert seen == [0, 1, 2]


async def test_pending_request_fails_when_the_transport_closes(service):
    t = await Transport(service).open()
    request = asyncio.create_task(t.send_request(Message("NOBODY.HOME", {}), WAIT))
    await asyncio.sleep(0.01)
    await t.close()
    with pytest.raises(rv.TransportClosed, match="during the request"):
        await asyncio.wait_for(request, WAIT)


async def test_services_are_separate(rv_service):
    from rvasync.testing import free_port

    first, second = rv_service[0], str(free_port())
    async with Transport(first) as a, Transport(second) as b:
        on_b = b.listen("WHO")
        on_a = a.listen("WHO")
        await a.send(Message("WHO", {"s": 1}))
        assert (await on_a.get(WAIT))["s"] == 1
        assert await collect(on_b, 1, timeout=0.2) == []
        assert len(running_in_process_daemon().services) == 2


class _StalledSocket:
    """Stands in for a daemon's unicast socket whose send buffer is full until released."""

    def __init__(self, sock):
        self._sock = sock
        self.stalled = True

    def sendto(self, data, addr):
        if self.stalled:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return self._sock.sendto(data, addr)

    def __getattr__(self, name):
        return getattr(self._sock, name)


async def test_a_lone_datagram_the_socket_refuses_waits_in_the_backlog_in_order(service):
    from rvasync import _accel

    parse = _accel.load("rmframe").parse
    async with Transport(service) as a:
        endpoint = a.link.session._service
        stalled = endpoint.driver._uc = _StalledSocket(endpoint.driver._uc)
        sent: list[bytes] = []
        real_sendto = stalled.sendto

        def recording_sendto(data, addr):
            real_sendto(data, addr)  # raises while stalled: nothing recorded
            sent.append(bytes(data))

        stalled.sendto = recording_sendto
        await asyncio.sleep(0.01)  # a turn of its own: the next send goes out alone
        await a.send(Message("LONE.FIRST", {"i": 0}))
        assert endpoint.driver.backlog_length, "refused by the socket: kept, not lost"
        for i in range(1, 4):
            await asyncio.sleep(0)  # each in a later turn, behind the backlog
            await a.send(Message("LONE.NEXT", {"i": i}))
        stalled.stalled = False
        async with asyncio.timeout(WAIT):
            while endpoint.driver.backlog_length:
                await asyncio.sleep(0.005)
        data = [p for p in map(parse, sent) if p is not None and p[0] == 1 and p[2] == 0]
        seqs = [p[3] for p in data]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)) >= 2
        messages = [m for p in data for m in p[10]]
        assert [Message.from_bytes(m)["i"] for m in messages] == [0, 1, 2, 3]


async def test_backpressure_and_fast_producer(service, monkeypatch):
    from rvasync.daemon import service as service_module
    from rvasync.daemon import udpdriver

    monkeypatch.setattr(udpdriver, "BACKLOG_HIGH", 2000)
    monkeypatch.setattr(udpdriver, "BACKLOG_LOW", 500)
    monkeypatch.setattr(service_module, "FAST_PRODUCER_AFTER", 0.05)
    async with Transport(service) as a:
        warnings = a.listen("_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER")
        endpoint = a.link.session._service
        stalled = endpoint.driver._uc = _StalledSocket(endpoint.driver._uc)
        flood = [Message("FLOOD", {"pad": b"x" * 500}) for _ in range(20)]
        sending = asyncio.ensure_future(a.send_many(flood))
        adv = await warnings.get(WAIT)
        assert adv["waiting"] >= 1
        assert not sending.done()  # the sender waits for the backlog to drain
        assert endpoint.counters.datagrams_backlogged >= 1
        stalled.stalled = False
        await asyncio.wait_for(sending, WAIT)
        assert not endpoint.driver.backlog_length
