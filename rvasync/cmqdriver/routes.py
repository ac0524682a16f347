"""Point-to-point routes to the other members of a distributed queue.

Most queue records are meant for one member: assignments and
acknowledgements go from the scheduler to one worker, acceptances and
completions from a worker to the scheduler. Sent on a subject
(``_RVCMQ.<name>.M.<member>`` or ``.S``) they would be broadcast to every
daemon of the service, and every member's process would wake for each of them
only to drop it; with four workers that is most of the work per task. So each
member listens on an inbox of its own as well, and writes it as the reply
subject of every record it sends; a member that has heard from a peer sends
the records meant for it to that inbox (point to point, to that daemon only).

The scheduler is whoever last sent this member an assignment or an
acknowledgement (only the active scheduler sends those). A record for a peer
not heard yet, or for the scheduler before one has assigned anything, goes on
the subject as before. A stale route costs no task: a completion sent to a
deposed scheduler is ignored there, and the worker repeats it in its status
(broadcast every heartbeat) until the current scheduler acknowledges it.
"""

from __future__ import annotations

from rvasync.protocol.cmq import GROUP, SCHEDULER, QueueRecord, RecordKind

# RecordKind members as module globals, read per message: on Python 3.11 reading a
# member through its class costs about 0.2 us (EnumType defines __getattr__, which
# puts every look-up on the class on a slow path); a global costs about 15 ns.
_BYE = RecordKind.BYE


__all__ = ["MAX_ROUTES", "PeerRoutes"]

MAX_ROUTES = 1024
"""Peers remembered at most (the least recently heard is forgotten first)."""

_FROM_SCHEDULER = (RecordKind.ASSIGN, RecordKind.ACK)


class PeerRoutes:
    """The inbox of each peer heard from, and which peer is the scheduler."""

    __slots__ = ("_inboxes", "_scheduler")

    def __init__(self) -> None:
        self._inboxes: dict[str, str] = {}
        self._scheduler: str | None = None

    def heard(self, record: QueueRecord, reply_subject: str | None) -> None:
        """Note a record received from another member, sent with ``reply_subject``."""
        member = record.member
        if record.kind is _BYE:
            self.forget(member)
            return
        if reply_subject is None or not reply_subject.startswith("_INBOX."):
            return
        inboxes = self._inboxes
        if inboxes.get(member) != reply_subject:
            inboxes.pop(member, None)
            if len(inboxes) >= MAX_ROUTES:
                del inboxes[next(iter(inboxes))]
            inboxes[member] = reply_subject
        if record.kind in _FROM_SCHEDULER:
            self._scheduler = member

    def forget(self, member: str) -> None:
        """``member`` left or died: records for it go on its subject again."""
        self._inboxes.pop(member, None)
        if self._scheduler == member:
            self._scheduler = None

    def inbox_of(self, to: str) -> str | None:
        """The inbox a record addressed to ``to`` goes to, or None for its subject."""
        if to == GROUP:
            return None
        if to == SCHEDULER:
            if self._scheduler is None:
                return None
            return self._inboxes.get(self._scheduler)
        return self._inboxes.get(to)

    @property
    def scheduler(self) -> str | None:
        """The member believed to be the scheduler (None when not known)."""
        return self._scheduler

    def __len__(self) -> int:
        return len(self._inboxes)
