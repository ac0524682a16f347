"""Certified delivery over a lossy, duplicating, reordering simulated network.

Properties, for random seeds and fault rates:

* without time limits, every certified message reaches every registered
  listener exactly once and in order per sender and subject, and every stored
  message ends DELIVERY.COMPLETE at the sender;
* with time limits, nothing is delivered twice or out of order, each message
  is either delivered or reported DELIVERY.FAILED naming the listener, and a
  DELIVERY.UNAVAILABLE range only covers such failed, undelivered messages;
* a persistent listener or sender that crashes and restarts from its ledger
  file loses and repeats nothing.
"""

from __future__ import annotations

import os
from collections import defaultdict

from cm_sim import SimNet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rvasync.protocol.cm import CmTiming, decode_ledger

# Generous registration retries: at 30% loss a handful of attempts can all fail,
# and these properties are about delivery, not about giving up registration.
TIMING = CmTiming(register_attempts=40, register_retry_interval=0.5, confirm_request_interval=1.0)

faults = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32 - 1),
        "loss": st.sampled_from([0.0, 0.05, 0.2, 0.3]),
        "duplicate": st.sampled_from([0.0, 0.1, 0.3]),
        "max_delay": st.sampled_from([0.002, 0.05, 0.4]),
    }
)

# CM_SIM_EXAMPLES raises the example count for a long bug hunt; the default keeps
# the suite fast.
SIM_SETTINGS = settings(
    max_examples=int(os.environ.get("CM_SIM_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _network(f) -> SimNet:
    return SimNet(
        f["seed"],
        loss=f["loss"],
        duplicate=f["duplicate"],
        max_delay=f["max_delay"],
        timing=TIMING,
    )


def _warm_up(net: SimNet, sender, listeners, subjects) -> int:
    """Send until every listener holds an agreement on every subject; returns messages sent.

    The listeners are anticipated (``add_listener``) and require old messages,
    so these messages are certified too. A listener only learns of a sender
    from a message that reaches it; until then nobody can ask anyone anything.
    """
    sent = 0

    def certified() -> bool:
        return all(
            any(a.get("subject") == s for a in node.advisories_of("REGISTRATION.CERTIFIED"))
            for node in listeners
            for s in subjects
        )

    while not certified():
        for subject in subjects:
            net.send(sender, subject, b"warm-up")
        sent += 1
        net.run(0.5, until=certified)
        assert sent < 100, "registration never completed"
    return sent


def _sequences(node, sender: str, subject: str) -> list[int]:
    return [s for who, subj, s in node.certified() if who == sender and subj == subject]


@SIM_SETTINGS
@given(
    f=faults,
    counts=st.lists(st.integers(1, 25), min_size=1, max_size=2),
    n_listeners=st.integers(1, 3),
    spacing=st.sampled_from([0.0, 0.01, 0.3]),
)
def test_every_certified_message_delivered_exactly_once_in_order(f, counts, n_listeners, spacing):
    net = _network(f)
    sender = net.add("JOE")
    subjects = [f"ORDERS.{i}" for i in range(len(counts))]
    listeners = []
    for i in range(n_listeners):
        node = net.add(f"L{i}", require_old=True)
        node.core.listen("ORDERS.>", now=net.now)
        for subject in subjects:
            sender.core.add_listener(node.name, subject)
        listeners.append(node)
    warm = _warm_up(net, sender, listeners, subjects)
    counts = [count + warm for count in counts]
    total = warm * len(subjects)
    for round_ in range(warm, max(counts)):
        for subject, count in zip(subjects, counts, strict=True):
            if round_ < count:
                net.send(sender, subject, b"%s/%d" % (subject.encode(), round_ + 1))
                total += 1
        net.run(spacing)

    def settled() -> bool:
        return all(not entry.messages for entry in sender.core.ledger.subjects.values())

    assert net.run(600, until=settled), "sender still holds unconfirmed messages"
    for node in listeners:
        for subject, count in zip(subjects, counts, strict=True):
            assert _sequences(node, "JOE", subject) == list(range(1, count + 1))
        assert all(d.sequence is not None for d in node.deliveries)
        assert [d.payload for d in node.deliveries if d.subject == subjects[0]][warm:] == [
            b"%s/%d" % (subjects[0].encode(), n) for n in range(warm + 1, counts[0] + 1)
        ]
        assert not node.advisories_of("DELIVERY.UNAVAILABLE")
    complete = sender.advisories_of("DELIVERY.COMPLETE")
    assert len(complete) == total
    assert len(sender.advisories_of("DELIVERY.CONFIRM")) == total * n_listeners
    assert not sender.advisories_of("DELIVERY.FAILED")


@SIM_SETTINGS
@given(
    f=faults,
    count=st.integers(1, 30),
    time_limit=st.sampled_from([0.3, 1.0, 3.0]),
    spacing=st.sampled_from([0.05, 0.4]),
)
def test_time_limits_give_delivery_or_failure_never_duplicates(f, count, time_limit, spacing):
    net = _network(f)
    sender = net.add("JOE")
    node = net.add("SUE", require_old=True)
    node.core.listen("FOO", now=net.now)
    sender.core.add_listener("SUE", "FOO")
    for i in range(count):
        net.send(sender, "FOO", b"%d" % (i + 1), time_limit=time_limit)
        net.run(spacing)

    def settled() -> bool:
        return not sender.core.ledger.subjects["FOO"].messages

    assert net.run(600, until=settled)
    net.run(5)
    delivered = _sequences(node, "JOE", "FOO")
    assert delivered == sorted(set(delivered)), "duplicate or out-of-order delivery"
    failed = {
        a.get("seqno"): a.get_all("listener") for a in sender.advisories_of("DELIVERY.FAILED")
    }
    for seq in range(1, count + 1):
        assert seq in delivered or failed.get(seq) == ["SUE"], f"message {seq} vanished"
    for a in node.advisories_of("DELIVERY.UNAVAILABLE"):
        for seq in range(a.get("seqno_begin"), a.get("seqno_end") + 1):
            assert seq in failed and seq not in delivered
    assert all(d.payload == b"%d" % d.sequence for d in node.deliveries)


@SIM_SETTINGS
@given(
    f=faults,
    count=st.integers(5, 30),
    crash_after=st.integers(1, 29),
    downtime=st.sampled_from([0.5, 5.0]),
    who=st.sampled_from(["listener", "sender"]),
)
def test_persistent_correspondent_restart_loses_and_repeats_nothing(
    f, count, crash_after, downtime, who
):
    crash_after = min(crash_after, count - 1)
    net = _network(f)
    sender = net.add("JOE_PER", file_ledger=True)
    listener = net.add("SUE_PER", file_ledger=True, require_old=True)
    listener.core.listen("REMEMBER.THIS", now=net.now)
    sender.core.add_listener("SUE_PER", "REMEMBER.THIS")
    warm = _warm_up(net, sender, [listener], ["REMEMBER.THIS"])
    history: dict[str, list[int]] = defaultdict(list)
    handed = list(range(1, warm + 1))
    for i in range(warm, warm + count):
        if i == warm + crash_after:
            if who == "listener":
                history["listener"] += _sequences(listener, "JOE_PER", "REMEMBER.THIS")
                ledger = net.crash(listener)
                net.run(downtime)
                listener = net.add(
                    "SUE_PER", file_ledger=True, require_old=True, ledger_bytes=ledger
                )
                listener.core.listen("REMEMBER.THIS", now=net.now)
            else:
                ledger = net.crash(sender)
                net.run(downtime)
                sender = net.add("JOE_PER", file_ledger=True, ledger_bytes=ledger)
        result = net.send(sender, "REMEMBER.THIS", b"%d" % (i + 1))
        # A restarted sender continues after every number it may have handed
        # out (its reservation): never a number twice.
        assert result.sequence > handed[-1], "a restarted sender must continue its sequence"
        handed.append(result.sequence)
        net.run(0.05)

    def settled() -> bool:
        return not sender.core.ledger.subjects["REMEMBER.THIS"].messages

    assert net.run(600, until=settled)
    net.run(2)
    seen = history["listener"] + _sequences(listener, "JOE_PER", "REMEMBER.THIS")
    assert seen == handed
    # Numbers skipped by the restart (reserved, never used) are reported, not silent.
    reported = set()
    for advisory in listener.advisories_of("DELIVERY.UNAVAILABLE"):
        reported.update(range(advisory.get("seqno_begin"), advisory.get("seqno_end") + 1))
    assert set(range(1, handed[-1] + 1)) - set(handed) <= reported
    for node in (sender, listener):
        replay = decode_ledger(bytes(node.ledger_bytes), expected_name=node.name)
        assert replay.state == node.core.ledger


operations = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 1), st.sampled_from([0.0, 0.5, 5.0])),
        st.tuples(st.just("run"), st.sampled_from([0.01, 0.3, 2.0])),
        st.tuples(st.just("crash"), st.sampled_from(["JOE_PER", "SUE_PER"])),
        st.tuples(st.just("close"), st.booleans()),
        st.tuples(st.just("remove"), st.integers(0, 1)),
        st.tuples(st.just("disallow")),
        st.tuples(st.just("allow")),
        st.tuples(st.just("expire"), st.integers(0, 1)),
    ),
    max_size=40,
)


