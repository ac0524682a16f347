"""Certified delivery: protocol records, advisory subjects, and smaller protocol paths."""

from __future__ import annotations

import pytest
from cm_sim import SimNet
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.protocol.cm import CmCorrespondent, CmTiming, Deliver, Transmit
from rvasync.protocol.cm import advisories as adv
from rvasync.protocol.cm.records import (
    Cancel,
    Confirm,
    ConfirmRequest,
    DataRecord,
    Hello,
    Invite,
    NotCertified,
    Record,
    RegisterReply,
    RegisterRequest,
    RetransmitRequest,
    Unavailable,
    parse_record,
)

T0 = 1_000_000.0
HEAD = {"origin": "JOE", "address": "_INBOX.J"}

text = st.text(alphabet="ABCXYZ._", min_size=1, max_size=12)
seq = st.integers(1, 2**63 - 1)
count = st.integers(0, 2**63 - 1)
any_record = st.one_of(
    st.builds(
        DataRecord,
        origin=text,
        address=text,
        subject=text,
        sequence=seq,
        time_limit=st.floats(0, 1e9),
        payload=st.binary(max_size=40),
        retransmit=st.booleans(),
    ),
    st.builds(RegisterRequest, text, text, text, st.booleans(), count),
    st.builds(RegisterReply, text, text, text, seq, count, st.booleans()),
    st.builds(NotCertified, text, text, text, st.booleans()),
    st.builds(Confirm, text, text, text, count),
    st.builds(ConfirmRequest, text, text, text, count),
    st.builds(RetransmitRequest, text, text, text, st.just(3), st.integers(3, 9)),
    st.builds(Unavailable, text, text, text, st.just(1), st.integers(1, 9)),
    st.builds(Cancel, text, text, text),
    st.builds(Invite, text, text, text),
    st.builds(Hello, text, text, st.booleans()),
)


@settings(max_examples=100, deadline=None)
@given(record=any_record)
def test_every_record_round_trips_through_flat_fields(record):
    fields = record.to_fields()
    assert fields["rvcm"] == 1 and fields["kind"] == record.KIND
    assert all(isinstance(v, str | int | float | bool | bytes) for v in fields.values())
    assert parse_record(fields) == record
    assert type(record).from_fields(fields) == record
    assert Record.from_fields(fields) == record


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"kind": "confirm", **HEAD, "subject": "F", "sequence": 1}, "rvcm=None"),
        ({"rvcm": 2, "kind": "confirm"}, "version 1"),
        ({"rvcm": 1, "kind": "gossip", **HEAD}, "unknown certified-delivery record kind"),
        ({"rvcm": 1, "kind": "confirm", **HEAD, "subject": "F"}, "lacks field 'sequence'"),
        (
            {"rvcm": 1, "kind": "confirm", **HEAD, "subject": "F", "sequence": "1"},
            "field 'sequence' must be int, not str",
        ),
        (
            {"rvcm": 1, "kind": "confirm", **HEAD, "subject": "F", "sequence": -1},
            "'sequence' must be >= 0",
        ),
        (
            {"rvcm": 1, "kind": "cancel", "origin": "", "address": "A", "subject": "F"},
            "field 'origin' is empty",
        ),
        (
            {
                "rvcm": 1,
                "kind": "retransmit_request",
                **HEAD,
                "subject": "F",
                "first": 5,
                "last": 2,
            },
            "'last' (2) is below 'first' (5)",
        ),
        (
            {
                "rvcm": 1,
                "kind": "data",
                **HEAD,
                "subject": "F",
                "sequence": 0,
                "time_limit": 0,
                "payload": b"",
            },
            "'sequence' must be >= 1",
        ),
        (
            {
                "rvcm": 1,
                "kind": "data",
                **HEAD,
                "subject": "F",
                "sequence": 1,
                "time_limit": -1.0,
                "payload": b"",
            },
            "'time_limit' must be finite",
        ),
    ],
)
def test_malformed_records_are_refused_with_the_reason(fields, problem):
    with pytest.raises(rv.MalformedMessage) as caught:
        parse_record(fields)
    assert problem in str(caught.value)


def test_from_fields_of_a_specific_kind_refuses_another():
    with pytest.raises(rv.MalformedMessage, match="expected a cancel record, got 'confirm'"):
        Cancel.from_fields(Confirm("A", "B", "F", 1).to_fields())


