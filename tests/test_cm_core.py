"""Certified delivery core: the specification's examples and each protocol rule.

Single cores are driven with hand-made records where the exact exchange
matters (sequencing, gaps, confirmation order); the simulated network of
``cm_sim`` runs whole conversations (registration, restarts, anticipation).
"""

from __future__ import annotations

import pytest
from cm_sim import SimNet

import rvasync as rv
from rvasync.protocol.cm import (
    Advisory,
    CmCorrespondent,
    CmTiming,
    Deliver,
    LedgerState,
    Transmit,
    decode_ledger,
)
from rvasync.protocol.cm.records import (
    Confirm,
    ConfirmRequest,
    DataRecord,
    RegisterReply,
    RegisterRequest,
    RetransmitRequest,
    Unavailable,
)

T0 = 1_000_000.0
BAZ = "_INBOX.BAZ.1"


def data(seq: int, subject: str = "FOO", origin: str = "BAZ", address: str = BAZ, **kw):
    return DataRecord(
        origin=origin,
        address=address,
        subject=subject,
        sequence=seq,
        time_limit=kw.pop("time_limit", 0.0),
        payload=b"m%d" % seq,
        **kw,
    )


def reply(begin: int, last_sent: int, resumed: bool = False, subject: str = "FOO"):
    return RegisterReply(
        origin="BAZ",
        address=BAZ,
        subject=subject,
        begin=begin,
        last_sent=last_sent,
        resumed=resumed,
    )


def kinds(outputs, cls):
    return [o for o in outputs if isinstance(o, cls)]


def transmitted(outputs, record_type):
    return [
        o.record for o in outputs if isinstance(o, Transmit) and isinstance(o.record, record_type)
    ]


def delivered(outputs):
    return [(o.sequence, o.payload) for o in outputs if isinstance(o, Deliver)]


def certified_listener(upto: int, *, explicit: bool = False):
    """A listener certified with BAZ on FOO that has delivered messages up to ``upto``."""
    core = CmCorrespondent("SUE", "_INBOX.SUE.1", now=T0)
    lid = core.listen("FOO", now=T0, explicit_confirm=explicit)
    core.receive(data(upto), T0)
    out = core.drain()
    assert transmitted(out, RegisterRequest), "discovery must ask for registration"
    assert not delivered(out), "messages wait while registration is pending"
    core.receive(reply(upto, upto - 1, resumed=False), T0)
    out = core.drain()
    # The discovery message is certified here (begin == its sequence).
    assert delivered(out) == [(upto, b"m%d" % upto)]
    if not explicit:
        core.confirm(lid, "BAZ", "FOO", upto)
    core.drain()
    return core, lid


# --- sequencing and retransmission (spec: "Sequencing and Retransmission") ---------------


def test_message_35_is_held_until_33_and_34_arrive():
    core, _lid = certified_listener(32)
    core.receive(data(35), T0)
    out = core.drain()
    assert delivered(out) == []
    requests = transmitted(out, RetransmitRequest)
    assert [(r.first, r.last) for r in requests] == [(33, 34)]
    assert all(o.destination == BAZ for o in out if isinstance(o, Transmit))
    core.receive(data(34), T0)
    assert delivered(core.drain()) == []
    core.receive(data(33, retransmit=True), T0)
    out = core.drain()
    assert [seq for seq, _ in delivered(out)] == [33, 34, 35]


def test_duplicates_are_delivered_once():
    core, _lid = certified_listener(10)
    for seq in (11, 11, 12, 10, 12):
        core.receive(data(seq), T0)
    assert [seq for seq, _ in delivered(core.drain())] == [11, 12]


def test_unavailable_46_to_48_reported_before_49_is_queued():
    core, lid = certified_listener(45)
    core.receive(data(49), T0)
    out = core.drain()
    assert [(r.first, r.last) for r in transmitted(out, RetransmitRequest)] == [(46, 48)]
    core.receive(Unavailable(origin="BAZ", address=BAZ, subject="FOO", first=46, last=48), T0)
    out = core.drain()
    events = [o for o in out if isinstance(o, (Advisory, Deliver))]
    assert isinstance(events[0], Advisory)
    assert events[0].subject == "_RV.ERROR.RVCM.DELIVERY.UNAVAILABLE.FOO"
    assert events[0].as_dict() == {
        "subject": "FOO",
        "seqno_begin": 46,
        "seqno_end": 48,
        "sender": "BAZ",
    }
    assert isinstance(events[1], Deliver) and events[1].sequence == 49
    # The skipped messages count as settled: confirming 49 confirms through 49.
    core.confirm(lid, "BAZ", "FOO", 49)
    assert [c.sequence for c in transmitted(core.drain(), Confirm)] == [49]


