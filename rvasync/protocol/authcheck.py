"""Rules of the secure daemon that need no I/O: who may publish and listen to what.

Both ends use them: the daemon enforces a session's rights on every LISTEN
and PUBLISH of its client port, and tells the client its permissions in
WELCOME so that the client refuses a forbidden ``listen`` or ``send`` at once
with :class:`~rvasync.errors.NotPermitted` instead of having it vanish on the
daemon.

Two layers decide:

* :class:`SubjectPermissions`: what the users file gives one user (publish
  and subscribe patterns, whether it may reply to inboxes, whether it may
  connect as a routing daemon);
* the **reserved subjects** (:data:`RESERVED`): subjects whose first element
  starts with ``_`` belong to the system, and each family has its own rule
  (inboxes are addresses, advisories and router records are the daemons' and
  routers' own). :class:`SubjectRights` applies both, for one session, in one
  place: :meth:`SubjectRights.why_not_publish` and
  :meth:`SubjectRights.why_not_listen`.

The brake on password guessing is in :mod:`rvasync.protocol.loginbrake`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from rvasync.errors import InvalidArgument
from rvasync.subjects import has_wildcards

__all__ = [
    "RESERVED",
    "Access",
    "ReservedFamily",
    "SubjectPermissions",
    "SubjectRights",
    "listen_is_for_routers",
    "pattern_covers",
    "reserved_family",
    "reserved_publish_refusal",
]


def _check_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgument(f"a subject pattern must be a non-empty str, got {pattern!r}")
    elements = pattern.split(".")
    for index, element in enumerate(elements):
        if not element:
            raise InvalidArgument(f"subject pattern {pattern!r} has an empty element")
        if element == ">" and index != len(elements) - 1:
            raise InvalidArgument(f"subject pattern {pattern!r}: '>' must be the last element")
    return pattern


def pattern_covers(allowed: str, wanted: str) -> bool:
    """True if every subject ``wanted`` matches is also matched by ``allowed``.

    Both may hold the wildcards ``*`` (one element) and ``>`` (one or more
    trailing elements). A literal subject is the simple case: it is covered
    when ``allowed`` matches it.
    """
    have = allowed.split(".")
    want = wanted.split(".")
    for index, element in enumerate(have):
        if element == ">":
            return len(want) > index  # '>' needs at least one element to cover
        if index >= len(want):
            return False
        asked = want[index]
        if asked == ">":
            return False  # only '>' covers '>'
        if element == "*":
            continue  # covers a literal or '*'
        if element != asked:
            return False
    return len(want) == len(have)


@dataclass(frozen=True, slots=True)
class SubjectPermissions:
    """What one user may do, from the users file.

    ``publish``/``subscribe``: subject patterns (``(">",)`` is everything).
    ``reply``: may the user send to inboxes (answer requests)? ``router``: may
    it connect as a routing daemon (publish advisories and router records)?
    """

    publish: tuple[str, ...] = (">",)
    subscribe: tuple[str, ...] = (">",)
    reply: bool = True
    router: bool = False

    @classmethod
    def of(
        cls,
        publish: Iterable[str] | None,
        subscribe: Iterable[str] | None,
        *,
        reply: bool = True,
        router: bool = False,
    ) -> SubjectPermissions:
        """Checked permissions; None for a list means "everything"."""
        for name, flag in (("reply", reply), ("router", router)):
            if not isinstance(flag, bool):
                raise InvalidArgument(f"{name} must be true or false, got {flag!r}")
        return cls(
            publish=(">",) if publish is None else tuple(_check_pattern(p) for p in publish),
            subscribe=(">",) if subscribe is None else tuple(_check_pattern(p) for p in subscribe),
            reply=reply,
            router=router,
        )

    @property
    def unrestricted(self) -> bool:
        """Everything a client may do: every pattern, replies included."""
        return ">" in self.publish and ">" in self.subscribe and self.reply

    def may_publish(self, subject: str) -> bool:
        """Do the publish patterns cover ``subject``? (Inboxes: see :class:`SubjectRights`.)"""
        return any(pattern_covers(p, subject) for p in self.publish)

    def may_listen(self, subject: str) -> bool:
        """May the user listen to ``subject`` (a pattern: all it matches must be allowed)?"""
        return any(pattern_covers(p, subject) for p in self.subscribe)

    def as_dict(self) -> dict[str, object]:
        """The form WELCOME carries to the client."""
        return {
            "publish": list(self.publish),
            "subscribe": list(self.subscribe),
            "reply": self.reply,
            "router": self.router,
        }

    @classmethod
    def from_dict(cls, data: object) -> SubjectPermissions | None:
        """Read WELCOME's form back; None when it is absent or not well formed."""
        if not isinstance(data, dict):
            return None
        publish, subscribe = data.get("publish"), data.get("subscribe")
        reply, router = data.get("reply", True), data.get("router", False)
        if not isinstance(publish, list) or not isinstance(subscribe, list):
            return None
        try:
            return cls.of(publish, subscribe, reply=reply, router=router)
        except InvalidArgument:
            return None


class Access(Enum):
    """Who may publish to, or listen to, one family of reserved subjects."""

    #: The user's patterns decide, as for any subject.
    PATTERNS = "the user's patterns"
    #: Only sessions with the router role (and the daemon itself).
    ROUTERS = "routing daemons only"
    #: Inboxes: one concrete inbox (no wildcard); publishing needs ``reply``.
    #: Listening needs nothing more: inbox messages are delivered to the session
    #: that owns the inbox, by address, whoever else listens to its name.
    ADDRESS = "one concrete inbox"


