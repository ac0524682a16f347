"""The secure daemon's brake on password guessing, without I/O (time is an argument).

A password check costs the daemon real work (scrypt: 16 MiB and tens of
milliseconds), so guesses must be few whoever makes them and from wherever.
:class:`LoginBrake` counts failed logins in three places:

* **per host** (the client's address): a host that keeps failing is slowed
  down, whatever names it tries;
* **per user name**: a user under attack from many hosts is slowed down
  too. Names of the users file are kept in a table of their own, bounded by
  the file, so that no flood of made-up names can push a real user's count
  out; made-up names share a bounded table of their own (they never cost a
  password check, see :mod:`rvasync.daemon.login`, and are braked only so
  that the answers do not tell which names exist);
* **per trusted host of a user**: a host a user logged in from before (the
  last :data:`TRUSTED_HOSTS_PER_USER` of each user) skips the two brakes
  above and has a count of its own, so a flood against a user from elsewhere
  never locks that user out of the hosts it works from. Only a successful
  login makes a host trusted, so only the user can fill or evict its list.

Each count lets ``free`` failures through within ``window`` seconds, then
refuses attempts without a check for a delay that doubles from
``first_delay`` up to ``max_delay``; it starts over only after a quiet
``window`` once the last block ended, so an attack that goes on gets about
one check per ``max_delay``. A login is counted as failed when it is
admitted and the count is given back when it succeeds, so a burst of
simultaneous guesses gets no more checks than ``free``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from rvasync.errors import InvalidArgument

__all__ = ["TRUSTED_HOSTS_PER_USER", "Admission", "FailureLimiter", "LoginBrake"]

#: Hosts remembered per user as ones it logged in from (most recent first).
TRUSTED_HOSTS_PER_USER = 16
# Oldest entries looked at when a full table needs room (expired ones go first).
_EVICTION_SCAN = 8


class FailureLimiter:
    """Failed attempts per key: after ``free`` within ``window`` seconds, each further
    failure refuses the key's attempts for a delay that doubles with every failure, up
    to ``max_delay``. A braked key is forgotten (its free failures come back) only
    when ``window`` seconds have passed since its block ended without a failure: a
    sustained attack gets about one attempt per ``max_delay``.

    At most ``max_keys`` keys are kept: when full, expired entries among the
    oldest go first, then the oldest that blocks nothing, then the oldest.
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

    def _expired(self, entry: tuple[int, float, float], now: float) -> bool:
        failures, start, until = entry
        if failures > self.free:
            # Braked: forgotten only after a quiet window once the block ended, so that
            # an attack that goes on never gets its free failures back.
            return now - until >= self.window
        return now - start > self.window and now >= until

    def retry_after(self, key: object, now: float) -> float:
        """Seconds before ``key`` may try again (0: it may now). A refusal is counted."""
        entry = self._keys.get(key)
        if entry is None:
            return 0.0
        if self._expired(entry, now):
            del self._keys[key]
            return 0.0
        until = entry[2]
        if now < until:
            self.refused += 1
            return until - now
        return 0.0

    def failed(self, key: object, now: float) -> None:
        """Count one failed attempt of ``key`` at ``now``."""
        entry = self._keys.pop(key, None)
        if entry is None or self._expired(entry, now):
            failures, start = 0, now
        else:
            failures, start = entry[0], entry[1]
        failures += 1
        until = now
        if failures > self.free:
            delay = min(self.first_delay * 2 ** min(failures - self.free - 1, 32), self.max_delay)
            until = now + delay
        if len(self._keys) >= self.max_keys:
            self._make_room(now)
        self._keys[key] = (failures, start, until)

    def _make_room(self, now: float) -> None:
        keys = self._keys
        oldest = []
        for key, entry in keys.items():
            oldest.append((key, entry))
            if len(oldest) >= _EVICTION_SCAN:
                break
        expired = [key for key, entry in oldest if self._expired(entry, now)]
        if not expired:
            idle = [key for key, entry in oldest if now >= entry[2]]
            expired = idle[:1] or [oldest[0][0]]
        for key in expired:
            del keys[key]

    def undo(self, key: object) -> None:
        """Give back one failure of ``key`` (an attempt counted on admission that succeeded)."""
        entry = self._keys.get(key)
        if entry is None:
            return
        failures = entry[0] - 1
        if failures <= 0:
            del self._keys[key]
        else:
            self._keys[key] = (failures, entry[1], entry[2])

    def succeeded(self, key: object) -> None:
        """A good login of ``key``: forget its failures."""
        self._keys.pop(key, None)

    def forget(self, keep: Iterable[object]) -> None:
        """Drop every key not in ``keep`` (users no longer in the users file)."""
        wanted = set(keep)
        for key in [k for k in self._keys if k not in wanted]:
            del self._keys[key]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