def test_unavailable_end_to_end_with_expired_messages():
    net = SimNet(3)
    joe = net.add("JOE")
    sue = net.add("SUE")
    sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"first")
    net.run(1)
    for i in range(2, 46):
        net.send(joe, "FOO", b"m%d" % i, time_limit=1.0)
    net.run(1)
    # Messages 46-48 never reach SUE and expire at JOE before anyone asks.
    net.drop = lambda src, dst, rec: (
        isinstance(rec, DataRecord) and dst is sue and 46 <= rec.sequence <= 48
    )
    for i in range(46, 49):
        net.send(joe, "FOO", b"m%d" % i, time_limit=1.0)
    net.run(1.5)
    assert [a.get("seqno") for a in joe.advisories_of("DELIVERY.FAILED")] == [46, 47, 48]
    assert joe.advisories_of("DELIVERY.FAILED")[0].get_all("listener") == ["SUE"]
    assert joe.advisories_of("DELIVERY.FAILED")[0].get("data") == b"m46"
    net.drop = None
    net.send(joe, "FOO", b"m49")
    net.run(2)
    unavailable = sue.advisories_of("DELIVERY.UNAVAILABLE")
    assert [(a.get("seqno_begin"), a.get("seqno_end")) for a in unavailable] == [(46, 48)]
    order = [e for e in sue.events if getattr(e, "sequence", None) == 49 or e in unavailable]
    assert order[0] is unavailable[0] and order[1].sequence == 49
    assert [s for _, _, s in sue.certified()] == [*range(2, 46), 49]


# --- confirmation ---------------------------------------------------------------------------


def test_confirming_57_before_55_and_56_sends_nothing_until_the_gap_is_confirmed():
    core, lid = certified_listener(54, explicit=True)
    core.confirm(lid, "BAZ", "FOO", 54)
    core.drain()
    for seq in (55, 56, 57):
        core.receive(data(seq), T0)
    assert [s for s, _ in delivered(core.drain())] == [55, 56, 57]
    assert core.confirm(lid, "BAZ", "FOO", 57) is True
    assert transmitted(core.drain(), Confirm) == []
    core.confirm(lid, "BAZ", "FOO", 55)
    assert [c.sequence for c in transmitted(core.drain(), Confirm)] == [55]
    core.confirm(lid, "BAZ", "FOO", 56)
    assert [c.sequence for c in transmitted(core.drain(), Confirm)] == [57]
    assert core.confirm(lid, "BAZ", "FOO", 56) is False  # already settled


def test_confirm_of_uncertified_or_unknown_message_is_a_no_op():
    core, lid = certified_listener(3, explicit=True)
    assert core.confirm(lid, "BAZ", "FOO", None) is False
    assert core.confirm(lid, "BAZ", "FOO", 99) is False
    assert core.confirm(lid, "OTHER", "FOO", 3) is False
    with pytest.raises(rv.InvalidArgument, match="no open CM listener has id 999"):
        core.confirm(999, "BAZ", "FOO", 3)
    with pytest.raises(rv.InvalidArgument, match="sequence must be >= 1"):
        core.confirm(lid, "BAZ", "FOO", 0)


def test_confirmation_waits_for_every_listener_that_got_the_message():
    core = CmCorrespondent("SUE", "_INBOX.SUE.1", now=T0)
    a = core.listen("FOO", now=T0, explicit_confirm=True)
    b = core.listen("*", now=T0, explicit_confirm=True)
    core.receive(data(1), T0)
    core.receive(reply(1, 0), T0)
    out = core.drain()
    assert sorted(o.listener_id for o in kinds(out, Deliver)) == [a, b]
    core.confirm(a, "BAZ", "FOO", 1)
    assert transmitted(core.drain(), Confirm) == []
    core.confirm(b, "BAZ", "FOO", 1)
    assert [c.sequence for c in transmitted(core.drain(), Confirm)] == [1]


