"""Listeners that require old messages adopt an earlier instance's agreement (queues).

A new instance of a reusable listening name without a ledger (a distributed
queue's next scheduler) knows nothing of the agreements its predecessor made.
When a sender asks it to confirm, it registers and takes the agreement over
(the sender retransmits what was not confirmed) instead of cancelling it;
without ``require_old`` it still cancels, as before.
"""

from __future__ import annotations

from cm_sim import Node, SimNet

from rvasync.protocol.cm.records import Record


class NamedRoutes(SimNet):
    """Point-to-point records reach every live instance of the addressee's name.

    As on a real transport, where every instance of a name listens on the
    name's instance route: an address a sender remembers for a crashed
    instance reaches its successor.
    """

    def transmit(self, src: Node, destination: str, record: Record, p2p: bool) -> None:
        if p2p:
            names = {n.address: n.name for n in self.everyone}
            name = names.get(destination)
            live = [n for n in self.nodes if n.name == name and n.address != destination]
            for node in live:
                super().transmit(src, node.address, record, p2p)
        super().transmit(src, destination, record, p2p)

    def add(self, *args, **kwargs) -> Node:  # type: ignore[override]
        node = super().add(*args, **kwargs)
        self.everyone.append(node)
        return node


def _predecessor_crashed(require_old: bool):
    net = NamedRoutes(21)
    net.everyone = []
    joe = net.add("JOE")
    sue = net.add("WORK.Q", require_old=True, explicit=True)
    lid = sue.core.listen("JOBS", now=net.now, explicit_confirm=True)
    joe.core.add_listener("WORK.Q", "JOBS")
    for i in range(1, 11):
        net.send(joe, "JOBS", b"%d" % i)
    net.run(1)
    for d in sue.deliveries:
        if d.sequence is not None and d.sequence <= 4:
            sue.core.confirm(lid, d.sender, d.subject, d.sequence)
    net.run(1)
    assert joe.core.review_ledger("JOBS")[0].total_messages == 6
    net.crash(sue)
    successor = net.add("WORK.Q", require_old=require_old)
    successor.core.listen("JOBS", now=net.now)
    net.run(600)  # only the sender's confirmation requests reach the successor
    return joe, successor


def test_successor_requiring_old_messages_takes_the_agreement_over():
    joe, successor = _predecessor_crashed(require_old=True)
    assert [s for _, _, s in successor.certified()] == [5, 6, 7, 8, 9, 10]
    assert joe.advisories_of("REGISTRATION.CLOSED") == []
    assert joe.core.review_ledger("JOBS")[0].total_messages == 0


def test_successor_without_require_old_still_cancels():
    joe, successor = _predecessor_crashed(require_old=False)
    assert successor.certified() == []
    assert [a.get("listener") for a in joe.advisories_of("REGISTRATION.CLOSED")] == ["WORK.Q"]


# --- A listener that comes back after the sender has gone quiet -------------------------------
#
# The spec: when an anticipated (or restarted) listener starts, "the sender
# automatically retransmits all the stored messages". A listener discovers a
# sender only from a labeled message, so with nothing new to send the stored
# messages would wait for the next one. The sender hears the listener's
# announcement (Hello) instead and invites it to register.


def _quiet_sender_then_listener(require_old: bool, listen_after: float = 0.0):
    net = SimNet(5)
    joe = net.add("JOE")
    joe.core.add_listener("DB.PER", "STORE.THIS")
    for i in range(1, 6):
        net.send(joe, "STORE.THIS", b"%d" % i)
    net.run(30)  # nobody listens yet: the messages wait in the sender's ledger
    assert joe.core.review_ledger("STORE.THIS")[0].total_messages == 5
    db = net.add("DB.PER", require_old=require_old)
    if listen_after:
        net.run(listen_after)  # announced itself, not yet listening
    db.core.listen("STORE.THIS", now=net.now)
    net.run(30)  # no new message from the sender
    return joe, db


def test_an_anticipated_listener_starting_after_the_last_send_gets_the_stored_messages():
    joe, db = _quiet_sender_then_listener(require_old=True)
    assert [s for _, _, s in db.certified()] == [1, 2, 3, 4, 5]
    assert joe.core.review_ledger("STORE.THIS")[0].total_messages == 0


def test_the_invitation_is_repeated_for_a_listener_that_listens_a_moment_after_starting():
    _, db = _quiet_sender_then_listener(require_old=True, listen_after=2.5)
    assert [s for _, _, s in db.certified()] == [1, 2, 3, 4, 5]


def test_a_listener_that_does_not_require_old_messages_ignores_the_invitation():
    joe, db = _quiet_sender_then_listener(require_old=False)
    assert db.certified() == []
    # The sender still keeps them (nothing was confirmed, nothing cancelled).
    assert joe.core.review_ledger("STORE.THIS")[0].total_messages == 5
    assert joe.advisories_of("REGISTRATION.CLOSED") == []
