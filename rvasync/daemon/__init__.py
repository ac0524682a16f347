"""The Rendezvous daemon engine: reliable multicast between programs, in-process or standalone.

``Daemon`` is the engine (see docs/daemon.md); ``rv.Transport`` attaches to the
in-process daemon of its event loop by default, or to a standalone daemon over TCP.
"""

from rvasync.daemon.engine import Daemon

__all__ = ["Daemon"]
