"""asyncio driver of remote operations (exactly-once request/reply): ``rv.RemoteOps``."""

from rvasync.protocol.rops import Retention
from rvasync.ropsdriver.remoteops import PendingInvocation, RemoteOps, VerifyResult

__all__ = ["PendingInvocation", "RemoteOps", "Retention", "VerifyResult"]