@SIM_SETTINGS
@given(f=faults, ops=operations)
def test_random_operations_keep_order_and_ledgers_consistent(f, ops):
    """Whatever happens, certified deliveries to a name never repeat or go backwards."""
    net = _network(f)
    subjects = ["A.ONE", "A.TWO"]
    nodes = {
        "JOE_PER": net.add("JOE_PER", file_ledger=True),
        "SUE_PER": net.add("SUE_PER", file_ledger=True, require_old=True),
    }
    listening = {"SUE_PER": nodes["SUE_PER"].core.listen("A.>", now=net.now)}
    seen: dict[tuple[str, str], list[int]] = defaultdict(list)
    counted: dict[int, int] = {}

    def collect(node) -> None:
        start = counted.get(id(node), 0)
        for d in node.deliveries[start:]:
            if d.sequence is not None:
                seen[(d.sender, d.subject)].append(d.sequence)
        counted[id(node)] = len(node.deliveries)

    for op in ops:
        joe, sue = nodes["JOE_PER"], nodes["SUE_PER"]
        kind = op[0]
        if kind == "send":
            net.send(joe, subjects[op[1]], b"x", time_limit=op[2])
        elif kind == "run":
            net.run(op[1])
        elif kind == "crash":
            name = op[1]
            collect(nodes[name])
            ledger = net.crash(nodes[name])
            nodes[name] = net.add(
                name, file_ledger=True, require_old=name == "SUE_PER", ledger_bytes=ledger
            )
            if name == "SUE_PER" and "SUE_PER" in listening:
                listening["SUE_PER"] = nodes[name].core.listen("A.>", now=net.now)
        elif kind == "close":
            if "SUE_PER" in listening:
                sue.core.close_listener(listening.pop("SUE_PER"), net.now, cancel_agreements=op[1])
            else:
                listening["SUE_PER"] = sue.core.listen("A.>", now=net.now)
        elif kind == "remove":
            review = joe.core.review_ledger(subjects[op[1]])
            if review and any(r.name == "SUE_PER" for r in review[0].listeners):
                joe.core.remove_listener("SUE_PER", subjects[op[1]], net.now)
        elif kind == "disallow":
            joe.core.disallow_listener("SUE_PER", net.now)
        elif kind == "allow":
            joe.core.allow_listener("SUE_PER")
        elif kind == "expire":
            joe.core.expire_messages(subjects[op[1]], 10**6)
        net.pump()
    net.run(30)
    collect(nodes["SUE_PER"])
    for key, sequences in seen.items():
        assert sequences == sorted(set(sequences)), f"{key}: {sequences}"
    for node in nodes.values():
        replay = decode_ledger(bytes(node.ledger_bytes), expected_name=node.name)
        assert replay.state == node.core.ledger
