"""rv.CurrentValueCache, t.request_retained and t.listen(retained=True) on real transports.

The protocol decisions are tested on the core (test_cvc_core.py,
test_cvc_handover.py); here the driver: ingest through listeners, answers
over the process transport and network transports, several caches on one
network, deletions, limits and their advisory, the store file (restore,
corrupt, locked, compaction), and the argument rules.
"""

from __future__ import annotations

import asyncio
import os

import pytest

import rvasync as rv
from rvasync.cache import storefile
from rvasync.message import Message

WAIT = 20.0


async def settle(transport) -> None:
    """Let deliveries made so far reach their listeners (bounded)."""
    for _ in range(5):
        await asyncio.sleep(0)
    ping = getattr(getattr(transport, "link", None), "ping", None)
    if ping is not None:
        await asyncio.wait_for(ping(), WAIT)


async def publish(transport, values: dict[str, int]) -> None:
    for subject, value in values.items():
        await transport.send(Message(subject, {"v": value}))


def as_dict(messages) -> dict[str, int]:
    subjects = [m.subject for m in messages]
    assert len(subjects) == len(set(subjects)), subjects  # never a subject twice
    return {m.subject: m["v"] for m in messages}


async def retained_eventually(transport, pattern, expected, timeout=WAIT) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    got: dict[str, int] = {}
    while loop.time() < deadline:
        try:
            got = as_dict(await transport.request_retained(pattern, timeout=2.0))
        except rv.RequestTimeout:
            got = {}
        if got == expected:
            return
        await asyncio.sleep(0.05)
    assert got == expected


# --- process transport ---------------------------------------------------------------


async def test_retains_the_last_value_per_subject_and_answers_patterns(rv_process_transport):
    t = rv_process_transport
    async with rv.CurrentValueCache(t, ["SCORE.>", "SCORE.A"]) as cache:
        assert cache.patterns == ["SCORE.>"]  # the covered pattern is dropped
        await publish(t, {"SCORE.A": 1, "SCORE.B": 2, "SCORE.C.X": 3, "OTHER": 4})
        await publish(t, {"SCORE.A": 10})
        await settle(t)
        assert len(cache) == 3
        assert as_dict(await t.request_retained("SCORE.*", timeout=WAIT)) == {
            "SCORE.A": 10,
            "SCORE.B": 2,
        }
        assert as_dict(await t.request_retained("SCORE.>", timeout=WAIT)) == {
            "SCORE.A": 10,
            "SCORE.B": 2,
            "SCORE.C.X": 3,
        }
        assert as_dict(await t.request_retained("SCORE.B", timeout=WAIT)) == {"SCORE.B": 2}
        assert await t.request_retained("NOTHING.>", timeout=WAIT) == []
        assert cache.retained("SCORE.A")["v"] == 10
        with pytest.raises(rv.InvalidSubject):
            await t.request_retained("SCORE..A", timeout=WAIT)


async def test_a_deletion_removes_the_value_everywhere(rv_process_transport):
    t = rv_process_transport
    async with rv.CurrentValueCache(t, "K.>") as cache:
        await publish(t, {"K.1": 1, "K.2": 2})
        live = t.listen("K.>")
        deletion = rv.retained_deletion("K.1")
        await t.send(deletion)
        await t.send(rv.retained_deletion("K.NEVER"))  # absent: nothing to do
        await settle(t)
        assert as_dict(await t.request_retained("K.>", timeout=WAIT)) == {"K.2": 2}
        assert len(cache) == 1
        got = await live.get(WAIT)
        assert rv.is_retained_deletion(got) and got.subject == "K.1"
        assert not rv.is_retained_deletion(Message("K.1", {"v": 1}))


async def test_no_cache_is_a_request_timeout(rv_process_transport):
    with pytest.raises(rv.RequestTimeout, match="no cache answered"):
        await rv_process_transport.request_retained("A.>", timeout=0.2)


async def test_limits_refuse_and_report_in_an_advisory(rv_process_transport):
    t = rv_process_transport
    advisories = t.listen("_RV.WARN.RVCACHE.>")
    async with rv.CurrentValueCache(t, "L.>", max_subjects=2) as cache:
        await publish(t, {"L.1": 1, "L.2": 2, "L.3": 3, "L.4": 4})
        await publish(t, {"L.1": 11})  # an update of a retained subject still fits
        adv = await advisories.get(WAIT)
        assert adv.subject == "_RV.WARN.RVCACHE.LIMIT_EXCEEDED"
        assert adv["refused"] == 2 and adv["over_subjects"] == 2 and adv["max_subjects"] == 2
        assert as_dict(await t.request_retained("L.>", timeout=WAIT)) == {"L.1": 11, "L.2": 2}
        assert cache.refused.over_subjects == 2
    big = "x" * 200
    async with rv.CurrentValueCache(t, "B.>", max_bytes=300) as cache:
        await t.send(Message("B.1", {"v": 1, "pad": big}))
        await t.send(Message("B.2", {"v": 2, "pad": big}))  # would pass 300 bytes
        adv = await advisories.get(WAIT)
        assert adv["over_bytes"] == 1 and adv["max_bytes"] == 300
        assert list(as_dict(await t.request_retained("B.>", timeout=WAIT))) == ["B.1"]
        assert cache.retained_bytes <= 300


