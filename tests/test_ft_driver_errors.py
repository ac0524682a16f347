"""FtMember's boundaries: parameter errors, bad records, a closed transport, gone peers."""

from __future__ import annotations

import asyncio

import pytest
from test_ft_driver_support import FAST, WAIT, Journal, until

import rvasync as rv
from rvasync.driverkit.channel import (
    ORIGIN_FIELD,
    UNREACHABLE_PREFIX,
    send_internal,
    transport_id,
)
from rvasync.ftdriver import FtMember
from rvasync.message import Message
from rvasync.protocol.ft import FtAction, FtRecord, RecordKind, control_subject
from rvasync.transport.process import ProcessTransport

A, D = FtAction.ACTIVATE, FtAction.DEACTIVATE


def noop(member: FtMember, action: FtAction) -> None:
    pass


@pytest.mark.parametrize(
    ("params", "error", "words"),
    [
        ({"weight": 0}, rv.InvalidArgument, "weight must be at least 1"),
        ({"weight": "heavy"}, rv.InvalidArgument, "weight must be an integer"),
        ({"active_goal": 0}, rv.InvalidArgument, "active_goal must be at least 1"),
        ({"heartbeat": 0}, rv.InvalidArgument, "heartbeat interval must be positive"),
        ({"heartbeat": 3.0}, rv.InvalidArgument, "strictly less than the activation"),
        ({"preparation": 0.5}, rv.InvalidArgument, "strictly greater than the heartbeat"),
        ({"preparation": 4.0}, rv.InvalidArgument, "strictly less than the activation"),
        ({"activation": float("nan")}, rv.InvalidArgument, "activation interval must be finite"),
        ({"group": "A.*"}, rv.InvalidSubject, "wildcard"),
        ({"group": "A..B"}, rv.InvalidSubject, "empty element"),
        ({"group": "G" * 127 + "." + "H" * 124}, rv.InvalidSubject, "255"),
        ({"callback": None}, rv.InvalidArgument, "callback must be a function"),
        ({"transport": "tcp:7500"}, rv.InvalidArgument, "needs an rvasync transport"),
    ],
)
async def test_bad_parameters_raise_at_construction(rv_process_transport, params, error, words):
    args = {"transport": rv_process_transport, "group": "SVC.ERR", "callback": noop, **params}
    with pytest.raises(error, match=words):
        FtMember(args.pop("transport"), args.pop("group"), **args)


async def test_bad_weights_at_run_time(rv_process_transport):
    member = FtMember(rv_process_transport, "SVC.ERRW", callback=noop, **FAST)
    with pytest.raises(rv.InvalidArgument, match="only a joined member"):
        member.weight = 0
    with pytest.raises(rv.NotPermitted, match="not joined"):
        member.disable()
    member.weight = 70  # before joining: simply the weight it will join with
    async with member:
        assert member.weight == 70
        with pytest.raises(rv.InvalidArgument, match="weight must be at least 1"):
            member.weight = -3
        with pytest.raises(rv.InvalidArgument, match="weight must be an integer"):
            member.weight = 2.5
        assert member.weight == 70
    with pytest.raises(rv.NotPermitted, match="create a new FtMember"):
        await member.join()


async def test_malformed_records_are_dropped_and_counted(rv_process_transport, capsys):
    journal = Journal()
    async with FtMember(
        rv_process_transport, "SVC.BAD", callback=journal.callback("m"), **FAST
    ) as member:
        for fields in ({"junk": 1}, {"version": 99}, {"version": 1, "kind": "HELLO"}):
            send_internal(rv_process_transport, Message(control_subject("SVC.BAD"), fields))
        await until(lambda: member.malformed_records == 3, what="three drops")
        await until(lambda: member.active, what="activation despite the junk")
    assert capsys.readouterr().err.count("malformed fault tolerance record") == 1


