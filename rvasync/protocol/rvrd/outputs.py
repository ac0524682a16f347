"""What the router core asks its driver to do: one small class per kind of output.

Every method of :class:`~rvasync.protocol.rvrd.core.RouterCore` that takes
an input returns a list of :data:`Output`, which the driver carries out in
order (rvasync.rvrd.router dispatches on the class):

* :class:`SendFrame`: write a frame on the link to a neighbor;
* :class:`SendLan`: publish a frame on an attached network, for the other
  routers there;
* :class:`Deliver` / :class:`DeliverRun`: publish one message / a batch
  passing through into an attached network;
* :class:`ListenSet`: listen to exactly these subjects on an attached network;
* :class:`Present`: present a DATALOSS advisory on an attached network;
* :class:`TopologyChanged`: the set of reachable routers changed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rvasync.protocol.rvrd.frames import LinkFrame, LossFrame, LsaFrame
from rvasync.protocol.rvrd.losses import LossReport

__all__ = [
    "Deliver",
    "DeliverRun",
    "ListenSet",
    "Output",
    "Present",
    "RouteTag",
    "SendFrame",
    "SendLan",
    "TopologyChanged",
]


class RouteTag(NamedTuple):
    """Where a message entered the domain, who imported it with which sequence number, and
    how many routers it crossed: what a router writes on a message it publishes."""

    origin: str
    importer: str
    seq: int
    hops: int


class SendFrame(NamedTuple):
    """Send ``frame`` on the link to ``neighbor``."""

    neighbor: str
    frame: LinkFrame


class SendLan(NamedTuple):
    """Publish ``frame`` (a record, or a loss report for one router there) on attached
    ``network``, for the other routers there."""

    network: str
    frame: LsaFrame | LossFrame


class Deliver(NamedTuple):
    """Publish ``payload`` (subject ``subject``) into attached ``network``, tagged with
    ``tag`` so other routers there know it is already in the domain."""

    network: str
    subject: str
    payload: Any
    tag: tuple[str, str, int, int]


class DeliverRun(NamedTuple):
    """:class:`Deliver` for consecutive messages of one subject (a BATCH passing through):
    ``payloads[i]`` is tagged ``(origin, importer, seq + i, hops)``. One output per batch,
    however many messages it holds."""

    network: str
    subject: str
    payloads: list[Any]
    origin: str
    importer: str
    seq: int
    hops: int

    def deliveries(self) -> list[Deliver]:
        """The same, one :class:`Deliver` per message."""
        net, subject, origin, importer, seq, hops = (
            self.network,
            self.subject,
            self.origin,
            self.importer,
            self.seq,
            self.hops,
        )
        return [
            Deliver(net, subject, payload, RouteTag(origin, importer, seq + i, hops))
            for i, payload in enumerate(self.payloads)
        ]


class ListenSet(NamedTuple):
    """The router must listen to exactly ``subjects`` on attached ``network``."""

    network: str
    subjects: frozenset[str]


class Present(NamedTuple):
    """Present ``report`` as a DATALOSS advisory on attached ``network``."""

    network: str
    report: LossReport


class TopologyChanged(NamedTuple):
    """The set of reachable routers changed (for logging and status)."""

    reachable: frozenset[str]


Output = SendFrame | SendLan | Deliver | DeliverRun | ListenSet | Present | TopologyChanged