@dataclass(frozen=True, slots=True)
class Admission:
    """:meth:`LoginBrake.admit`'s answer for one login."""

    #: Seconds before this login may be tried (0: check it now).
    wait: float = 0.0
    #: The user logged in from this host before: it has its own count (and lane).
    trusted: bool = False
    #: What refuses it when ``wait``: "host" or "user".
    by: str = ""


class LoginBrake:
    """Failed-login counts per host, per user name and per trusted host (module docstring).

    ``known`` tells, for each call, whether the name is a user of the users
    file (the caller knows; the answers to the client never do).
    """

    def __init__(
        self,
        *,
        host_free: int = 10,
        user_free: int = 5,
        window: float = 60.0,
        first_delay: float = 1.0,
        max_delay: float = 60.0,
        max_keys: int = 10_000,
        trusted_hosts: int = TRUSTED_HOSTS_PER_USER,
    ) -> None:
        if trusted_hosts < 0:
            raise InvalidArgument("LoginBrake: trusted_hosts must be >= 0")

        def limiter(free: int, keys: int) -> FailureLimiter:
            return FailureLimiter(
                free=free,
                window=window,
                first_delay=first_delay,
                max_delay=max_delay,
                max_keys=keys,
            )

        self.hosts = limiter(host_free, max_keys)
        #: Users of the users file: never evicted by other names (pruned on reload).
        self.users = limiter(user_free, 2**62)
        #: Names that are not users: bounded, evictable.
        self.names = limiter(user_free, max_keys)
        #: (host, user) for the trusted hosts of each user.
        self.pairs = limiter(user_free, 2**62)
        self.trusted_hosts = trusted_hosts
        self._trusted: dict[str, OrderedDict[str, None]] = {}

    @property
    def refused(self) -> int:
        """Logins refused without a password check."""
        return self.hosts.refused + self.users.refused + self.names.refused + self.pairs.refused

    def trusted(self, host: str, user: str) -> bool:
        """Did ``user`` log in from ``host`` before (one of its last trusted hosts)?"""
        hosts = self._trusted.get(user)
        return hosts is not None and host in hosts

    def admit(self, host: str, user: str, known: bool, now: float) -> Admission:
        """May a login of ``user`` from ``host`` be checked now? (A refusal is counted.)"""
        if known and self.trusted(host, user):
            return Admission(self.pairs.retry_after((host, user), now), trusted=True, by="user")
        by_host = self.hosts.retry_after(host, now)
        by_user = (self.users if known else self.names).retry_after(user, now)
        if by_host >= by_user:
            return Admission(by_host, by="host" if by_host else "")
        return Admission(by_user, by="user")

    def failed(self, host: str, user: str, known: bool, now: float, *, trusted: bool) -> None:
        """Count a login as failed (on admission: it may succeed yet, see :meth:`succeeded`)."""
        if trusted:
            self.pairs.failed((host, user), now)
            return
        self.hosts.failed(host, now)
        (self.users if known else self.names).failed(user, now)

    def succeeded(self, host: str, user: str, *, trusted: bool) -> None:
        """A good login counted as failed on admission: give that back and trust ``host``."""
        if trusted:
            self.pairs.succeeded((host, user))
        else:
            self.hosts.undo(host)
            self.users.undo(user)
        if not self.trusted_hosts:
            return
        hosts = self._trusted.setdefault(user, OrderedDict())
        hosts[host] = None
        hosts.move_to_end(host, last=False)
        while len(hosts) > self.trusted_hosts:
            gone, _ = hosts.popitem()
            self.pairs.succeeded((gone, user))

    def keep_users(self, names: Iterable[str]) -> None:
        """The users file now holds ``names``: forget everything about other users."""
        keep = set(names)
        self.users.forget(keep)
        for user in [u for u in self._trusted if u not in keep]:
            for host in self._trusted.pop(user):
                self.pairs.succeeded((host, user))

    def __len__(self) -> int:
        """Entries held (for tests of the bounds)."""
        trusted = sum(len(hosts) for hosts in self._trusted.values())
        return len(self.hosts) + len(self.users) + len(self.names) + len(self.pairs) + trusted
