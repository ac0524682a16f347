"""``rv.FtMember``: one membership of one fault tolerance group, driven on asyncio.

All decisions are made by the sans-IO core :class:`~rvasync.protocol.ft.FtMemberCore`;
this class only connects it to the world. Every input (a record from the
group, the core's own deadline, a weight change, a peer known to be gone, the
join and the withdrawal) runs synchronously on the event loop, and its outputs
are carried out in the core's order: records to the group first, then
advisories on the local transport, then the actions to the program's callback.
Because records go out inside the input itself, a slow async callback (which
runs in a task of its own, actions strictly in order) never delays the
member's heartbeats; only blocking the event loop can do that.

Failures of the driver itself follow the specification's "Disabling a Member":
a record that cannot be sent or an input the core chokes on disables the
member (weight 0, DEACTIVATE, ``DISABLING_MEMBER``). A closed transport ends
the membership: the member is disabled, deactivated and stops, since it can
no longer hear or be heard. A daemon link that is down for a while
(``DaemonUnavailable`` while a standalone daemon is reconnected) is an outage
like a network partition: the member keeps its state and weight, the others
take over, and the ranking settles when the link returns.
"""

from __future__ import annotations

import asyncio
import functools
import os
import socket
import uuid
from collections.abc import Awaitable, Callable

from rvasync._logging import stderr_logger
from rvasync.driverkit.channel import ORIGIN_MEMORY, GroupChannel
from rvasync.driverkit.deadline import DeadlineTimer
from rvasync.errors import DaemonUnavailable, InvalidArgument, NotPermitted, TransportClosed
from rvasync.ftdriver._serial import SerialCallback
from rvasync.protocol.ft import FtAction, FtMemberCore, FtOutputs, FtRecord, validate_weight
from rvasync.transport.base import BaseTransport

__all__ = ["FtMember", "FtMemberCallback"]

FtMemberCallback = Callable[["FtMember", FtAction], Awaitable[None] | None]


