"""The routing daemon (rvrd): joins networks that multicast cannot span.

* :mod:`~rvasync.rvrd.config`: the TOML configuration, validated;
* :mod:`~rvasync.rvrd.attach`: one attached local network (a transport, its
  interest, messages in and out);
* :mod:`~rvasync.rvrd.links`: TCP neighbor links (dial with backoff, accept,
  handshake, liveness);
* :mod:`~rvasync.rvrd.router`: :class:`Router`, which feeds the sans-IO core
  (:mod:`rvasync.protocol.rvrd`) and carries out its decisions.
"""

from rvasync.rvrd.config import NeighborConfig, NetworkConfig, RouterConfig, load_config
from rvasync.rvrd.router import Router

__all__ = ["NeighborConfig", "NetworkConfig", "Router", "RouterConfig", "load_config"]
