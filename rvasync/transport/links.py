"""Links between a network transport and its daemon.

``rv.Transport`` does not care where its daemon runs: it talks to a
:class:`DaemonLink`. :class:`InProcessLink` attaches to the daemon engine of
the running event loop and calls it directly (no sockets, no copies: a
published Message is handed to local listeners as copy-on-write deliveries and
encoded once for the network). ``rvasync.transport.tcplink.TcpLink`` speaks the
client protocol to a standalone daemon.

The transport implements :class:`LinkHooks`: the link hands it inbound messages
and advisories through them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from rvasync.daemon.engine import in_process_daemon
from rvasync.errors import TransportClosed

if TYPE_CHECKING:
    from rvasync.daemon.session import ClientSession, Payload
    from rvasync.message import Message

__all__ = ["DaemonLink", "InProcessLink", "LinkHooks"]


class LinkHooks(Protocol):
    """What a link calls on its transport (implemented by ``rv.Transport``).

    Public names: the link is another object and calls them from its own
    module. A transport may also offer these optional hooks, which a link
    looks up once (``getattr(hooks, name, None)``) and uses when present:

    * ``link_deliver_owned(msg)``: a freshly decoded message that nobody else
      holds (the transport may deliver it without a copy-on-write copy);
    * ``link_deliver_inbox(msg, owned)``: a message for one of the
      transport's inboxes (the reply a request waits for);
    * ``link_inbox_prefix(prefix)``: the link reconnected to a new daemon
      session, whose inboxes start with ``prefix``;
    * ``link_lost(error)``: the link lost its daemon session; replies to its
      inboxes can no longer come (pending requests fail with ``error``);
    * ``link_backlog()`` and ``pending_limit``: the most messages waiting in
      one of its listener queues, and their bound (0: none); a standalone
      daemon's link reads nothing more while the backlog is at half the bound.
    """

    def link_deliver(self, msg: Message) -> object:
        """Route an inbound message to this transport's listeners (the result is ignored)."""

    def link_present(self, advisory: Message) -> None:
        """Present an advisory on this transport."""


class DaemonLink(Protocol):
    """A transport's connection to its daemon (in-process or standalone)."""

    inbox_prefix: str

    async def open(self, transport_hooks: LinkHooks) -> None:
        """Attach to the daemon; raises DaemonUnavailable if it cannot be reached."""

    async def close(self) -> None:
        """Detach (idempotent)."""

    def add_interest(self, subject: str) -> None: ...

    def remove_interest(self, subject: str) -> None: ...

    def publish(self, msg: Message) -> Awaitable[None] | None:
        """Send one validated message; may return an awaitable (backpressure) to await
        before sending more. TransportClosed when the link is closed."""

    def publish_many(self, msgs: list[Message]) -> Awaitable[None] | None:
        """Send several validated messages in order (packed together)."""

    def publish_wire(self, data: bytes) -> Awaitable[None] | None:
        """Send one message given in its wire form (a router forwarding it undecoded)."""

    def publish_wire_run(self, subject: str, datas: list[bytes]) -> Awaitable[None] | None:
        """Send wire messages that all carry ``subject``, in order."""

    async def request_reliability(self, seconds: float) -> None:
        """Ask the daemon for ``seconds`` of reliability (checked); returns once it has it."""


def _not_open(*_args: object) -> None:
    raise TransportClosed("the transport is not open: await transport.open() or use async with")


def _nowhere(_msg: Message) -> None:
    """Where a link's inbound traffic goes before the transport's hooks are bound: nowhere."""


class InProcessLink:
    """Attaches a transport to the in-process daemon of the running event loop.

    The session's methods are bound straight onto this object when it opens,
    so ``transport.send`` reaches the engine with no intermediate call.
    """

    # Bound on open to the session's methods and the transport's hooks (no def:
    # they are replaced per instance, so they are attributes of these types).
    add_interest: Callable[[str], None]
    remove_interest: Callable[[str], None]
    publish: Callable[[Message], Awaitable[None] | None]
    publish_many: Callable[[list[Message]], Awaitable[None] | None]
    publish_wire: Callable[[bytes], Awaitable[None] | None]
    publish_wire_run: Callable[[str, list[bytes]], Awaitable[None] | None]
    #: Hands a decoded message to the transport's listeners (the SessionOwner sink).
    deliver_message: Callable[[Message], object]
    #: Optional SessionOwner fast paths, set on open only when the transport has them.
    deliver_owned: Callable[[Message], None]
    deliver_inbox: Callable[[Message, bool], None]
    _present: Callable[[Message], None]

    def __init__(
        self,
        *,
        service: str | None,
        network: str | None,
        description: str | None,
        reliability: float | None,
        batch: bool = False,
        service_key: bytes | None = None,
        router: bool = False,
    ) -> None:
        self._service = service
        self._service_key = service_key
        # In-process: the daemon is this process's own, so the role asked for is granted.
        self._router = router
        self._network = network
        self._description = description
        self._reliability = reliability
        self._batch = batch
        self._session: ClientSession | None = None
        self.inbox_prefix = ""
        self.add_interest = _not_open
        self.remove_interest = _not_open
        self.publish = _not_open
        self.publish_many = _not_open
        self.publish_wire = self.publish_wire_run = _not_open
        self.deliver_message = _nowhere
        self._present = _nowhere

    @property
    def session(self) -> ClientSession | None:
        """The daemon session, once open."""
        return self._session

    async def open(self, transport_hooks: LinkHooks) -> None:
        if self._session is not None:
            return
        daemon = await in_process_daemon()
        # Set before attaching: the engine looks for deliver_message when it builds the session.
        self.deliver_message = transport_hooks.link_deliver
        owned = getattr(transport_hooks, "link_deliver_owned", None)
        if owned is not None:
            self.deliver_owned = owned
        inbox = getattr(transport_hooks, "link_deliver_inbox", None)
        if inbox is not None:
            self.deliver_inbox = inbox
        self._present = transport_hooks.link_present
        session = daemon.attach(
            self,
            service=self._service,
            network=self._network,
            description=self._description,
            reliability=self._reliability,
            service_key=self._service_key,
            router=self._router,
        )
        session.batch = self._batch
        self._session = session
        self.inbox_prefix = session.inbox_prefix
        self.add_interest = session.add_interest
        self.remove_interest = session.remove_interest
        self.publish = session.message_publisher()
        self.publish_many = session.publish_messages
        self.publish_wire = session.wire_publisher()
        self.publish_wire_run = session.run_publisher()

    async def request_reliability(self, seconds: float) -> None:
        """Ask the daemon for ``seconds`` of reliability (checked by the caller)."""
        self._reliability = seconds
        session = self._session
        if session is None:
            _not_open()
            return
        session.request_reliability(seconds)

    async def close(self) -> None:
        session = self._session
        if session is not None:
            self.publish = self.publish_many = _not_open
            self.publish_wire = self.publish_wire_run = _not_open
            session.close()

    # -- SessionOwner ---------------------------------------------------------

    def deliver(self, payload: Payload) -> None:
        """Fallback of the SessionOwner protocol (the engine uses deliver_message)."""
        self.deliver_message(payload.message())

    def present(self, advisory: Message) -> None:
        self._present(advisory)

    # -- direct communication ----------------------------------------------------

    def on_service(self, address: tuple[str, int]) -> bool:
        """Whether the daemon at ``address`` is on this link's service with no routing
        daemon between (this link's daemon, or one it hears directly)."""
        session = self._session
        return session is not None and not session.closed and session.on_service(address)

    def __repr__(self) -> str:
        return f"<InProcessLink {self._session!r}>"
