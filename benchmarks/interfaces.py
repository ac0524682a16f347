"""What an adapter provides, per capability.

An adapter is the thin layer between the shared scenario code and one system's
own API. It is deliberately small: the measuring loops live in the scenarios
and in :mod:`benchmarks.measure`, so all systems run the same loop and only the
calls that differ (publish, receive, request ...) go through the adapter.

Each adapter class declares ``system`` and ``capability`` and may override the
class-level hooks the runner calls in the parent process (:meth:`Adapter.unavailable`,
:meth:`Adapter.variants`, :meth:`Adapter.not_applicable`, :attr:`Adapter.environment`).
Instances live in the worker processes.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from benchmarks.registry import Params, Variant

if TYPE_CHECKING:
    from benchmarks.registry import Scenario

#: Called with each received payload; returns True once the consumer has seen enough.
Sink = Callable[[bytes], bool]


class Environment:
    """Resources the parent provides for one row (scenario, system, variant): a broker,
    ports ...

    An async context manager entered once before the repetitions and exited after
    them, also on failure and Ctrl-C; its value is a JSON-able dict handed to
    every worker. The default provides nothing.
    """

    def __init__(self, params: Params, workdir: Path, variant: Variant | None = None) -> None:
        self.params = params
        self.workdir = workdir
        self.variant = variant or Variant()

    async def __aenter__(self) -> dict[str, Any]:
        return {}

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class Adapter(abc.ABC):
    """Base of every adapter: one system's implementation of one capability."""

    system: ClassVar[str]
    capability: ClassVar[str]
    environment: ClassVar[type[Environment]] = Environment

    def __init__(
        self, params: Params, env: dict[str, Any], variant: Variant, index: int = 0
    ) -> None:
        self.params = params
        self.env = env
        self.variant = variant
        #: This worker's number within its role (subscriber 0, 1, ...).
        self.index = index

    @classmethod
    def unavailable(cls) -> str | None:
        """None if the system's package/API is importable here, else why not."""
        return None

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        """The rows this adapter contributes; one plain row by default."""
        return (Variant(),)

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        """None if this adapter can run ``scenario`` with ``params``, else the reason."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release whatever :meth:`connect` or the setup acquired."""


class PubSub(Adapter):
    """Publish/subscribe, between processes ("pubsub") or inside one ("inproc").

    Two ways to publish. :meth:`publish_new` builds a new message for every send,
    with the subject and payload field an application sets, as applications do:
    the headline rows use it. :meth:`publish` re-sends a *handle* made once by
    :meth:`prepare`, timing sending alone: the secondary "prebuilt" rows.
    """

    async def connect(self) -> None:
        """Open the connection/transport; called once per process."""

    @abc.abstractmethod
    async def subscribe(self, subject: str) -> Any:
        """Start receiving ``subject``; on return the interest is in effect."""

    @abc.abstractmethod
    async def consume(self, subscription: Any, sink: Sink) -> None:
        """Feed each received payload to ``sink`` until it returns True.

        Uses the system's natural receive loop (``async for`` where it has one).
        The caller may cancel this coroutine.
        """

    async def wait_subscribers(self, count: int, timeout: float) -> None:
        """Wait until ``count`` subscribers can receive what is published (ZeroMQ's
        slow-joiner problem); a no-op where subscribing is synchronous."""

    @abc.abstractmethod
    def prepare(self, subject: str, payload: bytes) -> Any:
        """Build, once, whatever :meth:`publish` sends for ``payload`` on ``subject``."""

    @abc.abstractmethod
    async def publish(self, handle: Any) -> None:
        """Send one prepared message."""

    async def publish_new(self, subject: str, payload: bytes) -> None:
        """Build one new message carrying ``payload`` on ``subject`` and send it.

        The default suits systems whose message *is* its subject and bytes (the
        prepared handle is then all an application builds); systems with a
        message object override it to build that object per send.
        """
        await self.publish(self.prepare(subject, payload))

    async def flush(self) -> None:
        """Push buffered messages out before the publisher stops its clock."""


class ReqRep(Adapter):
    """Request/reply: a replier echoes the request's payload back."""

    async def connect(self) -> None:
        """Open the connection/transport; called once per process."""

    @abc.abstractmethod
    async def serve(self, subject: str) -> None:
        """Start echoing requests on ``subject`` in the background; return once serving."""

    @abc.abstractmethod
    def prepare(self, subject: str, payload: bytes) -> Any:
        """Build, once, the request sent by :meth:`request`."""

    @abc.abstractmethod
    async def request(self, handle: Any, timeout: float) -> bytes:
        """Send one request and return the reply's payload."""

    async def request_new(self, subject: str, payload: bytes, timeout: float) -> bytes:
        """Build a new request carrying ``payload`` on ``subject``, as applications do for
        every request, send it and return the reply's payload (what the scenarios time).

        The default prepares and sends it, for systems whose request is its subject and
        payload bytes (nothing to build); systems with a message object build one here.
        """
        return await self.request(self.prepare(subject, payload), timeout)


class Fanout(Adapter):
    """Many listeners on distinct subjects, one of which matches what is sent."""

    @abc.abstractmethod
    async def setup(self, patterns: Sequence[str]) -> None:
        """Create one listener per pattern."""

    @abc.abstractmethod
    async def deliver(self, subject: str, payload: bytes, count: int, listener: int) -> int:
        """Send ``count`` messages to ``subject``, which pattern number ``listener``
        matches; return how many deliveries the listeners received."""


class Codec(Adapter):
    """Encode and decode one structured message (synchronous; micro-benchmark)."""

    @abc.abstractmethod
    def build(self, fields: Sequence[tuple[str, str, Any]]) -> Any:
        """The system's message holding ``fields`` (name, type tag, value)."""

    @abc.abstractmethod
    def encode(self, message: Any) -> bytes:
        """Wire bytes of ``message``."""

    @abc.abstractmethod
    def decode(self, data: bytes) -> Any:
        """A message back from ``data``."""


class Match(Adapter):
    """Subject matching against a set of listener patterns (synchronous; micro-benchmark)."""

    @abc.abstractmethod
    def build(self, patterns: Sequence[str]) -> None:
        """Index ``patterns``."""

    @abc.abstractmethod
    def match(self, subject: str) -> int:
        """How many indexed patterns match ``subject``."""
