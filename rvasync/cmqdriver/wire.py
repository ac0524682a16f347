"""How a distributed queue's records travel on an rvasync transport.

Queue records go as messages whose fields are the record's flat mapping, on
subjects under ``_RVCMQ.<name>.``: ``G`` for the whole group (status, bye),
``S`` for the active scheduler (completions), ``M.<member id>`` for one member
(assignments, acceptances, acknowledgements) and ``A`` for certified listener
advisories the scheduler shares with the other members. The scheduler
election's fault tolerance records travel as the fault tolerance driver sends
them (``_RVFT._RVCMQ.<name>``).
"""

from __future__ import annotations

from rvasync.errors import InvalidSubject
from rvasync.message import Message
from rvasync.protocol.cmq import GROUP, SCHEDULER, QueueRecord
from rvasync.subjects import validate_subject

__all__ = ["QueueSubjects", "record_message"]


class QueueSubjects:
    """The internal subjects of queue ``name`` as seen by member ``member``."""

    __slots__ = ("advisories", "group", "member", "prefix", "scheduler")

    def __init__(self, name: str, member: str) -> None:
        self.prefix = f"_RVCMQ.{name}."
        self.group = self.prefix + "G"
        self.scheduler = self.prefix + "S"
        self.advisories = self.prefix + "A"
        self.member = self.prefix + "M." + member
        try:
            validate_subject(self.member, wildcards=False)
        except InvalidSubject:
            raise InvalidSubject(
                f"distributed queue name {name!r} is too long for its internal subjects "
                f"({self.member!r} breaks the subject length limits)"
            ) from None

    def destination(self, to: str) -> str:
        if to == GROUP:
            return self.group
        if to == SCHEDULER:
            return self.scheduler
        return self.prefix + "M." + to


def record_message(subject: str, record: QueueRecord) -> Message:
    return Message(subject, record.to_fields())
