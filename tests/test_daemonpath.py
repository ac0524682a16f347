"""The daemon's receive loop (daemonpath): the pure and compiled twins behave the same."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync import _accel
from rvasync.codec import encode
from rvasync.errors import MalformedMessage
from rvasync.message import Message

IMPLS = _accel.implementations("daemonpath")


@pytest.fixture(params=IMPLS, ids=lambda m: m.__name__)
def path(request):
    return request.param


class Recorder:
    """Routes and sinks that write down what happened, in order."""

    def __init__(self, routes):
        self.routes = routes  # subject -> (True: owned, "raw": undecoded, False: shared; sessions)
        self.log = []
        self.inbound = {}
        self.misses = []

    def decode(self, data):
        if data.endswith(b"!bad"):
            raise MalformedMessage("bad on purpose")
        return data

    def slow(self, data):
        self.misses.append(data)
        if data.startswith(b"drop"):
            return None
        subject = data[6 : 6 + data[5] - 0xA0] if len(data) > 6 and data[4] == 0x94 else b"?"
        kind, sessions = self.routes.get(subject, (False, ()))
        entry = (
            (lambda msg, s=subject: self.owned(s, msg)) if kind is True else None,
            (lambda data, s=subject: self.raw(s, data)) if kind == "raw" else None,
            sessions,
        )
        key = subject if len(data) > 6 and data[4] == 0x94 and 0xA0 < data[5] <= 0xBF else None
        if key is not None:
            self.inbound[key] = entry
        return entry

    def owned(self, subject, msg):
        if msg.endswith(b"!boom"):
            raise RuntimeError("sink failed")
        self.log.append(("owned", subject, msg))

    def raw(self, subject, data):
        if data.endswith(b"!boom"):
            raise RuntimeError("sink failed")
        self.log.append(("raw", subject, data))

    def shared(self, msg, data, sessions):
        self.log.append(("shared", msg, sessions))

    def contain(self, exc, msg):
        self.log.append(("contained", type(exc).__name__, msg))

    def run(self, path, payloads):
        result = path.deliver_multicast(
            payloads,
            self.inbound,
            self.decode,
            self.slow,
            self.shared,
            self.contain,
            MalformedMessage,
        )
        return result, self.log, self.misses


def wire(subject: bytes, tail: bytes = b"") -> bytes:
    return b"\xc1RV\x01\x94" + bytes([0xA0 + len(subject)]) + subject + b"\xc0\xc0\x90" + tail


def test_subject_key_reads_short_and_str8_subjects(path):
    assert path.subject_key(encode(Message("A.B", {}))) == b"A.B"
    long = ".".join(["X" * 100] * 2)
    assert path.subject_key(encode(Message(long, {}))) == long.encode()
    assert path.subject_key(encode(Message("ÉTÉ", {}))) == "ÉTÉ".encode()
    assert path.subject_key(b"short") is None
    assert path.subject_key(encode(Message(None, {}))) is None


def test_routes_cache_misses_and_counts(path):
    rec = Recorder({b"A": (True, ("s1",)), b"B": (False, ("s1", "s2")), b"C": (False, ())})
    payloads = [
        wire(b"A"),
        wire(b"A", b"x"),
        wire(b"B"),
        wire(b"C"),
        wire(b"A", b"!bad"),
        b"drop-me",
        wire(b"A", b"!boom"),
        wire(b"B"),
    ]
    result, log, misses = rec.run(path, payloads)
    assert result == (1 + 1 + 2 + 1 + 2, 1, 1)  # deliveries, unwanted, malformed
    assert [entry[0] for entry in log] == ["owned", "owned", "shared", "contained", "shared"]
    assert misses == [wire(b"A"), wire(b"B"), wire(b"C"), b"drop-me"]


def test_a_raw_route_takes_the_bytes_undecoded(path):
    """A session that wants the wire bytes (a routing daemon) gets them as they came: not
    decoded, so not counted malformed here (it reads and reports them itself)."""
    rec = Recorder({b"R": ("raw", ("router",)), b"A": (True, ("s1",))})
    payloads = [wire(b"R"), wire(b"R", b"!bad"), wire(b"A"), wire(b"R", b"!boom"), wire(b"R")]
    result, log, misses = rec.run(path, payloads)
    assert result == (5, 0, 0)
    assert log == [
        ("raw", b"R", wire(b"R")),
        ("raw", b"R", wire(b"R", b"!bad")),
        ("owned", b"A", wire(b"A")),
        ("contained", "RuntimeError", wire(b"R", b"!boom")),
        ("raw", b"R", wire(b"R")),
    ]
    assert misses == [wire(b"R"), wire(b"A")]


def make_payload(draw_item):
    kind, subject, tail = draw_item
    if kind == "garbage":
        return b"drop" + tail
    return wire(subject, tail)


items = st.tuples(
    st.sampled_from(["msg", "msg", "msg", "garbage"]),
    st.sampled_from([b"A", b"B", b"C", b"D.E", b"F"]),
    st.sampled_from([b"", b"1", b"!bad", b"!boom"]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(items, max_size=30), max_size=4))
def test_pure_and_native_agree(batches):
    routes = {
        b"A": (True, ("s1",)),
        b"B": (False, ("s1", "s2")),
        b"C": (False, ()),
        b"D.E": (True, ("s3",)),
        b"F": ("raw", ("s4",)),
    }
    outcomes = []
    for impl in IMPLS:
        rec = Recorder(routes)
        results = [rec.run(impl, [make_payload(i) for i in batch])[0] for batch in batches]
        outcomes.append((results, rec.log, rec.misses))
    assert all(outcome == outcomes[0] for outcome in outcomes)


subjects = st.one_of(
    st.none(),
    st.text(min_size=1, max_size=300),
    st.lists(st.text(alphabet="abcXYZé.", min_size=1, max_size=40), min_size=1, max_size=5).map(
        ".".join
    ),
)


@settings(max_examples=200, deadline=None)
@given(subjects)
def test_peeked_subject_and_key_match_the_decoded_subject(subject):
    """The layout of rvasync._wire agrees with the codec, for both twins of daemonpath."""
    from rvasync._wire import peek_subject

    data = encode(Message(subject, {}))
    assert peek_subject(data) == subject
    raw = None if subject is None else subject.encode()
    expected = raw if raw is not None and 0 < len(raw) <= 255 else None
    for impl in IMPLS:
        assert impl.subject_key(data) == expected


@given(st.binary(max_size=40))
def test_peeking_garbage_never_raises(data):
    from rvasync._wire import peek_subject

    subject = peek_subject(data)
    assert subject is None or isinstance(subject, str)
    keys = {impl.subject_key(data) for impl in IMPLS}
    assert len(keys) == 1