async def test_listen_retained_delivers_retained_first_then_live(rv_process_transport):
    t = rv_process_transport
    async with rv.CurrentValueCache(t, "R.>"):
        await publish(t, {"R.A": 1, "R.B": 2})
        await settle(t)
        queue = rv.Queue()
        listener = t.listen("R.*", retained=True, queue=queue, correlation_id="state")
        events = t.listen("EV.>", queue=queue, correlation_id="events")
        await publish(t, {"EV.1": 100, "R.A": 3})  # live, during the hand-over
        got = [await queue.get(WAIT) for _ in range(3)]
        state = [(m.subject, m["v"]) for m in got if m.correlation_id == "state"]
        assert state[0] == ("R.B", 2)  # retained (R.A's retained value superseded by live)
        assert state[1:] == [("R.A", 3)]
        assert all(m.listener is listener for m in got if m.correlation_id == "state")
        assert [m["v"] for m in got if m.correlation_id == "events"] == [100]
        await publish(t, {"R.B": 4})
        assert (await queue.get(WAIT))["v"] == 4
        assert events.correlation_id == "events"


async def test_listen_retained_without_a_cache_goes_live_and_warns(
    rv_process_transport, monkeypatch
):
    from rvasync.transport import base

    monkeypatch.setattr(base, "RetainedHandOver", _quick(base.RetainedHandOver))
    t = rv_process_transport
    warnings = t.listen("_RV.WARN.SYSTEM.RETAINED.>")
    listener = t.listen("Q.>", retained=True)
    await publish(t, {"Q.1": 1})
    assert (await listener.get(WAIT))["v"] == 1
    assert (await warnings.get(WAIT))["subject"] == "Q.>"


def _quick(cls):
    def make(transport, listener):
        return cls(transport, listener, timeout=0.2)

    return make


async def test_bad_arguments_are_refused_clearly(rv_process_transport, tmp_path):
    t = rv_process_transport
    for patterns, match in [
        ([], "at least one"),
        (["A..B"], "A..B"),
        (["_RVCACHE.>"], "cache protocol"),
        ([7], "must be a str"),
        (None, "patterns"),
    ]:
        with pytest.raises((rv.InvalidArgument, rv.InvalidSubject), match=match):
            rv.CurrentValueCache(t, patterns)
    with pytest.raises(rv.InvalidArgument, match="max_subjects"):
        rv.CurrentValueCache(t, "A", max_subjects=0)
    with pytest.raises(rv.InvalidArgument, match="max_bytes"):
        rv.CurrentValueCache(t, "A", max_bytes=-5)
    with pytest.raises(rv.InvalidArgument, match="store"):
        rv.CurrentValueCache(t, "A", store=42)
    with pytest.raises(rv.InvalidArgument, match="hello_interval"):
        rv.CurrentValueCache(t, "A", hello_interval=0)
    with pytest.raises(rv.InvalidArgument, match="retained"):
        t.listen("A", retained="yes")
    with pytest.raises(rv.InvalidArgument, match="timeout"):
        await t.request_retained("A", timeout=-1)


# --- store file -----------------------------------------------------------------------


async def test_store_file_restores_values_and_deletions(rv_process_transport, tmp_path):
    t = rv_process_transport
    path = tmp_path / "cache.store"
    async with rv.CurrentValueCache(t, "S.>", store=path):
        await publish(t, {"S.1": 1, "S.2": 2, "S.3": 3})
        await t.send(rv.retained_deletion("S.2"))
        await publish(t, {"S.1": 11})
        await settle(t)
    async with rv.CurrentValueCache(t, "S.>", store=path) as again:
        assert len(again) == 2  # restored before any request
        assert as_dict(await t.request_retained("S.>", timeout=WAIT)) == {"S.1": 11, "S.3": 3}
        with pytest.raises(rv.NotPermitted, match="in use"):
            await rv.CurrentValueCache(t, "S.>", store=path).start()