def test_request_for_confirmation_reconfirms_and_recovers_a_lost_last_message():
    core, _lid = certified_listener(5)
    core.receive(ConfirmRequest(origin="BAZ", address=BAZ, subject="FOO", last_sent=7), T0)
    out = core.drain()
    assert [c.sequence for c in transmitted(out, Confirm)] == [5]
    assert [(r.first, r.last) for r in transmitted(out, RetransmitRequest)] == [(6, 7)]


def test_sender_asks_silent_listener_and_presents_no_response_each_time():
    net = SimNet(1, timing=CmTiming(confirm_request_interval=2.0))
    joe = net.add("JOE")
    sue = net.add("SUE", explicit=True)
    sue.core.listen("FOO", now=net.now, explicit_confirm=True)
    net.send(joe, "FOO", b"x")
    net.run(1)
    net.send(joe, "FOO", b"y")  # certified, never confirmed
    net.run(7)
    warnings = joe.advisories_of("DELIVERY.NO_RESPONSE")
    assert len(warnings) == 3
    assert warnings[0].subject == "_RV.WARN.RVCM.DELIVERY.NO_RESPONSE.SUE"
    assert warnings[0].as_dict() == {"listener": "SUE"}
    asks = [r for _, _, _, r in net.log if isinstance(r, ConfirmRequest)]
    assert len(asks) == 3


# --- discovery and registration ----------------------------------------------------------------


def test_discovery_registration_and_first_message_uncertified():
    net = SimNet(2)
    joe = net.add("JOE")
    sue = net.add("SUE")
    sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"one")
    net.run(1)
    net.send(joe, "FOO", b"two")
    net.run(1)
    assert [(d.sender, d.sequence, d.payload) for d in sue.deliveries] == [
        ("JOE", None, b"one"),
        ("JOE", 2, b"two"),
    ]
    [discovery] = sue.advisories_of("REGISTRATION.DISCOVERY")
    assert discovery.subject == "_RV.INFO.RVCM.REGISTRATION.DISCOVERY.FOO"
    assert discovery.as_dict() == {"subject": "FOO", "sender": "JOE"}
    [certified] = sue.advisories_of("REGISTRATION.CERTIFIED")
    assert certified.as_dict() == {"subject": "FOO", "sender": "JOE", "seqno_begin": 2}
    [request] = joe.advisories_of("REGISTRATION.REQUEST")
    assert request.subject == "_RV.INFO.RVCM.REGISTRATION.REQUEST.FOO"
    assert request.as_dict() == {"subject": "FOO", "listener": "SUE"}
    assert [(a.condition, a.get("seqno")) for a in joe.advisories[1:]] == [
        ("DELIVERY.CONFIRM", 2),
        ("DELIVERY.COMPLETE", 2),
    ]
    assert joe.advisories[1].as_dict() == {"subject": "FOO", "listener": "SUE", "seqno": 2}


def test_messages_while_registration_is_pending_are_held_and_queued_in_order():
    core = CmCorrespondent("SUE", "_INBOX.SUE.1", now=T0)
    core.listen("FOO", now=T0)
    for seq in (7, 9, 8):
        core.receive(data(seq), T0)
    assert delivered(core.drain()) == []
    core.receive(reply(8, 9), T0)
    out = core.drain()
    assert [(o.sequence, o.payload) for o in kinds(out, Deliver)] == [
        (None, b"m7"),
        (8, b"m8"),
        (9, b"m9"),
    ]


