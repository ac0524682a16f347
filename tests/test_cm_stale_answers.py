"""Answers meant for a dead instance of a listener's name, and listeners that lost track.

Every instance of a correspondent name receives on the name's route, and a
relay agent stores what arrives there while the name is away; so a
restarted listener can be handed, minutes late, the registration answer its
dead predecessor asked for. Taken for its own, that answer restarted the
agreement below what the ledger had confirmed since, and the listener then
asked for those messages forever while the sender, which had dropped them as
confirmed, said nothing. These run the sans-IO core directly.
"""

from __future__ import annotations

from rvasync.protocol.cm import (
    AppendLedger,
    CmCorrespondent,
    Deliver,
    Transmit,
    decode_ledger,
    encode_record,
    new_ledger,
)
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.records import (
    Confirm,
    DataRecord,
    NotCertified,
    RegisterReply,
    RegisterRequest,
    RetransmitRequest,
    Unavailable,
)

T0 = 1_000_000.0
JOE = "_RVCM.P2P.j1.JOE"
SUE1 = "_RVCM.P2P.s1.SUE"
SUE2 = "_RVCM.P2P.s2.SUE"


def data(seq: int, *, retransmit: bool = False) -> DataRecord:
    return DataRecord("JOE", JOE, "FOO", seq, 0.0, b"m%d" % seq, retransmit)


def sent(outputs, kind):
    return [o.record for o in outputs if isinstance(o, Transmit) and isinstance(o.record, kind)]


def advisories(outputs, condition):
    return [o for o in outputs if isinstance(o, Advisory) and o.condition == condition]


def delivered(outputs):
    return [o.sequence for o in outputs if isinstance(o, Deliver)]


