"""Virtual circuits, sans-IO: the hidden protocol between two circuit terminals.

:mod:`~rvasync.protocol.vc.frames` is what travels (and its message form),
:mod:`~rvasync.protocol.vc.circuit` the state machine of one terminal. The
asyncio driver is :mod:`rvasync.vcdriver`.
"""

from rvasync.protocol.vc.circuit import (
    Circuit,
    CircuitParams,
    CircuitState,
    Outputs,
)
from rvasync.protocol.vc.frames import Frame, FrameKind, frame_from_message, frame_to_message

__all__ = [
    "Circuit",
    "CircuitParams",
    "CircuitState",
    "Frame",
    "FrameKind",
    "Outputs",
    "frame_from_message",
    "frame_to_message",
]