def test_registration_no_response_after_repeated_requests_then_stops_asking():
    timing = CmTiming(register_retry_interval=1.0, register_attempts=4)
    net = SimNet(4, timing=timing)
    joe = net.add("JOE")
    sue = net.add("SUE")
    sue.core.listen("FOO", now=net.now)
    net.drop = lambda src, dst, rec: isinstance(rec, RegisterRequest)
    net.send(joe, "FOO", b"a")
    net.send(joe, "FOO", b"b")
    net.run(30)
    requests = [r for _, _, _, r in net.log if isinstance(r, RegisterRequest)]
    assert len(requests) == 4
    [warning] = sue.advisories_of("REGISTRATION.NO_RESPONSE")
    assert warning.subject == "_RV.WARN.RVCM.REGISTRATION.NO_RESPONSE.FOO"
    assert warning.as_dict() == {"subject": "FOO", "sender": "JOE"}
    # Held messages are delivered, uncertified; later ones too.
    net.send(joe, "FOO", b"c")
    net.run(1)
    assert [(d.sequence, d.payload) for d in sue.deliveries] == [
        (None, b"a"),
        (None, b"b"),
        (None, b"c"),
    ]
    assert len([r for _, _, _, r in net.log if isinstance(r, RegisterRequest)]) == 4


# --- time limits -------------------------------------------------------------------------------


def test_delivery_failed_names_missing_listeners_and_carries_the_data():
    net = SimNet(5)
    joe = net.add("JOE")
    sue = net.add("SUE")
    bob = net.add("BOB")
    sue.core.listen("FOO", now=net.now)
    bob.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"hello")
    net.run(1)
    net.crash(bob)
    result = net.send(joe, "FOO", b"important", time_limit=5.0)
    assert result.certified
    net.run(10)
    [failed] = joe.advisories_of("DELIVERY.FAILED")
    assert failed.subject == "_RV.ERROR.RVCM.DELIVERY.FAILED.FOO"
    assert failed.get("seqno") == result.sequence
    assert failed.get("data") == b"important"
    assert failed.get_all("listener") == ["BOB"]
    assert [a.get("listener") for a in joe.advisories_of("DELIVERY.CONFIRM")] == ["SUE"]
    assert joe.advisories_of("DELIVERY.COMPLETE") == []
    assert joe.core.review_ledger("FOO")[0].total_messages == 0


def test_expire_messages_fails_stored_messages_up_to_a_sequence():
    core = CmCorrespondent("JAN", "_INBOX.JAN.1", now=T0)
    core.add_listener("DB_PER", "STORE.THIS")
    for i in range(5):
        core.send("STORE.THIS", b"%d" % i, T0)
    core.drain()
    assert core.expire_messages("STORE.THIS", 3) == 3
    failed = [o for o in core.drain() if isinstance(o, Advisory)]
    assert [(a.condition, a.get("seqno"), a.get_all("listener")) for a in failed] == [
        ("DELIVERY.FAILED", 1, ["DB_PER"]),
        ("DELIVERY.FAILED", 2, ["DB_PER"]),
        ("DELIVERY.FAILED", 3, ["DB_PER"]),
    ]
    [review] = core.review_ledger("STORE.THIS")
    assert (review.last_sent, review.total_messages, review.total_size) == (5, 2, 2)


# --- persistent correspondents and anticipation ---------------------------------------------------


def _joe_and_sue(require_old: bool):
    """JOE_PER has sent 57; SUE_PER confirmed 52 and crashes while processing 53."""
    net = SimNet(6)
    joe = net.add("JOE_PER", file_ledger=True)
    sue = net.add("SUE_PER", file_ledger=True, require_old=True, explicit=True)
    lid = sue.core.listen("REMEMBER.THIS", now=net.now, explicit_confirm=True)
    net.send(joe, "REMEMBER.THIS", b"0")  # discovery: seq 1, not certified
    net.run(1)
    for i in range(2, 58):
        net.send(joe, "REMEMBER.THIS", b"%d" % i)
        net.run(0.01)
    net.run(1)
    for d in sue.deliveries:
        if d.sequence is not None and d.sequence <= 52:
            sue.core.confirm(lid, d.sender, d.subject, d.sequence)
    net.run(1)
    [review] = joe.core.review_ledger("REMEMBER.THIS")
    assert review.listeners[0].last_confirmed == 52
    assert review.total_messages == 5  # 53-57
    ledger = net.crash(sue)
    for i in range(58, 78):
        net.send(joe, "REMEMBER.THIS", b"%d" % i)
    net.run(1)
    sue2 = net.add("SUE_PER", file_ledger=True, require_old=require_old, ledger_bytes=ledger)
    sue2.core.listen("REMEMBER.THIS", now=net.now)
    return net, joe, sue2


