"""Bounded admission of new TCP connections, before they cost the daemon anything.

An unauthenticated connection holds a file descriptor, a TLS handshake and
some memory. :class:`HostSlots` bounds how many of them may exist, per
client host and in all; a :class:`GatedServer` accepts connections itself
(``loop.sock_accept``), so that one past the bound is closed the moment it is
accepted (its descriptor is free again at once, before any TLS), and one
within it gets its slot, its TLS handshake (bounded in time) and then its
protocol. When the total is reached, a connection from a host holding fewer
slots than another takes the place of the oldest connection of the host
holding the most: a flood from a few hosts cannot keep others out, only
make them share (to hold every slot against a newcomer, a flood needs as
many hosts as there are slots). The holder gives the slot back when the
connection no longer needs it (a client port: once the client logged in;
the status page: when the connection closes). When the process is out of
descriptors, accepting pauses briefly and goes on: nothing a client does
stops the server.

The bounds are scaled to the process's descriptor limit
(:func:`descriptor_limit`) so that a full status page and a full set of
unauthenticated clients together leave most descriptors to logged-in
clients and the daemon's own sockets: exhausting them can never stop the
client port from accepting.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from collections.abc import Callable
from typing import Any

from rvasync._logging import stderr_logger

__all__ = ["GatedServer", "HostSlots", "Slot", "descriptor_limit", "host_of"]

#: Seconds accepting pauses when the process is out of descriptors (or memory).
ACCEPT_RETRY = 0.1
_BACKLOG = 128


def descriptor_limit() -> int:
    """The process's soft limit of open file descriptors (65536 where unknown)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 65536
    return soft if soft > 0 else 65536


def host_of(transport: asyncio.BaseTransport) -> str:
    """The client host of a connection ("?" when the socket does not say)."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return "?"


class Slot:
    """One admitted connection's place in its :class:`HostSlots`; :meth:`release` once.

    The server that admitted it says how to close the connection
    (:meth:`close_with`) in case the slot is taken back for a newcomer (see
    :class:`HostSlots`).
    """

    __slots__ = ("_closer", "_slots", "host", "taken_at")

    def __init__(self, slots: HostSlots | None, host: str, taken_at: float) -> None:
        self._slots = slots
        self._closer: Callable[[], object] | None = None
        self.host = host
        #: The loop's time when the connection was accepted.
        self.taken_at = taken_at

    def close_with(self, closer: Callable[[], object]) -> None:
        """``closer()`` closes this slot's connection if the slot is taken back."""
        self._closer = closer

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.give(self)

    def take_back(self) -> None:
        """For a newcomer (:meth:`HostSlots.take`): release, and close the connection
        (the holder's own :meth:`release` is then a no-op)."""
        self.release()
        closer, self._closer = self._closer, None
        if closer is not None:
            closer()


class HostSlots:
    """At most ``per_host`` connections from one host and ``total`` in all (module
    docstring: at the total, a newcomer from a host holding fewer slots than the
    largest holder takes the place of that holder's oldest connection)."""

    def __init__(self, *, per_host: int, total: int, what: str) -> None:
        self.per_host = max(1, min(per_host, total))
        self.total = max(1, total)
        self.what = what
        # host -> its slots, oldest first
        self._by_host: dict[str, dict[Slot, None]] = {}
        self.in_use = 0
        #: Connections closed at once because a bound was reached.
        self.refused = 0
        #: Connections closed to make room for one from a host holding fewer.
        self.evicted = 0

    def take(self, host: str, now: float) -> Slot | None:
        """A slot for a connection from ``host``, or None (then close it)."""
        held = self._by_host.get(host)
        count = len(held) if held is not None else 0
        if count >= self.per_host:
            self.refused += 1
            return None
        if self.in_use >= self.total:
            victim = self._oldest_of_the_largest(more_than=count)
            if victim is None:
                self.refused += 1
                return None
            victim.take_back()
            self.evicted += 1
            held = self._by_host.get(host)
        slot = Slot(self, host, now)
        if held is None:
            held = self._by_host[host] = {}
        held[slot] = None
        self.in_use += 1
        return slot

    def _oldest_of_the_largest(self, *, more_than: int) -> Slot | None:
        """The oldest slot of the host holding the most (if more than ``more_than``)."""
        if not self._by_host:
            return None
        largest = max(
            self._by_host.values(), key=lambda held: (len(held), -next(iter(held)).taken_at)
        )
        if len(largest) <= more_than:
            return None
        return next(iter(largest))

    def give(self, slot: Slot) -> None:
        """``slot``'s connection no longer needs it (:meth:`Slot.release` calls this)."""
        held = self._by_host.get(slot.host)
        if held is None or slot not in held:
            return
        del held[slot]
        self.in_use -= 1
        if not held:
            del self._by_host[slot.host]

    def held_by(self, host: str) -> int:
        held = self._by_host.get(host)
        return len(held) if held is not None else 0


