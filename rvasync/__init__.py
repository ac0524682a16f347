"""rvasync: asyncio-native messaging on the Rendezvous model.

``import rvasync as rv`` gives the whole public API: messages and field types,
subject rules, queues and timers, transports and listeners, and the errors.
"""

# First: the wire codec hands its encode/decode to rvasync.message (Message.to_bytes).
from rvasync import codec as codec
from rvasync._accel import native_enabled
from rvasync._version import __version__
from rvasync.cache import CurrentValueCache, StoreCorrupt, is_retained_deletion, retained_deletion
from rvasync.cmdriver import CmListener, CmTransport, LedgerCorrupt
from rvasync.cmqdriver import CmQueueTransport
from rvasync.daemon import Daemon
from rvasync.errors import (
    ConversionError,
    DaemonUnavailable,
    DeliveryFailed,
    InvalidArgument,
    InvalidSubject,
    ListenerClosed,
    MalformedMessage,
    MessageTooLarge,
    NotPermitted,
    OperationError,
    QueueDestroyed,
    RequestTimeout,
    RvError,
    TransportClosed,
)
from rvasync.events import IOEvent, IOKind, IOOccurrence, TimerEvent
from rvasync.fieldtypes import FieldType
from rvasync.ftdriver import FtMember, FtMonitor
from rvasync.message import CmLabel, Field, Message, Publisher
from rvasync.protocol.ft import FtAction
from rvasync.queues import LimitPolicy, Queue, QueueGroup, default_queue
from rvasync.relaydriver import RelayAgent
from rvasync.ropsdriver import RemoteOps, Retention, VerifyResult
from rvasync.rvdatetime import DateTime
from rvasync.rvrd import Router, RouterConfig
from rvasync.security import Security
from rvasync.subjects import SubjectIndex, subject_matches, validate_subject
from rvasync.timers import Timer
from rvasync.transport.listener import Listener
from rvasync.transport.network import Transport
from rvasync.transport.process import ProcessTransport, process_transport
from rvasync.vcdriver import VcTransport

__all__ = [
    "CmLabel",
    "CmListener",
    "CmQueueTransport",
    "CmTransport",
    "ConversionError",
    "CurrentValueCache",
    "Daemon",
    "DaemonUnavailable",
    "DateTime",
    "DeliveryFailed",
    "Field",
    "FieldType",
    "FtAction",
    "FtMember",
    "FtMonitor",
    "IOEvent",
    "IOKind",
    "IOOccurrence",
    "InvalidArgument",
    "InvalidSubject",
    "LedgerCorrupt",
    "LimitPolicy",
    "Listener",
    "ListenerClosed",
    "MalformedMessage",
    "Message",
    "MessageTooLarge",
    "NotPermitted",
    "OperationError",
    "ProcessTransport",
    "Publisher",
    "Queue",
    "QueueDestroyed",
    "QueueGroup",
    "RelayAgent",
    "RemoteOps",
    "RequestTimeout",
    "Retention",
    "Router",
    "RouterConfig",
    "RvError",
    "Security",
    "StoreCorrupt",
    "SubjectIndex",
    "Timer",
    "TimerEvent",
    "Transport",
    "TransportClosed",
    "VcTransport",
    "VerifyResult",
    "__version__",
    "default_queue",
    "is_retained_deletion",
    "native_enabled",
    "process_transport",
    "retained_deletion",
    "subject_matches",
    "validate_subject",
]
