"""Every boundary where rvasync reads bytes from outside, as a fuzz target.

This module is the harness shared by the quick CI tier (``test_fuzz_quick.py``),
the long mutation fuzzer (``python -m tests.fuzz.run``) and whoever wants to
poke one boundary by hand. It needs rvasync (and pyarrow for the capture
boundary) but neither pytest nor hypothesis.

A :class:`Boundary` is one boundary as one implementation ("twin") runs it:

``name`` / ``twin``
    e.g. ``codec`` / ``native``; twins are the entries of
    ``rvasync._accel.implementations`` (``pure``, ``native``), or ``-`` where the
    boundary has a single implementation.
``corpus()``
    VALID inputs, made with the project's own encoders (messages of every field
    type, frames of every type, datagrams of every kind ...).
``consume(data)``
    Feeds the bytes through the real decoding path. It returns normally, or
    raises one of ``errors`` (the boundary's documented error classes); any
    other exception is a defect. Boundaries whose documented behaviour is to
    drop and count (reliable datagrams never raise) raise :class:`Defect` when
    the counters show an internal error or a bound is broken.
``fixup(data, rng)``
    Optional: what a forger would do after mutating (recompute a CRC, a length)
    so mutations reach past the integrity checks. The fuzzers apply it to a
    share of their mutants.

Boundaries (and their documented errors):

* ``codec``: ``decode`` of a wire message; MalformedMessage (MessageTooLarge only
  over 64 MiB). Twins: pure, native (whose results are checked against the pure
  twin's: Defect if they differ).
* ``clientproto``: the TCP client protocol; bytes split at random points into
  ``FrameDecoder.feed``, then what the daemon does with each frame's contents
  (PUBLISH subject peeked and validated, HELLO service and reliability parsed,
  DELIVER/ADVISORY messages decoded as a client does); ProtocolError
  (a MalformedMessage), MalformedMessage, InvalidArgument (HELLO parameters),
  InvalidSubject/NotPermitted (subjects: the daemon presents ILLEGAL_PUBLISH).
  Twins: codec pure, native.
* ``reliable``: one datagram into a primed ReliableEndpoint (receive, a duplicate,
  then the timers), never raises; Defect when ``stats.internal_errors`` moves,
  the output/buffers exceed their bounds or HOST.STATUS cannot report the counters.
  Twins: rmframe pure, native.
* ``reliable_seq``: a run of up to 64 datagrams (packed in one input, each after its
  u16 length) into one endpoint, with timers between them; as ``reliable``.
* ``daemonpath``: one received message (a delivered datagram's payload, with
  copies, a truncation and an extension of it) through ``deliver_multicast`` and
  ``subject_key`` as a receiving daemon calls them; never raises (malformed
  messages are counted); Defect when it contains an exception or the twin's results
  differ from the pure twin's. Twins: daemonpath pure, native.
* ``cm_record``: a certified-delivery record message: decoded, then
  ``parse_record``; MalformedMessage. Twins: codec pure, native.
* ``ledger``: a ledger file's bytes through ``decode_ledger``; LedgerCorrupt,
  InvalidArgument (a ledger of another correspondent).
* ``http``: the status page's HTTP server (a real StatusServer over loopback,
  tests/fuzz/http_boundary.py); never raises: Defect on a 5xx answer, an answer
  that is not HTTP, an error the page logs, or a good request refused after it.
* ``capture``: a capture (Parquet) file through the Spark reader's path
  (``open_committed``, row groups, the cast to the base schema, projection of
  fields from each ``data`` message); CaptureError. Twins: codec pure, native.
* ``capture_marker``: the ``_committed.json`` marker through ``read_marker``;
  CaptureError.
"""

from __future__ import annotations

import ipaddress
import os
import random
import struct
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType

from rvasync import _accel
from rvasync.errors import InvalidArgument, InvalidSubject, MalformedMessage, NotPermitted
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Message
from rvasync.rvdatetime import DateTime

__all__ = ["BOUNDARIES", "Boundary", "Defect", "boundaries", "twins_of"]


class Defect(Exception):
    """Raised by a ``consume`` whose boundary never raises, when it saw a defect."""