class GatedServer:
    """A listening socket whose connections are admitted through ``slots`` first.

    ``make(slot)`` builds the protocol of an admitted connection; it owns the
    slot from then on (it must release it; if the slot is taken back for a
    newcomer, the connection is aborted here, its protocol then sees it lost). With
    ``ssl_context`` the connections are TLS, their handshake bounded by
    ``handshake_timeout`` (a connection whose handshake fails, or whose slot is
    taken back during it, gives its slot back here).
    """

    def __init__(
        self,
        slots: HostSlots,
        make: Callable[[Slot], asyncio.Protocol],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float = 10.0,
    ) -> None:
        self.slots = slots
        self._make = make
        self._ssl = ssl_context
        self._timeout = handshake_timeout
        self.sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: accept() failures for want of descriptors or memory (accepting went on).
        self.accept_errors = 0

    async def listen(self, host: str, port: int) -> None:
        """Bind ``host:port`` (every address the name has; 0: any free port) and serve."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                if port == 0 and self.sockets:  # one free port for every address
                    address = (address[0], self.sockets[0].getsockname()[1], *address[2:])
                sock.bind(address)
            except OSError:
                sock.close()
                self.close()
                raise
            self.serve(sock)

    def serve(self, sock: socket.socket) -> None:
        """Accept connections on ``sock`` (bound; listened to here)."""
        sock.listen(_BACKLOG)
        sock.setblocking(False)
        self.sockets.append(sock)
        self._spawn(self._accept(sock))

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as exc:
                if self._closed or exc.errno in (errno.EBADF, errno.EINVAL):
                    return  # the listening socket is closed
                if exc.errno not in _RESOURCE_ERRORS:
                    continue  # the connection went before it was accepted (ECONNABORTED)
                self.accept_errors += 1
                if self.accept_errors == 1 or self.accept_errors % 1000 == 0:
                    stderr_logger().warning(
                        "cannot accept a connection; retrying",
                        what=self.slots.what,
                        error=exc.strerror,
                        times=self.accept_errors,
                    )
                await asyncio.sleep(ACCEPT_RETRY)
                continue
            slot = self.slots.take(str(address[0]), loop.time())
            if slot is None:
                conn.close()  # over a bound: its descriptor is free again at once
                continue
            self._spawn(self._connect(loop, conn, slot))

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, conn: socket.socket, slot: Slot
    ) -> None:
        conn.setblocking(False)
        task = asyncio.current_task()
        if task is not None:  # taken back during the TLS handshake: cancel it
            slot.close_with(task.cancel)
        protocol = self._make(slot)
        try:
            if self._ssl is None:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn)
            else:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, conn, ssl=self._ssl, ssl_handshake_timeout=self._timeout
                )
            slot.close_with(transport.abort)  # taken back later (a no-op once released)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            slot.release()
            conn.close()
            stderr_logger().debug(
                "connection failed before it began", what=self.slots.what, error=str(exc)
            )
        except asyncio.CancelledError:  # its slot was taken back, or the server closes
            slot.release()
            conn.close()
            raise

    def close(self) -> None:
        """Stop accepting (connections already made go on; their owners close them)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=self._timeout + 1)


_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
