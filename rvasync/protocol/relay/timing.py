"""The relay protocol's intervals (seconds); defaults suit a LAN."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rvasync.errors import InvalidArgument

__all__ = ["RelayTiming"]


@dataclass(frozen=True, slots=True)
class RelayTiming:
    """Intervals of the relay link.

    * ``locate_interval``: a client looking for its agent asks again this often;
      after ``locate_attempts`` unanswered asks it presents DELIVERY.NO_RESPONSE
      (once per connect) and keeps asking.
    * ``retry``: unacknowledged pushed items are pushed again after this long.
    * ``keepalive``: a connected client pings its agent this often.
    * ``agent_timeout``: a connected client that has heard nothing from its
      agent for this long looks for it again (it may have restarted elsewhere).
    * ``session_timeout``: an agent that has heard nothing from a client for
      this long treats it as disconnected and stores for it.
    * ``bye_timeout``: a disconnect completes (and is advised) after this long
      even if the agent never answers.
    * ``reply_lifetime``: how long an agent relays replies to a surrogate inbox
      it substituted for a client's inbox (reply name substitution), counted
      from the last message that used it. Set it longer than the longest
      time a requester may stay away while a reply is due.
    """

    locate_interval: float = 0.5
    locate_attempts: int = 6
    retry: float = 1.0
    keepalive: float = 2.0
    agent_timeout: float = 7.0
    session_timeout: float = 10.0
    bye_timeout: float = 3.0
    reply_lifetime: float = 3600.0

    def __post_init__(self) -> None:
        for name in (
            "locate_interval",
            "retry",
            "keepalive",
            "agent_timeout",
            "session_timeout",
            "bye_timeout",
            "reply_lifetime",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidArgument(f"RelayTiming.{name} must be seconds > 0, got {value!r}")
        if (
            isinstance(self.locate_attempts, bool)
            or not isinstance(self.locate_attempts, int)
            or self.locate_attempts < 1
        ):
            raise InvalidArgument(
                f"RelayTiming.locate_attempts must be an int >= 1, got {self.locate_attempts!r}"
            )
        if not math.isfinite(self.reply_lifetime):
            raise InvalidArgument(
                f"RelayTiming.reply_lifetime must be finite seconds, got {self.reply_lifetime!r}"
            )
        if not self.keepalive < self.agent_timeout:
            raise InvalidArgument("RelayTiming.keepalive must be below agent_timeout")
