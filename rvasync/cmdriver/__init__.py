"""The asyncio driver of certified message delivery: ``CmTransport`` and ``CmListener``.

:class:`CmTransport` runs the sans-IO protocol core
(:mod:`rvasync.protocol.cm`) over any rvasync transport; :class:`CmListener`
is a CM listener; :mod:`.ledgerfile` keeps a ledger file; :mod:`.wire` says
how labeled messages, records and advisories travel. See docs/certified.md.
"""

from rvasync.cmdriver.listener import CmListener
from rvasync.cmdriver.transport import CmTransport
from rvasync.protocol.cm.ledger_format import LedgerCorrupt

__all__ = ["CmListener", "CmTransport", "LedgerCorrupt"]