def test_advisory_subjects_classes_and_fields():
    cases = [
        (adv.delivery_confirm("A.B", "L", 3), "_RV.INFO.RVCM.DELIVERY.CONFIRM.A.B"),
        (adv.delivery_complete("A.B", 3), "_RV.INFO.RVCM.DELIVERY.COMPLETE.A.B"),
        (adv.delivery_no_response("L.X"), "_RV.WARN.RVCM.DELIVERY.NO_RESPONSE.L.X"),
        (adv.delivery_failed("A", 3, b"m", ["L1", "L2"]), "_RV.ERROR.RVCM.DELIVERY.FAILED.A"),
        (adv.delivery_unavailable("A", 4, 6, "S"), "_RV.ERROR.RVCM.DELIVERY.UNAVAILABLE.A"),
        (adv.registration_request("A", "L"), "_RV.INFO.RVCM.REGISTRATION.REQUEST.A"),
        (adv.registration_certified("A", "S", 9), "_RV.INFO.RVCM.REGISTRATION.CERTIFIED.A"),
        (adv.registration_not_certified("A", "S"), "_RV.WARN.RVCM.REGISTRATION.NOT_CERTIFIED.A"),
        (adv.registration_no_response("A", "S"), "_RV.WARN.RVCM.REGISTRATION.NO_RESPONSE.A"),
        (adv.registration_closed("A", "L", 5, 4), "_RV.INFO.RVCM.REGISTRATION.CLOSED.A"),
        (adv.registration_discovery("A", "S"), "_RV.INFO.RVCM.REGISTRATION.DISCOVERY.A"),
        (adv.registration_moved("N.M"), "_RV.INFO.RVCM.REGISTRATION.MOVED.N.M"),
        (adv.collision("N"), "_RV.ERROR.RVCM.REGISTRATION.COLLISION.N"),
    ]
    for advisory, subject in cases:
        assert advisory.subject == subject
        assert subject.split(".")[1] == advisory.adv_class
        assert advisory.subject.startswith(f"_RV.{advisory.adv_class}.RVCM.{advisory.condition}.")
    failed = cases[3][0]
    assert [(n, t) for n, t, _ in failed.fields] == [
        ("subject", "string"),
        ("seqno", "u64"),
        ("data", "msg"),
        ("listener", "string"),
        ("listener", "string"),
    ]
    assert failed.as_dict()["listener"] == ["L1", "L2"]
    assert adv.registration_closed("A", "L", 5, 4).as_dict() == {
        "subject": "A",
        "listener": "L",
        "seqno_last_sent": 5,
        "seqno_last_confirmed": 4,
    }


# --- smaller protocol paths -------------------------------------------------------------------


def test_unlabeled_and_own_messages_reach_cm_listeners_uncertified():
    core = CmCorrespondent("JOE", "_INBOX.J", now=T0)
    lid = core.listen("FOO.>", now=T0)
    core.receive_plain("FOO.BAR", b"plain")
    result = core.send("FOO.BAR", b"mine", T0)
    first = core.drain()
    sent = [o for o in first if isinstance(o, Transmit)][-1]
    core.receive(sent.record, T0)  # the driver hears its own multicast
    out = [o for o in first + core.drain() if isinstance(o, Deliver)]
    assert [(o.listener_id, o.sender, o.sequence, o.payload) for o in out] == [
        (lid, None, None, b"plain"),
        (lid, "JOE", None, b"mine"),
    ]
    assert result.sequence == 1 and result.certified is False


def test_confirm_from_an_unregistered_listener_gets_not_certified():
    core = CmCorrespondent("JOE", "_INBOX.J", now=T0)
    core.drain()
    core.receive(Confirm("SUE", "_INBOX.S", "FOO", 3), T0)
    [out] = core.drain()
    assert isinstance(out.record, NotCertified) and out.destination == "_INBOX.S"


def test_confirm_request_for_a_forgotten_agreement_is_cancelled():
    core = CmCorrespondent("SUE", "_INBOX.S", now=T0)
    core.drain()
    core.receive(ConfirmRequest("JOE", "_INBOX.J", "FOO", 5), T0)
    [out] = core.drain()
    assert isinstance(out.record, Cancel) and out.destination == "_INBOX.J"


