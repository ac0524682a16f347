"""Sans-IO core of the routing daemon (rvrd): interest propagation and forwarding between routers.

Not to be confused with :mod:`rvasync.daemon.routing`, the daemon's routing of
messages among its own client sessions. This package decides which messages
cross which neighbor links between routers that join separate networks:

* :mod:`~rvasync.protocol.rvrd.patterns`: intersection of subject patterns;
* :mod:`~rvasync.protocol.rvrd.topology`: the link-state database and the
  shortest-path trees computed from it;
* :mod:`~rvasync.protocol.rvrd.inbox`: rewriting of inbox reply subjects;
* :mod:`~rvasync.protocol.rvrd.frames`: the link's frames, with named fields;
* :mod:`~rvasync.protocol.rvrd.outputs`: what the core asks its driver to do;
* :mod:`~rvasync.protocol.rvrd.losses` and :mod:`~rvasync.protocol.rvrd.desk`:
  loss reports, carried to the networks that missed the messages;
* :mod:`~rvasync.protocol.rvrd.core`: :class:`RouterCore`, the state machine
  a driver feeds with link events, frames, local interest and messages.
"""

from rvasync.protocol.rvrd.core import NetworkPolicy, RouterCore
from rvasync.protocol.rvrd.losses import LossReport
from rvasync.protocol.rvrd.outputs import (
    Deliver,
    DeliverRun,
    ListenSet,
    Output,
    Present,
    RouteTag,
    SendFrame,
    SendLan,
    TopologyChanged,
)

__all__ = [
    "Deliver",
    "DeliverRun",
    "ListenSet",
    "LossReport",
    "NetworkPolicy",
    "Output",
    "Present",
    "RouteTag",
    "RouterCore",
    "SendFrame",
    "SendLan",
    "TopologyChanged",
]
