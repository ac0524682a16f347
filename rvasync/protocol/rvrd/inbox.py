"""Inbox reply subjects across routers: annotated on the way out, resolved on the way back.

An inbox (``_INBOX.<daemon>.<session>.<n>``) names a daemon of one network; a
program on another network cannot reach it. So a router rewrites reply
subjects, statelessly:

* a message entering the domain from network ``N`` with reply subject
  ``_INBOX.x`` carries ``_RVRD.INBOX.N._INBOX.x`` inside the domain; every
  network implicitly "listens" to ``_RVRD.INBOX.<itself>.>``, so that subject
  is routed like any other, along the shortest-path tree, with failover;
* delivered into network ``M``, it becomes ``<router inbox on M>.N.x``: an
  inbox of the router's own transport there, so a reply goes point to point
  to the router like any reply, which turns it back into
  ``_RVRD.INBOX.N._INBOX.x`` and routes it to ``N``, where the router
  attached to ``N`` publishes it to ``_INBOX.x``.

Nothing is remembered per request, so a router restart or a path change
loses no reply route. Inbox names hidden in data fields are not rewritten and
cannot be answered across routers (as the specification warns).
"""

from __future__ import annotations

from rvasync.protocol.rvrd.topology import INBOX_ROUTE

__all__ = ["domain_reply", "inbox_to_domain", "network_reply", "network_subject"]

_INBOX = "_INBOX."


def domain_reply(network: str, reply: str | None) -> str | None:
    """The reply subject a message from ``network`` carries inside the domain."""
    if reply is not None and reply.startswith(_INBOX):
        return f"{INBOX_ROUTE}.{network}.{reply}"
    return reply


def network_reply(network: str, reply: str | None, prefix: str) -> str | None:
    """The reply subject a message delivered into ``network`` carries there.

    ``prefix``: the router's own inbox prefix on that network (``_INBOX.<d>.<s>``).
    """
    if reply is None or not reply.startswith(INBOX_ROUTE + "."):
        return reply
    parts = reply.split(".", 3)
    if len(parts) != 4 or not parts[3].startswith(_INBOX):
        return reply
    home, inbox = parts[2], parts[3]
    if home == network:
        return inbox  # the requester is on this very network
    return f"{prefix}.{home}.{inbox[len(_INBOX) :]}"


def inbox_to_domain(prefix: str, subject: str) -> str | None:
    """A reply received on the router's inbox ``prefix`` as its domain subject, or None."""
    if not subject.startswith(prefix + "."):
        return None
    rest = subject[len(prefix) + 1 :]
    home, sep, tail = rest.partition(".")
    if not sep or not home or not tail:
        return None
    return f"{INBOX_ROUTE}.{home}.{_INBOX}{tail}"


def network_subject(network: str, subject: str) -> str:
    """The subject to publish into ``network``: a reply to one of its inboxes resolved."""
    head = f"{INBOX_ROUTE}.{network}."
    if subject.startswith(head):
        return subject[len(head) :]
    return subject