@dataclass
class Boundary:
    name: str
    twin: str
    corpus: Callable[[], list[bytes]]
    consume: Callable[[bytes], object]
    errors: tuple[type[BaseException], ...]
    fixup: Callable[[bytes, random.Random], bytes] | None = None
    notes: str = ""
    _corpus: list[bytes] | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        return f"{self.name}[{self.twin}]"

    def seeds(self) -> list[bytes]:
        if self._corpus is None:
            self._corpus = self.corpus()
        return self._corpus


def _twin_name(module: ModuleType) -> str:
    return "native" if module.__name__.startswith("rvasync_native") else "pure"


def twins_of(hot_path: str) -> list[tuple[str, ModuleType]]:
    return [(_twin_name(m), m) for m in _accel.implementations(hot_path)]


# -- the client protocol (ONE place: it is moving from rvasync.daemon to rvasync.protocol) -----


def clientproto() -> ModuleType:
    """The client-protocol module (frames, FrameDecoder, ProtocolError)."""
    from rvasync.protocol import clientproto as cp

    return cp


# -- messages ---------------------------------------------------------------------------------


def sample_messages() -> list[Message]:
    """Messages covering every field type, nesting, labels and odd-but-valid values."""
    inner = Message(None, {"deep": True, "n": -1})
    inner.add("blob", b"\x00\xff")
    mid = Message("MID.SUBJECT", {"inner": inner}, reply_subject="_INBOX.X.1")
    msgs: list[Message] = []
    m = Message("ORDERS.EU.NEW", reply_subject="_INBOX.7F000001.1")
    m.add("id", 1017, field_id=1)
    m.add("qty", 200, FieldType.U8, 2)
    m.add("i8", -128, FieldType.I8)
    m.add("i16", -300, FieldType.I16)
    m.add("i32", -(2**31), FieldType.I32)
    m.add("i64", 2**63 - 1, FieldType.I64)
    m.add("u16", 65535, FieldType.U16)
    m.add("u32", 2**32 - 1, FieldType.U32)
    m.add("u64", 2**64 - 1, FieldType.U64)
    m.add("price", 101.25)
    m.add("ratio", 0.25, FieldType.F32)
    m.add("symbol", "TIBX é ✓")
    m.add("opaque", bytes(range(40)))
    m.add("xml", "<a>x</a>", FieldType.XML)
    m.add("flag", True)
    m.add("when", DateTime(1_700_000_000, 999_999))
    m.add("before", DateTime(-5, 1))
    m.add("host", ipaddress.IPv4Address("10.1.2.3"))
    m.add("port", 7500, FieldType.IPPORT16)
    for ftype, values in (
        (FieldType.I8ARRAY, [-1, 2]),
        (FieldType.U8ARRAY, [0, 255]),
        (FieldType.I16ARRAY, [-2, 3]),
        (FieldType.U16ARRAY, [1, 65535]),
        (FieldType.I32ARRAY, [1, -2, 3]),
        (FieldType.U32ARRAY, [7]),
        (FieldType.I64ARRAY, [2**40, -(2**40)]),
        (FieldType.U64ARRAY, [2**64 - 1]),
        (FieldType.F32ARRAY, [0.5, -1.0]),
        (FieldType.F64ARRAY, [1e300, float("nan")]),
    ):
        m.add(ftype.name.lower(), values, ftype)
    m.add("empty", [], FieldType.I32ARRAY)
    m.add("names", ["a", "", "ü"])
    m.add("nested", mid, field_id=9)
    m.add("list", [inner, Message("L", {"x": 1})])
    m.add(None, "unnamed")
    m.add("symbol", "dup name")
    msgs.append(m)
    labeled = Message("CM.SUBJECT", {"payload": b"p" * 300})
    labeled.cm = CmLabel("orders-service", 42, 30.0)
    msgs.append(labeled)
    unsequenced = Message("CM.X", {"s": "x" * 70})
    unsequenced.cm = CmLabel("a", None, 0.0)
    msgs.append(unsequenced)
    msgs.append(Message())
    msgs.append(Message("A", {"big": "y" * 70000}))  # str32 / bin32 lengths
    msgs.append(Message("B." + "L" * 300, {"opaque": bytes(300)}))  # subject of str16
    deep = Message(None, {"leaf": 1})
    for level in range(30):
        deep = Message(None, {f"l{level}": deep})
    msgs.append(Message("DEEP", {"d": deep}))
    many = Message("MANY")
    for i in range(40):
        many.add(f"f{i}", i, field_id=i + 1)
    msgs.append(many)
    return msgs