def test_persistent_listener_restart_redelivers_53_to_77():
    net, joe, sue = _joe_and_sue(require_old=True)
    net.send(joe, "REMEMBER.THIS", b"78")
    net.run(3)
    assert [s for _, _, s in sue.certified()] == list(range(53, 79))
    assert [d.payload for d in sue.deliveries] == [b"%d" % i for i in range(53, 79)]
    [certified] = sue.advisories_of("REGISTRATION.CERTIFIED")
    assert certified.get("seqno_begin") == 53
    assert sue.advisories_of("REGISTRATION.DISCOVERY") == []  # known from its ledger
    assert [a.get("name") for a in joe.advisories_of("REGISTRATION.MOVED")] == ["SUE_PER"]
    assert joe.core.review_ledger("REMEMBER.THIS")[0].total_messages == 0


def test_persistent_listener_restart_without_require_old_drops_stored_messages():
    net, joe, sue = _joe_and_sue(require_old=False)
    net.send(joe, "REMEMBER.THIS", b"78")
    net.run(3)
    assert sue.certified() == []
    assert [(d.sequence, d.payload) for d in sue.deliveries] == [(None, b"78")]
    assert sue.advisories_of("REGISTRATION.CERTIFIED")[0].get("seqno_begin") == 79
    completed = [a.get("seqno") for a in joe.advisories_of("DELIVERY.COMPLETE")]
    assert completed[-26:] == list(range(53, 79))
    net.send(joe, "REMEMBER.THIS", b"79")
    net.run(1)
    assert [s for _, _, s in sue.certified()] == [79]


def test_persistent_sender_restart_continues_sequence_and_redelivers():
    net = SimNet(7)
    joe = net.add("JOE_PER", file_ledger=True)
    sue = net.add("SUE_PER")
    sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"1")
    net.run(1)
    net.drop = lambda src, dst, rec: isinstance(rec, DataRecord) and dst is sue
    for i in range(2, 6):
        net.send(joe, "FOO", b"%d" % i)
    net.run(0.5)
    ledger = net.crash(joe)
    net.drop = None
    joe2 = net.add("JOE_PER", file_ledger=True, ledger_bytes=ledger)
    [review] = joe2.core.review_ledger("FOO")
    # After a crash the numbers reserved ahead (up to 64) are skipped: any of
    # them may have been handed out for a message the crash lost. The
    # listener is told they are unavailable; none is ever handed out again.
    assert (review.last_sent, review.total_messages) == (64, 4)
    assert net.send(joe2, "FOO", b"6").sequence == 65
    net.run(5)
    assert [s for _, _, s in sue.certified()] == [2, 3, 4, 5, 65]
    [gap] = sue.advisories_of("DELIVERY.UNAVAILABLE")
    assert (gap.get("seqno_begin"), gap.get("seqno_end")) == (6, 64)
    assert [a.get("name") for a in sue.advisories_of("REGISTRATION.MOVED")] == ["JOE_PER"]
    assert joe2.core.review_ledger("FOO")[0].total_messages == 0


def test_anticipated_listener_db_per_gets_everything_stored_for_it():
    net = SimNet(8)
    jan = net.add("JAN")
    assert jan.core.add_listener("DB_PER", "STORE.THIS") is True
    assert jan.core.add_listener("DB_PER", "STORE.THIS") is False
    for i in range(1, 6):
        net.send(jan, "STORE.THIS", b"%d" % i)
    [review] = jan.core.review_ledger("STORE.THIS")
    assert review.total_messages == 5
    assert review.listeners[0].anticipated and review.listeners[0].last_confirmed == 0
    db = net.add("DB_PER", require_old=True)
    db.core.listen("STORE.THIS", now=net.now)
    net.send(jan, "STORE.THIS", b"6")
    net.run(3)
    assert [s for _, _, s in db.certified()] == [1, 2, 3, 4, 5, 6]
    assert db.advisories_of("REGISTRATION.CERTIFIED")[0].get("seqno_begin") == 1
    assert jan.advisories_of("REGISTRATION.REQUEST")[0].get("listener") == "DB_PER"
    assert jan.core.review_ledger("STORE.THIS")[0].total_messages == 0