async def test_closed_transport_ends_the_membership():
    """The member can no longer be heard: it is disabled, deactivated and stops."""
    transport = ProcessTransport(asyncio.get_running_loop())
    journal = Journal()
    disabled = transport.listen("_RV.ERROR.RVFT.DISABLING_MEMBER.>")
    member = FtMember(transport, "SVC.CLOSE", callback=journal.callback("m"), **FAST)
    await member.join()
    await until(lambda: member.active, what="activation")
    transport._router.remove(disabled)  # keep hearing it after the shutdown below
    transport._shutdown()
    await until(lambda: not member.joined, what="the member to notice at its next heartbeat")
    assert journal.of("m") == [A, D] and member.weight == 0 and not member.active
    await member.withdraw()  # nothing left to send; must not raise
    assert disabled.queue.poll() is None  # presented on a closed transport: logged instead


@pytest.mark.parametrize("gone", ["D1.T42", "D1"], ids=["transport", "whole-daemon"])
async def test_unreachable_transport_confirms_a_peer_gone(rv_process_transport, gone):
    """UNREACHABLE.TRANSPORT for a peer's transport, or for its whole daemon, drops it at once."""
    journal = Journal()
    timing = {"heartbeat": 0.05, "activation": 1.0}  # a wait for silence would show
    member = FtMember(rv_process_transport, "SVC.GONE", callback=journal.callback("m"), **timing)
    peer = FtRecord(
        RecordKind.HEARTBEAT, "SVC.GONE", "peer-1", 0, 50, 1, 0.05, 1.0, 0.0, 0.05
    ).to_fields()

    async def active_peer() -> None:
        for seq in range(10_000):
            msg = Message(control_subject("SVC.GONE"), {**peer, "seq": seq, ORIGIN_FIELD: "D1.T42"})
            send_internal(rv_process_transport, msg)
            await asyncio.sleep(timing["heartbeat"])

    loop = asyncio.get_running_loop()
    async with member:
        beating = asyncio.create_task(active_peer())
        try:
            await until(lambda: member.active_count == 1, what="the peer to be heard")
            await asyncio.sleep(1.2 * timing["activation"])  # past the first interval
            assert not member.active  # status quo: the active peer keeps its place
            for other in ("D1.T4", "D2", "D1.T42.X"):  # other transports and daemons
                rv_process_transport._present(Message(UNREACHABLE_PREFIX + other))
            await asyncio.sleep(0.1)
            assert not member.active
        finally:
            beating.cancel()
        gone_at = loop.time()
        rv_process_transport._present(Message(UNREACHABLE_PREFIX + gone))
        await until(lambda: member.active, what="activation")
        assert journal.time_of("m", A) - gone_at < timing["activation"] / 2
        assert member.active_count == 1
    assert journal.of("m") == [A, D]


async def test_transport_id_is_the_transports_own(rv_process_transport):
    assert transport_id(rv_process_transport) is None  # no daemon: never reported gone

    class Unopened:
        transport_id = None

    class Named:
        transport_id = "T-1"

    assert transport_id(Unopened()) is None  # type: ignore[arg-type]
    assert transport_id(Named()) == "T-1"  # type: ignore[arg-type]


class FlakyTransport(ProcessTransport):
    """A process transport whose daemon link can be cut (sends raise DaemonUnavailable)."""

    cut = False

    def _route(self, msg: Message) -> None:
        if self.cut:
            raise rv.DaemonUnavailable("the daemon link is reconnecting")
        super()._route(msg)


async def test_daemon_outage_is_not_a_fault_of_the_member(capsys):
    transport = FlakyTransport(asyncio.get_running_loop())
    journal = Journal()
    member = FtMember(transport, "SVC.OUT", weight=70, callback=journal.callback("m"), **FAST)
    try:
        await member.join()
        await until(lambda: member.active, what="activation")
        transport.cut = True
        await asyncio.sleep(3 * FAST["heartbeat"])  # several heartbeats fail
        assert member.active and member.weight == 70 and member.joined
        records = transport.listen(control_subject("SVC.OUT"))
        assert records.queue.poll() is None
        transport.cut = False
        heartbeat = await records.get(WAIT)  # they flow again
        assert heartbeat["kind"] == "HEARTBEAT" and heartbeat["weight"] == 70
        assert journal.of("m") == [A]
    finally:
        await member.withdraw()
        transport._shutdown()
    err = capsys.readouterr().err
    assert err.count("cannot reach its daemon") == 1 and "DISABLING_MEMBER" not in err
