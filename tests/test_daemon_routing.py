"""The daemon's routing (rvasync.daemon.routing): no sockets, no event loop."""

from __future__ import annotations

import ast
import pathlib

from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.codec import encode
from rvasync.daemon.routing import (
    LOCAL_ONLY,
    NETWORK,
    ROUTE_CACHE,
    TO_PEER,
    TO_SESSION,
    Router,
    inbox_address,
)
from rvasync.daemon.session import Payload
from rvasync.daemon.stats import ServiceCounters
from rvasync.daemon.udp import address_hex
from rvasync.message import Message

HERE = address_hex(("127.0.0.1", 40000))
PEER = ("127.0.0.2", 40001)


class FakeOwner:
    """A session owner that writes down what it gets."""

    def __init__(self, log, name, *, messages=True, owned=False, inbox=False, wire=False):
        self.log = log
        self.name = name
        if wire:  # a TCP client's owner: takes the bytes
            self.deliver_wire = lambda data: log.append((name, "wire", data))
        if messages:
            self.deliver_message = lambda msg: log.append((name, "message", msg.subject))
        if owned:
            self.deliver_owned = lambda msg: log.append((name, "owned", msg.subject))
        if inbox:
            self.deliver_inbox = lambda msg, owned: log.append((name, "inbox", msg.subject, owned))

    def deliver(self, payload):
        self.log.append((self.name, "payload", payload.subject))

    def present(self, advisory):
        self.log.append((self.name, "advisory", advisory.subject))


class FakeSession:
    """What the router reads of a ClientSession: its public sinks and owner."""

    def __init__(self, token, owner):
        self.token = token
        self.owner = owner
        sink = getattr(owner, "deliver_message", None)
        self.sink_is_message = sink is not None
        self.sink = sink if sink is not None else owner.deliver
        self.inbox_sink = getattr(owner, "deliver_inbox", None)
        self.wire_sink = None if self.sink_is_message else getattr(owner, "deliver_wire", None)

    def __repr__(self):
        return f"<S {self.token}>"


def make_router(sessions=None):
    contained = []
    counters = ServiceCounters()
    router = Router(
        address_hex=HERE,
        sessions=sessions if sessions is not None else {},
        counters=counters,
        contain=lambda doing, **details: contained.append(doing),
        name="7500",
    )
    return router, counters, contained


# -- route equals a brute-force match over the registrations ----------------------


def brute_match(pattern: str, subject: str) -> bool:
    p, s = pattern.split("."), subject.split(".")
    for i, element in enumerate(p):
        if element == ">":
            return len(s) > i
        if i >= len(s) or (element != "*" and element != s[i]):
            return False
    return len(p) == len(s)


elements = st.sampled_from(["a", "b", "c"])
subjects = st.lists(elements, min_size=1, max_size=4).map(".".join)
patterns = st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=1, max_size=3).flatmap(
    lambda parts: st.sampled_from([".".join(parts), ".".join([*parts, ">"])])
)
operations = st.lists(
    st.tuples(st.sampled_from(["add", "add", "remove", "route"]), st.integers(0, 3), patterns),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations, st.lists(subjects, min_size=1, max_size=8))
def test_route_is_the_brute_force_match_over_interests(ops, probes):
    sessions = [FakeSession(str(n), FakeOwner([], str(n))) for n in range(4)]
    router, _, _ = make_router()
    registered: list[tuple[str, FakeSession]] = []
    for op, index, pattern in ops:
        session = sessions[index]
        if op == "add" and (pattern, session) not in registered:
            # a session registers a subject once (ClientSession refcounts the rest)
            router.add_interest(session, pattern)
            registered.append((pattern, session))
        elif op == "remove" and (pattern, session) in registered:
            router.remove_interest(session, pattern)
            registered.remove((pattern, session))
        else:
            for subject in probes:  # fill the cache between changes
                router.routes.get(subject) or router.route(subject)
        for subject in probes:
            expected = tuple(dict.fromkeys(s for p, s in registered if brute_match(p, subject)))
            cached = router.routes.get(subject)
            got = cached if cached is not None else router.route(subject)
            assert got == expected, (subject, registered)


def test_forget_drops_every_interest_of_a_session():
    a, b = (FakeSession(t, FakeOwner([], t)) for t in "ab")
    router, _, _ = make_router()
    for subject in ("X.>", "Y", "Z.*"):
        router.add_interest(a, subject)
    router.add_interest(b, "Y")
    assert router.route("Y") == (a, b)
    router.forget(a, ["X.>", "Y", "Z.*"])
    assert router.routes.get("Y") is None, "the cache is cleared"
    assert router.route("Y") == (b,)
    assert router.route("X.1") == router.route("Z.1") == ()