def _stream_to_anticipated(first_heard: int, last: int):
    """JAN anticipates DB_PER and sends 1..last; DB_PER, listening with require_old,
    hears first_heard..last (it started late) and registers: the records it sends."""
    jan = CmCorrespondent("JAN", "_INBOX.JAN.1", now=T0)
    jan.add_listener("DB_PER", "FOO")
    for i in range(1, last + 1):
        jan.send("FOO", b"m%d" % i, T0)
    jan.drain()
    db = CmCorrespondent("DB_PER", "_INBOX.DB.1", now=T0, require_old=True)
    db.listen("FOO", now=T0)
    for seq in range(first_heard, last + 1):
        db.receive(data(seq, origin="JAN", address="_INBOX.JAN.1"), T0)
    requests = transmitted(db.drain(), RegisterRequest)
    return jan, db, requests


def test_an_anticipated_listener_registering_mid_stream_is_not_sent_what_it_holds():
    """The listener holds what it heard while registering; the sender pushes only the
    messages before it (before the held_from field, every stored message went out a
    second time: a sender streaming at once to an anticipated listener sent twice)."""
    jan, db, [request] = _stream_to_anticipated(first_heard=4, last=50)
    assert request.held_from == 4
    jan.receive(request, T0)
    out = jan.drain()
    pushed = [r.sequence for r in transmitted(out, DataRecord) if r.retransmit]
    assert pushed == [1, 2, 3]
    [answer] = transmitted(out, RegisterReply)
    db.receive(answer, T0)
    got = delivered(db.drain())
    assert [seq for seq, _ in got] == []  # 4.. wait behind the pushed 1..3
    for seq in pushed:
        db.receive(data(seq, origin="JAN", address="_INBOX.JAN.1", retransmit=True), T0)
    assert [seq for seq, _ in delivered(db.drain())] == list(range(1, 51))


def test_a_retransmission_heard_while_registering_does_not_count_as_held():
    """Only the live stream says where the sender is: a retransmitted record (meant for
    an earlier instance of the name) that starts a registration leaves held_from at 0."""
    db = CmCorrespondent("DB_PER", "_INBOX.DB.1", now=T0, require_old=True)
    db.listen("FOO", now=T0)
    db.receive(data(5, origin="JAN", address="_INBOX.JAN.1", retransmit=True), T0)
    [request] = transmitted(db.drain(), RegisterRequest)
    assert request.held_from == 0


def test_a_register_request_without_held_from_gets_everything_pushed():
    """An older listener, which does not say what it holds: every stored message is pushed."""
    jan, _db, [request] = _stream_to_anticipated(first_heard=4, last=10)
    old = RegisterRequest(
        origin=request.origin,
        address=request.address,
        subject=request.subject,
        require_old=True,
        last_confirmed=0,
    )
    assert old.held_from == 0 and "held_from" not in {k for k, v in old.to_fields().items() if v}
    jan.receive(old, T0)
    pushed = [r.sequence for r in transmitted(jan.drain(), DataRecord) if r.retransmit]
    assert pushed == list(range(1, 11))


# --- cancelling, removing, disallowing ------------------------------------------------


def _certified_pair(seed: int = 9):
    net = SimNet(seed)
    joe = net.add("JOE")
    sue = net.add("SUE")
    lid = sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"1")
    net.run(1)
    net.send(joe, "FOO", b"2")
    net.run(1)
    assert sue.certified() == [("JOE", "FOO", 2)]
    return net, joe, sue, lid


def test_closing_listener_with_cancel_agreements_closes_registration_at_sender():
    net, joe, sue, lid = _certified_pair()
    sue.core.close_listener(lid, net.now, cancel_agreements=True)
    net.run(1)
    [closed] = joe.advisories_of("REGISTRATION.CLOSED")
    assert closed.subject == "_RV.INFO.RVCM.REGISTRATION.CLOSED.FOO"
    assert closed.as_dict() == {
        "subject": "FOO",
        "listener": "SUE",
        "seqno_last_sent": 2,
        "seqno_last_confirmed": 2,
    }
    assert net.send(joe, "FOO", b"3").certified is False


