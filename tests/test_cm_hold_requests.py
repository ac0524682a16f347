"""A certified sender away from the network stops asking for confirmations.

The relay agent specification: a CM sender that disconnects from its agent
stops requesting delivery confirmation for outstanding messages. The core
takes that as ``hold_confirm_requests``: while held, no confirmation
request and no DELIVERY.NO_RESPONSE, but messages still expire on time;
on release every listener that owes confirmations is asked at once.
"""

from __future__ import annotations

import pytest

from rvasync.protocol.cm import CmCorrespondent, CmTiming, Transmit
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.records import Confirm, ConfirmRequest, RegisterRequest

T0 = 1_000_000.0
JOE = "_RVCM.P2P.j1.JOE"
SUE = "_RVCM.P2P.s1.SUE"
TIMING = CmTiming(confirm_request_interval=2.0)


def asked(outputs) -> int:
    return sum(
        1 for o in outputs if isinstance(o, Transmit) and isinstance(o.record, ConfirmRequest)
    )


def conditions(outputs) -> list[str]:
    return [o.condition for o in outputs if isinstance(o, Advisory)]


@pytest.fixture
def joe():
    joe = CmCorrespondent("JOE", JOE, now=T0, timing=TIMING)
    joe.receive(RegisterRequest("SUE", SUE, "FOO", False, 0), T0)
    joe.send("FOO", b"kept", T0, 0.0)
    joe.send("FOO", b"short", T0, 5.0)
    joe.drain()
    return joe


def test_held_requests_are_not_made_and_nobody_is_called_unresponsive(joe):
    joe.hold_confirm_requests(True, T0)
    assert joe.next_deadline() == T0 + 5.0  # only the expiry
    joe.handle_timer(T0 + 60)
    out = joe.drain()
    assert asked(out) == 0
    assert "DELIVERY.NO_RESPONSE" not in conditions(out)
    assert conditions(out) == ["DELIVERY.FAILED"]  # time limits still run
    joe.hold_confirm_requests(False, T0 + 60)
    assert joe.next_deadline() <= T0 + 60  # due at once on release
    joe.handle_timer(T0 + 60)
    out = joe.drain()
    assert asked(out) == 1
    assert "DELIVERY.NO_RESPONSE" in conditions(out)
    joe.receive(Confirm("SUE", SUE, "FOO", 1), T0 + 61)
    joe.drain()
    assert joe.review_ledger("FOO")[0].total_messages == 0
    assert joe.next_deadline() is None


def test_not_held_asks_every_interval(joe):
    joe.handle_timer(T0 + 2.0)
    assert asked(joe.drain()) == 1
    joe.hold_confirm_requests(False, T0 + 2.5)  # releasing what is not held changes nothing
    assert joe.next_deadline() == T0 + 4.0
