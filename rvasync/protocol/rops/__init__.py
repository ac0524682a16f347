"""Remote operations core, sans-IO: exactly-once request/reply with 2-way and 3-way handshakes.

Follows the specification's operation procedures (performer and invoker of
each side, the 2-way and 3-way services, duplicate operation detection,
submission and delivery verify, retries and non-delivery reports), reshaped
as a symmetric request/reply service: any endpoint can invoke named
operations on any other, and each side can verify what the other knows.
No sockets, no clocks, no tasks: :class:`EndpointCore` takes PDUs, handler
completions and the time, and returns :class:`Outputs`.
"""

from rvasync.protocol.rops.endpoint import EndpointCore
from rvasync.protocol.rops.invoker import InvokerCore
from rvasync.protocol.rops.outputs import (
    BUSY,
    INTERRUPTED,
    Alarm,
    Completion,
    Execute,
    Outcome,
    Outputs,
    QueryAnswer,
    Report,
    ReportKind,
    Send,
    Settled,
)
from rvasync.protocol.rops.params import Retention, RetryPolicy
from rvasync.protocol.rops.pdu import Kind, Pdu, PduError, VerifyStatus, decode_pdu, encode_pdu
from rvasync.protocol.rops.performer import PerformerCore

__all__ = [
    "BUSY",
    "INTERRUPTED",
    "Alarm",
    "Completion",
    "EndpointCore",
    "Execute",
    "InvokerCore",
    "Kind",
    "Outcome",
    "Outputs",
    "Pdu",
    "PduError",
    "PerformerCore",
    "QueryAnswer",
    "Report",
    "ReportKind",
    "Retention",
    "RetryPolicy",
    "Send",
    "Settled",
    "VerifyStatus",
    "decode_pdu",
    "encode_pdu",
]
