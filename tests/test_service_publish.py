"""The daemon's publish paths are one (issue 36): ``publish``, written out flat for the
in-process send of one message, does what the reference path does for it.

The reference is ``ServiceEndpoint.publish_many`` (``_route_batch``, which
``publish_run`` and a TCP client's ``publish_wires`` use too). Two services of
one daemon get the same sessions; every kind of message goes through
``publish`` on one and ``publish_many`` on the other, and what comes out must
be the same: what each session receives, what goes to the network (and
where), the counters, the advisories presented, the errors raised. Sends to
the network are recorded instead of made (the drivers' send calls are
replaced on the two endpoints).
"""

from __future__ import annotations

import pytest

import rvasync as rv
from rvasync.codec import encode
from rvasync.daemon.engine import Daemon
from rvasync.daemon.udp import address_hex
from rvasync.testing import free_port


class Owner:
    """A session owner that records what it is given (in-process style)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, bytes]] = []

    def deliver_message(self, msg: rv.Message) -> None:
        self.got.append(("msg", encode(msg)))

    def deliver_inbox(self, msg: rv.Message, owned: bool) -> None:
        self.got.append(("inbox", encode(msg)))

    def deliver(self, payload) -> None:
        # The same bytes as deliver_wire's, only computed later: one kind of delivery.
        self.got.append(("wire", payload.wire()))

    def present(self, advisory: rv.Message) -> None:
        self.got.append(("advisory", advisory.subject.encode()))


class WireOwner(Owner):
    """A TCP client's owner: takes wire bytes, one or several at a time."""

    deliver_message = None  # type: ignore[assignment]
    deliver_inbox = None  # type: ignore[assignment]

    def deliver_wire(self, data: bytes) -> None:
        self.got.append(("wire", data))

    def deliver_wires(self, datas: list[bytes]) -> None:
        self.got.extend(("wire", d) for d in datas)


def record_network(endpoint) -> list:
    """Replace the endpoint driver's send calls by a record of (destination, bytes)."""
    sent: list = []
    driver = endpoint.driver

    def send_lone(data, dest):
        sent.append((dest, data))
        return True

    driver.send_lone = send_lone
    driver.multicast = lambda data, size, batch: sent.append((None, data))
    driver.multicast_many = lambda datas, total, batch, after_local=False: sent.extend(
        (None, d) for d in datas
    )
    driver.ptp = lambda dest, data, batch: sent.append((dest, data))
    driver.knows_address = lambda address: address == ("127.0.0.9", 4242)
    return sent


def cases(own_hex: str, token: str) -> list[tuple[str, rv.Message | None, bytes | None]]:
    def m(subject: str, **fields) -> rv.Message:
        return rv.Message(subject, fields or {"x": 1})

    known = address_hex(("127.0.0.9", 4242))
    unknown = address_hex(("127.0.0.8", 4343))
    mine = f"_INBOX.{own_hex}.{token}.1"
    return [
        ("plain", m("PARITY.A"), None),
        ("plain, wire only", None, encode(m("PARITY.A", n=2))),
        ("no listener", m("PARITY.NOBODY"), None),
        ("wildcard listener", m("PARITY.DEEP.X"), None),
        ("two listeners", m("PARITY.BOTH"), None),
        ("local only", m("_LOCAL.PARITY"), None),
        ("protocol subject", m("_RVCM.PARITY.X"), None),
        ("advisory from a client", m("_RV.INFO.SYSTEM.FAKE"), None),
        ("inbox of this daemon", m(mine), None),
        ("inbox of a gone session", m(f"_INBOX.{own_hex}.gone.1"), None),
        ("inbox of a known daemon", m(f"_INBOX.{known}.t.1"), None),
        ("inbox of an unknown daemon", m(f"_INBOX.{unknown}.t.1"), None),
        ("no subject", rv.Message(None, {"x": 1}), None),
        ("too large, wire", None, encode(m("PARITY.A", pad=b"")) + bytes(64 * 1024 * 1024)),
    ]