async def test_torn_tail_is_dropped_and_corruption_refused(rv_process_transport, tmp_path):
    t = rv_process_transport
    path = tmp_path / "cache.store"
    async with rv.CurrentValueCache(t, "S.>", store=str(path)):
        await publish(t, {"S.1": 1, "S.2": 2})
        await settle(t)
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # a kill -9 in the middle of the last append
    async with rv.CurrentValueCache(t, "S.>", store=path) as cache:
        assert as_dict(await t.request_retained("S.>", timeout=WAIT)) == {"S.1": 1}
        assert len(cache) == 1
    damaged = bytearray(path.read_bytes())
    damaged[12] ^= 0x55  # inside the first record's header
    path.write_bytes(bytes(damaged) + storefile.encode_record(storefile.Op.PUT, "S.9", 1.0, b""))
    with pytest.raises(rv.StoreCorrupt, match="corrupt"):
        await rv.CurrentValueCache(t, "S.>", store=path).start()
    assert not t.interested("S.1")  # nothing left listening


async def test_store_file_is_compacted(rv_process_transport, tmp_path, monkeypatch):
    monkeypatch.setattr(storefile, "COMPACT_MIN", 2000)
    t = rv_process_transport
    path = tmp_path / "cache.store"
    async with rv.CurrentValueCache(t, "C.>", store=path):
        for round_ in range(60):
            await publish(t, {"C.1": round_, "C.2": -round_})
        await settle(t)
        assert path.stat().st_size < 2000 + 600  # rewritten along the way
    async with rv.CurrentValueCache(t, "C.>", store=path):
        assert as_dict(await t.request_retained("C.>", timeout=WAIT)) == {"C.1": 59, "C.2": -59}
    assert not os.path.exists(f"{path}.compact")


# --- network transports ---------------------------------------------------------------


async def test_two_caches_on_one_network_answer_without_duplicates(rv_service):
    service, network = rv_service
    async with (
        rv.Transport(service, network) as a,
        rv.Transport(service, network) as b,
        rv.Transport(service, network) as client,
    ):
        first = rv.CurrentValueCache(a, "N.>", hello_interval=0.1, name="first")
        second = rv.CurrentValueCache(b, ["N.A", "N.B", "N.C"], hello_interval=0.1, name="second")
        async with first, second:
            await publish(client, {"N.A": 1, "N.B": 2, "N.Z": 26})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while loop.time() < deadline and not (first.peers and second.peers):
                await asyncio.sleep(0.05)
            assert first.peers == ["second"] and second.peers == ["first"]
            await retained_eventually(client, "N.>", {"N.A": 1, "N.B": 2, "N.Z": 26})
            await publish(client, {"N.A": 5})
            await retained_eventually(client, "N.*", {"N.A": 5, "N.B": 2, "N.Z": 26})


async def test_listen_retained_on_a_standalone_daemon(rv_daemon, rv_service):
    service, network = rv_service
    async with (
        rv.Transport(service, network, rv_daemon) as cache_side,
        rv.Transport(service, network, rv_daemon) as client,
        rv.CurrentValueCache(cache_side, "D.>"),
    ):
        await publish(client, {"D.1": 1, "D.2": 2})
        await retained_eventually(client, "D.>", {"D.1": 1, "D.2": 2})
        listener = client.listen("D.>", retained=True, correlation_id=b"d")
        first = [await listener.get(WAIT) for _ in range(2)]
        assert as_dict(first) == {"D.1": 1, "D.2": 2}
        assert {m.correlation_id for m in first} == {b"d"}
        await publish(client, {"D.1": 3})
        got = await listener.get(WAIT)
        assert (got.subject, got["v"], got.correlation_id) == ("D.1", 3, b"d")


async def test_closing_the_transport_ends_a_pending_request(rv_service):
    service, network = rv_service
    transport = rv.Transport(service, network)
    await transport.open()
    pending = asyncio.ensure_future(transport.request_retained("X.>", timeout=WAIT))
    listener = transport.listen("X.>", retained=True)
    await asyncio.sleep(0.05)
    await transport.close()
    with pytest.raises(rv.TransportClosed):
        await asyncio.wait_for(pending, WAIT)  # at once, not after WAIT
    assert listener.closed


async def test_joining_a_busy_stream_with_retained_has_no_gap_and_no_duplicate(rv_service):
    """Updates flow on five subjects while a listener joins with retained=True."""
    service, network = rv_service
    subjects = [f"BUSY.S{n}" for n in range(5)]
    last = 150
    async with (
        rv.Transport(service, network) as cache_side,
        rv.Transport(service, network) as publisher,
        rv.Transport(service, network) as joiner,
        rv.CurrentValueCache(cache_side, "BUSY.>"),
    ):
        joined = asyncio.Event()
        listener = None

        async def publish_all() -> None:
            nonlocal listener
            for version in range(1, last + 1):
                for subject in subjects:
                    await publisher.send(Message(subject, {"v": version}))
                if version == last // 3:
                    listener = joiner.listen("BUSY.*", retained=True)
                    joined.set()
                await asyncio.sleep(0)

        await asyncio.wait_for(publish_all(), WAIT)
        await asyncio.wait_for(joined.wait(), WAIT)
        assert listener is not None
        seen: dict[str, list[int]] = {s: [] for s in subjects}
        while any(not versions or versions[-1] < last for versions in seen.values()):
            msg = await listener.get(WAIT)
            seen[msg.subject].append(msg["v"])
        for subject, versions in seen.items():
            first = versions[0]
            assert first <= last // 3 + 1, (subject, first)  # retained or the first live
            assert versions == list(range(first, last + 1)), subject
        with pytest.raises(TimeoutError):
            await listener.get(0.7)  # nothing more: no duplicate


