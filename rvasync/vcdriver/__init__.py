"""asyncio driver of virtual circuits: :class:`VcTransport` terminals.

The protocol (handshake, ordering, retransmission, heartbeats) is the sans-IO
core :mod:`rvasync.protocol.vc`; :mod:`~rvasync.vcdriver.terminal` connects it
to an ordinary transport, the loop's clock and the terminal's listeners;
:mod:`~rvasync.vcdriver.checks` holds the argument rules.
"""

from rvasync.vcdriver.terminal import VcTransport

__all__ = ["VcTransport"]
