"""One local network a router is attached to: its transport, its interest, messages in and out.

The router joins the network with an ordinary transport (in-process daemon,
or a standalone one with ``daemon=``) whose description carries
:data:`~rvasync.daemon.interestadv.ROUTER_MARK`, so that its own listening is
never announced as the network's interest. Through it, it

* learns the network's interest from the daemons' LISTEN.START / LISTEN.STOP
  advisories and the LISTEN.CURRENT they restate when it starts (per daemon, so
  a daemon that goes silent takes its interest with it: UNREACHABLE.TRANSPORT);
* listens to exactly what the rest of the domain wants from this network
  (:meth:`Attachment.set_listens`) and to replies on its own inboxes;
* hands the first message programs publish here in an event-loop turn to
  the router at once, gathers the rest of the turn and hands each run of
  one subject to the router as a batch (one routing
  decision, one BATCH frame per link), in the order they arrived;
* publishes what the domain delivers here (:meth:`Attachment.deliver`),
  tagged with a reserved ``_rvrd`` field so that other routers on the
  network know the message is already inside the domain. The message is
  passed through in the wire form it crossed the link in: the new address
  and the tag are written into its bytes (:mod:`rvasync.wireedit`), so a
  hop never decodes a message into fields and encodes it again.

On the way in, with an in-process daemon, the router listens through a
:class:`~rvasync.rvrd.tap.Tap`: the daemon hands over each message's wire
bytes undecoded, the routing tag is looked for in them and only the head is
read (subject, reply subject), so a message a program published crosses
without ever becoming a Message in the router. Through a standalone daemon,
the router listens with its transport and encodes what the daemon decoded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rvasync._wire import FIXSTR
from rvasync.codec import decode as _decode
from rvasync.codec import encode as _encode
from rvasync.daemon.interestadv import LISTEN_CURRENT, LISTEN_START, LISTEN_STOP, ROUTER_MARK
from rvasync.errors import RvError
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.rvrd.inbox import (
    domain_reply,
    inbox_to_domain,
    network_reply,
    network_subject,
)
from rvasync.protocol.rvrd.topology import INBOX_ROUTE
from rvasync.rvrd.config import NetworkConfig
from rvasync.rvrd.tap import Tap
from rvasync.transport.listener import Listener
from rvasync.transport.network import Transport
from rvasync.wireedit import StringField, plain_subject, read_head, rewrite, tag_run

# FieldType members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_T_OPAQUE, _T_STRING = (FieldType.OPAQUE, FieldType.STRING)


__all__ = ["TAG_FIELD", "Attachment", "parse_tag"]

#: Reserved field on messages a router published into a network: "origin importer seq hops".
TAG_FIELD = "_rvrd"
#: The field's name as it is encoded (a fixstr): a message whose bytes lack it has no tag.
_TAG_MARK = bytes((FIXSTR + len(TAG_FIELD),)) + TAG_FIELD.encode()
#: Appends the tag field to a message's wire bytes (Attachment.deliver).
_TAG = StringField(TAG_FIELD)
UNREACHABLE = "_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.>"
#: Routers sharing a LAN: presence (``router``, ``network``) every heartbeat, and their
#: link-state records (``frame``: the msgpack LSA frame), so they know each other.
LAN_HELLO = "_RVRD.LAN.HELLO"
LAN_LSA = "_RVRD.LAN.LSA"

Tag = tuple[str, str, int, int]


def make_tag(tag: Tag, subject: str) -> str:
    """The ``_rvrd`` field value: the routing tag, bound to the subject it was put on."""
    return f"{tag[0]} {tag[1]} {tag[2]} {tag[3]} {subject}"


def parse_tag(value: Any, subject: str) -> Tag | None:
    """The routing tag of a ``_rvrd`` field, None if malformed or made for another subject.

    A program that republishes a routed message under a new subject keeps the
    field; bound to the old subject, it no longer counts, and the router
    takes the message as a new one instead of dropping it as an echo.
    """
    if not isinstance(value, str):
        return None
    parts = value.split(" ", 4)
    if len(parts) != 5 or parts[4] != subject:
        return None
    try:
        return parts[0], parts[1], int(parts[2]), int(parts[3])
    except ValueError:
        return None


class Attachment:
    """The router's presence on local network ``config``.

    ``on_message(network, subject, payload, tag)``: a message to import;
    ``on_batch(network, subject, payloads)``: messages of one subject that programs
    published here, in order (gathered over one event-loop turn);
    ``on_interest(network, subject, added)``: the network's interest changed;
    ``on_lan(network, peer, frame)``: another router on this LAN was heard (``frame``:
    the record it published, or None for its presence announcement).
    """

    def __init__(
        self,
        router: str,
        config: NetworkConfig,
        *,
        on_message: Callable[[str, str, bytes, Tag | None], None],
        on_batch: Callable[[str, str, list[bytes]], None],
        on_interest: Callable[[str, str, bool], None],
        on_lan: Callable[[str, str, bytes | None], None],
        on_error: Callable[..., None],
    ) -> None:
        self.name = config.name
        self.config = config
        self._router = router
        self._on_message = on_message
        self._on_batch = on_batch
        #: Untagged messages of this turn in runs of one subject, (subject, payloads),
        #: flushed at its end.
        self._pending: list[tuple[str, list[bytes]]] = []
        self._turn = False
        self._on_interest = on_interest
        self._on_lan = on_lan
        self._on_error = on_error
        self.transport = Transport(
            config.service,
            config.network,
            config.daemon,
            description=f"{ROUTER_MARK}{router}/{config.name}",
            security=config.security(),
            router=True,
        )
        self._listens: dict[str, Listener] = {}
        #: With an in-process daemon: the routed subjects are listened to through this
        #: (the wire bytes, undecoded) instead of listeners (see module).
        self._tap: Tap | None = None
        self._tapped: set[str] = set()
        #: daemon address -> subjects it announced
        self._daemons: dict[str, set[str]] = {}
        self.prefix = ""
        #: What an inbox reply subject of this network is prefixed with inside the domain.
        self._inbox_route = f"{INBOX_ROUTE}.{config.name}."
        self._loop = asyncio.get_running_loop()
        self.published = 0
        self.publish_failures = 0
        #: Of :attr:`published`: those that took the general path (decoded, changed and
        #: encoded again: bytes :func:`read_head` does not read, such as a certified
        #: label). A message a program sent plainly never should.
        self.decoded_out = 0
        #: Messages taken here to route that were decoded on the way in (all of them
        #: through a standalone daemon; through the tap, only those that may carry a
        #: routing tag or whose head is not read here).
        self.decoded_in = 0

    async def open(self) -> None:
        t = self.transport
        await t.open()
        if self.config.daemon is None:
            self._tap = Tap(
                self.config.service, self.config.network, t.description or "", self._take_wire
            )
            await self._tap.open()
        inboxes = t.listen_inboxes(callback=self._reply)
        inboxes.intercept(self._reply)  # at once, as they are delivered (see set_listens)
        self.prefix = inboxes.subject[:-2]
        t.listen(UNREACHABLE, callback=self._unreachable)
        t.listen("_RVRD.LAN.>", callback=self._lan)
        # Last: listening to the announcements makes every daemon restate its interest
        # (LISTEN.QUERY, answered with LISTEN.CURRENT).
        t.listen("_RV.INFO.SYSTEM.LISTEN.>", callback=self._announcement)

    async def close(self) -> None:
        if self._tap is not None:
            self._tap.close()
        await self.transport.close()

    def interest(self) -> set[str]:
        """Every subject some daemon of this network announced."""
        return set().union(*self._daemons.values()) if self._daemons else set()

    # ------------------------------------------------------------------ interest

    def _announcement(self, msg: Message) -> None:
        sub = msg.get("sub")
        daemon = msg.get("daemon")
        if not isinstance(sub, str) or not isinstance(daemon, str):
            return
        subjects = self._daemons.setdefault(daemon, set())
        if msg.subject in (LISTEN_START, LISTEN_CURRENT) and sub not in subjects:
            subjects.add(sub)
            self._on_interest(self.name, sub, True)
        elif msg.subject == LISTEN_STOP and sub in subjects:
            subjects.discard(sub)
            self._on_interest(self.name, sub, False)

    def _unreachable(self, msg: Message) -> None:
        gone = self._daemons.pop(str(msg.get("tport")), None)
        for sub in sorted(gone or ()):
            self._on_interest(self.name, sub, False)

    # ------------------------------------------------------------------ LAN peers

    def _lan(self, msg: Message) -> None:
        peer = msg.get("router")
        network = msg.get("network")
        if not isinstance(peer, str) or not peer or peer == self._router:
            return
        if network != self.name:
            self._on_error(
                "a router on this LAN gives it another network name (ignored)",
                network=self.name,
                peer=peer,
                its_name=network,
            )
            return
        frame = msg.get("frame") if msg.subject == LAN_LSA else None
        if msg.subject == LAN_LSA and not isinstance(frame, bytes | bytearray):
            return
        self._on_lan(self.name, peer, None if frame is None else bytes(frame))

    def _lan_message(self, subject: str, frame: bytes | None) -> None:
        msg = Message(subject)
        msg.add_reserved("router", self._router, _T_STRING)
        msg.add_reserved("network", self.name, _T_STRING)
        if frame is not None:
            msg.add_reserved("frame", frame, _T_OPAQUE)
        try:
            self.transport.send_internal(msg)
        except Exception:
            self._on_error("cannot publish on the LAN", network=self.name, subject=subject)

    def hello(self) -> None:
        """Announce this router's presence to the other routers of the LAN."""
        self._lan_message(LAN_HELLO, None)

    def publish_record(self, frame: bytes) -> None:
        """Publish a link-state frame for the other routers of the LAN."""
        self._lan_message(LAN_LSA, frame)

    # ------------------------------------------------------------------ listening

    def set_listens(self, subjects: frozenset[str]) -> None:
        """Listen to exactly ``subjects`` (what the rest of the domain wants from here)."""
        tap = self._tap
        if tap is not None:
            tapped = self._tapped
            for subject in sorted(tapped - subjects):
                tapped.discard(subject)
                tap.remove_interest(subject)
            for subject in sorted(subjects - tapped):
                try:
                    tap.add_interest(subject)
                except RvError:
                    self._on_error("cannot listen", network=self.name, subject=subject)
                    continue
                tapped.add(subject)
            return
        for subject in list(self._listens):
            if subject not in subjects:
                self._listens.pop(subject).close_now()
        for subject in sorted(subjects):
            if subject not in self._listens:
                try:
                    listener = self.transport.listen(subject)
                except RvError:
                    self._on_error("cannot listen", network=self.name, subject=subject)
                    continue
                # Taken as they are delivered, not through the listener's queue and a
                # dispatcher task: one event-loop turn less at every router a message
                # or a reply crosses, and no queue work per message.
                listener.intercept(self._take)
                self._listens[subject] = listener

    @property
    def listening(self) -> frozenset[str]:
        return frozenset(self._tapped if self._tap is not None else self._listens)

    # ------------------------------------------------------------------ messages in

    def _take(self, msg: Message) -> None:
        self.decoded_in += 1
        subject = msg.subject
        if subject is None:
            return
        # The common case written out: a message a program published here, with no tag.
        # Encoded first (with its reply subject made a domain one); the tag's field name
        # never appears in its bytes then. When it does (a routed message, or one whose
        # data happens to hold those bytes), the general path decides from the fields.
        original = msg
        reply = msg.reply_subject
        if reply is not None and reply.startswith("_INBOX."):
            msg = msg.copy()
            msg.reply_subject = f"{self._inbox_route}{reply}"
        try:
            payload = _encode(msg)
        except RvError:
            self._on_error("cannot encode a message to route", subject=subject)
            return
        if _TAG_MARK in payload:
            self._take_tagged(original, subject)
            return
        self._forward(subject, payload)

    def _take_wire(self, data: bytes) -> None:
        """:meth:`_take` for a message's wire bytes (from the tap): the same outcome, and for a
        message a program published plainly, only its head is read."""
        if _TAG_MARK not in data:
            subject = plain_subject(data)
            if subject is not None:
                # The usual case (no reply subject to make a domain one): sent on as it came.
                self._forward(subject, data)
                return
        head = None if _TAG_MARK in data else read_head(data)
        if head is None or head.subject is None:
            # Maybe tagged (or not read here): decided from the fields, as _take does.
            try:
                msg = _decode(data)
            except RvError:
                self._on_error("cannot decode a message to route", network=self.name)
                return
            self._take(msg)
            return
        subject = head.subject
        reply = head.reply
        if reply is not None and reply.startswith("_INBOX."):
            data = rewrite(data, head, subject, f"{self._inbox_route}{reply}")
        self._forward(subject, data)

    def _forward(self, subject: str, payload: bytes) -> None:
        """Hand an untagged message on: the turn's first message leaves at once (latency);
        the rest of a burst is gathered and handed over at the end of the turn (throughput)."""
        if self._turn:
            self._gather(subject, payload)
            return
        self._turn = True
        self._loop.call_soon(self._end_turn)
        self._on_batch(self.name, subject, [payload])

    def _gather(self, subject: str, payload: bytes) -> None:
        """Add a message to this turn's runs of one subject."""
        pending = self._pending
        if pending and pending[-1][0] == subject:
            pending[-1][1].append(payload)
        else:
            pending.append((subject, [payload]))

    def _take_tagged(self, msg: Message, subject: str) -> None:
        """:meth:`_take` for a message that may carry a routing tag."""
        tag = None
        if TAG_FIELD in msg:
            tag = parse_tag(msg.get(TAG_FIELD), subject)
            msg = msg.copy()
            while msg.remove(TAG_FIELD) is not None:
                pass
        if tag is None:
            # Published here by a program: replies to its inboxes must find their way back.
            reply = domain_reply(self.name, msg.reply_subject)
            if reply != msg.reply_subject:
                msg = msg.copy()
                msg.reply_subject = reply
        try:
            payload = msg.to_bytes()
        except RvError:
            self._on_error("cannot encode a message to route", subject=subject)
            return
        if tag is None:
            self._forward(subject, payload)
            return
        self.flush()  # what came before it leaves first
        self._on_message(self.name, subject, payload, tag)

    def _end_turn(self) -> None:
        self._turn = False
        self.flush()

    def flush(self) -> None:
        """Hand the messages gathered this turn to the router, one batch per run of a subject."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        for subject, payloads in pending:
            self._on_batch(self.name, subject, payloads)

    def _reply(self, msg: Message) -> None:
        """A reply to one of the inboxes the router wrote as reply subjects here."""
        subject = inbox_to_domain(self.prefix, msg.subject or "")
        if subject is None:
            return
        msg = msg.copy()
        msg.subject = subject
        msg.reply_subject = domain_reply(self.name, msg.reply_subject)
        self.flush()
        self._on_message(self.name, subject, msg.to_bytes(), None)

    # ------------------------------------------------------------------ messages out

    def deliver(self, subject: str, payload: bytes, tag: Tag) -> bool:
        """Publish a message of the domain here; False if it could not be sent.

        The message is passed through as it came: its address and the tag are
        edited in its wire bytes (rvasync.wireedit), not decoded and encoded
        again. Bytes that are not read that way take the general path, which
        reports a malformed message as a failure to publish.
        """
        try:
            head = read_head(payload)
            if head is None:
                self._deliver_decoded(subject, payload, tag)
            else:
                # network_subject and network_reply, for this network
                route = self._inbox_route
                local = subject[len(route) :] if subject.startswith(route) else subject
                reply = head.reply
                if reply is not None:
                    reply = network_reply(self.name, reply, self.prefix)
                field = (
                    None
                    if local.startswith("_INBOX.")
                    else _TAG.encode(f"{tag[0]} {tag[1]} {tag[2]} {tag[3]} {local}")
                )
                self.transport.send_encoded(rewrite(payload, head, local, reply, field))
        except Exception:
            self.publish_failures += 1
            self._on_error("cannot publish a routed message", network=self.name, subject=subject)
            return False
        self.published += 1
        return True

    def deliver_run(self, subject: str, payloads: list[bytes], tags: list[Tag]) -> int:
        """:meth:`deliver` for messages of one subject (a batch passing through), handed to
        the daemon in one call; returns how many could not be published."""
        n = len(payloads)
        datas: list[bytes] = []
        local = subject
        try:
            route = self._inbox_route
            local = subject[len(route) :] if subject.startswith(route) else subject
            inbox = local.startswith("_INBOX.")
            for payload, tag in zip(payloads, tags, strict=True):
                head = read_head(payload)
                if head is None:
                    break
                reply = head.reply
                if reply is not None:
                    reply = network_reply(self.name, reply, self.prefix)
                field = (
                    None if inbox else _TAG.encode(f"{tag[0]} {tag[1]} {tag[2]} {tag[3]} {local}")
                )
                datas.append(rewrite(payload, head, local, reply, field))
        except Exception:
            datas = []
        if len(datas) < n:
            # Not all read here: one by one, each reported on its own (in order).
            return sum(not self.deliver(subject, p, t) for p, t in zip(payloads, tags, strict=True))
        try:
            self.transport.send_encoded_run(local, datas)
        except Exception:
            self.publish_failures += n
            self._on_error("cannot publish routed messages", network=self.name, subject=subject)
            return n
        self.published += n
        return 0

    def deliver_batch(
        self, subject: str, payloads: list[bytes], origin: str, importer: str, seq: int, hops: int
    ) -> int:
        """:meth:`deliver_run` for a batch passing through: ``payloads[i]`` is tagged
        ``(origin, importer, seq + i, hops)``, with no tag tuple made per message; returns
        how many could not be published."""
        n = len(payloads)
        route = self._inbox_route
        local = subject[len(route) :] if subject.startswith(route) else subject
        inbox = local.startswith("_INBOX.")
        # The tag's value is "origin importer seq hops subject": only seq changes.
        before, after = f"{origin} {importer} ", f" {hops} {local}"
        datas = None
        if local == subject and not inbox:
            datas = tag_run(payloads, subject, _TAG, before, seq, after)  # the usual batch
        if datas is None:
            datas = self._edit_each(payloads, local, None if inbox else (before, seq, after))
        if datas is None:
            # Not all read here: one by one, each reported on its own (in order).
            return sum(
                not self.deliver(subject, p, (origin, importer, seq + i, hops))
                for i, p in enumerate(payloads)
            )
        try:
            self.transport.send_encoded_run(local, datas)
        except Exception:
            self.publish_failures += n
            self._on_error("cannot publish routed messages", network=self.name, subject=subject)
            return n
        self.published += n
        return 0

    def _edit_each(
        self, payloads: list[bytes], local: str, tag: tuple[str, int, str] | None
    ) -> list[bytes] | None:
        """Each payload with its address for this network and, unless ``tag`` is None, the
        tag field ``f"{before}{seq + i}{after}"`` (``tag``: before, seq, after); None when
        one of them is not read here (:func:`read_head`)."""
        datas: list[bytes] = []
        name, prefix, tag_field = self.name, self.prefix, _TAG.encode
        try:
            for i, payload in enumerate(payloads):
                head = read_head(payload)
                if head is None:
                    return None
                reply = head.reply
                if reply is not None:
                    reply = network_reply(name, reply, prefix)
                field = None if tag is None else tag_field(f"{tag[0]}{tag[1] + i}{tag[2]}")
                datas.append(rewrite(payload, head, local, reply, field))
        except Exception:
            return None
        return datas

    def _deliver_decoded(self, subject: str, payload: bytes, tag: Tag) -> None:
        """:meth:`deliver` through a Message (bytes :func:`read_head` does not read)."""
        self.decoded_out += 1
        msg = Message.from_bytes(payload)
        msg.subject = network_subject(self.name, subject)
        msg.reply_subject = network_reply(self.name, msg.reply_subject, self.prefix)
        if not msg.subject.startswith("_INBOX."):
            msg.add_reserved(TAG_FIELD, make_tag(tag, msg.subject), _T_STRING)
        self.transport.send_internal(msg)

    def publish_advisory(self, advisory: Message) -> None:
        """Present a router advisory to the programs of this network."""
        try:
            self.transport.send_internal(advisory)
        except Exception:
            self._on_error("cannot publish an advisory", subject=advisory.subject)