def _codec_boundary(twin: str, codec: ModuleType) -> Boundary:
    decode = codec.decode
    pure = _accel.pure_module("codec")

    def corpus() -> list[bytes]:
        return [codec.encode(m) for m in sample_messages()]

    def parity(data: bytes) -> Message:
        """The native decode, checked against the pure one (same message, or both refuse)."""
        try:
            got = decode(data)
        except MalformedMessage:
            try:
                pure.decode(data)
            except MalformedMessage:
                raise
            raise Defect("the native codec refuses what the pure one decodes") from None
        try:
            want = pure.decode(data)
        except MalformedMessage as exc:
            raise Defect(f"the native codec decodes what the pure one refuses: {exc}") from None
        if got != want or got.cm != want.cm or codec.encode(got) != pure.encode(want):
            raise Defect("the codec twins decode to different messages")
        return got

    return Boundary(
        "codec",
        twin,
        corpus,
        decode if codec is pure else parity,
        (MalformedMessage,),
        notes="decode(bytes) -> Message",
    )


# -- client protocol frames -------------------------------------------------------------------


def _clientproto_boundary(twin: str, codec: ModuleType) -> Boundary:
    cp = clientproto()
    from rvasync.daemon.engine import _optional_seconds
    from rvasync.daemon.params import parse_service
    from rvasync.daemon.service import check_client_subject
    from rvasync.daemon.session import Payload
    from rvasync.subjects import check_listen_subject, validate_subject

    decode = codec.decode
    errors = (MalformedMessage, InvalidArgument, InvalidSubject, NotPermitted)

    def corpus() -> list[bytes]:
        wires = [codec.encode(m) for m in sample_messages()[:4]]
        frames = [
            cp.Hello(),
            cp.Hello(1, "7500", ";239.1.1.1", "fuzz client", 60.0),
            cp.Hello(2, "", None, None, 0),
            cp.Welcome("_INBOX.7F000001.1.", {"pid": 1, "version": "x", "port": 7500}),
            cp.Error("PROTOCOL", "bad frame"),
            cp.Listen("ORDERS.>"),
            cp.Listen("A.*.C"),
            cp.Unlisten("ORDERS.>"),
            cp.Publish(wires),
            cp.Publish([wires[1]]),
            cp.Deliver(wires[:2]),
            cp.Advisory(wires[2]),
            cp.Ping(2**63),
            cp.Pong(-5),
            cp.Bye("done"),
        ]
        out = [cp.encode(f) for f in frames]
        out.append(b"".join(out[:3]) + out[5] + out[8] + out[12])  # a conversation
        out.append(b"".join(cp.encode_messages(cp.FrameType.PUBLISH, wires * 3, target=200)))
        return out

    def use(frame) -> None:
        kind = type(frame)
        if kind is cp.Publish:
            for wire in frame.messages:
                subject = Payload(data=wire).subject
                if not subject:
                    continue  # the daemon drops the connection (ProtocolError)
                try:
                    validate_subject(subject, wildcards=True)
                    check_client_subject(subject)
                except (InvalidSubject, NotPermitted):
                    pass  # ILLEGAL_PUBLISH advisory
        elif kind is cp.Deliver:
            for wire in frame.messages:
                try:
                    decode(wire)
                except MalformedMessage:
                    pass
        elif kind is cp.Advisory:
            try:
                decode(frame.message)
            except MalformedMessage:
                pass
        elif kind is cp.Listen:
            try:
                check_listen_subject(frame.subject)
            except InvalidSubject:
                pass
        elif kind is cp.Hello:
            try:
                parse_service(frame.service)
                _optional_seconds("reliability", frame.reliability, zero_ok=True)
            except InvalidArgument:
                pass

    def consume(data: bytes) -> None:
        rng = random.Random(zlib.crc32(data))
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
        decoder = cp.FrameDecoder()
        start = 0
        for cut in [*cuts, len(data)]:
            try:
                frames = decoder.feed(data[start:cut])
            except cp.ProtocolError as exc:
                for frame in exc.frames:
                    use(frame)
                raise
            for frame in frames:
                use(frame)
            start = cut

    return Boundary("clientproto", twin, corpus, consume, errors, notes="FrameDecoder.feed")


