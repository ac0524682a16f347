"""Publisher identity (``msg.publisher``) and named subscriptions (``listen(subscription=...)``).

The MQ publish/subscribe identity seed: a publisher is its transport plus an
optional correlation id, so subscribers tell apart publishers sharing a
transport; a subscriber may be identified by a name instead of a correlation
id, and, with the retained values, resume under that name after a restart.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cvc_driver import publish, retained_eventually

import rvasync as rv
from rvasync._accel import implementations

WAIT = 20.0


async def test_publications_carry_their_transport_and_correlation_id(rv_service) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network, correlation_id="prices") as pricing,
        rv.Transport(service, network) as plain,
        rv.Transport(service, network) as subscriber,
    ):
        assert pricing.correlation_id == "prices" and plain.correlation_id is None
        assert pricing.publisher_id != plain.publisher_id and len(pricing.publisher_id) == 16
        quotes = subscriber.listen("Q.>")
        await pricing.send(rv.Message("Q.A", {"n": 1}))
        await pricing.send(rv.Message("Q.A", {"n": 2}), correlation_id=b"desk-7")
        await plain.send(rv.Message("Q.A", {"n": 3}))
        await plain.send(rv.Message("Q.A", {"n": 4}), correlation_id=42)
        async with asyncio.timeout(WAIT):
            got = [await quotes.get() for _ in range(4)]
        assert [m.publisher for m in got] == [
            rv.Publisher(pricing.publisher_id, "prices"),
            rv.Publisher(pricing.publisher_id, b"desk-7"),
            rv.Publisher(plain.publisher_id, None),
            rv.Publisher(plain.publisher_id, 42),
        ]


async def test_a_forwarded_message_names_its_new_publisher(rv_service) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network, correlation_id="origin") as first,
        rv.Transport(service, network) as relay,
        rv.Transport(service, network) as end,
    ):
        inbound = relay.listen("IN")
        outbound = end.listen("OUT")
        await first.send(rv.Message("IN", {"n": 1}))
        async with asyncio.timeout(WAIT):
            msg = await inbound.get()
        assert msg.publisher == rv.Publisher(first.publisher_id, "origin")
        msg.subject = "OUT"
        await relay.send(msg)  # a new publication, by relay
        async with asyncio.timeout(WAIT):
            forwarded = await outbound.get()
        assert forwarded.publisher == rv.Publisher(relay.publisher_id, None)


async def test_through_a_standalone_daemon(rv_daemon: str, rv_service) -> None:
    service, network = rv_service
    async with (
        rv.Transport(service, network, rv_daemon, correlation_id=7) as pub,
        rv.Transport(service, network, rv_daemon) as sub,
    ):
        listener = sub.listen("S")
        await sub.link.ping()
        await pub.send(rv.Message("S", {"n": 1}))
        async with asyncio.timeout(WAIT):
            assert (await listener.get()).publisher == rv.Publisher(pub.publisher_id, 7)


def test_unsent_messages_have_no_publisher() -> None:
    assert rv.Message("A").publisher is None


@pytest.mark.parametrize("bad", [0, "", b"", b"\0\0", 2**64, -(2**63) - 1, 1.5, True, [1]])
async def test_bad_correlation_ids_are_refused(rv_transport, bad) -> None:
    with pytest.raises(rv.InvalidArgument, match="correlation_id"):
        rv.Transport(correlation_id=bad)
    with pytest.raises(rv.InvalidArgument, match="correlation_id"):
        await rv_transport.send(rv.Message("A"), correlation_id=bad)


correlations = (
    st.none()
    | st.text(min_size=1)
    | st.binary(min_size=1).filter(lambda b: b.strip(b"\0"))
    | st.integers(-(2**63), 2**64 - 1).filter(bool)
)


@given(
    correlation=correlations,
    origin=st.none() | st.integers(0, 2**128 - 1),
    label=st.none() | st.builds(rv.CmLabel, st.text(min_size=1, max_size=4), st.none()),
)
@settings(deadline=None)  # no timed assertion: a loaded machine runs an example slowly
def test_the_correlation_id_travels_on_both_codec_twins(correlation, origin, label) -> None:
    msg = rv.Message("A", {"n": 1})
    msg.publisher_correlation, msg.origin, msg.cm = correlation, origin, label
    encoded = {impl.encode(msg) for impl in implementations("codec")}
    assert len(encoded) == 1  # byte for byte the same
    for impl in implementations("codec"):
        back = impl.decode(encoded.pop() if encoded else impl.encode(msg))
        assert back.publisher_correlation == correlation
        assert back.origin == origin and back.cm == label and back == msg
        impl.check(impl.encode(msg))


def test_a_forged_correlation_id_is_malformed_on_both_twins() -> None:
    import msgpack

    from rvasync._wire import HEADER

    for bad in ("", b"\0", 0, 1.5, None, [1]):
        wire = HEADER + msgpack.packb(["A", None, [None, bad], []], use_bin_type=True)
        errors = set()
        for impl in implementations("codec"):
            with pytest.raises(rv.MalformedMessage) as caught:
                impl.decode(wire)
            with pytest.raises(rv.MalformedMessage):
                impl.check(wire)
            errors.add(str(caught.value))
        assert len(errors) == 1 and "correlation id" in errors.pop()


# -- named subscriptions ----------------------------------------------------------------------


async def test_a_named_subscription_labels_its_deliveries(rv_process_transport) -> None:
    t = rv_process_transport
    queue = rv.Queue()
    t.listen("A", queue=queue, subscription="scores")
    t.listen("A", queue=queue, correlation_id="other")
    await t.send(rv.Message("A", {"n": 1}))
    got = sorted([queue.poll(), queue.poll()], key=lambda m: str(m.subscription))
    assert [m.subscription for m in got] == [None, "scores"]
    assert [m.correlation_id for m in got] == ["other", "scores"]


async def test_a_second_live_subscription_of_one_name_is_refused(rv_process_transport) -> None:
    t = rv_process_transport
    first = t.listen("A", subscription="s")
    with pytest.raises(rv.InvalidArgument, match="already live"):
        t.listen("B", subscription="s")
    with pytest.raises(rv.InvalidArgument, match="not both"):
        t.listen("B", subscription="x", correlation_id="y")
    for bad in ("", 5, "tab\t"):
        with pytest.raises(rv.InvalidArgument, match="subscription"):
            t.listen("B", subscription=bad)
    await first.close()
    t.listen("B", subscription="s").close_now()  # free again once closed


async def test_a_restarted_named_subscriber_gets_the_retained_values_then_live(
    rv_process_transport,
) -> None:
    t = rv_process_transport
    async with rv.CurrentValueCache(t, "SCORE.>"):
        await publish(t, {"SCORE.A": 1, "SCORE.B": 2})
        await retained_eventually(t, "SCORE.>", {"SCORE.A": 1, "SCORE.B": 2})
        before = t.listen("SCORE.>", subscription="results", retained=True)
        async with asyncio.timeout(WAIT):
            assert {(await before.get()).subject for _ in range(2)} == {"SCORE.A", "SCORE.B"}
        await before.close()  # the subscriber "restarts"
        await publish(t, {"SCORE.A": 3})
        after = t.listen("SCORE.>", subscription="results", retained=True)
        async with asyncio.timeout(WAIT):
            first = [await after.get() for _ in range(2)]
            assert {(m.subject, m["v"]) for m in first} == {("SCORE.A", 3), ("SCORE.B", 2)}
            await publish(t, {"SCORE.B": 5})
            live = await after.get()
        assert (live.subject, live["v"]) == ("SCORE.B", 5)
        assert {m.subscription for m in [*first, live]} == {"results"}
