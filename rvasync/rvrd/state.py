"""A router's state file: which incarnation runs, and until when its predecessor was alive.

A router killed -9 together with its neighbors leaves nobody who saw it go:
the new incarnation could not tell that messages were lost. With ``state =
FILE`` in its configuration, a router writes its incarnation there when it
starts and touches the file every heartbeat; the next start reads when the
file was last touched (the predecessor's last sign of life) and reports
what may have been lost since, as a window (docs/routing.md, "What a
router outage loses"). The file holds one line of JSON; it is replaced
atomically, and a missing, unreadable or foreign file only means no
predecessor is known.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from rvasync.errors import InvalidArgument

__all__ = ["RouterState"]


class RouterState:
    """The state file ``path`` of router ``name``."""

    def __init__(self, path: str | Path, name: str) -> None:
        self.path = Path(path)
        self.name = name
        #: When the previous incarnation was last known alive (wall clock), None if unknown.
        self.predecessor_alive: float | None = None

    def begin(self, incarnation: int) -> None:
        """Read what the previous incarnation left, then record ``incarnation``."""
        with contextlib.suppress(OSError, ValueError):
            previous = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(previous, dict) and previous.get("router") == self.name:
                self.predecessor_alive = self.path.stat().st_mtime
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(
                json.dumps({"router": self.name, "incarnation": incarnation}) + "\n",
                encoding="utf-8",
            )
            os.replace(tmp, self.path)
        except OSError as exc:
            raise InvalidArgument(f"{self.path}: cannot write the router state: {exc}") from None

    def alive(self) -> None:
        """This incarnation is alive now (the file's modification time says so)."""
        with contextlib.suppress(OSError):
            os.utime(self.path)
