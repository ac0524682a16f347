"""The current value cache: ``rv.CurrentValueCache`` and its store file.

The protocol's decisions live in :mod:`rvasync.protocol.cvc`; the requester's
side (``t.request_retained``, ``t.listen(subject, retained=True)``) in
:mod:`rvasync.transport.retained`. See docs/retained.md.
"""

from __future__ import annotations

from rvasync.cache.deletion import is_retained_deletion, retained_deletion
from rvasync.cache.service import CurrentValueCache
from rvasync.cache.storefile import StoreCorrupt, StoreFile

__all__ = [
    "CurrentValueCache",
    "StoreCorrupt",
    "StoreFile",
    "is_retained_deletion",
    "retained_deletion",
]