# -- reliable multicast datagrams -------------------------------------------------------------

_RM_OPTIONS = dict(
    max_datagram=600,
    reorder_limit_bytes=256 * 1024,
    reorder_limit_datagrams=256,
    max_nak_datagrams=64,
    retransmit_burst_bytes=64 * 1024,
)
_RM_VICTIM = 2  # the session id of the endpoint under test (B in the corpus exchange)


def _rm_exchange(frame: ModuleType) -> list[bytes]:
    """Every datagram of a lossy exchange between A (session 1) and B (session 2)."""
    from rvasync.protocol.reliable import ReliableEndpoint

    eps = {
        "A": ReliableEndpoint(now=0.0, session_id=1, frame=frame, **_RM_OPTIONS),
        "B": ReliableEndpoint(now=0.0, session_id=2, frame=frame, **_RM_OPTIONS),
    }
    captured: list[bytes] = []
    counter = 0
    now = 0.0
    sizes = (20, 50, 1500, 30, 2000, 17, 90, 5000)
    for step in range(120):
        if step < len(sizes):
            size = sizes[step]
            eps["A"].send_multicast(bytes([step]) * size)
            eps["A"].send_ptp("B", bytes([step + 1]) * size)
            eps["B"].send_multicast(bytes([step + 2]) * (size // 2 + 1))
            for ep in eps.values():
                ep.flush(now)
        if step == 100:
            eps["A"].close(now)
        for src, ep in eps.items():
            ep.handle_timer(now)
            for data, dest in ep.datagrams_to_send():
                data = bytes(data)
                captured.append(data)
                counter += 1
                if counter % 4 == 0:
                    continue  # lost: the receiver NAKs
                for name, other in eps.items():
                    if name != src and (dest is None or dest == name):
                        other.receive_datagram(data, src, now)
            ep.events()
        now += 0.02
    return captured


def host_status_of(ep) -> Message:
    """The HOST.STATUS advisory a daemon publishes from this endpoint's counters, encoded."""
    from rvasync.daemon import advisories as adv
    from rvasync.daemon.stats import DaemonIdentity, ServiceCounters, host_status_fields

    who = DaemonIdentity(
        host="127.0.0.1",
        port=40000,
        address_hex="7F0000019C40",
        pid=1,
        session=ep.session_id,
        ipport=7500,
        version="fuzz",
    )
    fields = host_status_fields(
        who=who,
        core=ep.stats,
        counters=ServiceCounters(),
        uptime=1.0,
        clients=1,
        service="7500",
        service_port=7500,
        network="",
    )
    message = adv.host_status("127.0.0.1", fields)
    message.to_bytes()
    return message


def _reliable_boundary(twin: str, frame: ModuleType) -> Boundary:
    from rvasync.protocol.reliable import ReliableEndpoint

    def corpus() -> list[bytes]:
        captured = _rm_exchange(frame)
        kinds = {d[7] for d in captured}
        assert kinds == {1, 2, 3}, f"the corpus must hold data, heartbeats and NAKs, got {kinds}"
        # Extra shapes: a heartbeat claiming huge streams, a NAK of absurd ranges.
        captured.append(frame.build_heartbeat(1, 0, [(0, 0, 0, 1, 1, 2**63, 1)]))
        captured.append(frame.build_nak(1, _RM_VICTIM, 0, [(1, 2**32 - 1), (2**63, 5)]))
        return captured

    @cache
    def prelude() -> tuple[bytes, ...]:
        # The first datagrams A sent (multicast data with fragments), to give the victim
        # streams in progress (a partly reassembled message) for the fuzzed datagram to hit.
        seeds = [d for d in _rm_exchange(frame) if d[7] == 1 and d[8] == 1][:3]
        return tuple(seeds)

    def consume(data: bytes) -> None:
        ep = ReliableEndpoint(now=0.0, session_id=_RM_VICTIM, frame=frame, **_RM_OPTIONS)
        ep.send_multicast(b"v" * 1500)  # retained: NAKs for session 2 are served
        ep.flush(0.0)
        ep.datagrams_to_send()
        for seed in prelude():
            ep.receive_datagram(seed, "A", 0.01)
        ep.events()
        ep.receive_datagram(data, "A", 0.02)
        ep.receive_datagram(data, "Z", 0.03)  # a duplicate, from elsewhere
        sent = 0
        for t in (0.05, 0.2, 1.5, 12.0, 75.0):
            ep.handle_timer(t)
            out = ep.datagrams_to_send()
            sent += len(out)
            for d, _ in out:
                if len(d) > ep.max_datagram:
                    raise Defect(f"sent a datagram of {len(d)} bytes over max_datagram")
            ep.events()
        if ep.stats.internal_errors:
            raise Defect(f"internal error in the core: {ep.last_internal_error!r}")
        if sent > 1000:
            raise Defect(f"one datagram made the endpoint send {sent} datagrams")
        if ep.buffered_bytes() > _RM_OPTIONS["reorder_limit_bytes"] + 3 * 64 * 1024 * 1024:
            raise Defect(f"buffered {ep.buffered_bytes()} bytes")
        try:
            host_status_of(ep)  # the daemon reports these counters
        except Exception as exc:
            raise Defect(f"HOST.STATUS of the counters fails: {exc!r}") from exc

    def fixup(data: bytes, rng: random.Random) -> bytes:
        """Recompute the CRC (a forger's datagram), so mutations reach the core."""
        if len(data) < 6 or rng.random() < 0.15:
            return data
        body = data[6:]
        return data[:2] + struct.pack("<I", zlib.crc32(body)) + body

    return Boundary(
        "reliable", twin, corpus, consume, (), fixup=fixup, notes="ReliableEndpoint.receive"
    )


def pack_datagrams(datagrams: list[bytes]) -> bytes:
    """Several datagrams as one fuzz input: each prefixed by its length (u16, little-endian)."""
    return b"".join(struct.pack("<H", len(d)) + d for d in datagrams)


def unpack_datagrams(data: bytes) -> list[bytes]:
    """The datagrams of a fuzz input (leniently: a length past the end takes what is left)."""
    out = []
    off = 0
    while off + 2 <= len(data) and len(out) < 64:
        (n,) = struct.unpack_from("<H", data, off)
        out.append(data[off + 2 : off + 2 + n])
        off += 2 + n
    return out


def _reliable_sequence_boundary(twin: str, frame: ModuleType) -> Boundary:
    """Several datagrams in a row into one endpoint (the input packs them, see
    pack_datagrams): fragments across datagrams, gaps, NAKs of retained data,
    heartbeats moving the window, all from several sources and over time."""
    from rvasync.protocol.reliable import ReliableEndpoint

    def corpus() -> list[bytes]:
        captured = _rm_exchange(frame)
        out = []
        for start in range(0, len(captured), 5):
            out.append(pack_datagrams(captured[start : start + 3 + start % 9]))
        return out

    def consume(data: bytes) -> None:
        datagrams = unpack_datagrams(data)
        ep = ReliableEndpoint(now=0.0, session_id=_RM_VICTIM, frame=frame, **_RM_OPTIONS)
        ep.send_multicast(b"v" * 1500)
        ep.send_ptp("A", b"w" * 700)
        ep.flush(0.0)
        ep.datagrams_to_send()
        now = 0.01
        sent = 0
        for i, d in enumerate(datagrams):
            ep.receive_datagram(d, "A" if i % 3 else "C", now)
            now += 0.004 * (i % 4)
            if i % 3 == 2:
                ep.handle_timer(now)
                sent += len(ep.datagrams_to_send())
                ep.events()
        for t in (0.3, 2.0, 12.0, 75.0):
            ep.handle_timer(now + t)
            sent += len(ep.datagrams_to_send())
            ep.events()
        if ep.stats.internal_errors:
            raise Defect(f"internal error in the core: {ep.last_internal_error!r}")
        if sent > 2000 + 100 * len(datagrams):
            raise Defect(f"{len(datagrams)} datagrams made the endpoint send {sent}")
        try:
            host_status_of(ep)
        except Exception as exc:
            raise Defect(f"HOST.STATUS of the counters fails: {exc!r}") from exc

    def fixup(data: bytes, rng: random.Random) -> bytes:
        """Recompute each datagram's CRC (most of the time)."""
        out = []
        for d in unpack_datagrams(data):
            if len(d) >= 6 and rng.random() < 0.85:
                d = d[:2] + struct.pack("<I", zlib.crc32(d[6:])) + d[6:]
            out.append(d)
        return pack_datagrams(out)

    return Boundary(
        "reliable_seq",
        twin,
        corpus,
        consume,
        (),
        fixup=fixup,
        notes="ReliableEndpoint.receive of a run of datagrams",
    )


# -- the daemon's receive path for the messages of delivered datagrams -------------------------


def _daemonpath_boundary(twin: str, path: ModuleType) -> Boundary:
    """One received message (the payload of a delivered datagram) through ``deliver_multicast``
    and ``subject_key`` as the daemon calls them; the pure twin's results are the reference
    (any difference is a parity defect)."""
    from rvasync.codec import decode
    from rvasync.daemon.session import peek_subject

    pure = _accel.pure_module("daemonpath")

    def corpus() -> list[bytes]:
        return [m.to_bytes() for m in sample_messages()] + [
            Message("_INBOX.7F000001.1.2", {"x": 1}).to_bytes(),
            Message("S" * 31, {}).to_bytes(),
            Message("T" * 32, {}).to_bytes(),
        ]

    def run(module: ModuleType, payloads: list[bytes]) -> tuple:
        inbound: dict[bytes, tuple] = {
            b"CACHED": (None, None, ("s1", "s2")),
            b"NOBODY": (None, None, ()),
        }
        seen: list = []

        def slow(data: bytes):
            subject = peek_subject(data)
            if subject is None:
                try:
                    subject = decode(data).subject
                except MalformedMessage:
                    return None
            if not subject or subject.startswith("_"):
                return None
            # Three kinds of route: one owner (decoded), one raw sink (wire bytes), shared.
            if len(subject) % 3 == 1:
                entry = (seen.append, None, ("s1",))
            elif len(subject) % 3 == 2:
                entry = (None, seen.append, ("s1",))
            else:
                entry = (None, None, ("s1", "s2"))
            key = module.subject_key(data)
            if key is not None:
                inbound[key] = entry
            return entry

        def shared(msg, data, sessions) -> None:
            seen.append((msg, len(sessions)))

        def contain(exc, msg) -> None:
            raise Defect(f"deliver_multicast contained {exc!r}")

        counts = module.deliver_multicast(
            payloads, inbound, decode, slow, shared, contain, MalformedMessage
        )
        keys = [module.subject_key(p) for p in payloads]
        return counts, keys, len(seen), sorted(inbound)

    def consume(data: bytes) -> None:
        payloads = [data, data, data[:-1], data + b"\x00", data]
        got = run(path, payloads)
        if path is not pure:
            want = run(pure, payloads)
            if got != want:
                raise Defect(f"daemonpath twins differ: {got!r} != {want!r}")

    return Boundary(
        "daemonpath", twin, corpus, consume, (), notes="deliver_multicast + subject_key"
    )


# -- certified-delivery records ---------------------------------------------------------------


def _cm_records():
    from rvasync.protocol.cm import records as r

    common = {"origin": "orders-service", "address": "_INBOX.7F000001.2.1"}
    return [
        r.DataRecord(**common, subject="ORD", sequence=7, time_limit=30.0, payload=b"\x01" * 40),
        r.DataRecord(
            **common, subject="ORD", sequence=1, time_limit=0.0, payload=b"", retransmit=True
        ),
        r.RegisterRequest(**common, subject="ORD", require_old=True, last_confirmed=3),
        r.RegisterReply(**common, subject="ORD", begin=1, last_sent=9, resumed=False),
        r.NotCertified(**common, subject="ORD", disallowed=True),
        r.Confirm(**common, subject="ORD", sequence=5),
        r.ConfirmRequest(**common, subject="ORD", last_sent=9),
        r.RetransmitRequest(**common, subject="ORD", first=2, last=4),
        r.Unavailable(**common, subject="ORD", first=1, last=1),
        r.Cancel(**common, subject="ORD"),
        r.Invite(**common, subject="ORD"),
        r.Hello(**common, reply=True),
        r.Hello(**common),
    ]


def _cm_record_boundary(twin: str, codec: ModuleType) -> Boundary:
    from rvasync.cmdriver.wire import message_fields, record_message
    from rvasync.protocol.cm.records import parse_record

    decode = codec.decode

    def corpus() -> list[bytes]:
        return [codec.encode(record_message("_INBOX.X.1", rec)) for rec in _cm_records()]

    def consume(data: bytes) -> object:
        return parse_record(message_fields(decode(data)))

    return Boundary(
        "cm_record", twin, corpus, consume, (MalformedMessage,), notes="parse_record(decode)"
    )


# -- ledger files -----------------------------------------------------------------------------

LEDGER_NAME = "orders-service"


def _ledger_records():
    from rvasync.protocol.cm import ledger as lg

    return [
        lg.SubjectMark(subject="ORD", last_sent=10),
        lg.StoredMessage(
            subject="ORD", sequence=11, time_limit=30.0, expiry=2e9, payload=b"m" * 50
        ),
        lg.StoredMessage(subject="ORD", sequence=12, time_limit=0.0, expiry=0.0, payload=b""),
        lg.Registration(
            subject="ORD",
            listener="L1",
            address="_INBOX.A",
            begin=1,
            confirmed=0,
            last_sent=12,
            anticipated=False,
        ),
        lg.ListenerConfirmed(subject="ORD", listener="L1", sequence=11),
        lg.MessageRemoved(subject="ORD", sequence=11),
        lg.MessagesRemoved(subject="ORD", first=1, last=12),
        lg.RegistrationRemoved(subject="ORD", listener="L1"),
        lg.Disallowed(listener="BAD"),
        lg.Allowed(listener="BAD"),
        lg.Source(sender="S", subject="ORD", address="_INBOX.B", confirmed=3),
        lg.SourceConfirmed(sender="S", subject="ORD", sequence=4),
        lg.SourceRemoved(sender="S", subject="ORD"),
    ]


def _ledger_boundary() -> Boundary:
    from rvasync.protocol.cm.ledger_format import (
        LedgerCorrupt,
        compact_ledger,
        decode_ledger,
        encode_record,
        new_ledger,
    )

    def corpus() -> list[bytes]:
        header = new_ledger(LEDGER_NAME, 1_700_000_000.0)
        records = _ledger_records()
        full = header + b"".join(encode_record(rec) for rec in records)
        replay = decode_ledger(full, expected_name=LEDGER_NAME)
        assert replay.record_count == len(records) and replay.torn_bytes == 0
        compacted = compact_ledger(
            decode_ledger(header + b"".join(encode_record(rec) for rec in records[:5])).state, 1.0
        )
        return [header, full, compacted, full[:-7]]  # the last one: a torn tail

    def consume(data: bytes) -> object:
        return decode_ledger(data, path="<fuzz>", expected_name=LEDGER_NAME)

    def fixup(data: bytes, rng: random.Random) -> bytes:
        """Recompute the frames' CRCs after a mutation (a forged, intact-looking file)."""
        if rng.random() < 0.2:
            return data
        buf = bytearray(data)
        off = 8
        while off + 12 <= len(buf):
            length = struct.unpack_from("<I", buf, off)[0]
            end = off + 12 + length
            if end > len(buf):
                break
            struct.pack_into(
                "<II", buf, off + 4, zlib.crc32(buf[off : off + 4]), zlib.crc32(buf[off + 12 : end])
            )
            off = end
        return bytes(buf)

    return Boundary(
        "ledger",
        "-",
        corpus,
        consume,
        (LedgerCorrupt, InvalidArgument),
        fixup=fixup,
        notes="decode_ledger",
    )


# -- capture files ----------------------------------------------------------------------------


def _capture_corpus() -> list[bytes]:
    import time

    from rvasync.spark.capture import CaptureWriter, fields_json, file_path, rows_to_batch

    msgs = sample_messages()[:4] + [Message("S.X", {"n": i, "s": "v" * i}) for i in range(6)]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for group_rows in (3, 65536):
            directory = os.path.join(tmp, f"g{group_rows}")
            with CaptureWriter(directory, row_group_rows=group_rows) as writer:
                columns: list[list] = [[] for _ in range(7)]
                for i, msg in enumerate(msgs):
                    label = msg.cm
                    columns[0].append(msg.subject or "")
                    columns[1].append(msg.reply_subject)
                    columns[2].append(label.sender if label else None)
                    columns[3].append(label.sequence if label else None)
                    columns[4].append(int(time.time() * 1e6) + i)
                    columns[5].append(msg.to_bytes())
                    columns[6].append(fields_json(msg))
                writer.append(rows_to_batch(columns))
                writer.commit()
            with open(file_path(directory, 1), "rb") as f:
                out.append(f.read())
    return out


def _capture_boundary() -> Boundary:
    from pyspark.sql import types as T

    from rvasync.spark import capture, scan, storage
    from rvasync.spark.typemap import METADATA_KEY, field_to_spark

    directory = tempfile.mkdtemp(prefix="rvasync-fuzz-capture-")
    path = os.path.join(directory, capture.file_name(1))
    fields = list(scan.BASE_SCHEMA.fields)
    for name, ftype in (
        ("n", FieldType.I64),
        ("symbol", FieldType.STRING),
        ("price", FieldType.F64),
        ("u8array", FieldType.U8ARRAY),
        ("when", FieldType.DATETIME),
        ("names", FieldType.STRINGARRAY),
        ("host", FieldType.IPADDR32),
    ):
        meta = {METADATA_KEY: ftype.name, scan.FIELD_KEY: name}
        fields.append(T.StructField(f"f_{name}", field_to_spark(ftype, name), True, meta))
    schema = T.StructType(fields)

    def consume(data: bytes) -> int:
        """A committed file through the Spark source's planner and reader (scan.py)."""
        with open(path, "wb") as f:
            f.write(data)
        rows = 0
        # A file without a marker entry (as from an rvasync before 0.13): the reader's
        # own checks, without the checksums that would refuse any changed byte.
        ref = capture.CommittedFile(storage.locate(directory), 1)
        for part in scan.plan([ref], rows_per_part=4):
            for batch in scan.read_part(part, schema):
                rows += batch.num_rows
        return rows

    return Boundary(
        "capture",
        "-",
        _capture_corpus,
        consume,
        (capture.CaptureError,),
        notes="scan.plan + scan.read_part (open_committed, row groups, cast, projection)",
    )


def _capture_marker_boundary() -> Boundary:
    from rvasync.spark.capture import MARKER_NAME, CaptureError, read_marker

    directory = tempfile.mkdtemp(prefix="rvasync-fuzz-marker-")
    path = os.path.join(directory, MARKER_NAME)

    def corpus() -> list[bytes]:
        return [
            b'{"format": "rvasync-capture", "version": 1, "committed": 6, "rows": 1234}',
            b'{"format":"rvasync-capture","version":1,"committed":0,"rows":0}',
        ]

    def consume(data: bytes) -> object:
        with open(path, "wb") as f:
            f.write(data)
        return read_marker(directory)

    return Boundary("capture_marker", "-", corpus, consume, (CaptureError,), notes="read_marker")


# -- the registry -----------------------------------------------------------------------------


def boundaries() -> list[Boundary]:
    """Every boundary x twin, in a stable order."""
    out: list[Boundary] = []
    codecs = twins_of("codec")
    for twin, codec in codecs:
        out.append(_codec_boundary(twin, codec))
    for twin, codec in codecs:
        out.append(_clientproto_boundary(twin, codec))
    for twin, frame in twins_of("rmframe"):
        out.append(_reliable_boundary(twin, frame))
    for twin, frame in twins_of("rmframe"):
        out.append(_reliable_sequence_boundary(twin, frame))
    for twin, path in twins_of("daemonpath"):
        out.append(_daemonpath_boundary(twin, path))
    for twin, codec in codecs:
        out.append(_cm_record_boundary(twin, codec))
    out.append(_ledger_boundary())
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        pass
    else:
        from .http_boundary import http_boundary

        out.append(http_boundary())
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        out.append(_capture_boundary())
        out.append(_capture_marker_boundary())
    return out


BOUNDARIES = (
    "codec",
    "clientproto",
    "reliable",
    "cm_record",
    "ledger",
    "http",
    "capture",
    "capture_marker",
)
