"""rvasync.wireedit: a new address and one more field, written into a message's wire bytes.

The edit must give exactly the bytes that decoding, changing and encoding
again would give, with either codec; whatever it does not read (other
layouts, certified-delivery labels, garbage) it declines with None.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync._accel import implementations
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Message
from rvasync.wireedit import StringField, plain_subject, read_head, rewrite, tag_run

IMPLS = implementations("codec")


@pytest.fixture(params=IMPLS, ids=lambda m: m.__name__)
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return request.param


# Subjects of every msgpack str size class: fixstr (< 32 bytes), str8, str16.
texts = st.text(min_size=1, max_size=40) | st.text(min_size=250, max_size=300)
values = st.one_of(
    st.text(max_size=30).map(lambda v: (v, FieldType.STRING)),
    st.integers(-(2**31), 2**31 - 1).map(lambda v: (v, FieldType.I32)),
    st.binary(max_size=40).map(lambda v: (v, FieldType.OPAQUE)),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    msg = Message(draw(texts), reply_subject=draw(st.none() | texts))
    # What every send stamps (rv.Transport.send): an origin in the label slot.
    msg.origin = draw(st.none() | st.integers(0, 2**128 - 1))
    # 0..20 fields: the field array's header goes from fixarray to array16 on the way.
    for _ in range(draw(st.integers(0, 20))):
        value, ftype = draw(values)
        msg.add_reserved(draw(st.none() | st.text(min_size=1, max_size=8)), value, ftype)
    return msg


def _expected(
    impl: ModuleType, data: bytes, subject: str, reply: str | None, tag: str | None
) -> bytes:
    msg = impl.decode(data)
    msg.subject = subject
    msg.reply_subject = reply
    if tag is not None:
        msg.add_reserved("_rvrd", tag, FieldType.STRING)
    out: bytes = impl.encode(msg)
    return out


@settings(max_examples=150, deadline=None)
@given(
    msg=messages(),
    subject=st.none() | texts,
    reply=st.just("same") | st.none() | texts,
    tag=st.none() | st.text(max_size=40),
)
def test_the_edit_gives_the_bytes_a_re_encoding_would(
    msg: Message, subject: str | None, reply: str | None, tag: str | None
) -> None:
    for impl in IMPLS:
        data = impl.encode(msg)
        head = read_head(data)
        assert head is not None
        assert (head.subject, head.reply) == (msg.subject, msg.reply_subject)
        new_subject = msg.subject if subject is None else subject
        new_reply = msg.reply_subject if reply == "same" else reply
        field = None if tag is None else StringField("_rvrd").encode(tag)
        edited = rewrite(data, head, new_subject, new_reply, field)  # type: ignore[arg-type]
        assert edited == _expected(impl, data, new_subject, new_reply, tag)  # type: ignore[arg-type]
        # and it decodes, with either codec
        for other in IMPLS:
            back = other.decode(edited)
            assert back.subject == new_subject
            assert back.origin == msg.origin
            if tag is not None:
                assert back.get_all("_rvrd")[-1] == tag


def test_a_sent_message_is_read_with_its_origin(impl: ModuleType) -> None:
    """A message a transport sent carries its origin in the label slot: read here, and kept
    (a router passing it on must not take the general path for every message)."""
    msg = Message("A.B", {"data": b"x" * 128}, reply_subject="_INBOX.x.y.1")
    msg.origin = (12345 << 64) | 678
    data = impl.encode(msg)
    head = read_head(data)
    assert head is not None and head.reply == "_INBOX.x.y.1"
    edited = rewrite(data, head, "C.D", None, StringField("_rvrd").encode("t"))
    assert edited == _expected(impl, data, "C.D", None, "t")
    assert impl.decode(edited).origin == msg.origin


def test_a_long_subject_and_the_array16_boundary(impl: ModuleType) -> None:
    msg = Message("S." + "x" * 70_000, reply_subject="R")
    for i in range(3):  # 12 elements: one field more makes 16, past a fixarray
        msg.add_reserved(f"f{i}", i)
    data = impl.encode(msg)
    head = read_head(data)
    assert head is not None and head.elements == 12
    edited = rewrite(data, head, "NEW", None, StringField("_rvrd").encode("t"))
    assert edited == _expected(impl, data, "NEW", None, "t")


def test_unchanged_address_without_a_field_is_the_same_bytes(impl: ModuleType) -> None:
    data = impl.encode(Message("A.B", {"data": b"x" * 128}, reply_subject="R.S"))
    head = read_head(data)
    assert head is not None
    assert rewrite(data, head, "A.B", "R.S") is data


def test_what_is_not_read_here_is_declined(impl: ModuleType) -> None:
    certified = Message("A.B", {"n": 1})
    certified.cm = CmLabel("sender", 5, 0.0)
    stamped = Message("A.B", {"n": 1})
    stamped.cm = CmLabel("sender", 6, 0.0)
    stamped.origin = 99
    for data in (
        impl.encode(certified),  # a certified-delivery label: the general path
        impl.encode(stamped),  # a label with an origin as its 4th element: the same
        "not bytes",
        None,
        b"",
        b"\xc1RV\x01",
        b"\x94\xa1a\xc0\xc0\x90",  # no header
    ):
        assert read_head(data) is None


def test_a_head_cut_short_is_declined(impl: ModuleType) -> None:
    data = impl.encode(Message("A.B" * 20, {"data": b"x"}, reply_subject="_INBOX.x.y.1"))
    head = read_head(data)
    assert head is not None
    for cut in range(head.fields_body):
        assert read_head(data[:cut]) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_garbage_never_raises(junk: bytes) -> None:
    for data in (junk, b"\xc1RV\x01\x94" + junk):
        head = read_head(data)
        if head is not None:
            assert head.fields_body <= len(data)


def test_string_field_refuses_what_is_not_unicode() -> None:
    with pytest.raises(UnicodeEncodeError):
        StringField("_rvrd").encode("\ud800")


async def _send_encoded_round_trip(t: rv.Transport) -> None:
    listener = t.listen("WIRE.X")
    if t.link is not None and hasattr(t.link, "ping"):
        await t.link.ping(10)  # the standalone daemon has taken the listen
    t.send_encoded(Message("WIRE.X", {"n": 7}).to_bytes())
    got = await listener.get(10)
    assert got["n"] == 7
    with pytest.raises(rv.InvalidArgument):
        t.send_encoded(b"\x00not a message")


async def test_send_encoded_publishes_wire_bytes(rv_transport: rv.Transport) -> None:
    await _send_encoded_round_trip(rv_transport)
    await rv_transport.close()
    with pytest.raises(rv.TransportClosed):
        rv_transport.send_encoded(Message("WIRE.X", {"n": 8}).to_bytes())


async def test_send_encoded_through_a_standalone_daemon(
    rv_daemon: str, rv_service: tuple[str, str]
) -> None:
    t = rv.Transport(*rv_service, daemon=rv_daemon)
    await t.open()
    try:
        await _send_encoded_round_trip(t)
    finally:
        await t.close()


@settings(max_examples=150, deadline=None)
@given(msg=messages(), before=st.text(max_size=20), first=st.integers(0, 2**40))
def test_a_tag_run_gives_the_bytes_of_each_rewrite(msg: Message, before: str, first: int) -> None:
    """tag_run (the batch fast path) gives exactly what rewrite gives message by message, or
    None; and for the usual shape (no reply subject, a fixarray of fields left) never None."""
    field = StringField("_rvrd")
    after = f" 2 {msg.subject}"
    for impl in IMPLS:
        datas = [impl.encode(msg), impl.encode(msg)]
        subject: str = msg.subject  # type: ignore[assignment]  # the strategy always sets one
        got = tag_run(datas, subject, field, before, first, after)
        usual = msg.reply_subject is None and len(msg) <= 2
        try:
            f"{before}{after}".encode()
        except UnicodeEncodeError:
            usual = False
        if got is None:
            assert not usual
            continue
        for i, (data, edited) in enumerate(zip(datas, got, strict=True)):
            head = read_head(data)
            assert head is not None
            value = f"{before}{first + i}{after}"
            assert edited == rewrite(data, head, subject, head.reply, field.encode(value))
            assert edited == _expected(impl, data, subject, None, value)


def test_a_tag_run_declines_another_subject_or_a_reply(impl: ModuleType) -> None:
    field = StringField("_rvrd")
    plain = impl.encode(Message("A.B", {"data": b"x"}))
    assert tag_run([plain], "A.B", field, "A r ", 1, " 2 A.B") is not None
    for other in (
        impl.encode(Message("A.C", {"data": b"x"})),
        impl.encode(Message("A.B", {"data": b"x"}, reply_subject="R")),
        impl.encode(Message("A.B", {f"f{i}": i for i in range(3)})),  # no fixarray with one more
        plain[:9],  # cut inside the head (the body is not read: rewrite does not either)
        b"junk",
    ):
        assert tag_run([plain, other], "A.B", field, "A r ", 1, " 2 A.B") is None


@settings(max_examples=150, deadline=None)
@given(msg=messages())
def test_plain_subject_is_the_subject_of_a_message_without_reply(msg: Message) -> None:
    for impl in IMPLS:
        data = impl.encode(msg)
        found = plain_subject(data)
        subject: str = msg.subject  # type: ignore[assignment]
        short = 0 < len(subject.encode("utf-8", "surrogatepass")) <= 31
        if msg.reply_subject is None and short:
            assert found == subject
        else:
            assert found is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_the_fast_paths_never_raise_on_garbage(junk: bytes) -> None:
    field = StringField("_rvrd")
    for data in (junk, b"\xc1RV\x01\x94" + junk):
        plain_subject(data)
        tag_run([data], "A", field, "x ", 0, " y")
