"""The client protocol's connection object: the legal order of frames, for both roles."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.protocol.clientproto import (
    Advisory,
    Bye,
    Connection,
    Deliver,
    Error,
    Hello,
    Listen,
    LocalProtocolError,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    Reliability,
    Role,
    State,
    Unlisten,
    Welcome,
    encode,
)

MODERATE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(max_size=20)
wires = st.binary(max_size=200)
tokens = st.integers(min_value=0, max_value=2**32)

hello = st.builds(Hello, service=st.none() | texts, description=st.none() | texts)
welcome = st.builds(Welcome, inbox_prefix=texts)
client_steady = st.one_of(
    st.builds(Listen, subject=texts),
    st.builds(Unlisten, subject=texts),
    st.builds(Publish, messages=st.lists(wires, max_size=5)),
    st.builds(Ping, token=tokens),
    st.builds(Pong, token=tokens),
)
daemon_steady = st.one_of(
    st.builds(Deliver, messages=st.lists(wires, max_size=5)),
    st.builds(Advisory, message=wires),
    st.builds(Error, code=texts, text=texts),
    st.builds(Ping, token=tokens),
    st.builds(Pong, token=tokens),
)
any_frame = st.one_of(
    hello,
    welcome,
    client_steady,
    daemon_steady,
    st.builds(Bye, reason=texts),
    st.builds(Reliability, seconds=st.floats(0, 1e6, allow_nan=False)),
)


@st.composite
def conversations(draw):
    """A legal conversation: (sender role, frame) in the order they are sent.

    The client says HELLO (maybe after PINGs), the daemon WELCOMEs it, then both
    send their frames interleaved; either may end with BYE.
    """
    steps: list[tuple[Role, object]] = []
    for token in draw(st.lists(tokens, max_size=2)):
        steps.append((Role.CLIENT, Ping(token)))
    steps.append((Role.CLIENT, draw(hello)))
    # The client may pipeline before the WELCOME arrives.
    steps += [(Role.CLIENT, f) for f in draw(st.lists(client_steady, max_size=3))]
    steps.append((Role.DAEMON, draw(welcome)))
    for _ in range(draw(st.integers(0, 15))):
        role = draw(st.sampled_from(Role))
        frame = draw(client_steady if role is Role.CLIENT else daemon_steady)
        steps.append((role, frame))
    for role in draw(st.lists(st.sampled_from(Role), unique=True, max_size=2)):
        steps.append((role, Bye("done")))
    return steps


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(points)]


@MODERATE
@given(conversations(), st.lists(st.integers(0, 10**6), max_size=20))
def test_legal_conversations_round_trip_in_any_chunking(steps, cuts):
    ends = {Role.CLIENT: Connection(Role.CLIENT), Role.DAEMON: Connection(Role.DAEMON)}
    streams: dict[Role, bytearray] = {Role.CLIENT: bytearray(), Role.DAEMON: bytearray()}
    sent: dict[Role, list] = {Role.CLIENT: [], Role.DAEMON: []}
    received: dict[Role, list] = {Role.CLIENT: [], Role.DAEMON: []}
    for role, frame in steps:
        other = Role.DAEMON if role is Role.CLIENT else Role.CLIENT
        if type(frame) in (Publish, Deliver) and ends[role].our_state is State.OPEN:
            data = b"".join(ends[role].send_messages(frame.messages))
            if frame.messages:
                sent[role].append(frame)
        else:
            data = ends[role].send(frame)
            sent[role].append(frame)
        streams[role] += data
        # The daemon answers HELLO only after it has read it: deliver what is in flight.
        if type(frame) is Hello or role is Role.DAEMON or len(cuts) % 2:
            received[other] += ends[other].receive_data(bytes(streams[role]))
            streams[role].clear()
    for role in Role:
        other = Role.DAEMON if role is Role.CLIENT else Role.CLIENT
        for piece in split(bytes(streams[role]), cuts):
            received[other] += ends[other].receive_data(piece)
    assert received[Role.DAEMON] == sent[Role.CLIENT]
    assert received[Role.CLIENT] == sent[Role.DAEMON]
    for role in Role:
        assert ends[role].buffered == 0
        said_bye = any(type(f) is Bye for f in sent[role])
        assert ends[role].our_state is (State.CLOSED if said_bye else State.OPEN)


# -- illegal orders -----------------------------------------------------------------------------

LOCAL_ILLEGAL = [
    (Role.CLIENT, [], Publish([b"x"]), "PUBLISH before HELLO"),
    (Role.CLIENT, [], Listen("A"), "LISTEN before HELLO"),
    (Role.CLIENT, [Hello()], Hello(), "a second HELLO on one connection"),
    (Role.CLIENT, [], Welcome("_INBOX.X."), "WELCOME is not a frame a client may send"),
    (Role.CLIENT, [], Deliver([b"x"]), "DELIVER is not a frame a client may send"),
    (Role.CLIENT, [Hello(), Bye()], Ping(1), "PING after BYE"),
    (Role.DAEMON, [], Welcome("_INBOX.X."), "WELCOME before HELLO"),
    (Role.DAEMON, [], Deliver([b"x"]), "DELIVER before WELCOME"),
    (Role.DAEMON, [], Advisory(b"x"), "ADVISORY before WELCOME"),
    (Role.DAEMON, [], Publish([b"x"]), "PUBLISH is not a frame a daemon may send"),
    (Role.DAEMON, [], Hello(), "HELLO is not a frame a daemon may send"),
    (Role.DAEMON, [Bye()], Error("PROTOCOL", "x"), "ERROR after BYE"),
]


def _prepare(role: Role, before: list) -> Connection:
    conn = Connection(role)
    for frame in before:
        conn.send(frame)
    return conn


@pytest.mark.parametrize(("role", "before", "frame", "problem"), LOCAL_ILLEGAL)
def test_illegal_local_frames_raise_a_local_protocol_error(role, before, frame, problem):
    conn = _prepare(role, before)
    states = (conn.our_state, conn.their_state)
    with pytest.raises(LocalProtocolError, match=problem):
        conn.send(frame)
    assert (conn.our_state, conn.their_state) == states  # nothing happened


def test_local_protocol_error_is_an_rv_error_but_not_a_peer_error():
    assert issubclass(LocalProtocolError, rv.NotPermitted)
    assert not issubclass(LocalProtocolError, ProtocolError)
    assert issubclass(ProtocolError, rv.MalformedMessage)


def test_message_batches_need_an_open_conversation():
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError, match="PUBLISH before HELLO"):
        client.send_messages([b"x"])
    client.send(Hello())
    assert client.send_messages([]) == []
    client.send(Bye())
    with pytest.raises(LocalProtocolError, match="PUBLISH after BYE"):
        client.send_messages([b"x"])
    daemon = Connection(Role.DAEMON)
    with pytest.raises(LocalProtocolError, match="DELIVER before WELCOME"):
        daemon.send_messages([b"x"])


PEER_ILLEGAL = [
    # (receiving role, frames the peer sent, the problem)
    (Role.DAEMON, [Listen("A.B")], "LISTEN before HELLO"),
    (Role.DAEMON, [Publish([b"x"])], "PUBLISH before HELLO"),
    (Role.DAEMON, [Hello(), Hello()], "a second HELLO on one connection"),
    (Role.DAEMON, [Hello(), Error("X", "y")], "ERROR is not a frame a client may send"),
    (Role.DAEMON, [Deliver([b"x"])], "DELIVER is not a frame a client may send"),
    (Role.CLIENT, [Deliver([b"x"])], "DELIVER before WELCOME"),
    (Role.CLIENT, [Welcome("_INBOX.X.")], "WELCOME before HELLO"),
    (Role.CLIENT, [Publish([b"x"])], "PUBLISH is not a frame a daemon may send"),
]


@pytest.mark.parametrize(("role", "peer_frames", "problem"), PEER_ILLEGAL)
def test_illegal_peer_frames_raise_protocol_error_after_the_legal_ones(role, peer_frames, problem):
    conn = Connection(role)
    if role is Role.CLIENT and type(peer_frames[0]) is Deliver:
        conn.send(Hello())  # DELIVER is early even once HELLO is out
    data = encode(Ping(7)) + b"".join(encode(f) for f in peer_frames)
    with pytest.raises(ProtocolError, match=problem) as caught:
        conn.receive_data(data)
    assert caught.value.frames == [Ping(7), *peer_frames[:-1]]
    assert conn.their_state is State.BROKEN
    with pytest.raises(ProtocolError, match=problem):  # broken for good
        conn.receive_data(encode(Ping(1)))
    if role is Role.DAEMON:
        conn.send(Error("PROTOCOL", problem))  # we may still tell the peer why
    conn.send(Bye(problem))


@MODERATE
@given(st.data())
def test_random_frame_orders_are_accepted_exactly_when_legal(data):
    """Feed frames in any order: each is accepted iff the rules allow it then."""
    role = data.draw(st.sampled_from(Role))
    peer = Role.DAEMON if role is Role.CLIENT else Role.CLIENT
    conn = Connection(role)
    if data.draw(st.booleans()):
        conn.send(Hello() if role is Role.CLIENT else Ping(0))
    model_state, hello = State.START, role is Role.CLIENT and conn.our_state is State.OPEN
    allowed = {
        Role.CLIENT: {
            State.START: {Hello, Ping, Pong, Bye},
            State.OPEN: {Listen, Unlisten, Publish, Ping, Pong, Bye, Reliability},
        },
        Role.DAEMON: {
            State.START: {Welcome, Error, Ping, Pong, Bye},
            State.OPEN: {Deliver, Advisory, Error, Ping, Pong, Bye},
        },
    }[peer]
    for frame in data.draw(st.lists(any_frame, max_size=12)):
        legal = type(frame) in allowed[model_state] and (type(frame) is not Welcome or hello)
        try:
            got = conn.receive_data(encode(frame))
        except ProtocolError:
            assert not legal
            assert conn.their_state is State.BROKEN
            return
        assert legal and got == [frame]
        if type(frame) is Hello:
            model_state, hello = State.OPEN, True
        elif type(frame) is Welcome:
            model_state = State.OPEN
        elif type(frame) is Bye:
            assert conn.their_state is State.CLOSED
            assert conn.receive_data(encode(Ping(1)) + b"garbage") == []  # ignored after BYE
            return
        assert conn.their_state is model_state


@MODERATE
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=6), st.booleans())
def test_garbage_into_a_daemon_connection_only_ever_raises_protocol_error(junk, cuts, greeted):
    conn = Connection(Role.DAEMON)
    prefix = encode(Hello()) if greeted else b""
    try:
        for piece in split(prefix + junk, cuts):
            for frame in conn.receive_data(piece):
                if type(frame) is Hello:
                    conn.send(Welcome("_INBOX.X."))
    except ProtocolError:
        assert conn.their_state is State.BROKEN
        with pytest.raises(ProtocolError):
            conn.receive_data(b"more")
        conn.send(Error("PROTOCOL", "garbage"))
        conn.send(Bye("garbage"))


@MODERATE
@given(st.lists(any_frame, min_size=1, max_size=8), st.data())
def test_mutated_streams_only_ever_raise_protocol_error(frames, data):
    stream = bytearray(b"".join(encode(f) for f in frames))
    for _ in range(data.draw(st.integers(1, 4))):
        stream[data.draw(st.integers(0, len(stream) - 1))] = data.draw(st.integers(0, 255))
    for role in Role:
        try:
            Connection(role).receive_data(bytes(stream))
        except ProtocolError:
            pass


def test_frames_after_the_peer_bye_are_ignored_even_garbage():
    conn = Connection(Role.DAEMON)
    got = conn.receive_data(encode(Hello()) + encode(Bye("bye")) + b"\x00\x00\x00\x00\x01")
    assert got == [Hello(), Bye("bye")]
    assert conn.their_state is State.CLOSED
    assert conn.receive_data(encode(Listen("A"))) == []
    conn.send(Error("SHUTDOWN", "x"))  # our side is still ours to close


def test_pipelined_client_frames_before_welcome_are_legal():
    daemon = Connection(Role.DAEMON)
    frames = daemon.receive_data(
        encode(Hello()) + encode(Listen("A")) + encode(Publish([b"m"])) + encode(Ping(1))
    )
    assert [type(f) for f in frames] == [Hello, Listen, Publish, Ping]
    assert daemon.our_state is State.START
    welcome = daemon.send(Welcome("_INBOX.X.", {"pid": 1}))
    assert daemon.our_state is State.OPEN
    client = Connection(Role.CLIENT)
    client.send(Hello())
    assert client.receive_data(welcome) == [Welcome("_INBOX.X.", {"pid": 1})]
    assert client.their_state is State.OPEN


def test_send_messages_is_byte_identical_to_encode_messages():
    from rvasync.protocol.clientproto import FrameType, encode_messages

    msgs = [b"a" * n for n in (1, 300, 70000, 5)]
    client = Connection(Role.CLIENT)
    client.send(Hello())
    assert client.send_messages(msgs) == encode_messages(FrameType.PUBLISH, msgs)
    daemon = Connection(Role.DAEMON)
    daemon.receive_data(encode(Hello()))
    daemon.send(Welcome("_INBOX.X."))
    assert daemon.send_messages(msgs) == encode_messages(FrameType.DELIVER, msgs)


def _imports(path) -> set[str]:
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_layering_of_the_client_protocol_and_the_tcp_link():
    """The protocol core imports no driver; the TCP link reaches the daemon package
    only through the in-process link (transport.links), never directly."""
    from pathlib import Path

    import rvasync.protocol.clientproto as package
    import rvasync.transport.tcplink as tcplink

    for path in Path(package.__file__).parent.glob("*.py"):
        bad = {n for n in _imports(path) if n.startswith(("rvasync.daemon", "rvasync.transport"))}
        assert not bad, (path.name, bad)
    transport = Path(tcplink.__file__).parent
    for name in ("tcplink.py", "autostart.py"):
        bad = {n for n in _imports(transport / name) if n.startswith("rvasync.daemon")}
        assert not bad, (name, bad)
    assert not hasattr(tcplink, "LinkHooks") or tcplink.LinkHooks.__module__.endswith(".links")
