"""Subject routing of one service: which local sessions and which peers get a message.

A :class:`Router` holds the subject interests of a service's client sessions
and answers, without sockets or an event loop:

* for a message published here: the local sessions that listen to its
  subject (:meth:`Router.route`, cached in :attr:`Router.routes`), and for a
  subject starting with ``_``, where it goes (:meth:`Router.destination`: an
  inbox of this daemon goes to its session, an inbox of another daemon point
  to point to the address written in it, ``_LOCAL.`` stays here);
* for messages received from the network (the reliable core's delivered
  payloads): it hands each one to the sessions interested in it
  (:meth:`Router.deliver_multicast`, the ``daemonpath`` hot path, whose route
  cache is keyed by the encoded subject so that an unwanted message is never
  decoded) or, point to point, to the session owning the inbox
  (:meth:`Router.deliver_ptp`);
* local delivery of a published message to the sessions found
  (:meth:`Router.deliver_local`).

It counts what it routes in the service's
:class:`~rvasync.daemon.stats.ServiceCounters` and contains any exception a
session's sink raises. The service (:mod:`rvasync.daemon.service`) keeps the
sessions and tells the router about interest; the UDP driver
(:mod:`rvasync.daemon.udpdriver`) feeds it what the core delivers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rvasync import _accel, codec
from rvasync._logging import stderr_logger
from rvasync._wire import peek_subject
from rvasync.daemon.session import Payload
from rvasync.daemon.udp import parse_address_hex
from rvasync.errors import MalformedMessage
from rvasync.protocol.authcheck import listen_is_for_routers
from rvasync.subjects import SubjectIndex

if TYPE_CHECKING:
    from rvasync.daemon.session import ClientSession
    from rvasync.daemon.stats import ServiceCounters
    from rvasync.message import Message

__all__ = [
    "LOCAL_ONLY",
    "NETWORK",
    "ROUTE_CACHE",
    "TO_PEER",
    "TO_SESSION",
    "Router",
    "inbox_address",
    "subject_of",
]

#: Subjects whose routes are remembered before the cache is cleared.
ROUTE_CACHE = 4096

#: Kinds of :meth:`Router.destination` (for subjects starting with '_').
#: An inbox of this daemon: the session owning it (None: no longer here).
TO_SESSION = 0
#: An inbox of another daemon: its address (point to point).
TO_PEER = 1
#: ``_LOCAL.``, or an inbox name rvasync did not make: only this daemon's listeners.
LOCAL_ONLY = 2
#: Any other '_' subject (fault tolerance, certified delivery ...): like an ordinary one.
NETWORK = 3

_LOCAL_ONLY = (LOCAL_ONLY, None)
_NETWORK = (NETWORK, None)

_decode = codec.decode
_deliver = _accel.load("daemonpath").deliver_multicast
_subject_key = _accel.load("daemonpath").subject_key


@functools.lru_cache(maxsize=1024)
def inbox_address(text: str) -> tuple[str, int] | None:
    """The daemon address written in an inbox (cached: replies reuse a few addresses)."""
    return parse_address_hex(text)


def subject_of(data: bytes) -> str | None:
    """Subject of wire bytes: peeked when possible, else decoded (None if undecodable)."""
    subject = peek_subject(data)
    if subject is not None:
        return subject
    try:
        decoded: str | None = _decode(data).subject
    except MalformedMessage:
        return None
    return decoded


class Router:
    """Interest of a service's sessions, and the routes of messages to them.

    ``address_hex``: this daemon's address on the service (as written in its
    inboxes). ``sessions``: the service's sessions by token (read only; the
    service adds and removes them). ``counters``: where routing is counted.
    ``contain(doing, **details)``: logs and counts an unexpected exception.
    ``name``: the service, for log records.
    """

    def __init__(
        self,
        *,
        address_hex: str,
        sessions: Mapping[str, ClientSession],
        counters: ServiceCounters,
        contain: Callable[..., None],
        name: str,
    ) -> None:
        self.address_hex = address_hex
        self._sessions = sessions
        self._counters = counters
        self._contain = contain
        self._name = name
        self._log = stderr_logger()
        self._interest: SubjectIndex[ClientSession] = SubjectIndex()
        #: Route cache of published subjects: subject -> sessions (see :meth:`route`). The
        #: service's publish path reads it directly (``routes.get``); it is only ever
        #: cleared, never replaced, so a reference to it stays valid.
        self.routes: dict[str, tuple[ClientSession, ...]] = {}
        #: received subjects (encoded bytes) -> (owned sink or None, raw sink or None, sessions)
        self._inbound: dict[bytes, tuple[Any, Any, tuple[ClientSession, ...]]] = {}

    # ------------------------------------------------------------------ interest

    def add_interest(self, session: ClientSession, subject: str) -> None:
        """``session`` listens to ``subject`` (wildcards allowed; once per subject)."""
        self._interest.add(subject, session)
        self._clear()

    def remove_interest(self, session: ClientSession, subject: str) -> None:
        """Undo :meth:`add_interest`."""
        self._interest.remove(subject, session)
        self._clear()

    def forget(self, session: ClientSession, subjects: list[str]) -> None:
        """A closed session: drop its interest in ``subjects``."""
        for subject in subjects:
            self._interest.remove(subject, session)
        self._clear()

    def _clear(self) -> None:
        self.routes.clear()
        self._inbound.clear()

    # ------------------------------------------------------------------ publishing

    def route(self, subject: str) -> tuple[ClientSession, ...]:
        """Sessions interested in ``subject``, each once, in order of first interest
        (computed and cached in :attr:`routes`; look there first)."""
        try:
            found = self._interest.match(subject)
        except Exception:
            found = ()
        if len(found) > 1:
            found = tuple(dict.fromkeys(found))
        if found and subject[:1] == "_" and listen_is_for_routers(subject):
            # Router records reach routers only, whatever pattern ('>') others listen to.
            found = tuple(s for s in found if s.router)
        routes = self.routes
        if len(routes) >= ROUTE_CACHE:
            routes.clear()
        routes[subject] = found
        return found

    def destination(self, subject: str) -> tuple[int, Any]:
        """Where a published message whose subject starts with '_' goes: ``(kind, where)``.

        ``(TO_SESSION, session or None)`` for ``_INBOX.<this daemon>.<token>.n``;
        ``(TO_PEER, address)`` for an inbox of another daemon; ``(LOCAL_ONLY, None)``
        for ``_LOCAL.`` and inbox names rvasync did not make; ``(NETWORK, None)``
        for the rest (which travels like an ordinary subject).
        """
        if subject.startswith("_INBOX."):
            parts = subject.split(".", 3)
            if len(parts) == 4:
                if parts[1] == self.address_hex:
                    return TO_SESSION, self._sessions.get(parts[2])
                dest = inbox_address(parts[1])
                if dest is not None:
                    return TO_PEER, dest
            return _LOCAL_ONLY
        if subject.startswith("_LOCAL."):
            return _LOCAL_ONLY
        return _NETWORK

    def deliver_local(
        self, sessions: tuple[ClientSession, ...], msg: Message | None, data: bytes | None
    ) -> None:
        """Hand a message published here to ``sessions`` (each gets the Message when it
        takes Messages, else a shared Payload)."""
        payload = None
        for target in sessions:
            try:
                if target.sink_is_message:
                    if msg is None:
                        msg = _decode(data)
                    target.sink(msg)
                elif data is not None and target.wire_sink is not None:
                    target.wire_sink(data)
                else:
                    if payload is None:
                        payload = Payload(msg, data)
                    target.sink(payload)
            except MalformedMessage:
                self._counters.messages_malformed += 1
                return
            except Exception:
                self._contain("delivering to a client", subject=getattr(msg, "subject", None))
        self._counters.deliveries += len(sessions)

    def deliver_wires(self, batches: dict[Any, list[bytes]]) -> None:
        """Hand each session's batch of wire bytes to its ``wires_sink`` (the key), in order;
        the service collects them for sessions that are a message's only receiver."""
        delivered = 0
        for sink, wires in batches.items():
            delivered += len(wires)
            try:
                sink(wires)
            except Exception:
                self._contain("delivering to a client", messages=len(wires))
        self._counters.deliveries += delivered

    # ------------------------------------------------------------------ received

    def deliver_multicast(self, payloads: list[bytes]) -> None:
        """Hand each received multicast message to the sessions interested in its subject.

        The hot path of a receiving daemon (``daemonpath``: compiled, or its
        pure twin). The subject is not decoded: its encoded bytes key a cache
        of routes, so an unwanted message costs a slice and a dict lookup, and
        a wanted one is decoded once whatever the number of sessions.
        """
        deliveries, unwanted, malformed = _deliver(
            payloads,
            self._inbound,
            _decode,
            self._inbound_route,
            self._deliver_shared,
            self._delivery_failed,
            MalformedMessage,
        )
        # Counted after the hand-over: a waiting consumer is woken first.
        counters = self._counters
        counters.messages_in += len(payloads)
        counters.bytes_in += sum(map(len, payloads))
        counters.deliveries += deliveries
        counters.messages_unwanted += unwanted
        counters.messages_malformed += malformed

    def _deliver_shared(
        self, msg: Message, data: bytes, sessions: tuple[ClientSession, ...]
    ) -> None:
        """A received message for several sessions (or for one that takes Payloads)."""
        payload = None
        for target in sessions:
            try:
                if target.sink_is_message:
                    target.sink(msg)
                elif target.wire_sink is not None:
                    target.wire_sink(data)
                else:
                    if payload is None:
                        payload = Payload(msg, data)
                    target.sink(payload)
            except Exception as exc:
                self._delivery_failed(exc, msg)

    def _delivery_failed(self, exc: BaseException, msg: Message) -> None:
        self._counters.internal_errors += 1
        self._log.error(
            "delivery to a client failed; the daemon carries on",
            service=self._name,
            subject=getattr(msg, "subject", None),
            exc_info=exc,
        )

    def _inbound_route(self, data: bytes) -> tuple[Any, Any, tuple[ClientSession, ...]] | None:
        """Route of a received multicast message the cache did not know: (owned sink or None,
        raw sink or None, sessions); None to drop it (undecodable, or an inbox/_LOCAL
        subject, which never travel by multicast)."""
        key = _subject_key(data)
        subject = peek_subject(data)
        if subject is None or subject[:1] == "_":
            subject = self._acceptable_multicast(data, subject)
            if subject is None:
                return None
        sessions = self.routes.get(subject)
        if sessions is None:
            sessions = self.route(subject)
        owned = raw = None
        if len(sessions) == 1:
            owner = sessions[0].owner
            # One session only that wants the bytes as they came (a routing daemon): no
            # decode at all. Else the decoded message goes to it alone: it may keep it as is.
            raw = getattr(owner, "deliver_raw", None)
            if raw is None:
                owned = getattr(owner, "deliver_owned", None)
        entry = (owned, raw, sessions)
        if key is not None:
            inbound = self._inbound
            if len(inbound) >= ROUTE_CACHE:
                inbound.clear()
            inbound[key] = entry
        return entry

    def _acceptable_multicast(self, data: bytes, subject: str | None) -> str | None:
        """The subject of a multicast message that could not be peeked or starts with '_',
        or None if it must be dropped: undecodable, or an inbox or _LOCAL subject (those
        never travel by multicast)."""
        counters = self._counters
        if subject is None:
            subject = subject_of(data)
            if subject is None:
                counters.messages_malformed += 1
                return None
        if subject.startswith(("_INBOX.", "_LOCAL.")) or subject in ("_INBOX", "_LOCAL"):
            counters.messages_misrouted += 1
            return None
        return subject

    def deliver_ptp(self, payloads: list[bytes]) -> None:
        """Hand each received point-to-point message to the session owning its inbox."""
        counters = self._counters
        mine = self.address_hex
        sessions = self._sessions
        for data in payloads:
            key = _subject_key(data)  # native: the subject's bytes, without a decode
            try:
                subject = key.decode() if key else subject_of(data)
            except UnicodeDecodeError:
                subject = None
            if subject is None:
                counters.messages_malformed += 1
                continue
            parts = subject.split(".", 3)
            target = None
            if len(parts) == 4 and parts[0] == "_INBOX" and parts[1] == mine:
                target = sessions.get(parts[2])
            if target is None:
                counters.messages_misrouted += 1
                continue
            try:
                if target.inbox_sink is not None:
                    target.inbox_sink(_decode(data), True)
                elif target.sink_is_message:
                    target.sink(_decode(data))
                elif target.wire_sink is not None:
                    target.wire_sink(data)  # a TCP client: forwarded undecoded
                else:
                    target.sink(Payload(None, data))
                counters.deliveries += 1
            except MalformedMessage:
                counters.messages_malformed += 1
            except Exception:
                self._contain("delivering to a client", subject=subject)
        # Counted after the hand-over: a waiting request is woken first.
        counters.messages_in += len(payloads)
        counters.bytes_in += sum(map(len, payloads))
