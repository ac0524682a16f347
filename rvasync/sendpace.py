"""Send pacing: a loop of sends gives its event loop a turn now and then.

A send hands its message to the daemon link, the ledger or the circuit and
returns; it suspends only when a buffer is past its high-water mark (the
daemon's send backlog, the TCP link's paused socket, a ledger file behind).
A program that sends in a plain ``for ...: await t.send(msg)`` loop would
therefore keep the loop to itself for as long as it sends: no timer fires, no
datagram is read, no other task runs, so fault-tolerance heartbeats stop
(another member takes over), certified confirmations and advisories wait, and
what was sent piles up unflushed until the loop ends. asyncio's own streams
leave that to the program (``await writer.drain()`` only suspends past the
high-water mark); a messaging library whose sends are this cheap cannot.

A :class:`SendPacer` makes every paced send path give the loop a turn once a
loop turn has lasted :data:`TURN_SENDS` sends, and costs nothing more while
the program yields on its own. One pacer serves an event loop, shared by every
transport of that loop, so the budget is the loop turn's, whatever mix of
transports spends it. It counts sends, not time: a send whose buffers are
full already waits on its own (the high-water marks above), the turn's length
stays what a program yielding every 1,000 sends would have (the batches the
daemon packs are as full), and a run under a profiler or ``callgrind``, tens
of times slower, takes the same turns as a native one.

The cost per send is one tick: ``next()`` on the pacer's
:attr:`~SendPacer.ticks` (a shared ``itertools.cycle``: cheaper than an
attribute countdown, and a call into the pacer per send would cost more than
the rest of a fast path's bookkeeping); a network transport's send has it for
free, from the native call that stamps the message's origin (which counts
the transport's sends already: ``Origins(..., tick=CHECK_EVERY)``). Every
:data:`CHECK_EVERY` sends a tick comes and the send calls
:meth:`SendPacer.look` (a plain call: an ``async def`` would cost a coroutine
every look), which looks at the turn: the first time, it asks the loop to
tell it when the turn ends (one ``call_soon``, the marker); if the turn has
not ended by later looks and has had its :data:`TURN_SENDS`, it returns an
awaitable that suspends for one turn, as ``asyncio.sleep(0)`` does. The
marker runs first in the next turn, so the yielding send resumes into a
fresh budget, behind the flushes, timers, reads and tasks that were waiting.
A program that yields at least every few hundred sends never sees a yield of
the library's, only a marker every CHECK_EVERY sends at most.

Which send paths are paced: every user-facing send of the network
transports (in-process daemon and standalone), the process transport,
certified transports (the certified send counts once, not again for the
transport it employs), virtual circuit terminals and remote operations'
:meth:`~rvasync.ropsdriver.RemoteOps.start_invoke`. Distributed-queue
senders are certified transports. Driver-internal sends
(:meth:`~rvasync.transport.base.BaseTransport.send_internal`) are plain
calls and are not paced: the driver paces the user's send that caused them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Generator, Iterator

from rvasync.perloop import PerLoop

__all__ = ["CHECK_EVERY", "TURN_SENDS", "SendPacer", "pacer_for"]

#: Sends between two looks at the turn.
CHECK_EVERY = 64
#: Sends a loop turn may last before a send yields (give or take CHECK_EVERY).
TURN_SENDS = 1024


class _OneTurn:
    """Awaiting it suspends for one loop turn (what ``asyncio.sleep(0)`` does, without
    its checks); one instance serves every yield."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        yield


_ONE_TURN = _OneTurn()


class SendPacer:
    """Gives one event loop a turn during a long run of sends (see the module docstring).

    Paced send paths do, after each send, with :attr:`ticks` bound once::

        if next(ticks) and (turn := pacer.look()) is not None:
            await turn
    """

    __slots__ = ("__weakref__", "_loop", "_marked", "_turn_sends", "ticks", "yields")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: True once every CHECK_EVERY ``next()`` calls, False otherwise (shared by the
        #: loop's send paths, so the count is the loop's).
        self.ticks: Iterator[bool] = itertools.cycle((False,) * (CHECK_EVERY - 1) + (True,))
        #: How many times a send yielded to give the loop its turn.
        self.yields = 0
        self._marked = False  # a marker is scheduled: the turn has not ended since
        self._turn_sends = 0

    def look(self, sends: int = CHECK_EVERY) -> Awaitable[None] | None:
        """Look at the turn (``sends`` went by since the last look): mark it and return
        None, or return the awaitable that gives the loop its turn if it is spent."""
        if not self._marked:
            self._marked = True
            self._turn_sends = sends
            self._loop.call_soon(self._turned)
            return None
        self._turn_sends += sends
        if self._turn_sends < TURN_SENDS:
            return None
        self.yields += 1
        return _ONE_TURN  # the marker runs before this resumes: a fresh budget

    def _turned(self) -> None:
        """The marker: the loop has turned since it was scheduled."""
        self._marked = False


_pacers: PerLoop[SendPacer] = PerLoop(SendPacer)


def pacer_for(loop: asyncio.AbstractEventLoop | None = None) -> SendPacer:
    """The send pacer of ``loop`` (default: the running loop), created on first use."""
    return _pacers.get(loop)
