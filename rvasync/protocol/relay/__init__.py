"""Relay agents for certified delivery, as sans-IO protocol cores.

A correspondent that connects only now and then (a laptop, a cron job)
designates a relay agent; all its certified traffic flows through it.
:class:`RelayClient` is the correspondent's end of the link,
:class:`RelayAgentCore` the agent's; :mod:`.ledger` is the agent's ledger
and its file format, :mod:`.frames` the link's frames. The certified
protocol itself is untouched: the client's CM core stays the master of the
protocol state and the agent only stores and forwards. See
docs/relay-agent.md.
"""

from rvasync.protocol.relay.agent import ClientReview, RelayAgentCore
from rvasync.protocol.relay.client import ClientState, RelayClient
from rvasync.protocol.relay.frames import decode_frame, encode_frame, locate_subject
from rvasync.protocol.relay.ledger import (
    AgentLedger,
    RelayReplay,
    decode_relay_ledger,
    encode_relay_record,
    new_relay_ledger,
)
from rvasync.protocol.relay.outputs import (
    AppendRecord,
    Emit,
    Inbound,
    Interest,
    RelayOutput,
    SendFrame,
)
from rvasync.protocol.relay.replies import LOST_ROLE, REPLY_ROLE
from rvasync.protocol.relay.timing import RelayTiming

__all__ = [
    "LOST_ROLE",
    "REPLY_ROLE",
    "AgentLedger",
    "AppendRecord",
    "ClientReview",
    "ClientState",
    "Emit",
    "Inbound",
    "Interest",
    "RelayAgentCore",
    "RelayClient",
    "RelayOutput",
    "RelayReplay",
    "RelayTiming",
    "SendFrame",
    "decode_frame",
    "decode_relay_ledger",
    "encode_frame",
    "encode_relay_record",
    "locate_subject",
    "new_relay_ledger",
]
