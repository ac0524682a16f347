"""Shared helpers of the fault tolerance driver tests (one event loop, process transport)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from rvasync.ftdriver import FtMember
from rvasync.protocol.ft import FtAction

WAIT = 10.0
"""Upper bound of every wait: a hang fails fast instead of stalling the suite."""

FAST = {"heartbeat": 0.05, "activation": 0.25}
"""Small intervals for one-loop tests: six heartbeats per activation interval."""


@dataclass
class Journal:
    """Actions of every member of a test, in the order callbacks saw them."""

    entries: list[tuple[float, str, FtAction]] = field(default_factory=list)

    def callback(self, name: str) -> Callable[[FtMember, FtAction], None]:
        def on_action(member: FtMember, action: FtAction) -> None:
            self.entries.append((asyncio.get_running_loop().time(), name, action))

        return on_action

    def of(self, name: str) -> list[FtAction]:
        return [action for _, who, action in self.entries if who == name]

    def activations(self) -> list[str]:
        return [who for _, who, action in self.entries if action is FtAction.ACTIVATE]

    def time_of(self, name: str, action: FtAction, after: float = float("-inf")) -> float:
        return next(t for t, who, a in self.entries if who == name and a is action and t >= after)


async def until(predicate: Callable[[], bool], timeout: float = WAIT, what: str = "") -> None:
    """Poll ``predicate`` every few milliseconds; fail the test after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what or predicate}"
        ) from None


def actives(members: dict[str, FtMember]) -> list[str]:
    return sorted(name for name, m in members.items() if m.active)
