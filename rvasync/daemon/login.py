"""Logins of a secure daemon: password and certificate checks, bounded and fair.

One :class:`LoginGate` per daemon checks every login, of the client port and
of the status page alike:

* **Made-up names cost nothing.** A name that is not a password user of the
  users file is refused without a password check: no scrypt, no thread, no
  slot that a real user could need. Its answer is held back as long as a
  real check takes (at least :data:`FAILED_LOGIN_DELAY`), so that the time
  of the answer does not tell which names exist.
* **Every failed login is answered at the same time**: no earlier than
  :data:`FAILED_LOGIN_DELAY` after it was asked (a wrong password, an
  unknown name and a braked attempt alike).
* **Guessing is braked** per host, per user and per trusted host
  (:class:`~rvasync.protocol.loginbrake.LoginBrake`).
* **Checks never block the event loop**: scrypt runs in threads (``hashlib``
  releases the GIL while it hashes). A user's login from a host it logged in
  from before has a thread of its own (the trusted lane), so a flood from
  elsewhere never makes it wait behind strangers; other checks share
  :data:`UNTRUSTED_CHECKERS` threads, at most :data:`MAX_UNTRUSTED_CHECKS`
  at once and :data:`MAX_CHECKS_PER_HOST` per host (more are refused with
  "retry later").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections import Counter
from collections.abc import Callable
from typing import NoReturn

from rvasync._logging import stderr_logger
from rvasync.daemon.users import LoginRefused, User, Users, verify_password
from rvasync.protocol.loginbrake import LoginBrake

__all__ = [
    "FAILED_LOGIN_DELAY",
    "MAX_CHECKS_PER_HOST",
    "MAX_UNTRUSTED_CHECKS",
    "UNTRUSTED_CHECKERS",
    "LoginGate",
]

#: Seconds after it was asked that a failed login is answered, at the earliest.
FAILED_LOGIN_DELAY = 0.5
#: Threads checking passwords of logins from hosts their user never logged in from.
UNTRUSTED_CHECKERS = 2
#: Such checks under way (running or queued) at once, in all.
MAX_UNTRUSTED_CHECKS = 32
#: ... and from one host.
MAX_CHECKS_PER_HOST = 4
#: Refused logins logged one by one per interval of REFUSAL_LOG_INTERVAL seconds.
REFUSALS_LOGGED = 20
REFUSAL_LOG_INTERVAL = 10.0
# Weight of the latest check in the running estimate of a check's duration.
_SMOOTHING = 0.2

_WRONG = "wrong user name or password"


class LoginGate:
    """The login checks of one daemon (module docstring).

    ``users()``: the current users table (None: a daemon without users).
    ``failed_delay``: :data:`FAILED_LOGIN_DELAY` (tests make it shorter).
    """

    def __init__(
        self,
        users: Callable[[], Users | None],
        *,
        brake: LoginBrake | None = None,
        failed_delay: float = FAILED_LOGIN_DELAY,
    ) -> None:
        self._users = users
        self.brake = brake if brake is not None else LoginBrake()
        self.failed_delay = failed_delay
        #: Logins accepted and refused, and passwords actually checked (scrypt runs).
        self.logins = 0
        self.failed_logins = 0
        self.password_checks = 0
        #: Logins refused because too many checks were under way ("retry later").
        self.busy = 0
        self._typical = failed_delay  # running estimate of a check's duration
        self._untrusted = 0
        self._by_host: Counter[str] = Counter()
        self._pools: dict[bool, concurrent.futures.ThreadPoolExecutor] = {}
        self._log = _RefusalLog()

    def keep_users(self, users: Users) -> None:
        """The users file was reloaded: forget the brake's counts of users it no longer has."""
        self.brake.keep_users(users.by_name)

    async def password(self, host: str, user: str, password: str) -> User:
        """The user if ``password`` is theirs; LoginRefused (answered no earlier than
        ``failed_delay`` after the call) otherwise."""
        loop = asyncio.get_running_loop()
        asked = loop.time()
        users = self._users()
        entry = users.by_name.get(user) if users is not None else None
        stored = entry.password_hash if entry is not None else None
        known = stored is not None
        admission = self.brake.admit(host, user, known, asked)
        if admission.wait > 0:
            await self._refuse(
                asked, f"too many failed logins; retry in {math.ceil(admission.wait)} s"
            )
        trusted = admission.trusted
        if not trusted and (
            self._untrusted >= MAX_UNTRUSTED_CHECKS or self._by_host[host] >= MAX_CHECKS_PER_HOST
        ):
            self.busy += 1
            await self._refuse(asked, "too many logins under way; retry later")
        self.brake.failed(host, user, known, asked, trusted=trusted)
        if entry is None or stored is None:
            # No check at all; answered when a check would have been.
            await self._refuse(asked, _WRONG, at=asked + max(self.failed_delay, self._typical))
        good = await self._check(host, trusted, password, stored)
        if not good:
            await self._refuse(asked, _WRONG)
        self.brake.succeeded(host, user, trusted=trusted)
        self.logins += 1
        return entry

    async def authenticate(
        self,
        *,
        host: str,
        user: str | None,
        password: str | None,
        tls: bool,
        allow_plain: bool,
        cert_subject: str | None,
    ) -> User:
        """The user a client's HELLO proves it is: by password (over TLS unless
        ``allow_plain``) or by the certificate whose subject is ``cert_subject``."""
        if password is not None:
            if not tls and not allow_plain:
                raise self.refused("this daemon accepts passwords over TLS only")
            if user is None:
                raise self.refused("a password needs a user name")
            return await self.password(host, user, password)
        if cert_subject is not None:
            return self.certificate(cert_subject, user)
        raise self.refused("this daemon needs a user name and password, or a client certificate")

    def log_refusal(self, client: str, user: str | None, reason: str) -> None:
        """Log a refused login: each one while they are few, then a count per interval."""
        self._log.refused(asyncio.get_running_loop().time(), client, user, reason)

    def certificate(self, subject: str, claimed: str | None) -> User:
        """The user whose ``cert_subject`` is ``subject`` (the TLS handshake proved the key)."""
        users = self._users()
        entry = users.by_subject.get(subject) if users is not None else None
        if entry is None:
            self.failed_logins += 1
            raise LoginRefused(f"certificate subject {subject!r} is not a user of this daemon")
        if claimed is not None and claimed != entry.name:
            self.failed_logins += 1
            raise LoginRefused("the certificate belongs to another user")
        self.logins += 1
        return entry

    def refused(self, reason: str) -> LoginRefused:
        """Count a login refused before any check (no credentials ...) and make its error."""
        self.failed_logins += 1
        return LoginRefused(reason)

    async def _check(self, host: str, trusted: bool, password: str, stored: str) -> bool:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(trusted)
        if pool is None:
            pool = self._pools[trusted] = concurrent.futures.ThreadPoolExecutor(
                max_workers=1 if trusted else UNTRUSTED_CHECKERS,
                thread_name_prefix="rvasync-login-trusted" if trusted else "rvasync-login",
            )
        if not trusted:
            self._untrusted += 1
            self._by_host[host] += 1
        started = loop.time()
        try:
            self.password_checks += 1
            return await loop.run_in_executor(pool, verify_password, password, stored)
        finally:
            took = loop.time() - started
            self._typical += _SMOOTHING * (took - self._typical)
            if not trusted:
                self._untrusted -= 1
                self._by_host[host] -= 1
                if not self._by_host[host]:
                    del self._by_host[host]

    async def _refuse(self, asked: float, reason: str, *, at: float | None = None) -> NoReturn:
        """Count a refusal and raise it, no earlier than ``at`` (default: the floor)."""
        self.failed_logins += 1
        loop = asyncio.get_running_loop()
        wait = (asked + self.failed_delay if at is None else at) - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        raise LoginRefused(reason)

    def close(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


class _RefusalLog:
    """At most :data:`REFUSALS_LOGGED` lines of refused logins per :data:`REFUSAL_LOG_INTERVAL`
    seconds, then one line counting the rest: a flood of logins is not a flood of logs."""

    def __init__(self) -> None:
        self._since = -math.inf
        self._logged = 0
        self._quiet = 0

    def refused(self, now: float, client: str, user: str | None, reason: str) -> None:
        log = stderr_logger()
        if now - self._since >= REFUSAL_LOG_INTERVAL:
            if self._quiet:
                log.warning(
                    "logins refused and not logged one by one",
                    count=self._quiet,
                    seconds=round(now - self._since, 1),
                )
            self._since, self._logged, self._quiet = now, 0, 0
        if self._logged < REFUSALS_LOGGED:
            self._logged += 1
            log.warning("login refused", client=client, user=user, reason=reason)
        else:
            self._quiet += 1
