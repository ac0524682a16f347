"""rvasync: asyncio-native messaging on the Rendezvous model."""

from rvasync._accel import native_enabled
from rvasync.errors import (
    ConversionError,
    DaemonUnavailable,
    InvalidArgument,
    InvalidSubject,
    MalformedMessage,
    MessageTooLarge,
    NotPermitted,
    QueueDestroyed,
    RequestTimeout,
    RvError,
    TransportClosed,
)

__version__ = "0.1.0"