def test_closing_listener_without_cancel_keeps_the_agreement():
    net, joe, sue, lid = _certified_pair()
    sue.core.close_listener(lid, net.now)
    net.run(1)
    assert joe.advisories_of("REGISTRATION.CLOSED") == []
    assert net.send(joe, "FOO", b"3").certified is True
    net.run(1)
    # A new listener gets the stored message when the sender asks for confirmation.
    sue.core.listen("FOO", now=net.now)
    net.run(5)
    assert sue.certified()[-1] == ("JOE", "FOO", 3)


def test_remove_listener_closes_and_listener_becomes_not_certified():
    net, joe, sue, _lid = _certified_pair()
    joe.core.remove_listener("SUE", "FOO", net.now)
    net.run(1)
    assert joe.advisories_of("REGISTRATION.CLOSED")[0].get("listener") == "SUE"
    [warning] = sue.advisories_of("REGISTRATION.NOT_CERTIFIED")
    assert warning.subject == "_RV.WARN.RVCM.REGISTRATION.NOT_CERTIFIED.FOO"
    assert warning.as_dict() == {"subject": "FOO", "sender": "JOE"}
    net.send(joe, "FOO", b"3")
    net.run(1)
    assert sue.deliveries[-1].sequence is None and sue.deliveries[-1].payload == b"3"
    with pytest.raises(rv.InvalidArgument, match="'SUE' is not a registered listener"):
        joe.core.remove_listener("SUE", "FOO", net.now)


def test_disallow_refuses_registration_and_allow_invites_it_back():
    net = SimNet(10)
    joe = net.add("JOE")
    sue = net.add("SUE")
    sue.core.listen("FOO", now=net.now)
    joe.core.disallow_listener("SUE", net.now)
    net.send(joe, "FOO", b"1")
    net.run(1)
    net.send(joe, "FOO", b"2")
    net.run(1)
    assert sue.advisories_of("REGISTRATION.NOT_CERTIFIED")[0].get("sender") == "JOE"
    # The triggering message is not delivered; later ones arrive uncertified.
    assert [(d.sequence, d.payload) for d in sue.deliveries] == [(None, b"2")]
    with pytest.raises(rv.NotPermitted, match="disallowed"):
        joe.core.add_listener("SUE", "FOO")
    joe.core.allow_listener("SUE")
    net.run(1)
    net.send(joe, "FOO", b"3")
    net.run(1)
    assert sue.advisories_of("REGISTRATION.CERTIFIED")
    assert sue.certified() == [("JOE", "FOO", 3)]


def test_disallow_cancels_existing_agreements():
    net, joe, sue, _lid = _certified_pair()
    joe.core.disallow_listener("SUE", net.now)
    net.run(1)
    assert joe.advisories_of("REGISTRATION.CLOSED")
    assert sue.advisories_of("REGISTRATION.NOT_CERTIFIED")
    assert joe.core.ledger.disallowed == {"SUE"}


# --- moved and collision ------------------------------------------------------------------------


def test_two_live_instances_of_one_name_collide():
    net = SimNet(11)
    first = net.add("TWIN")
    net.run(1)
    second = net.add("TWIN")
    net.run(1)
    for node in (first, second):
        [collision] = node.advisories_of("REGISTRATION.COLLISION")
        assert collision.subject == "_RV.ERROR.RVCM.REGISTRATION.COLLISION.TWIN"
        assert collision.as_dict() == {"name": "TWIN"}


def test_transient_names_are_generated_unique_and_never_announced():
    a = CmCorrespondent(None, "_INBOX.A", now=T0)
    b = CmCorrespondent(None, "_INBOX.B", now=T0)
    assert a.name != b.name and a.name.startswith("_RVCM_T.")
    assert a.drain() == [] and a.control_subjects == ()
    named = CmCorrespondent("NAMED", "_INBOX.C", now=T0)
    assert named.control_subjects == ("_RVCM.HELLO.NAMED",)


# --- write-ahead and restore ----------------------------------------------------------------------


def test_transmissions_wait_until_the_ledger_is_durable():
    core = CmCorrespondent("JAN", "_INBOX.JAN.1", now=T0, file_ledger=True)
    core.drain()
    core.add_listener("DB_PER", "STORE.THIS")
    result = core.send("STORE.THIS", b"x", T0)
    out = core.drain()
    # The registration, the message, the reservation of the numbers after it.
    assert [type(o).__name__ for o in out] == ["AppendLedger"] * 3
    assert result.lsn == 3 and core.last_lsn == 3 and result.hold_lsn == 3
    core.durable(2)
    assert core.drain() == []
    core.durable(3)
    [sent] = core.drain()
    assert isinstance(sent, Transmit) and sent.record.sequence == 1


