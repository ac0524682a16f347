"""Client sessions: what a transport holds in its daemon, and the messages they exchange.

A :class:`ClientSession` is one transport attached to one service of a daemon:
its subject interests (so the daemon hands it only what it listens to), its
inbox prefix (so point-to-point replies find it), and its way back to the
transport, the :class:`SessionOwner` (the in-process link, or D2's per-connection
TCP handler).

A :class:`Payload` carries one message in whichever forms are known (the
decoded :class:`~rvasync.message.Message`, the wire bytes, or both) and computes
each form at most once, so a message received from the network is decoded once
however many sessions take it, and a message published by a TCP client is
forwarded without being decoded unless a local in-process session wants it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from rvasync import codec
from rvasync._wire import peek_subject
from rvasync.errors import MalformedMessage, TransportClosed
from rvasync.message import Message

if TYPE_CHECKING:
    from collections.abc import Awaitable

__all__ = ["ClientSession", "Payload", "SessionOwner", "SessionService", "peek_subject"]

_encode = codec.encode
_decode = codec.decode


class Payload:
    """One message in whichever forms are known; each form is computed at most once.

    ``msg`` and ``data`` are the forms known so far (None for one not computed
    yet; at least one is known): read-only outside this class. A session
    forwards them to its service as they are (``service.publish(session, msg,
    data)``), so the service decodes or encodes only what a receiver needs;
    :meth:`message` and :meth:`wire` compute a missing form.
    """

    __slots__ = ("data", "msg")

    msg: Message | None
    data: bytes | None

    def __init__(self, msg: Message | None = None, data: bytes | None = None) -> None:
        if msg is None and data is None:
            raise ValueError("a Payload needs a message, its wire bytes, or both")
        self.msg = msg
        self.data = data

    def message(self) -> Message:
        """The decoded message (decoded on first use; MalformedMessage for bad bytes)."""
        msg = self.msg
        if msg is None:
            msg = self.msg = _decode(self.data)
        return msg

    def wire(self) -> bytes:
        """The wire bytes (encoded on first use; MessageTooLarge over 64 MiB)."""
        data = self.data
        if data is None:
            data = self.data = _encode(self.msg)
        return data

    @property
    def subject(self) -> str | None:
        """The message's subject, without decoding the whole message when only bytes are known."""
        msg = self.msg
        if msg is not None:
            return msg.subject
        subject = peek_subject(self.data)  # type: ignore[arg-type]  # msg None: data is known
        if subject is None:
            try:
                return self.message().subject
            except MalformedMessage:
                return None
        return subject

    @property
    def size(self) -> int:
        """Length of the wire form (encodes if needed)."""
        return len(self.wire())

    def __repr__(self) -> str:
        forms = [f for f, v in (("msg", self.msg), ("data", self.data)) if v is not None]
        return f"<Payload {'+'.join(forms)} subject={self.subject!r}>"


class SessionOwner(Protocol):
    """The transport side of a session: where the daemon hands messages and advisories.

    Neither call may block. Optional extensions, used when the owner has them:

    * ``deliver_message(msg)``: take decoded :class:`Message` objects instead of
      :class:`Payload` objects (shared with other sessions: deliver copies, as
      the router does);
    * ``deliver_owned(msg)``: a freshly decoded message that only this session
      receives; the owner may keep it as is;
    * ``deliver_inbox(msg, owned)``: a message for one of the session's inboxes
      (``owned`` as above), so that replies can complete requests directly;
    * ``deliver_wire(data)``: what ``deliver`` gets, as the message's wire bytes
      (an owner that forwards bytes: no Payload is made when the bytes are known);
    * ``deliver_wires(list)``: with ``deliver_wire``, several messages' bytes in
      order (what a client published in one frame for this session alone);
    * ``deliver_raw(data)``: the wire bytes of a message received from the network
      that this session alone receives, neither decoded nor checked by the daemon
      (a routing daemon passing messages on reads what it needs and reports what
      it cannot read itself).
    """

    def deliver(self, payload: Payload) -> None:
        """A message matching one of the session's interests, or sent to one of its inboxes."""

    def present(self, advisory: Message) -> None:
        """An advisory for this session (transport-scoped)."""


