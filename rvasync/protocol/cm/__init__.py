"""Certified message delivery (RVCM), as a sans-IO protocol core and a ledger format.

:class:`CmCorrespondent` is the state machine of one CM transport; the
asyncio driver (``rv.CmTransport``) feeds it inputs and carries out its
outputs. :mod:`.ledger` and :mod:`.ledger_format` define what a ledger holds
and how a file ledger stores it. See docs/certified.md.
"""

from rvasync.protocol.cm.advisories import Advisory
from rvasync.protocol.cm.context import CmTiming
from rvasync.protocol.cm.correspondent import CmCorrespondent
from rvasync.protocol.cm.ledger import LedgerState
from rvasync.protocol.cm.ledger_format import (
    LedgerCorrupt,
    LedgerDecoder,
    LedgerReplay,
    compact_ledger,
    decode_ledger,
    encode_record,
    encode_records,
    new_ledger,
)
from rvasync.protocol.cm.listener import SourceReview
from rvasync.protocol.cm.names import hello_subject, new_transient_name
from rvasync.protocol.cm.outputs import AppendLedger, Deliver, Output, SendResult, Transmit
from rvasync.protocol.cm.records import Record, parse_record
from rvasync.protocol.cm.sender import ListenerReview, SubjectReview

__all__ = [
    "Advisory",
    "AppendLedger",
    "CmCorrespondent",
    "CmTiming",
    "Deliver",
    "LedgerCorrupt",
    "LedgerDecoder",
    "LedgerReplay",
    "LedgerState",
    "ListenerReview",
    "Output",
    "Record",
    "SendResult",
    "SourceReview",
    "SubjectReview",
    "Transmit",
    "compact_ledger",
    "decode_ledger",
    "encode_record",
    "encode_records",
    "hello_subject",
    "new_ledger",
    "new_transient_name",
    "parse_record",
]