def test_late_acceptance_after_no_response_certifies_from_then_on():
    timing = CmTiming(register_attempts=2, register_retry_interval=1.0)
    core = CmCorrespondent("SUE", "_INBOX.S", now=T0, timing=timing)
    core.listen("FOO", now=T0)
    core.receive(DataRecord("JOE", "_INBOX.J", "FOO", 4, 0.0, b"4"), T0)
    core.handle_timer(T0 + 1)
    core.handle_timer(T0 + 2)
    out = core.drain()
    assert [a.condition for a in out if isinstance(a, adv.Advisory)][-1] == (
        "REGISTRATION.NO_RESPONSE"
    )
    assert [(d.sequence, d.payload) for d in out if isinstance(d, Deliver)] == [(None, b"4")]
    core.receive(DataRecord("JOE", "_INBOX.J", "FOO", 5, 0.0, b"5"), T0 + 3)
    # The sender did accept (begin 5); its answer was only slow.
    core.receive(RegisterReply("JOE", "_INBOX.J", "FOO", 5, 5, False), T0 + 3)
    out = core.drain()
    assert [(d.sequence, d.payload) for d in out if isinstance(d, Deliver)] == [(None, b"5")]
    assert [o.record.sequence for o in out if isinstance(o, Transmit)] == [5]
    core.receive(DataRecord("JOE", "_INBOX.J", "FOO", 6, 0.0, b"6"), T0 + 3)
    assert [d.sequence for d in core.drain() if isinstance(d, Deliver)] == [6]


def test_closing_one_of_two_listeners_settles_its_share():
    core = CmCorrespondent("SUE", "_INBOX.S", now=T0)
    a = core.listen("FOO", now=T0, explicit_confirm=True)
    b = core.listen("FOO", now=T0, explicit_confirm=True)
    core.receive(DataRecord("JOE", "_INBOX.J", "FOO", 1, 0.0, b"1"), T0)
    core.receive(RegisterReply("JOE", "_INBOX.J", "FOO", 1, 0, False), T0)
    core.drain()
    core.confirm(a, "JOE", "FOO", 1)
    assert [o for o in core.drain() if isinstance(o, Transmit)] == []
    core.close_listener(b, T0)
    [out] = core.drain()
    assert isinstance(out.record, Confirm) and out.record.sequence == 1


def test_restarted_listener_resumes_without_waiting_for_a_new_message():
    net = SimNet(21)
    joe = net.add("JOE")
    sue = net.add("SUE", file_ledger=True, require_old=True, explicit=True)
    sue.core.listen("FOO", now=net.now, explicit_confirm=True)
    joe.core.add_listener("SUE", "FOO")
    for i in range(1, 4):
        net.send(joe, "FOO", b"%d" % i)
    net.run(1)
    assert [s for _, _, s in sue.certified()] == [1, 2, 3]
    ledger = net.crash(sue)  # nothing confirmed
    sue = net.add("SUE", file_ledger=True, require_old=True, ledger_bytes=ledger)
    sue.core.listen("FOO", now=net.now)
    net.run(2)  # JOE sends nothing new
    assert [s for _, _, s in sue.certified()] == [1, 2, 3]
    assert joe.core.review_ledger("FOO")[0].total_messages == 0


def test_collision_answer_reaches_the_newcomer():
    core = CmCorrespondent("TWIN", "_INBOX.T1", now=T0)
    core.drain()
    core.receive(Hello("TWIN", "_INBOX.T2", started=T0 + 5), T0 + 5)  # a younger instance
    out = core.drain()
    assert [type(o).__name__ for o in out] == ["Advisory", "Transmit"]
    assert out[1].destination == "_INBOX.T2" and out[1].record.reply is True
    assert out[1].record.started == T0 and out[1].record.to == "_INBOX.T2"
    core.receive(Hello("TWIN", "_INBOX.T2", reply=True, started=T0 + 5), T0 + 5)
    assert core.drain() == []  # one advisory per intruder
    assert not core.standby  # the older instance keeps the name


def test_cancel_agreements_also_cancels_agreements_inherited_from_the_ledger():
    net = SimNet(22)
    joe = net.add("JOE")
    sue = net.add("SUE", file_ledger=True, require_old=True)
    lid = sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"1")
    net.run(1)
    ledger = net.crash(sue)
    sue = net.add("SUE", file_ledger=True, require_old=True, ledger_bytes=ledger)
    lid = sue.core.listen("BAR", now=net.now)  # does not cover FOO: FOO stays idle
    other = sue.core.listen("FOO", now=net.now)
    sue.core.close_listener(other, net.now, cancel_agreements=True)
    net.run(1)
    # The restored agreement's registration request and the cancel may cross
    # (the network reorders): the agreement may be renewed once, then closed again.
    closed = [a.get("listener") for a in joe.advisories_of("REGISTRATION.CLOSED")]
    assert closed and set(closed) == {"SUE"}
    assert joe.core.review_ledger("FOO")[0].listeners == ()
    assert sue.core.review_sources() == []
    assert lid != other
