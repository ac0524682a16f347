"""A router's tap on its in-process daemon: the routed subjects' messages as wire bytes.

A router listens on a network to what the rest of the domain wants from it,
then sends each message on over a neighbor link as the bytes it came in.
Through an ordinary transport the daemon would decode every message into a
:class:`~rvasync.message.Message` and the router would encode it again, only
to read its subject and reply subject. A :class:`Tap` is a second session of
the same in-process daemon (with the router's description, so its listening
is never announced as the network's interest) whose owner asks for the wire
bytes (``deliver_raw``, ``deliver_wire``: rvasync.daemon.session): the daemon
hands over what arrives undecoded, and the router reads the head of each
message itself (rvasync.wireedit).

The tap only listens; the router still publishes, and takes replies to its
inboxes, through its transport. Advisories the daemon presents to a session
concern what the session publishes (a fast producer, a message too large)
or the whole service, which the transport's session is told as well: the
tap has nothing to do with them.
"""

from __future__ import annotations

from collections.abc import Callable

from rvasync.daemon.engine import in_process_daemon
from rvasync.daemon.params import regular_service
from rvasync.daemon.session import ClientSession, Payload
from rvasync.errors import TransportClosed
from rvasync.message import Message
from rvasync.subjects import check_listen_subject

__all__ = ["Tap"]


class Tap:
    """A listening session of the in-process daemon of the running loop on ``service`` /
    ``network``; ``on_wire(data)`` takes each message's wire bytes, in the order the
    daemon delivers them."""

    def __init__(
        self,
        service: str | None,
        network: str | None,
        description: str,
        on_wire: Callable[[bytes], None],
    ) -> None:
        self._service = regular_service(service)
        self._network = network
        self._description = description
        self._session: ClientSession | None = None
        # SessionOwner: received messages undecoded (deliver_raw), local deliveries as bytes.
        self.deliver_raw = on_wire
        self.deliver_wire = on_wire

    async def open(self) -> None:
        """Attach to the daemon (already running: the router's transport opened it)."""
        if self._session is not None:
            return
        daemon = await in_process_daemon()
        self._session = daemon.attach(
            self,
            service=self._service,
            network=self._network,
            description=self._description,
            router=True,  # the router's own tap on its own in-process daemon
        )

    def close(self) -> None:
        """Detach: the daemon forgets the tap's interest."""
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def add_interest(self, subject: str) -> None:
        """Listen to ``subject`` (checked as a listen subject: InvalidArgument)."""
        check_listen_subject(subject)
        if self._session is None:
            raise TransportClosed("the router's tap is not open")
        self._session.add_interest(subject)

    def remove_interest(self, subject: str) -> None:
        if self._session is not None:
            self._session.remove_interest(subject)

    # -- SessionOwner ---------------------------------------------------------

    def deliver(self, payload: Payload) -> None:
        """A message whose bytes the daemon did not have at hand (the bytes are made)."""
        self.deliver_raw(payload.wire())

    def present(self, advisory: Message) -> None:
        """Per-session advisories concern publishing, which the tap never does (see module)."""