def test_route_cache_is_bounded():
    router, _, _ = make_router()
    for n in range(ROUTE_CACHE + 10):
        router.route(f"S.{n}")
    assert len(router.routes) <= ROUTE_CACHE


# -- where a '_' subject goes --------------------------------------------------------


def test_destination_of_special_subjects():
    mine = FakeSession("t1", FakeOwner([], "mine"))
    router, _, _ = make_router({"t1": mine})
    peer_hex = address_hex(PEER)
    assert router.destination(f"_INBOX.{HERE}.t1.7") == (TO_SESSION, mine)
    assert router.destination(f"_INBOX.{HERE}.gone.7") == (TO_SESSION, None)
    assert router.destination(f"_INBOX.{peer_hex}.t9.1") == (TO_PEER, PEER)
    assert inbox_address(peer_hex) == PEER
    assert router.destination("_INBOX.not-an-address.t.1") == (LOCAL_ONLY, None)
    assert router.destination("_INBOX.short") == (LOCAL_ONLY, None)
    assert router.destination("_LOCAL.X") == (LOCAL_ONLY, None)
    assert router.destination("_RV.INFO.X") == (NETWORK, None)
    assert router.destination("_FT.GROUP") == (NETWORK, None)


# -- local delivery of a published message --------------------------------------------


def test_deliver_local_gives_messages_or_one_shared_payload():
    log = []
    takes_messages = FakeSession("m", FakeOwner(log, "m"))
    payloads = [FakeSession(t, FakeOwner(log, t, messages=False)) for t in "pq"]
    router, counters, _ = make_router()
    msg = Message("A.B", {"n": 1})
    router.deliver_local((takes_messages, *payloads), None, encode(msg))
    assert log == [("m", "message", "A.B"), ("p", "payload", "A.B"), ("q", "payload", "A.B")]
    assert counters.deliveries == 3


def test_owners_that_take_bytes_get_the_bytes_everywhere():
    """A TCP client's owner (deliver_wire) gets the wire bytes, no Payload, from every
    delivery path: a local publish, a received multicast and a point-to-point message;
    and a Payload through deliver() when only the Message is known."""
    log = []
    wires = FakeSession("w", FakeOwner(log, "w", messages=False, wire=True))
    messages = FakeSession("m", FakeOwner(log, "m"))
    router, counters, _ = make_router({"w": wires, "m": messages})
    local = encode(Message("A.B", {"n": 1}))
    router.deliver_local((messages, wires), None, local)
    assert log == [("m", "message", "A.B"), ("w", "wire", local)]
    log.clear()
    router.deliver_local((wires,), Message("A.B", {"n": 2}), None)
    assert log == [("w", "payload", "A.B")]
    log.clear()
    router.add_interest(wires, "M.ONE")
    router.add_interest(wires, "M.BOTH")
    router.add_interest(messages, "M.BOTH")
    one, both = encode(Message("M.ONE", {})), encode(Message("M.BOTH", {}))
    router.deliver_multicast([one, both])
    assert log == [("w", "wire", one), ("w", "wire", both), ("m", "message", "M.BOTH")]
    log.clear()
    reply = encode(Message(f"_INBOX.{HERE}.w.1", {}))
    router.deliver_ptp([reply])
    assert log == [("w", "wire", reply)]
    assert counters.deliveries == 2 + 1 + 3 + 1


def test_deliver_wires_hands_each_batch_over_and_contains_a_failure():
    got = []

    def boom(wires):
        raise RuntimeError("sink failed")

    router, counters, contained = make_router()
    router.deliver_wires({got.extend: [b"a", b"b"], boom: [b"c"]})
    assert got == [b"a", b"b"]
    assert contained == ["delivering to a client"]
    assert counters.deliveries == 3


def test_deliver_local_contains_a_failing_sink():
    def boom(msg):
        raise RuntimeError("sink failed")

    failing = FakeSession("f", FakeOwner([], "f"))
    failing.sink = boom
    log = []
    fine = FakeSession("g", FakeOwner(log, "g"))
    router, counters, contained = make_router()
    router.deliver_local((failing, fine), Message("A", {}), None)
    assert contained == ["delivering to a client"]
    assert log == [("g", "message", "A")]
    assert counters.deliveries == 2  # counted as handed over, as before the split