@dataclass(frozen=True, slots=True)
class ReservedFamily:
    """One family of reserved subjects: its first element and its rules."""

    element: str
    publish: Access
    listen: Access
    what: str


#: The reserved families a daemon's client port knows (docs/security.md lists them).
#: A first element starting with '_' that is not here follows the user's patterns.
RESERVED: tuple[ReservedFamily, ...] = (
    ReservedFamily("_INBOX", Access.ADDRESS, Access.ADDRESS, "inboxes: point-to-point addresses"),
    ReservedFamily("_LOCAL", Access.PATTERNS, Access.PATTERNS, "traffic that stays in one daemon"),
    ReservedFamily("_RV", Access.ROUTERS, Access.PATTERNS, "advisories"),
    ReservedFamily("_RVRD", Access.ROUTERS, Access.ROUTERS, "routing daemons' LAN records"),
    ReservedFamily("_RVCM", Access.PATTERNS, Access.PATTERNS, "certified delivery's protocol"),
    ReservedFamily("_RVCMQ", Access.PATTERNS, Access.PATTERNS, "distributed queues' protocol"),
    ReservedFamily("_RVFT", Access.PATTERNS, Access.PATTERNS, "fault tolerance's protocol"),
    ReservedFamily("_RVOPS", Access.PATTERNS, Access.PATTERNS, "remote operations' protocol"),
    ReservedFamily("_RVCACHE", Access.PATTERNS, Access.PATTERNS, "the value cache's protocol"),
    ReservedFamily("_RVRELAY", Access.PATTERNS, Access.PATTERNS, "relay agents' protocol"),
)
_BY_ELEMENT = {family.element: family for family in RESERVED}
# Dots in the shortest inbox name a transport makes: _INBOX.<daemon>.<transport>.<n>.
_INBOX_DOTS = 3


def reserved_family(subject: str) -> ReservedFamily | None:
    """The reserved family of ``subject`` (by its first element), or None."""
    if subject[:1] != "_":
        return None
    return _BY_ELEMENT.get(subject.partition(".")[0])


def listen_is_for_routers(subject: str) -> bool:
    """True for a subject only sessions with the router role may receive (the daemon's
    routing leaves other sessions out, whatever pattern they listen to)."""
    family = reserved_family(subject)
    return family is not None and family.listen is Access.ROUTERS


def reserved_publish_refusal(subject: str, *, router: bool) -> str | None:
    """Why a session may not publish to ``subject`` whatever its user (None: it may).

    The part of the rules that holds for every session of a daemon, in-process
    ones included: advisories and router records are for routers, and an
    inbox is one address (no wildcard).
    """
    family = reserved_family(subject)
    if family is None:
        return None
    if family.publish is Access.ROUTERS and not router:
        return (
            f"clients may not publish to {subject!r}: {family.element}. subjects "
            f"({family.what}) are published by daemons and routing daemons only"
        )
    if family.publish is Access.ADDRESS:
        if has_wildcards(subject):
            return (
                f"cannot publish to {subject!r}: an inbox is one address, so its name "
                "cannot contain wildcards"
            )
        if subject.count(".") < _INBOX_DOTS:
            return (
                f"cannot publish to {subject!r}: not an inbox (inbox names are made by "
                "create_inbox: _INBOX.<daemon>.<transport>.<n>)"
            )
    return None


@dataclass(frozen=True, slots=True)
class SubjectRights:
    """What one session may publish and listen to: its user's name and permissions
    (None: not restricted) and whether it has the router role.

    Every answer is a reason (a str naming the user and subject) or "" when
    allowed; the caller decides how to refuse (ERROR frame, ILLEGAL_PUBLISH,
    NotPermitted).
    """

    user: str | None = None
    permissions: SubjectPermissions | None = None
    router: bool = False

    def _who(self) -> str:
        return f"user {self.user!r}" if self.user is not None else "this client"

    def why_not_publish(self, subject: str) -> str:
        """Why this session may not publish to ``subject`` (a valid subject); "" if it may."""
        refusal = reserved_publish_refusal(subject, router=self.router)
        if refusal is not None:
            return refusal
        perms = self.permissions
        if perms is None:
            return ""
        family = reserved_family(subject)
        if family is not None and family.publish is Access.ADDRESS:
            if perms.reply:
                return ""
            return f"{self._who()} may not reply to inboxes ({subject!r})"
        if family is not None and family.publish is Access.ROUTERS:
            return ""  # a router (refused above otherwise): its role is the permission
        if perms.may_publish(subject):
            return ""
        return f"{self._who()} may not publish to {subject!r}"

    def why_not_listen(self, subject: str) -> str:
        """Why this session may not listen to ``subject`` (a valid pattern); "" if it may."""
        family = reserved_family(subject)
        if family is not None and family.listen is Access.ADDRESS:
            if has_wildcards(subject):
                return f"cannot listen to {subject!r}: inbox names cannot contain wildcards"
            return ""  # delivered by address to its owner: a listen takes nobody's replies
        if family is not None and family.listen is Access.ROUTERS:
            if self.router:
                return ""
            return (
                f"{self._who()} may not listen to {subject!r}: {family.element}. "
                f"subjects ({family.what}) are for routing daemons only"
            )
        # A wildcard first element ('>') matches reserved subjects too: the daemon
        # delivers router records to routers only (see listen_is_for_routers).
        perms = self.permissions
        if perms is None or perms.may_listen(subject):
            return ""
        return f"{self._who()} may not listen to {subject!r}"
