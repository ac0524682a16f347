"""What one client connection of a daemon may publish and listen to.

The rules are :class:`~rvasync.protocol.authcheck.SubjectRights` (the user's
permissions and the reserved subjects, in one place). :class:`ConnectionRights`
is the client port's use of them: it checks a subject's syntax first, keeps
the verdict on each subject a client publishes (a client publishes few
subjects many times, and the checks cost more than a lookup), and follows a
reload of the users file. :class:`RouterGrant` decides who may take the
routing daemon's role when a HELLO asks for it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from rvasync.daemon.users import User, Users
from rvasync.errors import InvalidArgument, InvalidSubject, NotPermitted
from rvasync.protocol.authcheck import SubjectRights
from rvasync.subjects import validate_subject

__all__ = [
    "LOOPBACK_ROUTERS",
    "ConnectionRights",
    "NotAllowed",
    "RouterGrant",
    "router_networks",
]

#: Subjects whose publish verdict one connection remembers (then it starts over).
VERDICTS_KEPT = 1024


class NotAllowed(str):
    """A verdict refusing a subject for its user's rights (not for its syntax)."""

    __slots__ = ()


class ConnectionRights:
    """The rights of one connection (``user``: None on a daemon without users)."""

    def __init__(self, user: User | None, *, router: bool) -> None:
        self.rights = _rights_of(user, router)
        #: May this connection send to inboxes (the reply fast path reads it)?
        self.replies = _replies(self.rights)
        #: Subject -> "" (may publish) or why not (a NotAllowed for a permission).
        #: Read by the connection's publish loop directly; inboxes are never kept.
        self.verdicts: dict[str, str] = {}

    @property
    def user(self) -> str | None:
        return self.rights.user

    @property
    def router(self) -> bool:
        return self.rights.router

    def publish_verdict(self, subject: str) -> str:
        """Why this connection may not publish to ``subject`` ("": it may); remembered."""
        try:
            validate_subject(subject, wildcards=True)
        except (InvalidSubject, NotPermitted) as exc:
            verdict = str(exc)
        else:
            why = self.rights.why_not_publish(subject)
            verdict = NotAllowed(why) if why else ""
        if subject[:7] != "_INBOX.":  # a reply's inbox seldom comes back
            verdicts = self.verdicts
            if len(verdicts) >= VERDICTS_KEPT:
                verdicts.clear()
            verdicts[subject] = verdict
        return verdict

    def listen_verdict(self, subject: str) -> str:
        """Why this connection may not listen to ``subject`` (valid syntax) ("": it may)."""
        return self.rights.why_not_listen(subject)

    def reloaded(self, users: Users) -> bool:
        """Apply a reloaded users file; False if this user may no longer be connected
        (gone from the file, or no longer a router while holding the role)."""
        name = self.rights.user
        if name is None:
            return True
        entry = users.by_name.get(name)
        if entry is None or (self.rights.router and not entry.permissions.router):
            return False
        self.rights = _rights_of(entry, self.rights.router)
        self.replies = _replies(self.rights)
        self.verdicts.clear()
        return True


#: Who may take the router role on a daemon without users, by default: its own host.
LOOPBACK_ROUTERS = ("127.0.0.0/8", "::1/128")


def router_networks(
    hosts: Iterable[str] | None,
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parse the networks whose clients may connect as routing daemons (None: loopback)."""
    if isinstance(hosts, str):
        raise InvalidArgument("router_hosts must be a list of networks, not one str")
    try:
        return tuple(
            ipaddress.ip_network(h, strict=False)
            for h in (LOOPBACK_ROUTERS if hosts is None else hosts)
        )
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"router_hosts: {exc}") from None


class RouterGrant:
    """Who may take the router role on one client port (docs/security.md, "The router
    role"): with users, a user the users file gives ``router = true``; without, a
    client from one of the ``router_hosts`` networks (None: loopback)."""

    def __init__(self, router_hosts: Iterable[str] | None, *, with_users: bool) -> None:
        self._networks = router_networks(router_hosts)
        self._with_users = with_users

    def may_route(self, host: str) -> bool:
        """Without users: may a client from ``host`` take the router role?"""
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self._networks)

    def refusal(self, asked: bool, user: User | None, host: str) -> str:
        """Why a client from ``host`` logged in as ``user`` (None: no login) may not
        take the router role it ``asked`` for ("": it may, or it did not ask)."""
        if not asked:
            return ""
        if user is not None:
            if user.permissions.router:
                return ""
            return (
                f"user {user.name!r} may not connect as a routing daemon "
                "(the users file does not give it router = true)"
            )
        if self._with_users:
            return "only a user of this daemon may connect as a routing daemon"
        if self.may_route(host):
            return ""
        return f"clients from {host} may not connect as routing daemons (see router_hosts)"


def _replies(rights: SubjectRights) -> bool:
    return rights.permissions is None or rights.permissions.reply


def _rights_of(user: User | None, router: bool) -> SubjectRights:
    if user is None:
        return SubjectRights(router=router)
    perms = user.permissions
    return SubjectRights(
        user=user.name, permissions=None if perms.unrestricted else perms, router=router
    )
