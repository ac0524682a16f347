"""When a standalone daemon's link stops reading, for its listeners' sake.

A consumer that keeps its event loop free but awaits slow work would have
every message the link reads decoded into its listener's queue. So the link
(``rvasync.transport.tcplink``) stops reading while one of its transport's
listener queues holds half the transport's ``pending_limit``: the backlog then
waits as bytes in the sockets and in the daemon, whose consumer buffer bounds
it and whose CLIENT.SLOWCONSUMER counts what it drops.

A listener nobody reads (one a program made and forgot, say on ``_RV.>``)
never drains, though, and holding for it would deafen every other listener of
the transport for good. So a hold ends when the backlog has not gone down for
:data:`STALL_AFTER` seconds: the link reads on, and until the backlog is down
to a quarter of the limit the listener queues' own bound applies instead (the
oldest dropped past ``pending_limit``, counted by QUEUE.LIMIT_EXCEEDED), as
for an in-process transport. Memory stays bounded either way.

:class:`ReadHold` makes that decision without I/O: the backlog, its bound and
the time are its arguments.
"""

from __future__ import annotations

__all__ = ["STALL_AFTER", "ReadHold"]

#: Seconds a hold lasts with no message taken from the fullest listener queue before
#: the link gives up holding for it (see the module's docstring).
STALL_AFTER = 5.0


class ReadHold:
    """Whether a link holds its reading: :meth:`check` while reading, :meth:`poll`
    while holding. ``backlog`` is the most messages waiting in one of the transport's
    listener queues, ``limit`` their ``pending_limit`` (0: no bound, never held)."""

    __slots__ = ("_given_up", "_mark", "_since", "held")

    def __init__(self) -> None:
        #: Reading is held (the link reads nothing until :meth:`poll` says otherwise).
        self.held = False
        # A hold ended for a backlog that did not drain: none again until it is down
        # to a quarter of the limit.
        self._given_up = False
        self._mark = 0  # the lowest backlog seen during this hold ...
        self._since = 0.0  # ... and when it was seen

    def check(self, backlog: int, limit: int, now: float) -> bool:
        """Whether to hold from now on (asked every few hundred messages handed over)."""
        if self.held:
            return True
        if not limit:
            self._given_up = False
            return False
        if self._given_up:
            if backlog > limit // 4:
                return False
            self._given_up = False
        if backlog < limit // 2:
            return False
        self.held = True
        self._mark, self._since = backlog, now
        return True

    def poll(self, backlog: int, limit: int, now: float, stall_after: float = STALL_AFTER) -> bool:
        """Whether to go on holding: not once the backlog is down to a quarter of
        ``limit``, nor when it has not gone down for ``stall_after`` seconds."""
        if not limit or backlog <= limit // 4:
            self.held = False
            return False
        if backlog < self._mark:
            self._mark, self._since = backlog, now
        elif now - self._since >= stall_after:
            self.held = False
            self._given_up = True
            return False
        return True
