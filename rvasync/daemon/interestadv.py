"""LISTEN.START / LISTEN.STOP: a daemon tells its network which subjects it listens to.

A routing daemon must know what each network it is attached to listens to,
but with in-process daemons that interest is spread over every program's own
daemon. So each daemon announces its own: when the first of its sessions
starts listening to a subject it publishes ``_RV.INFO.SYSTEM.LISTEN.START``
(fields ``sub``: the subject, ``daemon``: the daemon's address as written in
its inboxes), and ``LISTEN.STOP`` when the last one stops. It announces its
whole interest again when it discovers a new daemon on the network (a router
that just started) and when one of its own sessions starts listening to the
announcements (a router attached to an existing standalone daemon).

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
    "LISTEN_START",
    "LISTEN_STOP",
    "ROUTER_MARK",
    "InterestAnnouncer",
]

#: How a router's transports describe themselves (a label; it grants nothing).
ROUTER_MARK = "rvasync-router:"
LISTEN_START = "_RV.INFO.SYSTEM.LISTEN.START"
LISTEN_STOP = "_RV.INFO.SYSTEM.LISTEN.STOP"

_SILENT_HEADS = ("_INBOX", "_LOCAL", "_RV", "_RVRD")


def announced(subject: str) -> bool:
    """Subjects whose interest is announced (everything that can cross a router)."""
    return subject.split(".", 1)[0] not in _SILENT_HEADS


class InterestAnnouncer:
    """Counts a daemon's interest per subject and builds the announcements."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self._counts: dict[str, int] = {}

    def _advisory(self, start: bool, subject: str) -> Message:
        return make_advisory(
            AdvisoryClass.INFO,
            SYSTEM,
            "LISTEN.START" if start else "LISTEN.STOP",
            fields=[
                ("sub", subject, FieldType.STRING),
                ("daemon", self.daemon, FieldType.STRING),
            ],
        )

    def added(self, router: bool, subject: str) -> list[Message]:
        """A session (``router``: with the router role) started listening to ``subject``:
        the advisories to publish."""
        if router:
            if subject_matches(subject, LISTEN_START):
                return self.everything()
            return []
        out: list[Message] = []
        if announced(subject):
            count = self._counts.get(subject, 0) + 1
            self._counts[subject] = count
            if count == 1:
                out.append(self._advisory(True, subject))
        if subject_matches(subject, LISTEN_START):
            out += self.everything()
        return out

    def removed(self, router: bool, subject: str) -> list[Message]:
        """A session stopped listening to ``subject`` (or closed)."""
        if router:
            return []
        count = self._counts.get(subject, 0)
        if count <= 0:
            return []
        if count == 1:
            del self._counts[subject]
            return [self._advisory(False, subject)]
        self._counts[subject] = count - 1
        return []

    def everything(self) -> list[Message]:
        """LISTEN.START for every subject listened to (announced again)."""
        return [self._advisory(True, s) for s in sorted(self._counts)]
