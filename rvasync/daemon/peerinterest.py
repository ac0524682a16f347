"""What the other daemons of a service listen to, as their LISTEN advisories say.

A daemon hears the LISTEN.START, LISTEN.STOP and LISTEN.CURRENT of the other
daemons on its service (see :mod:`rvasync.daemon.interestadv`) and keeps, per
daemon, the subjects it announced. That is what lets it present a LISTEN.STOP
for every subject of a daemon it gives up on (silent for ``peer_timeout``, or
gone), which the daemon itself can no longer say. A LISTEN.QUERY addressed to
it (or to every daemon) asks it to restate its own interest.

No sockets, no event loop: :meth:`PeerInterest.heard` takes an advisory and
says what it means; the service acts on it. What a forger can make a daemon
keep is bounded (:data:`MAX_TRACKED` subjects in all; the rest is counted in
:attr:`PeerInterest.untracked`, and its STOP is never presented).
"""

from __future__ import annotations

import enum

from rvasync.daemon.interestadv import LISTEN_CURRENT, LISTEN_QUERY, LISTEN_START, LISTEN_STOP
from rvasync.message import Message

__all__ = ["MAX_TRACKED", "Heard", "PeerInterest"]

#: Subjects of other daemons kept at most, over all of them.
MAX_TRACKED = 100_000


class Heard(enum.Enum):
    """What an advisory heard from the network asks of this daemon."""

    NOTHING = 0
    #: A LISTEN.QUERY for this daemon: restate its interest (LISTEN.CURRENT).
    ANSWER = 1


class PeerInterest:
    """Per other daemon (its address in hex), the subjects it announced it listens to."""

    def __init__(self, own: str, limit: int = MAX_TRACKED) -> None:
        self.own = own
        self.limit = limit
        #: Announcements not kept because :attr:`limit` subjects are kept already.
        self.untracked = 0
        self._by_daemon: dict[str, set[str]] = {}
        self._count = 0

    def heard(self, msg: Message) -> Heard:
        """A LISTEN advisory from the network (anything else is ignored)."""
        daemon = msg.get("daemon")
        if not isinstance(daemon, str) or daemon == self.own:
            return Heard.NOTHING  # our own, looped back to our router
        subject = msg.subject
        if subject == LISTEN_QUERY:
            to = msg.get("to")
            return Heard.ANSWER if to is None or to == self.own else Heard.NOTHING
        sub = msg.get("sub")
        if not isinstance(sub, str):
            return Heard.NOTHING
        if subject in (LISTEN_START, LISTEN_CURRENT):
            self._add(daemon, sub)
        elif subject == LISTEN_STOP:
            subjects = self._by_daemon.get(daemon)
            if subjects is not None and sub in subjects:
                subjects.discard(sub)
                self._count -= 1
                if not subjects:
                    del self._by_daemon[daemon]
        return Heard.NOTHING

    def _add(self, daemon: str, sub: str) -> None:
        subjects = self._by_daemon.get(daemon)
        if subjects is not None and sub in subjects:
            return
        if self._count >= self.limit:
            self.untracked += 1
            return
        self._by_daemon.setdefault(daemon, set()).add(sub)
        self._count += 1

    def gone(self, daemon: str) -> list[str]:
        """This daemon gave up on ``daemon``: the subjects it had announced, forgotten."""
        subjects = self._by_daemon.pop(daemon, set())
        self._count -= len(subjects)
        return sorted(subjects)

    def subjects(self, daemon: str) -> frozenset[str]:
        """What ``daemon`` announced and has not withdrawn."""
        return frozenset(self._by_daemon.get(daemon, ()))
