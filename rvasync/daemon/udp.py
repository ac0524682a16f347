"""The UDP sockets of one service (opened by the UDP driver, rvasync.daemon.udpdriver), and
the daemon addresses written in inboxes.

Every daemon on a service has two kinds of socket:

* one **multicast receiver** per joined group, bound to ``(group, port)`` with
  ``SO_REUSEADDR`` and ``SO_REUSEPORT``, so that any number of daemons on one host
  share the service and each receives every datagram sent to the group. Being
  bound to the group address, it never sees unicast datagrams to the port;
* one **unicast socket** bound to ``(interface, 0)``: an address of its own, which
  the kernel does not share (unicast datagrams to a shared port would be spread
  among the sockets sharing it). Everything the daemon sends, multicast
  included, leaves from it, so peers learn that address from any datagram, send
  NAKs and point-to-point (inbox) traffic back to it, and inboxes carry it.

On loopback the multicast interface is 127.0.0.1 and the TTL 0: nothing reaches
another interface or host.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import struct
import sys

from rvasync.daemon.params import NetworkSpec
from rvasync.errors import InvalidArgument

__all__ = [
    "RECV_BUFFER",
    "SEND_BUFFER",
    "address_hex",
    "drop_own_datagrams",
    "open_multicast_receiver",
    "open_unicast",
    "parse_address_hex",
    "set_buffers",
]

#: Receive buffer asked for: bursts of a fast sender wait here while the loop works.
RECV_BUFFER = 32 * 1024 * 1024
#: Send buffer asked for (a daemon sends from one socket: multicast, ptp, retransmissions).
SEND_BUFFER = 8 * 1024 * 1024

# Linux values (the socket module does not export them).
_SO_SNDBUFFORCE = 32
_SO_RCVBUFFORCE = 33
_IP_MULTICAST_ALL = 49
_SO_ATTACH_FILTER = 26


def set_buffers(sock: socket.socket, recv: int, send: int) -> tuple[int, int]:
    """Ask for ``recv``/``send`` buffer bytes; return what the kernel granted.

    The kernel caps ``SO_RCVBUF``/``SO_SNDBUF`` at net.core.rmem_max/wmem_max; a
    privileged process (CAP_NET_ADMIN) may go past the cap with the ``FORCE``
    variants, which are tried when the plain request fell short. Linux reports
    twice the value set (it counts its bookkeeping), and so do we.
    """
    for level_opt, force_opt, size in (
        (socket.SO_RCVBUF, _SO_RCVBUFFORCE, recv),
        (socket.SO_SNDBUF, _SO_SNDBUFFORCE, send),
    ):
        if size <= 0:
            continue
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, level_opt, size)
        if sock.getsockopt(socket.SOL_SOCKET, level_opt) < size:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, force_opt, size)
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
    )


def open_multicast_receiver(group: str, port: int, net: NetworkSpec) -> socket.socket:
    """A non-blocking socket receiving every datagram sent to ``group:port``, shared with
    the other daemons of this host."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Only the groups this socket joined, not every group joined on the host.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_IP, _IP_MULTICAST_ALL, 0)
        try:
            sock.bind((group, port))
        except OSError as exc:
            raise InvalidArgument(
                f"service port {port}: cannot bind the multicast group {group} ({exc.strerror})"
            ) from None
        mreq = socket.inet_aton(group) + socket.inet_aton(net.interface)
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        except OSError as exc:
            raise InvalidArgument(
                f"network {net.text or 'default (loopback)'}: cannot join multicast group "
                f"{group} on interface {net.interface} ({exc.strerror})"
            ) from None
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def open_unicast(net: NetworkSpec) -> socket.socket:
    """The daemon's own non-blocking socket: bound to an ephemeral port on the interface,
    sending multicast out of that interface with the network's TTL, looped back to the
    other daemons of this host."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        try:
            sock.bind((net.interface, 0))
        except OSError as exc:
            raise InvalidArgument(
                f"network {net.text or 'default (loopback)'}: cannot bind interface "
                f"{net.interface} ({exc.strerror})"
            ) from None
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(net.interface))
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, net.ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def drop_own_datagrams(sock: socket.socket, session: bytes) -> bool:
    """Have the kernel drop, on ``sock``, datagrams whose bytes 8..16 are ``session``.

    Multicast loops back to every socket of the group on this host, the
    sender's own receiver included; the reliable protocol puts the sender's
    session id at offset 8 of every datagram. A classic BPF socket filter
    discards our own datagrams before they wake the loop (a publisher would
    otherwise read back everything it sends, and a requester would wake twice
    per request). Returns False where unsupported (non-Linux); the driver's
    own check on the session id then does the same job in Python.
    """
    if not sys.platform.startswith("linux") or len(session) != 8:
        return False
    first = int.from_bytes(session[:4], "big")
    second = int.from_bytes(session[4:], "big")
    # The filter sees the UDP header (8 bytes) then the payload: the id is at 16..24.
    program = [
        (0x80, 0, 0, 0),  # A = packet length
        (0x35, 0, 5, 24),  # if A >= 24 go on, else accept
        (0x20, 0, 0, 16),  # A = 32-bit word at 16
        (0x15, 0, 3, first),  # if A == first go on, else accept
        (0x20, 0, 0, 20),  # A = 32-bit word at 20
        (0x15, 0, 1, second),  # if A == second drop, else accept
        (0x06, 0, 0, 0),  # drop
        (0x06, 0, 0, 0xFFFFFFFF),  # accept whole datagram
    ]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in program))
    fprog = struct.pack("HL", len(program), ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)  # the kernel copies it
    except OSError:
        return False
    return True


def address_hex(addr: tuple[str, int]) -> str:
    """``("127.0.0.1", 54321)`` -> ``"7F000001D431"``: an address as one subject element."""
    return socket.inet_aton(addr[0]).hex().upper() + f"{addr[1]:04X}"


def parse_address_hex(text: str) -> tuple[str, int] | None:
    """Inverse of :func:`address_hex`; None if ``text`` is not one."""
    if len(text) != 12:
        return None
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    port = int.from_bytes(raw[4:], "big")
    if port == 0:
        return None
    return socket.inet_ntoa(raw[:4]), port
