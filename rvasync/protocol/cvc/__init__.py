"""Current value cache protocol core, sans-IO: the retained store, answers, the hand-over.

A cache (``rv.CurrentValueCache``, ``rvasync cache``) keeps the last message of
every subject matching its patterns and answers requests for the retained
messages matching a pattern; a listener created with ``retained=True`` merges
such an answer into its live stream. This package holds the decisions, with
no socket, task or clock of its own (time enters as arguments), so the
tests drive them through every interleaving on a simulated clock.

``names``       the protocol's subjects, fields and the deletion marker
``patterns``    pattern coverage (a cache's overlapping patterns reduced)
``store``       :class:`RetainedStore`: subject -> last message, with limits
``entries``     packing retained messages into answer parts
``collect``     :class:`AnswerCollector`: the requester merges the caches' answers
``handover``    :class:`HandOver`: retained first, then live, per-subject order
``storefile``   the crash-safe store file format (parse and encode)
"""

from __future__ import annotations

from rvasync.protocol.cvc.collect import AnswerCollector
from rvasync.protocol.cvc.entries import MAX_PART_BYTES, split_parts, unpack_entries
from rvasync.protocol.cvc.handover import HandOver, Identity, origin_identity
from rvasync.protocol.cvc.patterns import covers, reduce_patterns
from rvasync.protocol.cvc.store import Entry, Outcome, Refusals, RetainedStore
from rvasync.protocol.cvc.storefile import LogRecord, Op, ParsedLog, encode_record, parse_log

__all__ = [
    "MAX_PART_BYTES",
    "AnswerCollector",
    "Entry",
    "HandOver",
    "Identity",
    "LogRecord",
    "Op",
    "Outcome",
    "ParsedLog",
    "Refusals",
    "RetainedStore",
    "covers",
    "encode_record",
    "origin_identity",
    "parse_log",
    "reduce_patterns",
    "split_parts",
    "unpack_entries",
]