class SessionService(Protocol):
    """What a session needs of its service (implemented by ``ServiceEndpoint``)."""

    port: int
    address_hex: str

    def add_interest(self, session: ClientSession, subject: str) -> None: ...

    def remove_interest(self, session: ClientSession, subject: str) -> None: ...

    def publish(
        self, session: ClientSession | None, msg: Message | None, data: bytes | None = None
    ) -> Awaitable[None] | None: ...

    def publish_many(
        self,
        session: ClientSession | None,
        items: list[tuple[Message | None, bytes | None]],
    ) -> Awaitable[None] | None: ...

    def publish_run(
        self, session: ClientSession | None, subject: str, datas: list[bytes]
    ) -> Awaitable[None] | None: ...

    def publish_wires(
        self, session: ClientSession, subjects: list[str], wires: list[bytes]
    ) -> Awaitable[None] | None: ...

    def detach(self, session: ClientSession) -> None: ...

    def request_reliability(self, session: ClientSession, seconds: float) -> None: ...

    def on_service(self, address: tuple[str, int]) -> bool: ...


class ClientSession:
    """One transport attached to one service of a daemon.

    Created by ``Daemon.attach``. ``inbox_prefix`` is ``"_INBOX.<transport_id>."``
    where ``transport_id`` is the hex unicast address of the service's daemon
    socket and a token unique within that daemon, so that any daemon on the
    service can route a message sent to one of this session's inboxes straight
    to the right daemon (point to point) and that daemon to this session.
    """

    __slots__ = (
        "_interests",
        "_service",
        "batch",
        "closed",
        "description",
        "inbox_prefix",
        "inbox_sink",
        "owner",
        "reliability",
        "router",
        "service_key",
        "sink",
        "sink_is_message",
        "token",
        "transport_id",
        "wire_sink",
        "wires_sink",
    )

    def __init__(
        self,
        service: SessionService,
        owner: SessionOwner,
        token: str,
        *,
        description: str | None,
        reliability: float | None,
        router: bool = False,
    ) -> None:
        self._service = service
        self.owner = owner
        self.token = token
        self.description = description
        #: The session is a routing daemon's (granted by whoever attached it, never claimed
        #: by a description): it may publish advisories and router records, receives the
        #: latter, and its listening is not announced.
        self.router = router
        self.reliability = reliability
        self.service_key = service.port
        self.transport_id = f"{service.address_hex}.{token}"
        self.inbox_prefix = f"_INBOX.{self.transport_id}."
        self.closed = False
        self.batch = False
        self._interests: dict[str, int] = {}
        # Where the daemon's router hands this session its messages (read only):
        sink = getattr(owner, "deliver_message", None)
        #: True when :attr:`sink` takes Messages (the owner's deliver_message), False when
        #: it takes Payloads (the owner's deliver).
        self.sink_is_message = sink is not None
        self.sink: Any = sink if sink is not None else owner.deliver
        #: deliver_inbox(msg, owned): optional fast path for replies to this session's inboxes
        self.inbox_sink: Any = getattr(owner, "deliver_inbox", None)
        #: deliver_wire(data): optional, for an owner that takes Payloads and wants only their
        #: bytes (a TCP client): handed the wire bytes when they are known, no Payload made.
        self.wire_sink: Any = None if self.sink_is_message else getattr(owner, "deliver_wire", None)
        #: deliver_wires(list of wire bytes): optional, several messages at once, in order.
        self.wires_sink: Any = (
            None if self.wire_sink is None else getattr(owner, "deliver_wires", None)
        )

    # -- interest ------------------------------------------------------------

    def add_interest(self, subject: str) -> None:
        """Listen to ``subject`` (wildcards allowed); refcounted: add twice, remove twice."""
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        if subject.startswith(self.inbox_prefix):
            return  # this session's own inboxes reach it by address, whoever listens
        count = self._interests.get(subject, 0)
        self._interests[subject] = count + 1
        if count == 0:
            self._service.add_interest(self, subject)

    def remove_interest(self, subject: str) -> None:
        """Undo one :meth:`add_interest` (a no-op for a subject not listened to, or once closed)."""
        count = self._interests.get(subject, 0)
        if count == 0 or self.closed:
            return
        if count == 1:
            del self._interests[subject]
            self._service.remove_interest(self, subject)
        else:
            self._interests[subject] = count - 1

    def request_reliability(self, seconds: float) -> None:
        """Ask for ``seconds`` of reliability from now on (checked by the caller).

        The service keeps the largest request of its sessions; TransportClosed
        once the session is closed.
        """
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        self._service.request_reliability(self, seconds)

    def on_service(self, address: tuple[str, int]) -> bool:
        """Whether the daemon at ``address`` is on this session's service with no routing
        daemon between (this session's daemon, or a daemon it hears directly)."""
        return self._service.on_service(address)

    def interests(self) -> list[str]:
        """The subjects this session listens to now."""
        return list(self._interests)

    # -- publishing --------------------------------------------------------------

    def publish(self, payload: Payload) -> Awaitable[None] | None:
        """Send one message: to every matching session of this daemon (this one included) and,
        unless it is ``_LOCAL.`` or an inbox of this daemon, to the network (an inbox of
        another daemon goes point to point to that daemon only).

        Returns None, or an awaitable when the service's send backlog is full
        (backpressure: await it before sending more). Raises TransportClosed
        once closed, MessageTooLarge (after presenting DATALOSS.MSG_TOO_LARGE)
        for a message over 64 MiB.
        """
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        return self._service.publish(self, payload.msg, payload.data)

    def publish_many(self, payloads: list[Payload]) -> Awaitable[None] | None:
        """Send several messages in order (see :meth:`publish`); all are checked before any
        is sent."""
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        return self._service.publish_many(self, [(p.msg, p.data) for p in payloads])

    def publish_wires(self, subjects: list[str], wires: list[bytes]) -> Awaitable[None] | None:
        """:meth:`publish_many` for encoded messages whose subjects the caller has read
        (``subjects[i]`` is the subject of ``wires[i]``) and whose bytes it has checked
        (``codec.check``): a TCP client's PUBLISH, forwarded without being decoded."""
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        return self._service.publish_wires(self, subjects, wires)

    def publish_message(self, msg: Message) -> Awaitable[None] | None:
        """:meth:`publish` for a Message (the in-process path: no Payload object)."""
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        return self._service.publish(self, msg, None)

    def message_publisher(self) -> Callable[[Message], Awaitable[None] | None]:
        """:meth:`publish_message` as one direct call into the service (the in-process link's
        send path). The owner must stop calling it once it closes the session; a closed
        service still refuses with TransportClosed."""
        return functools.partial(self._service.publish, self)

    def wire_publisher(self) -> Callable[[bytes], Awaitable[None] | None]:
        """:meth:`publish` for wire bytes as one direct call into the service (the
        in-process link's path for messages a router forwards undecoded); as
        :meth:`message_publisher`, the owner stops calling it once it closes the session."""
        return functools.partial(self._service.publish, self, None)

    def run_publisher(self) -> Callable[[str, list[bytes]], Awaitable[None] | None]:
        """The service's ``publish_run`` for this session: wire messages of one subject
        (a router passing a batch through), as one direct call."""
        return functools.partial(self._service.publish_run, self)

    def publish_messages(self, msgs: list[Message]) -> Awaitable[None] | None:
        """:meth:`publish_many` for Messages."""
        if self.closed:
            raise TransportClosed("the daemon session is closed")
        return self._service.publish_many(self, [(m, None) for m in msgs])

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Detach from the daemon: interests dropped, inboxes dead; peers hear
        ``UNREACHABLE.TRANSPORT.<transport_id>``. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self._service.detach(self)
        self._interests.clear()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<ClientSession {self.transport_id} service={self.service_key} {state}>"
