"""The client protocol between a standalone daemon and its client transports (sans-IO).

Used by both ends: ``rvasync.transport.tcplink`` (the client) and
``rvasync.daemon.server`` (the daemon's client port) are asyncio adapters
over it.

* :mod:`.frames`: the frames and their bytes (``encode``, ``encode_messages``,
  ``FrameDecoder``, ``ProtocolError``);
* :mod:`.connection`: :class:`Connection`, one end of a conversation, which
  owns the legal order of frames for either role;
* :mod:`.address`: the daemon parameter (``"7500"``, ``"host:port"``) and
  whether a client may start a daemon there.
"""

from rvasync.protocol.clientproto.address import DEFAULT_DAEMON_PORT, DaemonAddress, parse_daemon
from rvasync.protocol.clientproto.connection import Connection, LocalProtocolError, Role, State
from rvasync.protocol.clientproto.frames import (
    MAX_FRAME,
    PROTOCOL_VERSION,
    Advisory,
    Bye,
    Deliver,
    Error,
    ErrorCode,
    Frame,
    FrameDecoder,
    FrameType,
    Hello,
    Listen,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    Reliability,
    Unlisten,
    Welcome,
    encode,
    encode_messages,
)

__all__ = [
    "DEFAULT_DAEMON_PORT",
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "Advisory",
    "Bye",
    "Connection",
    "DaemonAddress",
    "Deliver",
    "Error",
    "ErrorCode",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "Hello",
    "Listen",
    "LocalProtocolError",
    "Ping",
    "Pong",
    "ProtocolError",
    "Publish",
    "Reliability",
    "Role",
    "State",
    "Unlisten",
    "Welcome",
    "encode",
    "encode_messages",
    "parse_daemon",
]