async def test_network_sends_stamp_each_publication_with_its_origin(rv_service):
    service, network = rv_service
    async with rv.Transport(service, network) as sender, rv.Transport(service, network) as receiver:
        listener = receiver.listen("ORIGIN.>")
        await settle(receiver)
        msg = Message("ORIGIN.A", {"v": 1})
        assert msg.origin is None
        await sender.send(msg)
        first = msg.origin  # stamped in place: the publication just made
        await sender.send(msg)  # the same message twice: two publications
        assert first is not None and msg.origin != first
        batch = [Message("ORIGIN.B", {"v": 2}), Message("ORIGIN.C", {"v": 3})]
        await sender.send_many(batch)
        got = [await listener.get(WAIT) for _ in range(4)]
        origins = [m.origin for m in got]
        assert origins == [first, msg.origin, batch[0].origin, batch[1].origin]
        assert all(0 <= o < 2**128 for o in origins)
        assert len({o >> 64 for o in origins}) == 1  # one publisher
        sequences = [o & (2**64 - 1) for o in origins]
        assert sequences == sorted(set(sequences))  # increasing: the order sent
        assert got[0] == got[1]  # equal content, different publications


async def test_a_new_publication_equal_to_the_retained_value_is_delivered(rv_service):
    """Retained A; while the listener joins, B is published, then A again (a new
    publication with the retained content): the listener gets A (retained), B, A.
    Telling the copy by equal content within a time window dropped B and the new A."""
    service, network = rv_service
    async with (
        rv.Transport(service, network) as cache_side,
        rv.Transport(service, network) as publisher,
        rv.Transport(service, network) as joiner,
        rv.CurrentValueCache(cache_side, "EQ.>"),
    ):
        await publish(publisher, {"EQ.A": 1})
        await retained_eventually(joiner, "EQ.>", {"EQ.A": 1})
        listener = joiner.listen("EQ.A", retained=True)
        await settle(joiner)
        await publish(publisher, {"EQ.A": 2})
        await publish(publisher, {"EQ.A": 1})
        got = [(await listener.get(WAIT))["v"] for _ in range(3)]
        assert got == [1, 2, 1]
        with pytest.raises(TimeoutError):
            await listener.get(0.5)  # and no duplicate


async def test_a_live_copy_long_after_the_answer_is_not_delivered_twice(rv_service):
    """The live copy of a retained publication may come any time after the answer
    (here a second later, replayed with its origin): it is recognised by identity."""
    service, network = rv_service
    async with (
        rv.Transport(service, network) as cache_side,
        rv.Transport(service, network) as publisher,
        rv.Transport(service, network) as joiner,
        rv.CurrentValueCache(cache_side, "LATE.>"),
    ):
        await publish(publisher, {"LATE.A": 1})
        await retained_eventually(joiner, "LATE.>", {"LATE.A": 1})
        warnings = joiner.listen("_RV.WARN.SYSTEM.RETAINED.>")
        listener = joiner.listen("LATE.A", retained=True)
        retained = await listener.get(WAIT)
        assert retained["v"] == 1 and retained.origin is not None
        await asyncio.sleep(1.0)  # longer than the old time window
        older = Message("LATE.A", {"v": 0})
        older.origin = retained.origin - 1  # same publisher, the send before
        await _send_internal(publisher, older)  # late too, and older than what was delivered
        copy = Message("LATE.A", {"v": 1})
        copy.origin = retained.origin
        await _send_internal(publisher, copy)  # the late live copy
        await publish(publisher, {"LATE.A": 2})
        newer = await listener.get(WAIT)
        assert newer["v"] == 2  # not the copy, not the older one
        advisory = await warnings.get(WAIT)
        assert advisory.subject == "_RV.WARN.SYSTEM.RETAINED.SUPERSEDED"
        assert advisory["superseded"] == 1 and advisory["subject"] == "LATE.A"
        with pytest.raises(TimeoutError):
            await listener.get(0.5)


async def _send_internal(transport, msg: Message) -> None:
    """Send ``msg`` with the origin it has (send_internal does not stamp)."""
    pending = transport.send_internal(msg)
    if pending is not None:
        await pending
