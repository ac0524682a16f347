"""LISTEN.START / LISTEN.STOP: a daemon tells its network which subjects it listens to.

A routing daemon must know what each network it is attached to listens to,
but with in-process daemons that interest is spread over every program's own
daemon. So each daemon announces its own, and only what changes: when the
first of its sessions starts listening to a subject it publishes
``_RV.INFO.SYSTEM.LISTEN.START`` (fields ``sub``: the subject, ``daemon``: the
daemon's address as written in its inboxes), and ``LISTEN.STOP`` when the last
one stops. A monitor can therefore track subscriptions from START and STOP
alone: each announces something new.

Whoever needs the interest that already exists asks for it:
``_RV.INFO.SYSTEM.LISTEN.QUERY`` (fields ``daemon``: who asks, ``to``: the one
daemon asked, or none for all) makes each daemon asked restate its interest
as ``_RV.INFO.SYSTEM.LISTEN.CURRENT`` (the fields of START), never as START. A
daemon sends a QUERY when one of its sessions starts listening to the
announcements (a router that just started, or one attached to a running
standalone daemon), and, while such a session listens, to every daemon it
discovers on the network (one that was cut off and comes back). Every daemon
keeps what the others announced (:mod:`rvasync.daemon.peerinterest`), and when
it gives up on one (silent for ``peer_timeout``, or gone) it presents a
LISTEN.STOP to its own sessions for every subject that daemon had announced.

Inboxes, ``_LOCAL.`` and advisory subjects are never announced: they do not
cross routers. Nor is the interest of a router's own sessions (those with the
router role, ``ClientSession.router``): a router listens on a network on
behalf of other networks, and announcing that would make the interest echo
forever. The role is granted by whoever attaches the session (see
docs/security.md), never read from a description; :data:`ROUTER_MARK` only
labels a router's transports for people (status page, logs).
"""

from __future__ import annotations

from rvasync.advmsg import SYSTEM, AdvisoryClass, make_advisory
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.subjects import subject_matches

__all__ = [
    "LISTEN_ADVISORIES",
    "LISTEN_CURRENT",
    "LISTEN_QUERY",
    "LISTEN_START",
    "LISTEN_STOP",
    "ROUTER_MARK",
    "InterestAnnouncer",
    "watches",
]

#: How a router's transports describe themselves (a label; it grants nothing).
ROUTER_MARK = "rvasync-router:"
LISTEN_START = "_RV.INFO.SYSTEM.LISTEN.START"
LISTEN_STOP = "_RV.INFO.SYSTEM.LISTEN.STOP"
LISTEN_CURRENT = "_RV.INFO.SYSTEM.LISTEN.CURRENT"
LISTEN_QUERY = "_RV.INFO.SYSTEM.LISTEN.QUERY"
#: What a daemon itself listens to on the network (rvasync.daemon.peerinterest).
LISTEN_ADVISORIES = (LISTEN_START, LISTEN_STOP, LISTEN_CURRENT, LISTEN_QUERY)

_SILENT_HEADS = ("_INBOX", "_LOCAL", "_RV", "_RVRD")


def announced(subject: str) -> bool:
    """Subjects whose interest is announced (everything that can cross a router)."""
    return subject.split(".", 1)[0] not in _SILENT_HEADS


class InterestAnnouncer:
    """Counts a daemon's interest per subject and builds the announcements."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self._counts: dict[str, int] = {}
        #: Sessions listening to the announcements (they want to hear what others hold).
        self.watchers = 0

    def _advisory(self, name: str, subject: str) -> Message:
        return make_advisory(
            AdvisoryClass.INFO,
            SYSTEM,
            name,
            fields=[
                ("sub", subject, FieldType.STRING),
                ("daemon", self.daemon, FieldType.STRING),
            ],
        )

    def added(self, router: bool, subject: str) -> list[Message]:
        """A session (``router``: with the router role) started listening to ``subject``:
        the advisories to publish."""
        out: list[Message] = []
        if not router and announced(subject):
            count = self._counts.get(subject, 0) + 1
            self._counts[subject] = count
            if count == 1:
                out.append(self._advisory("LISTEN.START", subject))
        if watches(subject):
            # It wants what exists already: ask every daemon, and restate this one's.
            self.watchers += 1
            out.append(self.query())
            out += self.current()
        return out

    def removed(self, router: bool, subject: str) -> list[Message]:
        """A session stopped listening to ``subject`` (or closed)."""
        if watches(subject):
            self.watchers = max(0, self.watchers - 1)
        if router:
            return []
        count = self._counts.get(subject, 0)
        if count <= 0:
            return []
        if count == 1:
            del self._counts[subject]
            return [self._advisory("LISTEN.STOP", subject)]
        self._counts[subject] = count - 1
        return []

    def current(self) -> list[Message]:
        """LISTEN.CURRENT for every subject listened to (the answer to a QUERY)."""
        return [self._advisory("LISTEN.CURRENT", s) for s in sorted(self._counts)]

    def query(self, to: str | None = None) -> Message:
        """LISTEN.QUERY: every daemon (or the one at address ``to``) restates its interest."""
        fields: list[tuple[str, object, FieldType]] = [("daemon", self.daemon, FieldType.STRING)]
        if to is not None:
            fields.append(("to", to, FieldType.STRING))
        return make_advisory(AdvisoryClass.INFO, SYSTEM, "LISTEN.QUERY", fields=fields)

    def stopped(self, daemon: str, subject: str) -> Message:
        """LISTEN.STOP on behalf of ``daemon``, which this one has given up on."""
        return make_advisory(
            AdvisoryClass.INFO,
            SYSTEM,
            "LISTEN.STOP",
            fields=[
                ("sub", subject, FieldType.STRING),
                ("daemon", daemon, FieldType.STRING),
                ("reason", "daemon gone", FieldType.STRING),
            ],
        )


def watches(subject: str) -> bool:
    """Whether listening to ``subject`` means wanting the interest that exists (it takes
    LISTEN.CURRENT: ``_RV.INFO.SYSTEM.LISTEN.>``, ``_RV.>`` ...)."""
    return subject_matches(subject, LISTEN_CURRENT)