class FileLedger:
    """A correspondent's ledger file, kept as bytes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.data = bytearray(new_ledger(name, T0))

    def drain(self, core: CmCorrespondent) -> list[object]:
        out = core.drain()
        for o in out:
            if isinstance(o, AppendLedger):
                self.data += encode_record(o.record)
                core.durable(o.lsn)
        return out + core.drain()

    def replay(self):
        return decode_ledger(bytes(self.data), expected_name=self.name).state


def first_instance_confirms_four(ledger: FileLedger) -> CmCorrespondent:
    """SUE (instance 1) registers with JOE, gets 1..4 and confirms them."""
    sue = CmCorrespondent("SUE", SUE1, now=T0, file_ledger=True, require_old=True)
    lid = sue.listen("FOO", now=T0)
    sue.receive(data(1), T0)
    ledger.drain(sue)
    sue.receive(RegisterReply("JOE", JOE, "FOO", 1, 1, False, to=SUE1), T0)
    for seq in (2, 3, 4):
        sue.receive(data(seq), T0)
    out = ledger.drain(sue)
    assert delivered(out) == [1, 2, 3, 4]
    sue.confirm_many([(lid, "JOE", "FOO", seq) for seq in (1, 2, 3, 4)])
    out = ledger.drain(sue)
    assert [c.sequence for c in sent(out, Confirm)] == [4]
    return sue


def restarted(ledger: FileLedger) -> CmCorrespondent:
    sue = CmCorrespondent(
        "SUE", SUE2, now=T0 + 60, ledger=ledger.replay(), file_ledger=True, require_old=True
    )
    sue.listen("FOO", now=T0 + 60)
    out = ledger.drain(sue)
    (request,) = sent(out, RegisterRequest)
    assert request.last_confirmed == 4 and request.require_old
    return sue


def test_a_restarted_listener_ignores_the_answer_its_dead_predecessor_asked_for():
    ledger = FileLedger("SUE")
    first_instance_confirms_four(ledger)
    sue = restarted(ledger)
    # The acceptance JOE sent instance 1 (resuming at 1), stored at a relay
    # agent and handed to instance 2 now, with JOE's retransmissions of 1..4.
    sue.receive(RegisterReply("JOE", JOE, "FOO", 1, 4, True, to=SUE1), T0 + 61)
    for seq in (1, 2, 3, 4):
        sue.receive(data(seq, retransmit=True), T0 + 61)
    out = ledger.drain(sue)
    assert not advisories(out, "REGISTRATION.CERTIFIED")
    assert not delivered(out)  # held: instance 2's own request is not answered yet
    # A refusal meant for instance 1 does not end instance 2's registration either.
    sue.receive(NotCertified("JOE", JOE, "FOO", False, to=SUE1), T0 + 61)
    assert not advisories(ledger.drain(sue), "REGISTRATION.NOT_CERTIFIED")
    # JOE's answer to instance 2 resumes after what instance 1 confirmed.
    sue.receive(RegisterReply("JOE", JOE, "FOO", 5, 5, True, to=SUE2), T0 + 62)
    sue.receive(data(5, retransmit=True), T0 + 62)
    out = ledger.drain(sue)
    assert advisories(out, "REGISTRATION.CERTIFIED")
    assert delivered(out) == [5]
    assert not sent(out, RetransmitRequest)  # nothing is missing
    sue.handle_timer(T0 + 120)
    assert not sent(ledger.drain(sue), RetransmitRequest)


def test_a_resumed_agreement_never_restarts_below_what_the_ledger_confirmed():
    """The same answer from a sender that does not say whom it answers (``to`` empty)."""
    ledger = FileLedger("SUE")
    first_instance_confirms_four(ledger)
    sue = restarted(ledger)
    sue.receive(RegisterReply("JOE", JOE, "FOO", 1, 4, True), T0 + 61)
    out = ledger.drain(sue)
    assert advisories(out, "REGISTRATION.CERTIFIED")
    (review,) = sue.review_sources()
    assert (review.confirmed, review.expected) == (4, 5)
    for seq in (1, 2, 3, 4):  # late retransmissions to instance 1: already confirmed
        sue.receive(data(seq, retransmit=True), T0 + 61)
    sue.receive(data(5), T0 + 61)
    out = ledger.drain(sue)
    assert delivered(out) == [5]
    assert not sent(out, RetransmitRequest)


def test_a_sender_answers_a_request_for_messages_already_confirmed():
    """Silence left a listener that lost track asking forever; now it hears they are gone."""
    joe = CmCorrespondent("JOE", JOE, now=T0)
    joe.receive(RegisterRequest("SUE", SUE1, "FOO", True, 0), T0)
    out = joe.drain()
    (reply,) = sent(out, RegisterReply)
    assert (reply.begin, reply.to) == (1, SUE1)
    for n in range(6):
        joe.send("FOO", b"m%d" % n, T0, 0.0)
    joe.receive(Confirm("SUE", SUE1, "FOO", 4), T0)
    joe.drain()
    joe.receive(RetransmitRequest("SUE", SUE2, "FOO", 1, 6), T0 + 1)
    out = joe.drain()
    assert [(u.first, u.last) for u in sent(out, Unavailable)] == [(1, 4)]
    assert sorted(d.sequence for d in sent(out, DataRecord)) == [5, 6]
    assert all(o.destination == SUE2 for o in out if isinstance(o, Transmit))


def test_a_lagging_listener_reports_what_the_sender_says_is_gone():
    """The listener's side of the answer above: a DELIVERY.UNAVAILABLE advisory counts them."""
    sue = CmCorrespondent("SUE", SUE1, now=T0)
    sue.listen("FOO", now=T0)
    sue.receive(data(1), T0)
    sue.receive(RegisterReply("JOE", JOE, "FOO", 1, 6, False, to=SUE1), T0)
    out = sue.drain()
    assert delivered(out) == [1]
    sue.handle_timer(T0 + 60)
    (request,) = sent(sue.drain(), RetransmitRequest)
    assert (request.first, request.last) == (2, 6)
    sue.receive(Unavailable("JOE", JOE, "FOO", 2, 4), T0 + 60)
    for seq in (5, 6):
        sue.receive(data(seq, retransmit=True), T0 + 60)
    out = sue.drain()
    (gone,) = advisories(out, "DELIVERY.UNAVAILABLE")
    assert delivered(out) == [5, 6]
    assert (gone.get("seqno_begin"), gone.get("seqno_end")) == (2, 4)
