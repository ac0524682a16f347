"""Subjects, field names and the deletion marker of the current value cache protocol.

The wire exchange is rvasync's own design (Rendezvous documents what its
cache does, not how it talks):

``_RVCACHE.REQUEST``
    a request for retained messages: field ``pattern`` (a subject, wildcards
    allowed), the reply subject an inbox of the requester. Every cache on the
    network answers it (an empty answer when nothing matches), in parts.
``_RVCACHE.HELLO``
    sent by every cache when it starts and at its hello interval (field
    ``cache``: its id; ``interval``: seconds until the next one). Caches learn
    each other from it, so an answer can name the other caches the requester
    should also hear from (see :mod:`rvasync.protocol.cvc.collect`).

An answer part carries ``cache`` (the answering cache's id), ``peers`` (the
ids of the other caches it knows, a STRINGARRAY), ``part`` (0, 1, ...),
``last`` (True on the final part) and ``entries`` (OPAQUE: the retained
messages with their stamps, :mod:`rvasync.protocol.cvc.entries`).

A retained value is removed by publishing a *deletion* on its subject: a
message with the reserved boolean field ``_rvcache_delete`` set to True
(``rv.retained_deletion(subject)`` builds one). Caches drop the subject;
ordinary listeners receive the deletion like any message and can test it with
``rv.is_retained_deletion(msg)``.
"""

from __future__ import annotations

__all__ = [
    "ANSWER_CACHE",
    "ANSWER_ENTRIES",
    "ANSWER_LAST",
    "ANSWER_PART",
    "ANSWER_PEERS",
    "DELETE_FIELD",
    "HELLO_CACHE",
    "HELLO_INTERVAL",
    "HELLO_SUBJECT",
    "REQUEST_PATTERN",
    "REQUEST_SUBJECT",
]

REQUEST_SUBJECT = "_RVCACHE.REQUEST"
HELLO_SUBJECT = "_RVCACHE.HELLO"

REQUEST_PATTERN = "pattern"
HELLO_CACHE = "cache"
HELLO_INTERVAL = "interval"
ANSWER_CACHE = "cache"
ANSWER_PEERS = "peers"
ANSWER_PART = "part"
ANSWER_LAST = "last"
ANSWER_ENTRIES = "entries"

DELETE_FIELD = "_rvcache_delete"
