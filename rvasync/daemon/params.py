"""The service, network and daemon parameters of a network transport.

Rendezvous describes where a transport's messages go with three strings:

* **service**: the UDP port daemons meet on. ``None`` (or ``""``) looks up the
  service name ``rendezvous`` and falls back to 7500; a decimal string is a port;
  anything else is a service name looked up with ``getservbyname(name, "udp")``.
* **network**: ``"interface;group,group...;send-address"``. rvasync's default,
  ``None``, is the loopback interface, so that nothing leaves the host unless
  the user names a network.
* **daemon**: where a standalone daemon listens for client transports (TCP).

This module turns each into a validated value object, with errors that say
which part of which parameter is wrong. It does no I/O beyond name lookups.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import struct
import sys
from dataclasses import dataclass

from rvasync.errors import InvalidArgument

# The daemon parameter belongs to the client protocol (both ends use it): re-exported here.
from rvasync.protocol.clientproto.address import DEFAULT_DAEMON_PORT, DaemonAddress, parse_daemon

__all__ = [
    "DEFAULT_DAEMON_PORT",
    "DEFAULT_GROUP",
    "DEFAULT_SERVICE_PORT",
    "LOOPBACK",
    "MAX_RELIABILITY",
    "DaemonAddress",
    "NetworkSpec",
    "ServiceSpec",
    "check_reliability",
    "check_service_text",
    "parse_daemon",
    "parse_network",
    "parse_service",
]

#: The hard default service when the ``rendezvous`` service name is not defined.
DEFAULT_SERVICE_PORT = 7500
#: Interface of the default network: nothing leaves the host.
LOOPBACK = "127.0.0.1"
#: Multicast group of a network that names none. It lies in 239.255.0.0/16 (IPv4
#: organization-local scope, RFC 2365); "82.86" are the ASCII codes of "RV". It is
#: fixed so that every daemon on a host meets every other one on a given service
#: without configuration; the service port keeps services apart.
DEFAULT_GROUP = "239.255.82.86"

_SIOCGIFADDR = 0x8915
_SIOCGIFNETMASK = 0x891B


#: Longest reliability interval a daemon or a client may ask for (one hour). Retention
#: is also bounded in bytes (``max_retention``); this keeps a client from pinning it
#: for the daemon's lifetime (see docs/reliability.md, "Bounds").
MAX_RELIABILITY = 3600.0


def check_reliability(value: object, name: str = "reliability") -> float | None:
    """A requested reliability interval: None, or finite seconds within 0..MAX_RELIABILITY.

    The one rule for every request (a transport's, a HELLO's, a RELIABILITY
    frame's); here, below both the engine and its TCP server, so both use it.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(f"{name} must be finite and >= 0 seconds, got {seconds!r}")
    if seconds > MAX_RELIABILITY:
        raise InvalidArgument(
            f"{name} must be at most {MAX_RELIABILITY:g} seconds, got {seconds!r}"
        )
    return seconds


# -- service --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """A resolved service: the UDP ``port`` and the ``text`` the transport gave (for reports).

    ``direct`` is the second part of a two-part service (direct communication):
    None for a one-part service (disabled), 0 for an ephemeral port, else the
    UDP port the transport binds itself. The daemon never sees it.
    """

    port: int
    text: str
    direct: int | None = None


def parse_service(service: str | None) -> ServiceSpec:
    """Resolve a service parameter, one part or two (``"regular:direct"``).

    InvalidArgument names what is wrong. White space anywhere in it is refused:
    ``" 7500"`` is a typing mistake, not port 7500 (a program that strips it
    silently would open a service its user never named).
    """
    check_service_text(service)
    if isinstance(service, str) and ":" in service:
        return _parse_two_part(service)
    return _parse_one_part(service)


def check_service_text(service: object) -> None:
    """Refuse a service parameter with white space in it (InvalidArgument), at once.

    What a transport checks when it is made; the rest (a name resolved in the
    services database) waits for the daemon, which may be on another host.
    """
    if isinstance(service, str) and any(c.isspace() for c in service):
        raise InvalidArgument(
            f"service {service!r} contains white space: give the port number or service name alone"
        )


def regular_service(service: str | None) -> str | None:
    """The part of a service parameter the daemon uses (the first); None stays None."""
    if isinstance(service, str) and ":" in service:
        return service.split(":", 1)[0] or None
    return service


def _parse_two_part(service: str) -> ServiceSpec:
    regular_text, direct_text = service.split(":", 1)
    if ":" in direct_text:
        raise InvalidArgument(f"service {service!r}: at most two parts, 'regular:direct'")
    regular = _parse_one_part(regular_text or None)
    if direct_text in ("", "0"):
        direct = 0  # ephemeral: the system picks the direct port
    else:
        try:
            direct = _parse_one_part(direct_text).port
        except InvalidArgument as exc:
            raise InvalidArgument(f"service {service!r}: direct part: {exc}") from None
    if direct == regular.port:
        raise InvalidArgument(
            f"service {service!r}: the two parts must be different ports (the direct"
            " channel cannot bind the daemon's service)"
        )
    return ServiceSpec(regular.port, service, direct)


def _parse_one_part(service: str | None) -> ServiceSpec:
    if service is None or service == "":
        try:
            port = socket.getservbyname("rendezvous", "udp")
        except OSError:
            port = DEFAULT_SERVICE_PORT
        return ServiceSpec(port, str(port))
    if not isinstance(service, str):
        raise InvalidArgument(
            f"service must be a str (port number or service name) or None, "
            f"got {type(service).__name__}"
        )
    text = service
    if text.isascii() and text.isdigit():  # not "²" or "١٢": str.isdigit takes any script
        # More than five significant digits is no port (and int() refuses over 4300 digits).
        port = int(text) if len(text.lstrip("0")) <= 5 else 0
        if not 0 < port <= 0xFFFF:
            raise InvalidArgument(f"service {service!r}: port must be within 1..65535")
        return ServiceSpec(port, str(port))
    if not text or any(c.isspace() for c in text):
        raise InvalidArgument(f"service {service!r} is neither a port number nor a service name")
    try:
        port = socket.getservbyname(text, "udp")
    except (OSError, ValueError):  # ValueError: an embedded NUL, from a hostile client
        raise InvalidArgument(
            f"service {service!r}: no UDP service of that name in the services database "
            "(give a port number, or add the name to /etc/services)"
        ) from None
    return ServiceSpec(port, text)


# -- network --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """A resolved network parameter.

    ``interface`` is the IPv4 address multicast is sent from and joined on;
    ``groups`` the multicast groups joined (at least one); ``send_address`` where
    multicast is sent; ``ttl`` the multicast time-to-live (0 on loopback: the
    datagrams never leave the host; 1 otherwise: they stay on the local
    subnet); ``text`` the parameter as given (``""`` for the default).
    Two transports of one daemon on one service must agree on ``key``.
    """

    interface: str
    groups: tuple[str, ...]
    send_address: str
    ttl: int
    loopback: bool
    text: str

    @property
    def key(self) -> tuple[str, tuple[str, ...], str]:
        """What must be equal for two transports to share a service in one daemon."""
        return (self.interface, self.groups, self.send_address)


def parse_network(network: str | None) -> NetworkSpec:
    """Resolve a network parameter; InvalidArgument names the part that is wrong.

    Part one (the interface) may be an IPv4 address, an interface name
    (``lo``, ``eth0``), a network number (``10.1`` matches the interface whose
    address lies in 10.1.0.0/16) or a host name; empty means loopback. Part two
    lists multicast groups; when it is empty rvasync uses :data:`DEFAULT_GROUP`
    (it does not fall back to UDP broadcast, which the spec itself calls
    superseded and which loopback cannot do). Part three, the send address,
    defaults to the first group.
    """
    if network is None:
        return NetworkSpec(LOOPBACK, (DEFAULT_GROUP,), DEFAULT_GROUP, 0, True, "")
    if not isinstance(network, str):
        raise InvalidArgument(f"network must be a str or None, got {type(network).__name__}")
    if "\0" in network:  # the C library reads no further: say so rather than fail in it
        raise InvalidArgument(f"network {network!r} contains a NUL character")
    parts = network.split(";")
    if len(parts) > 3:
        raise InvalidArgument(
            f"network {network!r} has {len(parts)} parts; the form is "
            "'interface;group,group...;send-address' (at most three parts)"
        )
    parts += [""] * (3 - len(parts))
    iface_text, groups_text, send_text = (p.strip() for p in parts)
    interface = _resolve_interface(iface_text, network) if iface_text else LOOPBACK
    groups: list[str] = []
    if groups_text:
        for item in groups_text.split(","):
            groups.append(_multicast(item.strip(), network, "multicast group (part two)"))
    if send_text:
        send = _multicast(send_text, network, "send address (part three)")
    else:
        send = groups[0] if groups else DEFAULT_GROUP
    if not groups:
        groups = [send]
    loopback = ipaddress.IPv4Address(interface).is_loopback
    return NetworkSpec(
        interface,
        tuple(dict.fromkeys(groups)),
        send,
        0 if loopback else 1,
        loopback,
        network,
    )


def _multicast(text: str, network: str, what: str) -> str:
    try:
        addr = ipaddress.IPv4Address(text)
    except ValueError:
        raise InvalidArgument(
            f"network {network!r}: {what} {text!r} is not an IPv4 address"
        ) from None
    if not addr.is_multicast:
        raise InvalidArgument(
            f"network {network!r}: {what} {text} is not a multicast address (224.0.0.0/4)"
        )
    return str(addr)


def _resolve_interface(text: str, network: str) -> str:
    """The IPv4 address of the interface named by part one of a network parameter."""
    try:
        addr = ipaddress.IPv4Address(text)
    except ValueError:
        addr = None
    if addr is not None:
        if addr.is_multicast or addr.is_unspecified:
            raise InvalidArgument(
                f"network {network!r}: interface {text} must be the address of an interface"
            )
        return str(addr)
    by_name = _interface_address(text)
    if by_name is not None:
        return by_name
    if all(p.isdigit() for p in text.split(".")) and text.count(".") < 3:
        found = _interface_in_network(text)
        if found is not None:
            return found
        raise InvalidArgument(
            f"network {network!r}: no interface of this host lies in network number {text}"
        )
    try:
        return socket.gethostbyname(text)
    except (OSError, ValueError):  # ValueError: a NUL; UnicodeError: an empty or long label
        raise InvalidArgument(
            f"network {network!r}: interface {text!r} is not an IPv4 address, an interface "
            "name of this host, a network number or a resolvable host name"
        ) from None


def _interface_address(name: str) -> str | None:
    """IPv4 address of interface ``name`` (Linux ioctl), or None if unknown here."""
    if not sys.platform.startswith("linux") or len(name.encode()) >= 16:
        return None
    import fcntl  # Unix only: imported here so the module loads everywhere

    try:
        socket.if_nametoindex(name)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()))
        except OSError:
            return None  # the interface has no IPv4 address
    return socket.inet_ntoa(packed[20:24])


def _interface_in_network(number: str) -> str | None:
    """Address of the first interface inside network ``number`` ("10", "10.1", "10.1.2")."""
    octets = number.split(".")
    prefix = ".".join(octets + ["0"] * (4 - len(octets)))
    try:
        net = ipaddress.IPv4Network(f"{prefix}/{8 * len(octets)}")
    except ValueError:
        return None
    for _, name in socket.if_nameindex():
        addr = _interface_address(name)
        if addr is not None and ipaddress.IPv4Address(addr) in net:
            return addr
    return None
