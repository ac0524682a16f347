"""Rules of the secure daemon that need no I/O: subject permissions and failed-login limits.

Both ends use :class:`SubjectPermissions`: the daemon enforces a user's
publish/subscribe patterns on every LISTEN and PUBLISH, and tells the client
its patterns in WELCOME so that the client refuses a forbidden ``listen`` or
``send`` at once with :class:`~rvasync.errors.NotPermitted` instead of having
it vanish on the daemon. :class:`FailureLimiter` is the daemon's brake on
password guessing; time enters as an argument (``now``), so tests drive it
with a simulated clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from rvasync.errors import InvalidArgument

__all__ = ["FailureLimiter", "SubjectPermissions", "pattern_covers"]


def _check_pattern(pattern: object) -> str:
    if not isinstance(pattern, str) or not pattern:
        raise InvalidArgument(f"a subject pattern must be a non-empty str, got {pattern!r}")
    elements = pattern.split(".")
    for index, element in enumerate(elements):
        if not element:
            raise InvalidArgument(f"subject pattern {pattern!r} has an empty element")
        if element == ">" and index != len(elements) - 1:
            raise InvalidArgument(f"subject pattern {pattern!r}: '>' must be the last element")
    return pattern


def pattern_covers(allowed: str, wanted: str) -> bool:
    """True if every subject ``wanted`` matches is also matched by ``allowed``.

    Both may hold the wildcards ``*`` (one element) and ``>`` (one or more
    trailing elements). A literal subject is the simple case: it is covered
    when ``allowed`` matches it.
    """
    have = allowed.split(".")
    want = wanted.split(".")
    for index, element in enumerate(have):
        if element == ">":
            return len(want) > index  # '>' needs at least one element to cover
        if index >= len(want):
            return False
        asked = want[index]
        if asked == ">":
            return False  # only '>' covers '>'
        if element == "*":
            continue  # covers a literal or '*'
        if element != asked:
            return False
    return len(want) == len(have)


@dataclass(frozen=True, slots=True)
class SubjectPermissions:
    """What one user may publish to and listen to (patterns; ``(">",)`` is everything)."""

    publish: tuple[str, ...] = (">",)
    subscribe: tuple[str, ...] = (">",)

    @classmethod
    def of(
        cls, publish: Iterable[str] | None, subscribe: Iterable[str] | None
    ) -> SubjectPermissions:
        """Checked permissions; None for a list means "everything"."""
        return cls(
            publish=(">",) if publish is None else tuple(_check_pattern(p) for p in publish),
            subscribe=(">",) if subscribe is None else tuple(_check_pattern(p) for p in subscribe),
        )

    @property
    def unrestricted(self) -> bool:
        return ">" in self.publish and ">" in self.subscribe

    def may_publish(self, subject: str) -> bool:
        """May a message be sent to ``subject``?

        Replies to inboxes (``_INBOX.`` subjects) are always allowed: a user
        permitted to receive a request may answer it, the way NATS's
        ``allow_responses`` works.
        """
        if subject.startswith("_INBOX."):
            return True
        return any(pattern_covers(p, subject) for p in self.publish)

    def may_listen(self, subject: str) -> bool:
        """May the user listen to ``subject`` (a pattern: all it matches must be allowed)?"""
        return any(pattern_covers(p, subject) for p in self.subscribe)

    def as_dict(self) -> dict[str, list[str]]:
        """The form WELCOME carries to the client."""
        return {"publish": list(self.publish), "subscribe": list(self.subscribe)}

    @classmethod
    def from_dict(cls, data: object) -> SubjectPermissions | None:
        """Read WELCOME's form back; None when it is absent or not well formed."""
        if not isinstance(data, dict):
            return None
        publish, subscribe = data.get("publish"), data.get("subscribe")
        if not isinstance(publish, list) or not isinstance(subscribe, list):
            return None
        try:
            return cls.of(publish, subscribe)
        except InvalidArgument:
            return None


class FailureLimiter:
    """Slows down password guessing: after ``free`` failed logins of one key
    (typically the client's host and user name) within ``window`` seconds,
    further attempts are refused without checking the password for a delay
    that doubles with every failure, up to ``max_delay`` seconds.

    A successful login clears the key. At most ``max_keys`` keys are kept
    (the oldest forgotten first), so a flood of made-up names cannot grow
    the daemon's memory without bound.
    """

    def __init__(
        self,
        *,
        free: int = 5,
        window: float = 60.0,
        first_delay: float = 1.0,
        max_delay: float = 60.0,
        max_keys: int = 10_000,
    ) -> None:
        if free < 0 or window <= 0 or first_delay <= 0 or max_delay < first_delay or max_keys < 1:
            raise InvalidArgument("FailureLimiter: bad limits")
        self.free = free
        self.window = window
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.max_keys = max_keys
        # key -> (failures in the current window, window start, blocked until)
        self._keys: OrderedDict[object, tuple[int, float, float]] = OrderedDict()
        #: Attempts refused without a password check since this limiter was made.
        self.refused = 0

    def retry_after(self, key: object, now: float) -> float:
        """Seconds before ``key`` may try again (0: it may now). A refusal is counted."""
        entry = self._keys.get(key)
        if entry is None:
            return 0.0
        _, start, until = entry
        if now - start > self.window and now >= until:
            del self._keys[key]
            return 0.0
        if now < until:
            self.refused += 1
            return until - now
        return 0.0

    def failed(self, key: object, now: float) -> None:
        """Count one failed login of ``key`` at ``now``."""
        entry = self._keys.pop(key, None)
        if entry is None or (now - entry[1] > self.window and now >= entry[2]):
            failures, start = 0, now
        else:
            failures, start = entry[0], entry[1]
        failures += 1
        until = now
        if failures > self.free:
            delay = min(self.first_delay * 2 ** min(failures - self.free - 1, 32), self.max_delay)
            until = now + delay
        self._keys[key] = (failures, start, until)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)

    def succeeded(self, key: object) -> None:
        """A good login of ``key``: forget its failures."""
        self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)