# -- received messages -----------------------------------------------------------------


def test_deliver_multicast_routes_counts_and_drops_misrouted():
    log = []
    one = FakeSession("1", FakeOwner(log, "one", owned=True))
    two = FakeSession("2", FakeOwner(log, "two"))
    router, counters, _ = make_router({"1": one, "2": two})
    router.add_interest(one, "ONLY.ONE")
    router.add_interest(one, "BOTH")
    router.add_interest(two, "BOTH")
    payloads = [
        encode(Message("ONLY.ONE", {})),
        encode(Message("BOTH", {})),
        encode(Message("NOBODY", {})),
        encode(Message(f"_INBOX.{HERE}.1.1", {})),  # inboxes never travel by multicast
        encode(Message("_LOCAL.X", {})),
        b"\xc1RV\x01\x94\xa4BOTHjunk",  # wanted, peeks fine, does not decode
        b"garbage",
    ]
    router.deliver_multicast(payloads)
    assert log == [
        ("one", "owned", "ONLY.ONE"),
        ("one", "message", "BOTH"),
        ("two", "message", "BOTH"),
    ]
    assert counters.messages_in == len(payloads)
    assert counters.deliveries == 3
    assert counters.messages_unwanted == 1
    assert counters.messages_misrouted == 2
    assert counters.messages_malformed == 2
    # the second time the routes come from the inbound cache: same outcome
    log.clear()
    router.deliver_multicast(payloads[:3])
    assert log == [
        ("one", "owned", "ONLY.ONE"),
        ("one", "message", "BOTH"),
        ("two", "message", "BOTH"),
    ]


def test_deliver_ptp_reaches_the_inbox_owner_only():
    log = []
    replier = FakeSession("r", FakeOwner(log, "r", inbox=True))
    forwarder = FakeSession("f", FakeOwner(log, "f", messages=False))
    router, counters, _ = make_router({"r": replier, "f": forwarder})
    other = address_hex(PEER)
    router.deliver_ptp(
        [
            encode(Message(f"_INBOX.{HERE}.r.1", {})),
            encode(Message(f"_INBOX.{HERE}.f.2", {})),
            encode(Message(f"_INBOX.{HERE}.gone.3", {})),
            encode(Message(f"_INBOX.{other}.r.4", {})),
            encode(Message("NOT.AN.INBOX", {})),
            b"garbage",
        ]
    )
    assert log == [
        ("r", "inbox", f"_INBOX.{HERE}.r.1", True),
        ("f", "payload", f"_INBOX.{HERE}.f.2"),
    ]
    assert counters.deliveries == 2
    assert counters.messages_misrouted == 3
    assert counters.messages_malformed == 1
    assert counters.messages_in == 6


def test_payload_is_what_a_forwarding_session_gets():
    data = encode(Message("A", {"x": 1}))
    payload = Payload(None, data)
    assert payload.subject == "A" and payload.wire() is data


# -- layout: no import cycles between the daemon's modules ------------------------------


def test_daemon_modules_import_each_other_without_cycles():
    """Module-level imports, those under TYPE_CHECKING included, form no cycle (the
    session does not import the service, nor the service the engine)."""
    root = pathlib.Path(__file__).parent.parent / "rvasync" / "daemon"
    graph = {}
    for path in root.glob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        imports: set[str] = set()
        for node in tree.body:  # module level only (TYPE_CHECKING blocks included)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    for alias in inner.names:
                        sub = f"{inner.module}.{alias.name}"
                        if (
                            root / f"{alias.name}.py"
                        ).exists() and inner.module == "rvasync.daemon":
                            imports.add(sub)
                        elif inner.module.startswith("rvasync.daemon."):
                            imports.add(inner.module)
        graph[f"rvasync.daemon.{path.stem}"] = imports

    def reaches(start, goal, seen):
        for nxt in graph.get(start, ()):
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                if reaches(nxt, goal, seen):
                    return True
        return False

    cyclic = sorted(m for m in graph if reaches(m, m, set()))
    assert cyclic == [], cyclic
    assert "rvasync.daemon.engine" not in graph["rvasync.daemon.service"]
    assert "rvasync.daemon.service" not in graph["rvasync.daemon.session"]
    assert "rvasync.daemon.service" not in graph["rvasync.daemon.routing"]
    assert "rvasync.daemon.service" not in graph["rvasync.daemon.udpdriver"]
