"""What the driver asks of the certified-delivery core: addresses, batching, filters, races.

These run the sans-IO core directly (records by hand, or the simulated
network of cm_sim) for the parts of it the asyncio driver relies on.
"""

from __future__ import annotations

import pytest
from cm_sim import SimNet

import rvasync as rv
from rvasync.protocol.cm import CmCorrespondent, Deliver, Transmit, compact_ledger, decode_ledger
from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.ledger import LedgerState, MessageRemoved, MessagesRemoved, StoredMessage
from rvasync.protocol.cm.names import (
    any_instance_address,
    instance_address,
    instance_route,
    is_any_instance_address,
    is_transient_name,
    new_transient_name,
)
from rvasync.protocol.cm.records import (
    Confirm,
    DataRecord,
    NotCertified,
    RegisterReply,
    RegisterRequest,
)
from rvasync.subjects import subject_matches

T0 = 1_000_000.0


def data(seq, origin="JOE", address="_RVCM.P2P.a1.JOE", subject="FOO"):
    return DataRecord(origin, address, subject, seq, 0.0, b"m%d" % seq)


def sent(outputs, kind):
    return [o.record for o in outputs if isinstance(o, Transmit) and isinstance(o.record, kind)]


def advisories(outputs, condition):
    return [o for o in outputs if isinstance(o, Advisory) and o.condition == condition]


def test_instance_addresses_are_unique_yet_routed_by_name():
    one = instance_address("JOE.PER", "a1")
    two = instance_address("JOE.PER", "b2")
    assert one != two
    route = instance_route("JOE.PER")
    assert subject_matches(route, one) and subject_matches(route, two)
    assert subject_matches(route, any_instance_address("JOE.PER"))
    assert not subject_matches(route, instance_address("JOE.PER.X", "a1"))
    assert not subject_matches(route, instance_address("PER", "a1"))
    assert is_any_instance_address(any_instance_address("JOE.PER"))
    assert not is_any_instance_address(one)


def test_transient_names_are_recognised_by_their_exact_form():
    name = new_transient_name()
    assert is_transient_name(name)
    assert not is_transient_name("_RVCM_T.abc")
    assert not is_transient_name(name.upper())
    core = CmCorrespondent(name, instance_address(name, "a1"), now=T0)
    assert core.name == name  # a driver may generate the name first
    with pytest.raises(rv.InvalidSubject, match="reserved element"):
        CmCorrespondent("_RVCM_T.abc", "_RVCM.P2P.a1.X", now=T0)


def test_a_provisional_address_is_not_taken_for_a_move():
    sue = CmCorrespondent("SUE", "_RVCM.P2P.s1.SUE", now=T0)
    sue.listen("FOO", now=T0)
    sue.drain()  # its own announcement
    sue.receive(data(1, address=any_instance_address("JOE")), T0)
    out = sue.drain()
    assert sent(out, RegisterRequest)
    assert [o.destination for o in out if isinstance(o, Transmit)] == [any_instance_address("JOE")]
    # JOE's answer carries its real address: learning it is not a move.
    sue.receive(RegisterReply("JOE", "_RVCM.P2P.a1.JOE", "FOO", 2, 1, False), T0)
    out = sue.drain()
    assert not advisories(out, "REGISTRATION.MOVED")
    assert advisories(out, "REGISTRATION.CERTIFIED")
    # Later labeled messages may again come with the provisional address (a
    # driver that forgot): still no move, and replies go to the real address.
    sue.receive(data(2, address=any_instance_address("JOE")), T0)
    assert not advisories(sue.drain(), "REGISTRATION.MOVED")
    sue.receive(data(3, address="_RVCM.P2P.b2.JOE"), T0)  # a real new address is a move
    assert advisories(sue.drain(), "REGISTRATION.MOVED")


def certified_sue(explicit=True):
    sue = CmCorrespondent("SUE", "_RVCM.P2P.s1.SUE", now=T0)
    lid = sue.listen("FOO", now=T0, explicit_confirm=explicit)
    sue.receive(data(1), T0)
    sue.receive(RegisterReply("JOE", "_RVCM.P2P.a1.JOE", "FOO", 1, 0, False), T0)
    sue.drain()
    return sue, lid


def test_confirm_many_advances_each_source_once():
    sue, lid = certified_sue()
    for seq in range(2, 12):
        sue.receive(data(seq), T0)
    delivered = [o for o in sue.drain() if isinstance(o, Deliver)]
    assert [d.sequence for d in delivered] == list(range(2, 12))
    items = [(lid, "JOE", "FOO", seq) for seq in range(1, 12)]
    assert sue.confirm_many(items) == 11
    out = sue.drain()
    assert [c.sequence for c in sent(out, Confirm)] == [11]
    assert sue.confirm_many(items) == 0  # already settled
    assert sue.confirm_many([(lid, "JOE", "FOO", None)]) == 0
    with pytest.raises(rv.InvalidArgument, match="no open CM listener"):
        sue.confirm_many([(99, "JOE", "FOO", 3)])