def attach_all(daemon: Daemon, service: str) -> tuple[object, list[Owner]]:
    owners = [Owner(), Owner(), WireOwner()]
    sessions = [daemon.attach(o, service=service, network=None) for o in owners]
    sessions[0].add_interest("PARITY.A")
    sessions[0].add_interest("PARITY.BOTH")
    sessions[1].add_interest("PARITY.>")
    sessions[2].add_interest("PARITY.BOTH")
    sessions[2].add_interest("_LOCAL.>")
    sessions[2].add_interest("_RVCM.>")
    return sessions, owners


async def test_publish_does_what_the_reference_path_does():
    daemon = Daemon(host_status_interval=0)
    await daemon.start()
    try:
        flat_service, ref_service = str(free_port()), str(free_port())
        flat_sessions, flat_owners = attach_all(daemon, flat_service)
        ref_sessions, ref_owners = attach_all(daemon, ref_service)
        flat = daemon.services[int(flat_service)]
        ref = daemon.services[int(ref_service)]
        flat_sent, ref_sent = record_network(flat), record_network(ref)
        sender_flat, sender_ref = flat_sessions[0], ref_sessions[0]
        # The same inbox tokens on both sides: the receiving session is sessions[1].
        for (name, msg, data), (_, msg2, data2) in zip(
            cases(flat.address_hex, flat_sessions[1].token),
            cases(ref.address_hex, ref_sessions[1].token),
            strict=True,
        ):
            for owner in flat_owners + ref_owners:
                owner.got.clear()
            flat_sent.clear()
            ref_sent.clear()
            before = (flat.counters.as_dict(), ref.counters.as_dict())
            outcome = []
            for call, args in (
                (flat.publish, (sender_flat, msg, data)),
                (ref.publish_many, (sender_ref, [(msg2, data2)])),
            ):
                try:
                    call(*args)
                    outcome.append(None)
                except rv.RvError as exc:
                    outcome.append(type(exc))
            assert outcome[0] == outcome[1], name
            if "inbox" not in name:
                assert [o.got for o in flat_owners] == [o.got for o in ref_owners], name
                assert flat_sent == ref_sent, name
            else:  # an inbox names its service's daemon: the bytes differ, not the routes
                kinds = [
                    [[k for k, _ in o.got] for o in owners] for owners in (flat_owners, ref_owners)
                ]
                assert kinds[0] == kinds[1], name
                assert [d is None for d, _ in flat_sent] == [d is None for d, _ in ref_sent], name
                assert [d for d, _ in flat_sent] == [d for d, _ in ref_sent], name
            delta = [
                {k: after[k] - b[k] for k in after}
                for after, b in zip(
                    (flat.counters.as_dict(), ref.counters.as_dict()), before, strict=True
                )
            ]
            assert delta[0] == delta[1], name
    finally:
        await daemon.stop()


@pytest.mark.parametrize("via", ["publish_run", "publish_wires"])
async def test_the_batch_paths_deliver_in_order_and_count_alike(via):
    daemon = Daemon(host_status_interval=0)
    await daemon.start()
    try:
        service = str(free_port())
        sessions, owners = attach_all(daemon, service)
        endpoint = daemon.services[int(service)]
        sent = record_network(endpoint)
        before = endpoint.counters.messages_out  # the LISTEN.STARTs of attach_all
        wires = [encode(rv.Message("PARITY.BOTH", {"n": n})) for n in range(5)]
        if via == "publish_run":
            endpoint.publish_run(sessions[1], "PARITY.BOTH", wires)
        else:
            endpoint.publish_wires(sessions[1], ["PARITY.BOTH"] * 5, wires)
        assert [d for _, d in owners[0].got] == wires  # in order, decoded once each
        assert owners[2].got == [("wire", w) for w in wires]  # the TCP client: as batches
        assert [d for _, d in sent] == wires
        assert endpoint.counters.messages_out - before == 5
    finally:
        await daemon.stop()