def test_ledger_replay_restores_sender_and_listener_state():
    net = SimNet(12, loss=0.1)
    joe = net.add("JOE", file_ledger=True)
    sue = net.add("SUE", file_ledger=True, explicit=True)
    lid = sue.core.listen("FOO", now=net.now, explicit_confirm=True)
    joe.core.add_listener("SUE", "FOO")
    for i in range(10):
        net.send(joe, "FOO", b"%d" % i, time_limit=30.0)
        net.run(0.2)
    net.run(3)
    for d in sue.deliveries[:4]:
        sue.core.confirm(lid, d.sender, d.subject, d.sequence)
    net.run(3)
    for node in (joe, sue):
        replay = decode_ledger(bytes(node.ledger_bytes), expected_name=node.name)
        assert replay.state == node.core.ledger
        assert replay.torn_bytes == 0


# --- bad input ------------------------------------------------------------------------------------


def test_bad_inputs_raise_errors_naming_the_problem():
    core = CmCorrespondent("JOE", "_INBOX.JOE", now=T0)
    with pytest.raises(rv.NotPermitted, match="wildcard"):
        core.send("FOO.*", b"x", T0)
    with pytest.raises(rv.NotPermitted, match="wildcard"):
        core.send("FOO.>", b"x", T0)
    with pytest.raises(rv.NotPermitted, match="reserved"):
        core.send("_RV.INFO.X", b"x", T0)
    with pytest.raises(rv.InvalidSubject, match="empty element"):
        core.send("FOO..BAR", b"x", T0)
    with pytest.raises(rv.InvalidArgument, match="time_limit"):
        core.send("FOO", b"x", T0, time_limit=-1)
    with pytest.raises(rv.InvalidArgument, match="time_limit"):
        core.send("FOO", b"x", T0, time_limit=float("nan"))
    with pytest.raises(rv.InvalidArgument, match="payload must be bytes"):
        core.send("FOO", "text", T0)  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidSubject, match="reserved element"):
        CmCorrespondent("_INBOX.X", "_INBOX.Y", now=T0)
    with pytest.raises(rv.InvalidSubject, match="wildcard"):
        CmCorrespondent("A.*", "_INBOX.Y", now=T0)
    with pytest.raises(rv.InvalidSubject, match="reserved element '_RVCM_T'"):
        CmCorrespondent("_RVCM_T.abc", "_INBOX.Y", now=T0)
    with pytest.raises(rv.InvalidSubject, match="empty"):
        CmCorrespondent("", "_INBOX.Y", now=T0)
    with pytest.raises(rv.InvalidArgument, match="address"):
        CmCorrespondent("A", "", now=T0)
    with pytest.raises(rv.InvalidArgument, match="own name"):
        core.add_listener("JOE", "FOO")
    with pytest.raises(rv.NotPermitted, match="wildcard"):
        core.add_listener("SUE", "FOO.>")
    with pytest.raises(rv.InvalidSubject, match="listener name"):
        core.add_listener("A..B", "FOO")
    with pytest.raises(rv.InvalidSubject):
        core.listen("A..B", now=T0)
    with pytest.raises(rv.InvalidArgument, match="sequence"):
        core.expire_messages("FOO", -3)
    with pytest.raises(rv.InvalidArgument, match=r"CmTiming\.register_attempts"):
        CmTiming(register_attempts=0)
    with pytest.raises(rv.InvalidArgument, match="belongs to correspondent 'SUE'"):
        CmCorrespondent("JOE", "_INBOX.JOE", now=T0, ledger=LedgerState(name="SUE"))


def test_malformed_records_are_dropped_and_counted():
    core = CmCorrespondent("JOE", "_INBOX.JOE", now=T0)
    assert core.receive_fields({"rvcm": 1, "kind": "confirm"}, T0) is False
    assert core.receive_fields({"kind": "nonsense"}, T0) is False
    assert core.malformed == 2
