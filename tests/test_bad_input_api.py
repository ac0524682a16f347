"""Bad input to the public API (the contract in api.md): a clear error naming the argument.

Each row calls one public entry point with a wrong type, an out-of-range
value or junk and expects an ``rv.RvError`` subclass (``TypeError`` only where
Python itself refuses the call) whose message matches a pattern naming the
argument.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import rvasync as rv
from rvasync.testing import free_port

NAN = float("nan")
INF = float("inf")
M = rv.Message
FT = rv.FieldType


def _set(obj: Any, name: str, value: Any) -> None:
    setattr(obj, name, value)


def _add(*args: Any, **kwargs: Any) -> Callable[[], Any]:
    return lambda: M().add(*args, **kwargs)


def _two_ids() -> None:
    msg = M()
    msg.add("a", 1, field_id=3)
    msg.add("b", 2, field_id=3)


# (id, call, expected exception type(s), pattern the message must contain)
SYNC: list[Any] = [
    # -- Message construction and attributes ----------------------------------------------
    ("Message-fields-int", lambda: M("A", 5), rv.RvError, "fields must be a mapping"),
    ("Message-fields-str", lambda: M("A", "abc"), rv.RvError, "fields must be a mapping"),
    ("Message-fields-list-of-int", lambda: M("A", [1]), rv.RvError, "iterable of Field"),
    ("Message-fields-key-int", lambda: M("A", {1: 2}), rv.RvError, "field name must be a str"),
    ("Message-fields-value-object", lambda: M("A", {"a": object()}), rv.RvError, "field 'a'"),
    ("Message-subject-int", lambda: M(5), rv.InvalidArgument, "subject must be a str"),
    (
        "Message-reply-subject-int",
        lambda: M("A", reply_subject=5),
        rv.InvalidArgument,
        "reply_subject must be a str",
    ),
    # -- msg.add: names, types, values, ids -------------------------------------------------
    ("add-name-int", _add(5, 1), rv.ConversionError, "field name must be a str"),
    ("add-name-empty", _add("", 1), rv.InvalidArgument, "field name must not be empty"),
    ("add-name-reserved", _add("_x", 1), rv.InvalidArgument, "field name '_x' is reserved"),
    ("add-value-object", _add("a", object()), rv.ConversionError, "field 'a'.*no field type"),
    ("add-value-none", _add("a", None), rv.ConversionError, "field 'a'"),
    # A dict becomes a nested message (docs/messages.md); a bad one names the path to the fault.
    ("add-value-dict-key-int", _add("a", {1: 2}), rv.ConversionError, "field 'a': field name"),
    ("add-value-set", _add("a", {1}), rv.ConversionError, "field 'a'.*no field type"),
    ("add-value-mixed-list", _add("a", [1, "x"]), rv.ConversionError, "field 'a'.*array"),
    ("add-value-empty-list", _add("a", []), rv.ConversionError, "field 'a'.*empty list"),
    ("add-value-surrogate", _add("a", "\ud800"), rv.InvalidArgument, "field 'a'.*Unicode"),
    ("add-i64-inferred-range", _add("a", 2**63), rv.InvalidArgument, "field 'a'.*I64"),
    ("add-type-str", _add("a", 1, "I8"), rv.ConversionError, "field type must be a FieldType"),
    ("add-type-float", _add("a", 1, 3.5), rv.ConversionError, "field type must be a FieldType"),
    ("add-type-unknown-code", _add("a", 1, 999), rv.InvalidArgument, "999 is not a FieldType"),
    ("add-U8-300", _add("a", 300, FT.U8), rv.InvalidArgument, "field 'a'.*out of range for U8"),
    ("add-U8-negative", _add("a", -1, FT.U8), rv.InvalidArgument, "field 'a'.*U8"),
    ("add-I8-128", _add("a", 128, FT.I8), rv.InvalidArgument, "field 'a'.*I8"),
    ("add-U64-2**64", _add("a", 2**64, FT.U64), rv.InvalidArgument, "field 'a'.*U64"),
    (
        "add-IPPORT16-range",
        _add("a", 70000, FT.IPPORT16),
        rv.InvalidArgument,
        "field 'a'.*IPPORT16",
    ),
    ("add-I32-str", _add("a", "x", FT.I32), rv.ConversionError, "field 'a'.*I32 needs an int"),
    ("add-I32-float", _add("a", 1.5, FT.I32), rv.ConversionError, "field 'a'.*I32"),
    ("add-I32-bool", _add("a", True, FT.I32), rv.ConversionError, "field 'a'.*I32"),
    ("add-F64-str", _add("a", "x", FT.F64), rv.ConversionError, "field 'a'.*F64"),
    ("add-F32-huge", _add("a", 1e300, FT.F32), rv.InvalidArgument, "field 'a'.*F32"),
    ("add-STRING-int", _add("a", 1, FT.STRING), rv.ConversionError, "field 'a'.*STRING"),
    ("add-OPAQUE-int", _add("a", 1, FT.OPAQUE), rv.ConversionError, "field 'a'.*OPAQUE"),
    ("add-BOOL-int", _add("a", 1, FT.BOOL), rv.ConversionError, "field 'a'.*BOOL"),
    ("add-DATETIME-str", _add("a", "x", FT.DATETIME), rv.ConversionError, "field 'a'.*DATETIME"),
    ("add-IPADDR32-junk", _add("a", "junk", FT.IPADDR32), rv.InvalidArgument, "field 'a'.*IPv4"),
    ("add-MSG-int", _add("a", 1, FT.MSG), rv.ConversionError, "field 'a'.*MSG"),
    ("add-U8ARRAY-range", _add("a", [300], FT.U8ARRAY), rv.InvalidArgument, "field 'a'.*element 0"),
    ("add-I8ARRAY-str", _add("a", "abc", FT.I8ARRAY), rv.ConversionError, "field 'a'.*I8ARRAY"),
    ("add-MSGARRAY-int", _add("a", [1], FT.MSGARRAY), rv.ConversionError, "field 'a'.*element 0"),
    (
        "add-STRINGARRAY-int",
        _add("a", [1], FT.STRINGARRAY),
        rv.ConversionError,
        "field 'a'.*element 0",
    ),
    ("add-id-negative", _add("a", 1, field_id=-1), rv.InvalidArgument, "field id -1 out of range"),
    (
        "add-id-huge",
        _add("a", 1, field_id=70000),
        rv.InvalidArgument,
        "field id 70000 out of range",
    ),
    ("add-id-str", _add("a", 1, field_id="x"), rv.ConversionError, "field id must be an int"),
    ("add-id-float", _add("a", 1, field_id=1.0), rv.ConversionError, "field id must be an int"),
    ("add-id-bool", _add("a", 1, field_id=True), rv.ConversionError, "field id must be an int"),
    (
        "add-id-unnamed",
        _add(None, 1, field_id=3),
        rv.InvalidArgument,
        "field id 3 needs a field name",
    ),
    ("add-id-duplicate", _two_ids, rv.InvalidArgument, "field id 3 is already used"),
    ("setitem-name-int", lambda: M().__setitem__(5, 1), rv.ConversionError, "field name"),
    ("setitem-reserved", lambda: M().__setitem__("_x", 1), rv.InvalidArgument, "'_x' is reserved"),
    ("getitem-missing", lambda: M()["x"], KeyError, "x"),
    ("field-missing", lambda: M().field("x"), KeyError, "x"),
    ("field_by_id-missing", lambda: M().field_by_id(99), KeyError, "99"),
    pytest.param(
        "field_by_id-str",
        lambda: M().field_by_id("x"),
        rv.RvError,
        "field id must be an int",
    ),
    # -- wire form ----------------------------------------------------------------------------
    ("from_bytes-str", lambda: M.from_bytes("abc"), rv.MalformedMessage, "bytes"),
    ("from_bytes-none", lambda: M.from_bytes(None), rv.MalformedMessage, "bytes"),
    ("from_bytes-empty", lambda: M.from_bytes(b""), rv.MalformedMessage, "not an rvasync message"),
    ("from_bytes-junk", lambda: M.from_bytes(b"\xc1RVjunkjunk"), rv.MalformedMessage, "version"),
    # -- Field, FieldType, DateTime ----------------------------------------------------------
    ("Field-type-str", lambda: rv.Field("a", 0, "I8", 1), rv.ConversionError, "field type"),
    ("Field-id-negative", lambda: rv.Field("a", -1, FT.I8, 1), rv.InvalidArgument, "field id -1"),
    (
        "Field-value-range",
        lambda: rv.Field("a", 0, FT.I8, 300),
        rv.InvalidArgument,
        "field 'a'.*I8",
    ),
    ("FieldType-junk", lambda: rv.FieldType("x"), ValueError, "'x' is not a valid FieldType"),
    ("DateTime-str", lambda: rv.DateTime("x"), rv.ConversionError, "DateTime seconds"),
    ("DateTime-float", lambda: rv.DateTime(1.5), rv.ConversionError, "DateTime seconds"),
    ("DateTime-range", lambda: rv.DateTime(2**40), rv.InvalidArgument, "DateTime seconds.*40-bit"),
    ("DateTime-us-negative", lambda: rv.DateTime(0, -1), rv.InvalidArgument, "microseconds -1"),
    ("DateTime-us-huge", lambda: rv.DateTime(0, 10**6), rv.InvalidArgument, "microseconds"),
    (
        "DateTime.from_datetime-str",
        lambda: rv.DateTime.from_datetime("x"),
        rv.ConversionError,
        "datetime",
    ),
    ("DateTime.from_timestamp-nan", lambda: rv.DateTime.from_timestamp(NAN), rv.RvError, "nan"),
    # -- subjects -----------------------------------------------------------------------------
    (
        "validate_subject-int",
        lambda: rv.validate_subject(5),
        rv.InvalidSubject,
        "subject must be a str",
    ),
    (
        "validate_subject-none",
        lambda: rv.validate_subject(None),
        rv.InvalidSubject,
        "subject must be a str",
    ),
    ("validate_subject-empty", lambda: rv.validate_subject(""), rv.InvalidSubject, "empty"),
    (
        "validate_subject-dots",
        lambda: rv.validate_subject("A..B"),
        rv.InvalidSubject,
        "empty element",
    ),
    (
        "validate_subject-long",
        lambda: rv.validate_subject("A." * 200 + "B"),
        rv.InvalidSubject,
        "255",
    ),
    ("validate_subject-element", lambda: rv.validate_subject("A" * 128), rv.InvalidSubject, "127"),
    (
        "validate_subject-wildcard",
        lambda: rv.validate_subject("A.*"),
        rv.InvalidSubject,
        "wildcard",
    ),
    (
        "validate_subject-star-part",
        lambda: rv.validate_subject("A.B*", wildcards=True),
        rv.InvalidSubject,
        "'A.B\\*'",
    ),
    (
        "validate_subject-gt-middle",
        lambda: rv.validate_subject("A.>.B", wildcards=True),
        rv.InvalidSubject,
        "last element",
    ),
    (
        "validate_subject-not-unicode",
        lambda: rv.validate_subject("A.\udcff"),
        rv.InvalidSubject,
        "Unicode|UTF-8",
    ),
    (
        "subject_matches-pattern-int",
        lambda: rv.subject_matches(5, "A"),
        rv.InvalidSubject,
        "must be a str",
    ),
    (
        "subject_matches-subject-int",
        lambda: rv.subject_matches("A", 5),
        rv.InvalidSubject,
        "must be a str",
    ),
    ("subject_matches-bad", lambda: rv.subject_matches("A..B", "A"), rv.InvalidSubject, "'A..B'"),
    # -- queues ---------------------------------------------------------------------------------
    ("Queue-limit-negative", lambda: rv.Queue(limit=-1), rv.InvalidArgument, "limit must be >= 0"),
    ("Queue-limit-str", lambda: rv.Queue(limit="x"), rv.InvalidArgument, "limit must be an int"),
    ("Queue-limit-float", lambda: rv.Queue(limit=1.5), rv.InvalidArgument, "limit must be an int"),
    ("Queue-limit-bool", lambda: rv.Queue(limit=True), rv.InvalidArgument, "limit must be an int"),
    (
        "Queue-policy-str",
        lambda: rv.Queue(policy="x"),
        rv.InvalidArgument,
        "policy must be a LimitPolicy",
    ),
    (
        "Queue-policy-int",
        lambda: rv.Queue(policy=99),
        rv.InvalidArgument,
        "policy must be a LimitPolicy",
    ),
    (
        "Queue-discard-zero",
        lambda: rv.Queue(limit=5, discard_amount=0),
        rv.InvalidArgument,
        "discard_amount",
    ),
    (
        "Queue-discard-over-limit",
        lambda: rv.Queue(limit=5, discard_amount=10, policy=rv.LimitPolicy.DISCARD_FIRST),
        rv.InvalidArgument,
        "discard_amount must be <= limit",
    ),
    (
        "Queue-priority-zero",
        lambda: rv.Queue(priority=0),
        rv.InvalidArgument,
        "priority must be >= 1",
    ),
    (
        "Queue-priority-str",
        lambda: rv.Queue(priority="x"),
        rv.InvalidArgument,
        "priority must be an int",
    ),
    ("Queue-name-int", lambda: rv.Queue(name=5), rv.InvalidArgument, "name must be a str"),
    (
        "QueueGroup-int",
        lambda: rv.QueueGroup(5),
        rv.InvalidArgument,
        "queue must be an rvasync Queue",
    ),
    ("QueueGroup.add-int", lambda: rv.QueueGroup().add(5), rv.InvalidArgument, "queue must be"),
    (
        "QueueGroup.remove-stranger",
        lambda: rv.QueueGroup().remove(rv.Queue(name="q")),
        rv.InvalidArgument,
        "'q' is not in this group",
    ),
    # -- Transport construction ----------------------------------------------------------------
    (
        "Transport-service-int",
        lambda: rv.Transport(service=5),
        rv.InvalidArgument,
        "service must be a str",
    ),
    (
        "Transport-network-int",
        lambda: rv.Transport(network=5),
        rv.InvalidArgument,
        "network must be a str",
    ),
    (
        "Transport-daemon-int",
        lambda: rv.Transport(daemon=5),
        rv.InvalidArgument,
        "daemon must be a str",
    ),
    (
        "Transport-daemon-junk",
        lambda: rv.Transport(daemon="junk"),
        rv.InvalidArgument,
        "daemon 'junk'",
    ),
    (
        "Transport-daemon-port",
        lambda: rv.Transport(daemon="127.0.0.1:99999"),
        rv.InvalidArgument,
        "1..65535",
    ),
    (
        "Transport-daemon-parts",
        lambda: rv.Transport(daemon="a:b:c"),
        rv.InvalidArgument,
        "daemon 'a:b:c'",
    ),
    (
        "Transport-description-int",
        lambda: rv.Transport(description=5),
        rv.InvalidArgument,
        "description",
    ),
    (
        "Transport-reliability-negative",
        lambda: rv.Transport(reliability=-1),
        rv.InvalidArgument,
        "reliability",
    ),
    (
        "Transport-reliability-nan",
        lambda: rv.Transport(reliability=NAN),
        rv.InvalidArgument,
        "reliability",
    ),
    (
        "Transport-reliability-inf",
        lambda: rv.Transport(reliability=INF),
        rv.InvalidArgument,
        "reliability",
    ),
    (
        "Transport-reliability-str",
        lambda: rv.Transport(reliability="x"),
        rv.InvalidArgument,
        "reliability",
    ),
    (
        "Transport-busy_poll-nan",
        lambda: rv.Transport(busy_poll=NAN),
        rv.InvalidArgument,
        "busy_poll",
    ),
    ("Transport-busy_poll-big", lambda: rv.Transport(busy_poll=5), rv.InvalidArgument, "busy_poll"),
    (
        "Transport-busy_poll-str",
        lambda: rv.Transport(busy_poll="x"),
        rv.InvalidArgument,
        "busy_poll",
    ),
    (
        "Transport-reply_poll-negative",
        lambda: rv.Transport(reply_poll=-1),
        rv.InvalidArgument,
        "reply_poll",
    ),
    (
        "Transport-reply_poll-inf",
        lambda: rv.Transport(reply_poll=INF),
        rv.InvalidArgument,
        "reply_poll",
    ),
    ("Transport-batch-str", lambda: rv.Transport(batch="yes"), rv.InvalidArgument, "batch"),
    # -- Daemon -------------------------------------------------------------------------------
    ("Daemon-positional", lambda: rv.Daemon(5), TypeError, "positional"),
    ("Daemon-listen-negative", lambda: rv.Daemon(listen=-1), rv.InvalidArgument, "listen"),
    ("Daemon-listen-str", lambda: rv.Daemon(listen="x"), rv.InvalidArgument, "listen"),
    ("Daemon-listen-huge", lambda: rv.Daemon(listen=70000), rv.InvalidArgument, "listen"),
    ("Daemon-host-empty", lambda: rv.Daemon(host=""), rv.InvalidArgument, "host"),
    ("Daemon-host-int", lambda: rv.Daemon(host=5), rv.InvalidArgument, "host"),
    (
        "Daemon-reliability-nan",
        lambda: rv.Daemon(reliability=NAN),
        rv.InvalidArgument,
        "reliability",
    ),
    (
        "Daemon-reliability-negative",
        lambda: rv.Daemon(reliability=-1),
        rv.InvalidArgument,
        "reliability",
    ),
    ("Daemon-idle_exit-negative", lambda: rv.Daemon(idle_exit=-1), rv.InvalidArgument, "idle_exit"),
    ("Daemon-idle_exit-inf", lambda: rv.Daemon(idle_exit=INF), rv.InvalidArgument, "idle_exit"),
    ("Daemon-busy_poll-big", lambda: rv.Daemon(busy_poll=2), rv.InvalidArgument, "busy_poll"),
    (
        "Daemon-max_consumer_buffer-zero",
        lambda: rv.Daemon(max_consumer_buffer=0),
        rv.InvalidArgument,
        "max_consumer_buffer",
    ),
    (
        "Daemon-max_consumer_buffer-str",
        lambda: rv.Daemon(max_consumer_buffer="x"),
        rv.InvalidArgument,
        "max_consumer_buffer",
    ),
    ("Daemon-loss-one", lambda: rv.Daemon(loss=1), rv.InvalidArgument, "loss"),
    ("Daemon-loss-nan", lambda: rv.Daemon(loss=NAN), rv.InvalidArgument, "loss"),
    (
        "Daemon-max_datagram-small",
        lambda: rv.Daemon(max_datagram=10),
        rv.InvalidArgument,
        "max_datagram",
    ),
    (
        "Daemon-heartbeat-zero",
        lambda: rv.Daemon(heartbeat_interval=0),
        rv.InvalidArgument,
        "heartbeat_interval",
    ),
    (
        "Daemon-peer_timeout-short",
        lambda: rv.Daemon(peer_timeout=0.5),
        rv.InvalidArgument,
        "peer_timeout",
    ),
]


def _ids(cases: list[Any]) -> list[Any]:
    """Rows are ``(id, *values)`` tuples, or ``pytest.param(id, *values, marks=...)``."""
    out = []
    for case in cases:
        if hasattr(case, "marks"):  # a pytest.param (itself a tuple)
            values = case.values
            out.append(pytest.param(*values[1:], id=values[0], marks=case.marks))
        else:
            out.append(pytest.param(*case[1:], id=case[0]))
    return out


@pytest.mark.parametrize(("call", "error", "pattern"), _ids(SYNC))
def test_sync_call_names_the_argument(call: Callable[[], Any], error: Any, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()


# -- calls on an open transport: the process transport and a network transport -------------

AsyncCall = Callable[[Any], Awaitable[Any] | Any]


def _reply_to(subject: Any) -> Any:
    request = M("A")
    request.reply_subject = subject
    return request


ON_TRANSPORT: list[Any] = [
    ("listen-int", lambda t: t.listen(5), rv.InvalidSubject, "subject must be a str"),
    ("listen-empty", lambda t: t.listen(""), rv.InvalidSubject, "empty"),
    ("listen-dots", lambda t: t.listen("A..B"), rv.InvalidSubject, "'A..B'"),
    ("listen-inbox-wildcard", lambda t: t.listen("_INBOX.>"), rv.NotPermitted, "wildcards"),
    ("listen-queue-int", lambda t: t.listen("A", queue=5), rv.InvalidArgument, "queue must be"),
    (
        "listen-callback-int",
        lambda t: t.listen("A", callback=5),
        rv.InvalidArgument,
        "callback must be callable",
    ),
    ("send-no-subject", lambda t: t.send(M()), rv.InvalidArgument, "without a subject"),
    ("send-subject-empty", lambda t: t.send(M("")), rv.InvalidSubject, "empty"),
    ("send-subject-dots", lambda t: t.send(M("A..B")), rv.InvalidSubject, "'A..B'"),
    ("send-reserved", lambda t: t.send(M("_RV.X")), rv.NotPermitted, "'_RV.X'"),
    ("send-reserved-other", lambda t: t.send(M("_FOO.X")), rv.NotPermitted, "_FOO"),
    ("send-inbox-wildcard", lambda t: t.send(M("_INBOX.>")), rv.RvError, "_INBOX"),
    pytest.param(
        "send-int",
        lambda t: t.send(5),
        rv.InvalidArgument,
        "Message",
    ),
    pytest.param(
        "send-none",
        lambda t: t.send(None),
        rv.InvalidArgument,
        "Message",
    ),
    pytest.param(
        "send-reply-subject-dots",
        lambda t: t.send(_reply_to("A..B")),
        rv.InvalidSubject,
        "'A..B'",
    ),
    (
        "send_request-no-subject",
        lambda t: t.send_request(M(), 1),
        rv.InvalidArgument,
        "without a subject",
    ),
    (
        "send_request-timeout-zero",
        lambda t: t.send_request(M("A"), 0),
        rv.InvalidArgument,
        "timeout",
    ),
    (
        "send_request-timeout-negative",
        lambda t: t.send_request(M("A"), -1),
        rv.InvalidArgument,
        "timeout",
    ),
    (
        "send_request-timeout-none",
        lambda t: t.send_request(M("A"), None),
        rv.InvalidArgument,
        "timeout",
    ),
    ("send_request-reserved", lambda t: t.send_request(M("_RV.X"), 1), rv.NotPermitted, "'_RV.X'"),
    pytest.param(
        "send_request-int",
        lambda t: t.send_request(5, 1),
        rv.InvalidArgument,
        "Message",
    ),
    (
        "send_reply-no-reply-subject",
        lambda t: t.send_reply(M(), M("A")),
        rv.InvalidArgument,
        "no reply subject",
    ),
    (
        "send_reply-to-reserved",
        lambda t: t.send_reply(M(), _reply_to("_RV.X")),
        rv.NotPermitted,
        "'_RV.X'",
    ),
    pytest.param(
        "send_reply-reply-int",
        lambda t: t.send_reply(5, _reply_to("B")),
        rv.InvalidArgument,
        "reply",
    ),
    pytest.param(
        "send_reply-request-int",
        lambda t: t.send_reply(M(), 5),
        rv.InvalidArgument,
        "request",
    ),
    ("create_inbox-argument", lambda t: t.create_inbox(5), TypeError, "positional"),
]


async def _outcome(call: AsyncCall, t: Any) -> None:
    result = call(t)
    if asyncio.iscoroutine(result):
        await asyncio.wait_for(result, 10)


@pytest.mark.parametrize(("call", "error", "pattern"), _ids(ON_TRANSPORT))
async def test_network_transport_call_names_the_argument(
    rv_transport: Any, call: AsyncCall, error: Any, pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        await _outcome(call, rv_transport)


@pytest.mark.parametrize(("call", "error", "pattern"), _ids(ON_TRANSPORT))
async def test_process_transport_call_names_the_argument(
    call: AsyncCall, error: Any, pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        await _outcome(call, rv.process_transport())


@pytest.mark.parametrize("bad", [NAN, INF, "x", True], ids=["nan", "inf", "str", "bool"])
@pytest.mark.parametrize("kind", ["network", "process"])
async def test_send_request_timeout_is_refused_before_sending(
    rv_service: Any, kind: str, bad: Any
) -> None:
    if kind == "network":
        transport: Any = rv.Transport(*rv_service)
        await transport.open()
    else:
        transport = rv.process_transport()
    try:
        listener = transport.listen("REQ.BAD.TIMEOUT")
        with pytest.raises(rv.InvalidArgument, match="timeout"):
            await asyncio.wait_for(transport.send_request(M("REQ.BAD.TIMEOUT"), bad), 3)
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):  # nothing was sent
            await listener.get(0.2)
        await listener.close()
    finally:
        if kind == "network":
            await transport.close()


async def test_queue_get_timeout_is_checked() -> None:
    queue = rv.Queue()
    for bad, pattern in ((-1, "timeout must be >= 0"), (NAN, "timeout"), ("x", "timeout")):
        with pytest.raises(rv.InvalidArgument, match=pattern):
            await queue.get(bad)


# -- opening a transport with junk parameters ----------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        pytest.param({"service": "junk"}, rv.InvalidArgument, "service 'junk'", id="service-name"),
        pytest.param({"service": "0"}, rv.InvalidArgument, "service '0'", id="service-zero"),
        pytest.param(
            {"service": "99999"}, rv.InvalidArgument, "service '99999'", id="service-huge"
        ),
        pytest.param({"service": "-1"}, rv.InvalidArgument, "service '-1'", id="service-negative"),
        pytest.param({"network": ";;;"}, rv.InvalidArgument, "network ';;;'", id="network-parts"),
        pytest.param(
            {"network": "lo;junk"}, rv.InvalidArgument, "network 'lo;junk'", id="network-group"
        ),
        pytest.param(
            {"network": "lo;10.0.0.1"}, rv.InvalidArgument, "multicast", id="network-unicast"
        ),
        pytest.param(
            {"network": "no-such-if0"}, rv.InvalidArgument, "no-such-if0", id="network-if"
        ),
    ],
)
async def test_open_with_junk_parameters_names_them(kwargs: Any, error: Any, pattern: str) -> None:
    transport = rv.Transport(**kwargs)
    with pytest.raises(error, match=pattern):
        await asyncio.wait_for(transport.open(), 20)
    await transport.close()


async def test_open_with_an_unreachable_daemon_names_it() -> None:
    where = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
    transport = rv.Transport(daemon=where)
    with pytest.raises(rv.DaemonUnavailable, match=where):
        await asyncio.wait_for(transport.open(), 20)
    await transport.close()


# -- certified delivery and fault tolerance --------------------------------------------------

CM_AND_FT: list[Any] = [
    ("Cm-transport-int", lambda t: rv.CmTransport(5), rv.InvalidArgument, "transport"),
    ("Cm-name-int", lambda t: rv.CmTransport(t, 5), rv.InvalidSubject, "correspondent name"),
    ("Cm-name-empty", lambda t: rv.CmTransport(t, ""), rv.InvalidSubject, "correspondent name"),
    (
        "Cm-name-dots",
        lambda t: rv.CmTransport(t, "A..B"),
        rv.InvalidSubject,
        "correspondent name 'A..B'",
    ),
    ("Cm-ledger-int", lambda t: rv.CmTransport(t, "X", ledger=5), rv.InvalidArgument, "ledger"),
    ("Cm-ledger-empty", lambda t: rv.CmTransport(t, "X", ledger=""), rv.InvalidArgument, "ledger"),
    (
        "Cm-require_old-str",
        lambda t: rv.CmTransport(t, "X", require_old="x"),
        rv.InvalidArgument,
        "require_old",
    ),
    (
        "Cm-sync_ledger-str",
        lambda t: rv.CmTransport(t, "X", sync_ledger="x"),
        rv.InvalidArgument,
        "sync_ledger",
    ),
    (
        "Cm-relay-int",
        lambda t: rv.CmTransport(t, "X", relay_agent=5),
        rv.InvalidSubject,
        "relay agent",
    ),
    (
        "Cm-relay-dots",
        lambda t: rv.CmTransport(t, "X", relay_agent="A..B"),
        rv.InvalidSubject,
        "relay agent",
    ),
    (
        "Cm-time-limit-negative",
        lambda t: rv.CmTransport(t, "X", default_time_limit=-1),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "Cm-time-limit-nan",
        lambda t: rv.CmTransport(t, "X", default_time_limit=NAN),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "Cm-time-limit-inf",
        lambda t: rv.CmTransport(t, "X", default_time_limit=INF),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "Cm-time-limit-str",
        lambda t: rv.CmTransport(t, "X", default_time_limit="x"),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "Ft-transport-int",
        lambda t: rv.FtMember(5, "G", callback=print),
        rv.InvalidArgument,
        "transport",
    ),
    (
        "Ft-group-int",
        lambda t: rv.FtMember(t, 5, callback=print),
        rv.InvalidSubject,
        "must be a str",
    ),
    (
        "Ft-group-dots",
        lambda t: rv.FtMember(t, "A..B", callback=print),
        rv.InvalidSubject,
        "'A..B'",
    ),
    (
        "Ft-group-wildcard",
        lambda t: rv.FtMember(t, "A.*", callback=print),
        rv.InvalidSubject,
        "wildcard",
    ),
    ("Ft-callback-missing", lambda t: rv.FtMember(t, "G"), TypeError, "callback"),
    ("Ft-callback-int", lambda t: rv.FtMember(t, "G", callback=5), rv.InvalidArgument, "callback"),
    (
        "Ft-weight-zero",
        lambda t: rv.FtMember(t, "G", weight=0, callback=print),
        rv.InvalidArgument,
        "weight",
    ),
    (
        "Ft-weight-str",
        lambda t: rv.FtMember(t, "G", weight="x", callback=print),
        rv.InvalidArgument,
        "weight",
    ),
    (
        "Ft-weight-float",
        lambda t: rv.FtMember(t, "G", weight=1.5, callback=print),
        rv.InvalidArgument,
        "weight",
    ),
    (
        "Ft-active_goal-zero",
        lambda t: rv.FtMember(t, "G", active_goal=0, callback=print),
        rv.InvalidArgument,
        "active_goal",
    ),
    (
        "Ft-heartbeat-zero",
        lambda t: rv.FtMember(t, "G", heartbeat=0, callback=print),
        rv.InvalidArgument,
        "heartbeat",
    ),
    (
        "Ft-heartbeat-nan",
        lambda t: rv.FtMember(t, "G", heartbeat=NAN, callback=print),
        rv.InvalidArgument,
        "heartbeat",
    ),
    (
        "Ft-heartbeat-str",
        lambda t: rv.FtMember(t, "G", heartbeat="x", callback=print),
        rv.InvalidArgument,
        "heartbeat",
    ),
    (
        "Ft-heartbeat-over-activation",
        lambda t: rv.FtMember(t, "G", heartbeat=5, callback=print),
        rv.InvalidArgument,
        "heartbeat.*activation",
    ),
    (
        "Ft-activation-inf",
        lambda t: rv.FtMember(t, "G", activation=INF, callback=print),
        rv.InvalidArgument,
        "activation",
    ),
    (
        "Ft-preparation-between",
        lambda t: rv.FtMember(t, "G", preparation=0.5, callback=print),
        rv.InvalidArgument,
        "preparation",
    ),
    (
        "Ft-preparation-negative",
        lambda t: rv.FtMember(t, "G", preparation=-1, callback=print),
        rv.InvalidArgument,
        "preparation",
    ),
    (
        "Ft-weight-set-zero",
        lambda t: _set(rv.FtMember(t, "G", callback=print), "weight", 0),
        rv.InvalidArgument,
        "weight",
    ),
    (
        "Ft-weight-set-str",
        lambda t: _set(rv.FtMember(t, "G", callback=print), "weight", "x"),
        rv.InvalidArgument,
        "weight",
    ),
    (
        "FtMonitor-transport-int",
        lambda t: rv.FtMonitor(5, "G", lost_interval=1),
        rv.InvalidArgument,
        "transport",
    ),
    (
        "FtMonitor-group-dots",
        lambda t: rv.FtMonitor(t, "A..B", lost_interval=1),
        rv.InvalidSubject,
        "'A..B'",
    ),
    ("FtMonitor-lost-missing", lambda t: rv.FtMonitor(t, "G"), TypeError, "lost_interval"),
    (
        "FtMonitor-lost-zero",
        lambda t: rv.FtMonitor(t, "G", lost_interval=0),
        rv.InvalidArgument,
        "lost interval",
    ),
    (
        "FtMonitor-lost-nan",
        lambda t: rv.FtMonitor(t, "G", lost_interval=NAN),
        rv.InvalidArgument,
        "lost interval",
    ),
    (
        "FtMonitor-lost-inf",
        lambda t: rv.FtMonitor(t, "G", lost_interval=INF),
        rv.InvalidArgument,
        "lost interval",
    ),
    (
        "FtMonitor-lost-str",
        lambda t: rv.FtMonitor(t, "G", lost_interval="x"),
        rv.InvalidArgument,
        "lost interval",
    ),
    (
        "FtMonitor-callback-int",
        lambda t: rv.FtMonitor(t, "G", lost_interval=1, callback=5),
        rv.InvalidArgument,
        "callback",
    ),
]


@pytest.mark.parametrize(("call", "error", "pattern"), _ids(CM_AND_FT))
async def test_cm_and_ft_arguments_are_named(call: AsyncCall, error: Any, pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        await _outcome(call, rv.process_transport())


CM_CALLS: list[Any] = [
    ("cm.send-wildcard", lambda cm: cm.send(M("A.*")), rv.NotPermitted, "wildcard"),
    ("cm.send-no-subject", lambda cm: cm.send(M()), rv.RvError, "subject"),
    (
        "cm.send-time-limit-negative",
        lambda cm: cm.send(M("A"), time_limit=-1),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "cm.send-time-limit-nan",
        lambda cm: cm.send(M("A"), time_limit=NAN),
        rv.InvalidArgument,
        "time_limit",
    ),
    (
        "cm.send-time-limit-str",
        lambda cm: cm.send(M("A"), time_limit="x"),
        rv.InvalidArgument,
        "time_limit",
    ),
    ("cm.listen-dots", lambda cm: cm.listen("A..B"), rv.InvalidSubject, "'A..B'"),
    (
        "cm.listen-explicit-str",
        lambda cm: cm.listen("A", explicit_confirm="x"),
        rv.InvalidArgument,
        "explicit_confirm",
    ),
    ("cm.add_listener-dots", lambda cm: cm.add_listener("A..B", "S"), rv.InvalidSubject, "'A..B'"),
    ("cm.add_listener-subject-wild", lambda cm: cm.add_listener("L", "S.*"), rv.RvError, "S\\.\\*"),
    (
        "cm.disallow_listener-int",
        lambda cm: cm.disallow_listener(5),
        rv.InvalidSubject,
        "must be a str",
    ),
    ("cm.review_ledger-int", lambda cm: cm.review_ledger(5), rv.InvalidSubject, "must be a str"),
    (
        "cm.expire_messages-seq-str",
        lambda cm: cm.expire_messages("A", "x"),
        rv.InvalidArgument,
        "sequence",
    ),
]


@pytest.mark.parametrize(("call", "error", "pattern"), _ids(CM_CALLS))
async def test_cm_calls_name_the_argument(call: AsyncCall, error: Any, pattern: str) -> None:
    async with rv.CmTransport(rv.process_transport()) as cm:
        with pytest.raises(error, match=pattern):
            await _outcome(call, cm)


def test_naive_datetime_is_taken_as_utc() -> None:
    """Not an error: a naive datetime is UTC (documented in messages.md); kept here so the
    table says what happens to every DATETIME input."""
    msg = M("A", {"t": dt.datetime(2020, 1, 1)})
    assert msg["t"] == rv.DateTime.from_datetime(dt.datetime(2020, 1, 1, tzinfo=dt.UTC))


# -- the Spark recorder (rvasync.spark.Recorder) ----------------------------------------------

RECORDER: list[Any] = [
    ("transport-int", {"transport": 5}, "transport must be an rvasync transport"),
    ("subjects-empty", {"subjects": []}, "at least one subject"),
    ("subjects-int", {"subjects": 5}, "subjects must be"),
    ("subjects-dots", {"subjects": ["A..B"]}, "'A..B'"),
    ("subjects-inbox-wildcard", {"subjects": "_INBOX.>"}, "wildcards"),
    ("directory-int", {"directory": 5}, "directory must be"),
    ("directory-empty", {"directory": ""}, "directory must be"),
    ("roll_bytes-zero", {"roll_bytes": 0}, "roll_bytes"),
    ("roll_bytes-str", {"roll_bytes": "x"}, "roll_bytes"),
    ("roll_bytes-float", {"roll_bytes": 1.5}, "roll_bytes"),
    ("roll_interval-zero", {"roll_interval": 0}, "roll_interval"),
    ("roll_interval-nan", {"roll_interval": NAN}, "roll_interval"),
    ("roll_interval-inf", {"roll_interval": INF}, "roll_interval"),
    ("roll_interval-str", {"roll_interval": "x"}, "roll_interval"),
    ("batch_rows-zero", {"batch_rows": 0}, "batch_rows"),
    ("batch_rows-str", {"batch_rows": "x"}, "batch_rows"),
    ("row_group_rows-zero", {"row_group_rows": 0}, "row_group_rows"),
    ("progress-str", {"progress": "yes"}, "progress"),
]


@pytest.mark.parametrize(("changes", "pattern"), _ids(RECORDER))
async def test_recorder_arguments_are_named(tmp_path: Any, changes: Any, pattern: str) -> None:
    spark = pytest.importorskip("rvasync.spark.recorder")
    kwargs: dict[str, Any] = {
        "transport": rv.process_transport(),
        "subjects": ["A.>"],
        "directory": str(tmp_path / "capture"),
    }
    kwargs.update(changes)
    with pytest.raises(rv.RvError, match=pattern):
        spark.Recorder(**kwargs)


@pytest.mark.parametrize("attribute", ["subject", "reply_subject"])
async def test_a_subject_assigned_later_is_refused_when_sent(attribute: str) -> None:
    """``msg.subject`` is a plain attribute (read on every send: no property in the way);
    a bad value assigned later is refused by the send, naming it, and nothing is sent."""
    transport = rv.process_transport()
    listener = transport.listen("LATE.>")
    msg = M("LATE.A")
    _set(msg, attribute, 5)
    with pytest.raises((rv.InvalidArgument, rv.InvalidSubject), match="str"):
        await transport.send(msg)
    with pytest.raises(TimeoutError):
        await listener.get(0.1)
    await listener.close()
