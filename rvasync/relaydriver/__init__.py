"""Relay agents on asyncio: the embeddable agent and the client link a CM transport uses.

:class:`~rvasync.relaydriver.agent.RelayAgent` drives the sans-IO
:class:`~rvasync.protocol.relay.RelayAgentCore` over any rvasync transport
with a file ledger of its own; :class:`~rvasync.relaydriver.link.RelayLink`
drives :class:`~rvasync.protocol.relay.RelayClient` for ``CmTransport(...,
relay_agent=NAME)``. See docs/relay-agent.md.
"""

from rvasync.relaydriver.agent import RelayAgent
from rvasync.relaydriver.link import RelayLink

__all__ = ["RelayAgent", "RelayLink"]
