"""Sans-IO core of the routing daemon (rvrd): interest propagation and forwarding between routers.

Not to be confused with :mod:`rvasync.daemon.routing`, the daemon's routing of
messages among its own client sessions. This package decides which messages
cross which neighbor links between routers that join separate networks:

* :mod:`~rvasync.protocol.rvrd.patterns`: intersection of subject patterns;
* :mod:`~rvasync.protocol.rvrd.topology`: the link-state database and the
  shortest-path trees computed from it;
* :mod:`~rvasync.protocol.rvrd.inbox`: rewriting of inbox reply subjects;
* :mod:`~rvasync.protocol.rvrd.core`: :class:`RouterCore`, the state machine
  a driver feeds with link events, frames, local interest and messages.
"""

from rvasync.protocol.rvrd.core import (
    Deliver,
    DeliverRun,
    ListenSet,
    Loss,
    NetworkPolicy,
    RouterCore,
    SendFrame,
    SendLan,
    TopologyChanged,
)

__all__ = [
    "Deliver",
    "DeliverRun",
    "ListenSet",
    "Loss",
    "NetworkPolicy",
    "RouterCore",
    "SendFrame",
    "SendLan",
    "TopologyChanged",
]