def test_a_stale_not_certified_does_not_undo_a_registration_in_progress():
    """A restarted sender answers an old confirmation with "not certified" while
    our registration request to it is on its way; the registration decides."""
    sue, _lid = certified_sue()
    sue.receive(data(2), T0)
    sue.drain()
    sue.receive(data(3, address="_RVCM.P2P.b2.JOE"), T0)  # JOE moved: register again
    out = sue.drain()
    assert sent(out, RegisterRequest)
    sue.receive(NotCertified("JOE", "_RVCM.P2P.b2.JOE", "FOO", False), T0)
    assert not advisories(sue.drain(), "REGISTRATION.NOT_CERTIFIED")
    sue.receive(RegisterReply("JOE", "_RVCM.P2P.b2.JOE", "FOO", 4, 3, False), T0)
    out = sue.drain()
    assert advisories(out, "REGISTRATION.CERTIFIED")
    sue.receive(data(4, address="_RVCM.P2P.b2.JOE"), T0)
    assert [d.sequence for d in sue.drain() if isinstance(d, Deliver)] == [4]
    # A refusal while registering is still a refusal.
    sue.receive(data(5, address="_RVCM.P2P.c3.JOE"), T0)
    sue.drain()
    sue.receive(NotCertified("JOE", "_RVCM.P2P.c3.JOE", "FOO", True), T0)
    assert advisories(sue.drain(), "REGISTRATION.NOT_CERTIFIED")


def test_a_confirmed_run_leaves_the_ledger_in_one_record():
    net = SimNet(3)
    joe = net.add("JOE", file_ledger=True)
    sue = net.add("SUE", explicit=True)
    lid = sue.core.listen("FOO", now=net.now, explicit_confirm=True)
    net.send(joe, "FOO", b"first")
    net.run(1)
    for n in range(2, 12):
        net.send(joe, "FOO", b"m%d" % n)
    net.run(1)
    assert len(joe.core.ledger.subjects["FOO"].messages) == 10
    sue.core.confirm_many([(lid, "JOE", "FOO", seq) for seq in range(2, 12)])
    net.run(1)
    replay = decode_ledger(bytes(joe.ledger_bytes), expected_name="JOE")
    removals = [r for r in replay.records if isinstance(r, (MessageRemoved, MessagesRemoved))]
    assert removals == [MessagesRemoved("FOO", 2, 11)]
    assert replay.state.subjects["FOO"].messages == {}
    assert [a.get("seqno") for a in joe.advisories_of("DELIVERY.COMPLETE")] == list(range(2, 12))


def test_messages_removed_spares_what_another_listener_still_needs():
    net = SimNet(4)
    joe = net.add("JOE", file_ledger=True)
    sue = net.add("SUE")
    bob = net.add("BOB", explicit=True)
    sue.core.listen("FOO", now=net.now)
    bob_id = bob.core.listen("FOO", now=net.now, explicit_confirm=True)
    net.send(joe, "FOO", b"first")
    net.run(1)
    for n in range(2, 8):
        net.send(joe, "FOO", b"m%d" % n)
    net.run(1)
    assert sorted(joe.core.ledger.subjects["FOO"].messages) == list(range(2, 8))
    for seq in (2, 3, 4):
        bob.core.confirm(bob_id, "JOE", "FOO", seq)
    net.run(1)
    assert sorted(joe.core.ledger.subjects["FOO"].messages) == [5, 6, 7]
    replay = decode_ledger(bytes(joe.ledger_bytes), expected_name="JOE")
    assert replay.state == joe.core.ledger
    compacted = decode_ledger(compact_ledger(joe.core.ledger), expected_name="JOE")
    assert compacted.state == joe.core.ledger


def test_messages_removed_replays_only_its_range():
    state = LedgerState(name="JOE")
    for seq in range(1, 8):
        state.apply(StoredMessage("FOO", seq, 0.0, 0.0, b"x"))
    state.apply(MessagesRemoved("FOO", 2, 4))
    assert sorted(state.subjects["FOO"].messages) == [1, 5, 6, 7]
    state.apply(MessagesRemoved("FOO", 0, 1_000_000))  # a wide range, few messages
    assert state.subjects["FOO"].messages == {}
    state.apply(MessagesRemoved("BAR", 1, 3))  # an unknown subject changes nothing


def test_info_filter_skips_per_message_advisories_nobody_hears():
    asked = []

    def nobody(condition, tail):
        asked.append((condition, tail))
        return False

    net = SimNet(5)
    joe = net.add("JOE")
    joe.core.set_info_filter(nobody)
    sue = net.add("SUE")
    sue.core.listen("FOO", now=net.now)
    net.send(joe, "FOO", b"first")
    net.run(1)
    for n in range(2, 6):
        net.send(joe, "FOO", b"m%d" % n)
    net.run(1)
    assert not joe.advisories_of("DELIVERY.CONFIRM")
    assert not joe.advisories_of("DELIVERY.COMPLETE")
    assert joe.advisories_of("REGISTRATION.REQUEST")  # the others are never filtered
    assert ("DELIVERY.CONFIRM", "FOO") in asked
    assert joe.core.ledger.subjects["FOO"].messages == {}
    with pytest.raises(rv.InvalidArgument, match="callable"):
        joe.core.set_info_filter(3)
