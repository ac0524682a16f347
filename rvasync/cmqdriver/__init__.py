"""The asyncio driver of distributed queues: ``rv.CmQueueTransport``.

See docs/distributed-queues.md.
"""

from rvasync.cmqdriver.transport import CmQueueTransport

__all__ = ["CmQueueTransport"]