def _new_member_id() -> str:
    """Unique per membership, readable in logs: host, process and 64 random bits."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def check_transport(transport: object, what: str) -> BaseTransport:
    if not isinstance(transport, BaseTransport):
        raise InvalidArgument(
            f"{what} needs an rvasync transport (rv.Transport or rv.process_transport()), "
            f"got {type(transport).__name__}"
        )
    return transport


class FtMember:
    """A member of fault tolerance group ``group``: joins on enter, withdraws on exit.

    ``callback(member, action)`` (plain or async) is told to
    ``PREPARE_TO_ACTIVATE``, ``ACTIVATE`` or ``DEACTIVATE``; actions arrive in
    order, one at a time. Parameters are checked here, before anything is
    sent: :class:`~rvasync.errors.InvalidArgument` names the broken rule,
    :class:`~rvasync.errors.InvalidSubject` a bad group name.

    A member object serves one membership: to rejoin, create a new one (the
    group must see a fresh member, not a ghost of the old one).
    """

    def __init__(
        self,
        transport: BaseTransport,
        group: str,
        *,
        weight: int = 50,
        active_goal: int = 1,
        heartbeat: float = 1.0,
        preparation: float = 0.0,
        activation: float = 3.0,
        callback: FtMemberCallback,
    ) -> None:
        self._transport = check_transport(transport, "FtMember")
        if not callable(callback):
            raise InvalidArgument(
                f"FtMember callback must be a function of (member, action), got {callback!r}"
            )
        self._core = FtMemberCore(
            group,
            weight=weight,
            active_goal=active_goal,
            heartbeat=heartbeat,
            preparation=preparation,
            activation=activation,
            member_id=_new_member_id(),
        )
        self._channel = GroupChannel(
            self._transport,
            self._core.group,
            memory=ORIGIN_MEMORY * self._core.activation,
            on_record=self._on_record,
            on_gone=self._on_gone,
        )
        self._callbacks = SerialCallback(self, callback, f"{self._core.group}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: DeadlineTimer | None = None
        self._used = False
        self._running = False
        self._send_failing = False

    # -- public view ----------------------------------------------------------

    @property
    def group(self) -> str:
        return self._core.group

    @property
    def member_id(self) -> str:
        """This membership's id, as the other members and the logs know it."""
        return self._core.member_id

    @property
    def transport(self) -> BaseTransport:
        return self._transport

    @property
    def active(self) -> bool:
        """True from the ACTIVATE this member was given until the next DEACTIVATE.

        It changes when the instruction is issued; an async callback may still
        be carrying it out.
        """
        return self._core.active

    @property
    def joined(self) -> bool:
        """True between join (entering ``async with``) and withdrawal."""
        return self._running

    @property
    def active_goal(self) -> int:
        return self._core.active_goal

    @property
    def heartbeat(self) -> float:
        return self._core.heartbeat

    @property
    def preparation(self) -> float:
        return self._core.preparation

    @property
    def activation(self) -> float:
        return self._core.activation

    @property
    def active_count(self) -> int:
        """Active members this member hears (itself included when active)."""
        return self._core.active_count

    @property
    def malformed_records(self) -> int:
        """Records received on the group's subject that could not be decoded (dropped)."""
        return self._channel.malformed

    @property
    def weight(self) -> int:
        """This member's weight; 0 once disabled. Settable at any time.

        A new weight (at least 1) re-ranks the group at once and re-enables a
        disabled member; setting 0 disables a joined member (see :meth:`disable`).
        """
        return self._core.weight

    @weight.setter
    def weight(self, value: int) -> None:
        if value == 0 and not isinstance(value, bool) and isinstance(value, int):
            if not self._running:
                raise InvalidArgument(
                    "weight 0 disables a member, which only a joined member can be; "
                    "give a weight of at least 1"
                )
            self.disable()
            return
        validate_weight(value)
        if self._running:
            self._step(lambda now: self._core.set_weight(value, now))
        else:
            self._core.set_weight(value, 0.0)

    def disable(self) -> None:
        """Give up: deactivate, take weight 0 (last resort only), present DISABLING_MEMBER.

        For a program that finds it cannot serve (a lost resource). Setting a
        weight of at least 1 re-enables the member.
        """
        if not self._running:
            raise NotPermitted(f"member of group {self.group!r} is not joined; cannot disable it")
        self._step(self._core.disable)

    # -- membership -----------------------------------------------------------

    async def join(self) -> FtMember:
        """Announce this member to the group; it starts inactive (``async with`` does this)."""
        if self._used:
            raise NotPermitted(
                f"this FtMember of group {self.group!r} was already joined; "
                "create a new FtMember to join again"
            )
        self._transport.check_open()
        self._used = True
        self._loop = asyncio.get_running_loop()
        self._timer = DeadlineTimer(self._loop, self._on_timer)
        self._channel.start()
        self._running = True
        self._step(self._core.join)
        return self

    async def withdraw(self) -> None:
        """Leave the group; an active member is told to DEACTIVATE first (``async with`` exit).

        The others hear a BYE and replace this member at once. Returns when the
        callback has handled the last action.
        """
        if self._running:
            self._running = False
            assert self._loop is not None and self._timer is not None
            self._timer.cancel()
            out = self._core.withdraw(self._loop.time())
            for record in out.records:
                self._send_quietly(record)
            self._channel.stop()
            self._callbacks.submit(out.actions)
        elif self._core.joined and self._loop is not None:
            # Ended by a closed transport: nothing can be sent any more.
            self._core.withdraw(self._loop.time())
        try:
            await self._callbacks.wait_idle()
        except asyncio.CancelledError:
            self._callbacks.cancel()
            raise

    async def __aenter__(self) -> FtMember:
        return await self.join()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.withdraw()

    def __repr__(self) -> str:
        state = "active" if self.active else ("inactive" if self._running else "not joined")
        return f"<FtMember {self.group!r} weight={self.weight} {state} id={self.member_id}>"

    # -- inputs -----------------------------------------------------------------

    def _on_record(self, record: FtRecord) -> None:
        if self._running:
            self._step(lambda now: self._core.receive(record, now))

    def _on_gone(self, members: list[str]) -> None:
        for member in members:
            if self._running:
                self._step(functools.partial(self._core.peer_gone, member))

    def _on_timer(self, now: float) -> None:
        if self._running:
            self._step(self._core.handle_timer, now)

    def _step(self, core_input: Callable[[float], FtOutputs], now: float | None = None) -> None:
        """Feed one input to the core at ``now`` and carry out what it returns."""
        assert self._loop is not None
        if now is None:
            now = self._loop.time()
        try:
            out = core_input(now)
        except (InvalidArgument, NotPermitted):
            raise
        except Exception:
            stderr_logger().exception(
                "fault tolerance member failed to process an input; disabling it",
                group=self.group,
                member=self.member_id,
            )
            out = self._core.disable(now)
        self._carry_out(out, now)

    # -- outputs --------------------------------------------------------------

    def _carry_out(self, out: FtOutputs, now: float) -> None:
        failure: Exception | None = None
        for record in out.records:
            try:
                self._channel.send(record)
            except Exception as exc:
                failure = exc
                break
        if failure is None and out.records and self._send_failing:
            self._send_failing = False
            stderr_logger().info("fault tolerance member sends its records again", group=self.group)
        for advisory in out.advisories:
            self._channel.present(advisory)
        self._callbacks.submit(list(out.actions))
        if failure is not None:
            self._send_failed(failure, now)
        elif self._running:
            assert self._timer is not None
            self._timer.arm(self._core.next_deadline())

    def _send_failed(self, exc: Exception, now: float) -> None:
        """A record could not be sent: this member cannot function, so it is disabled.

        Except while the daemon link is down (``DaemonUnavailable``: a
        standalone daemon being reconnected). That is an outage, not a fault
        of this member: the others notice it (the daemon's UNREACHABLE.TRANSPORT,
        or silence) and take over, exactly as across a network partition, and
        when the link returns the ranking settles again. Disabling would leave
        the member at weight 0 for good after a mere daemon restart.
        """
        if isinstance(exc, DaemonUnavailable) and not self._transport.closed:
            if not self._send_failing:
                self._send_failing = True
                stderr_logger().warning(
                    "fault tolerance member cannot reach its daemon; the group will carry on "
                    "without it until the link returns",
                    group=self.group,
                    member=self.member_id,
                    error=repr(exc),
                )
            assert self._timer is not None
            self._timer.arm(self._core.next_deadline())
            return
        closed = isinstance(exc, TransportClosed) or self._transport.closed
        if not self._send_failing:
            self._send_failing = True
            stderr_logger().error(
                "fault tolerance member cannot send its records; disabling it"
                + (" (the transport is closed: the membership ends)" if closed else ""),
                group=self.group,
                member=self.member_id,
                error=repr(exc),
            )
        out = self._core.disable(now)
        if closed:
            self._running = False
            assert self._timer is not None
            self._timer.cancel()
            self._channel.stop()
            for advisory in out.advisories:
                self._channel.present(advisory)
            self._callbacks.submit(list(out.actions))
            return
        self._carry_out(out, now)

    def _send_quietly(self, record: FtRecord) -> None:
        try:
            self._channel.send(record)
        except TransportClosed:
            pass
        except Exception as exc:
            stderr_logger().warning(
                "fault tolerance member could not send its BYE; the others will notice "
                "its absence after the activation interval",
                group=self.group,
                member=self.member_id,
                error=repr(exc),
            )

    # -- test support -------------------------------------------------------------

    def _halt(self) -> None:
        """Stop dead, as if the process had been killed: no BYE, no DEACTIVATE, nothing.

        The other members notice only when the heartbeats stop (or when a daemon
        reports the transport gone). Used by tests to simulate a crash.
        """
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
        self._channel.stop()
        self._callbacks.cancel()
