"""The sans-IO part of direct communication: inbox addresses and the HELLO proof.

An address is used for direct sending only after it answered a HELLO with
the same nonce from the same address; forged or misdirected ACKs never
prove anything, and an address that never answers is given up on (and
asked again only after the backoff).
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.protocol.direct import (
    ACK,
    HELLO,
    NONCE_SIZE,
    DirectPeers,
    direct_tag,
    parse_direct_inbox,
    parse_hello,
)

SERVICE = 7500
DAEMON = ("127.0.0.1", 40000)


def peers_of(
    service: int = SERVICE,
    retry: float = 0.5,
    tries: int = 4,
    backoff: float = 30.0,
    capacity: int = 4096,
) -> DirectPeers:
    return DirectPeers(
        service=service,
        daemon=DAEMON,
        retry=retry,
        tries=tries,
        backoff=backoff,
        capacity=capacity,
    )


def ack_for(hello: bytes) -> bytes:
    """What a transport of the same service answers to ``hello``."""
    parsed = parse_hello(hello)
    assert parsed is not None
    answer = peers_of(parsed.service).answer(parsed)
    assert answer is not None
    return answer


def test_inbox_parsing() -> None:
    assert direct_tag(7501) == "D7501"
    assert parse_direct_inbox("_INBOX.7F000001E25A.abc1.D7501.3") == ("7F000001E25A", 7501)
    for subject in (
        "_INBOX.7F000001E25A.abc1.3",  # not enabled
        "_INBOX.7F000001E25A.abc1.D.3",
        "_INBOX.7F000001E25A.abc1.D0.3",
        "_INBOX.7F000001E25A.abc1.D70000.3",
        "_INBOX.7F000001E25A.abc1.Dx1.3",
        "_INBOX.a.b.D7501",  # no counter
        "ORDERS.a.b.D7501.1",
    ):
        assert parse_direct_inbox(subject) is None, subject


def test_hello_ack_proves_an_address() -> None:
    peers = peers_of(retry=1.0, tries=2, backoff=10.0)
    a = ("127.0.0.1", 1000)
    hello = peers.hello_for(a, 0.0)
    assert hello is not None and hello.startswith(HELLO)
    assert peers.hello_for(a, 0.5) is None  # asked recently
    assert not peers.verified(a)
    parsed = parse_hello(hello)
    assert parsed is not None
    assert (parsed.service, parsed.daemon) == (SERVICE, DAEMON)
    answer = peers_of().answer(parsed)
    assert answer == ACK + parsed.nonce + SERVICE.to_bytes(2, "big")
    # A transport of another service does not answer (a routing daemon's other side).
    assert peers_of(SERVICE + 1).answer(parsed) is None
    wrong_service = ACK + parsed.nonce + (SERVICE + 1).to_bytes(2, "big")
    assert not peers.acknowledged(wrong_service, a)
    assert not peers.acknowledged(answer, ("127.0.0.1", 1001))  # from elsewhere
    assert peers.acknowledged(answer, a)
    assert peers.verified(a)
    assert peers.hello_for(a, 1.0) is None
    peers.forget(a)
    assert not peers.verified(a)


def test_an_address_that_never_answers_is_given_up_then_asked_again() -> None:
    peers = peers_of(retry=1.0, tries=2, backoff=10.0)
    a = ("127.0.0.1", 1000)
    assert peers.hello_for(a, 0.0) is not None
    assert peers.hello_for(a, 1.0) is not None
    assert peers.hello_for(a, 2.0) is None  # gave up
    assert peers.hello_for(a, 11.0) is None
    assert peers.hello_for(a, 12.5) is not None  # the backoff passed


def test_answer_only_to_hello() -> None:
    assert parse_hello(b"RVDA" + bytes(NONCE_SIZE + 8)) is None
    assert parse_hello(HELLO) is None
    assert parse_hello(HELLO + bytes(NONCE_SIZE)) is None  # the old, shorter HELLO
    assert parse_hello(b"\xd2R" + bytes(30)) is None
    assert DirectPeers.is_control(HELLO + bytes(NONCE_SIZE))
    assert not DirectPeers.is_control(b"\xd2R" + bytes(30))


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    steps=st.lists(
        st.tuples(st.sampled_from(["hello", "forge", "wrong-src", "answer"]), st.integers(0, 3)),
        max_size=40,
    ),
)
def test_only_a_true_answer_verifies(seed: int, steps: list[tuple[str, int]]) -> None:
    rng = random.Random(seed)
    peers = peers_of(retry=0.1, tries=3, backoff=1.0, capacity=8)
    addresses = [("127.0.0.1", 2000 + i) for i in range(4)]
    sent: dict[tuple[str, int], bytes] = {}
    answered: set[tuple[str, int]] = set()
    now = 0.0
    for op, index in steps:
        now += rng.uniform(0, 0.3)
        address = addresses[index]
        if op == "hello":
            hello = peers.hello_for(address, now)
            if hello is not None:
                sent[address] = hello
        elif op == "forge":
            assert not peers.acknowledged(ACK + rng.randbytes(NONCE_SIZE), address) or (
                address in answered
            )
        elif op == "wrong-src" and address in sent:
            other = addresses[(index + 1) % 4]
            if sent.get(other) != sent[address]:
                assert not peers.acknowledged(ack_for(sent[address]), other)
        elif (
            op == "answer"
            and address in sent
            and peers.acknowledged(ack_for(sent[address]), address)
        ):
            answered.add(address)
        for a in addresses:
            if peers.verified(a):
                assert a in answered, "verified without its own answer"
