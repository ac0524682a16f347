"""rvasync between processes: ``rv.Transport`` on a service the runner chose.

Rows (variants):

- *in-process daemon* (the default, IPM-style mode, and the headline): every
  worker opens ``rv.Transport(service=<free UDP port>, network=None)``; the first
  network transport of a loop starts that loop's daemon, and the daemons of the
  processes meet on the service over the loopback interface.
- *standalone daemon*: the runner starts one ``python -m rvasync daemon`` process
  on 127.0.0.1 (the broker-like layout NATS has), and every worker attaches to it
  with ``daemon="127.0.0.1:<port>"``.
- *busy polling* (request/reply only): the in-process daemon with
  ``rv.Transport(busy_poll=0.001)``, which keeps each process's loop polling
  for 1 ms after traffic instead of sleeping (a CPU core for lower latency).
- *service key*: the in-process daemon with ``rv.Transport(service_key=...)``:
  every datagram between the daemons carries a keyed BLAKE2b MAC, checked on
  arrival (issue #24; what authenticating the service costs).
- *no reply polling* (request/reply only): the in-process daemon with
  ``rv.Transport(reply_poll=0)``: the requester sleeps while its request is out
  instead of polling for the reply (the default polls up to 0.5 ms), so the
  row shows what being woken costs.
- *prebuilt* (request/reply only): the in-process daemon re-sending one
  prebuilt request message (every other row builds a new one per request, as
  programs do): what building the message costs a round trip.
- *direct communication* (request/reply only): both transports with a
  two-part service (``"<port>:"``); the requester learns the replier's inbox
  once and sends every request there, so requests and replies both travel over
  the transports' own UDP channels instead of through the daemons.
- *virtual circuit* (one-to-one pub/sub only): the publisher asks the
  subscriber for a circuit, connects to the accept terminal it is invited to,
  and publishes every message on the circuit (ordered, acknowledged,
  retransmitted), beside the plain transport's row.

Rows report "not available in this rvasync build" until the names they need exist.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.environments import UdpPort
from benchmarks.interfaces import PubSub, ReqRep
from benchmarks.procs import LOOPBACK, Broker, free_port
from benchmarks.registry import Params, Scenario, Variant, adapter
from benchmarks.systems.rvasync_api import ListenerPubSub, missing, missing_module

IN_PROCESS_DAEMON = Variant(name="ipm", label="in-process daemon", headline=True)
#: Request/reply only: the in-process daemon with busy polling (rv.Transport(busy_poll=...)).
BUSY_POLL_SECONDS = 0.001
BUSY_POLL = Variant(
    name="ipm-busy-poll",
    label=f"in-process daemon, busy_poll={BUSY_POLL_SECONDS * 1000:g} ms",
    headline=False,
    unavailable=lambda: missing_module("rvasync.busypoll", "BusyPoller"),
)
#: Request/reply only: the in-process daemon with the requester sleeping while it waits.
NO_REPLY_POLL = Variant(
    name="ipm-no-reply-poll",
    label="in-process daemon, reply_poll=0",
    headline=False,
    unavailable=lambda: missing_module("rvasync.transport.network", "REPLY_POLL"),
)
#: The in-process daemon with a service key (a MAC on every datagram between daemons).
SERVICE_KEY = Variant(
    name="ipm-service-key",
    label="in-process daemon, service key",
    headline=False,
    unavailable=lambda: missing_module("rvasync.protocol.servicekey", "DatagramMac"),
)
#: The secret the service-key rows share (any 16 bytes or more will do).
BENCH_SERVICE_KEY = "rvasync-benchmark-service-key"
#: Request/reply only: both transports with direct communication (two-part service
#: "<port>:"); the requester asks the replier for its inbox once, then sends every
#: request to that inbox, so requests and replies both take the direct channels.
DIRECT = Variant(
    name="ipm-direct",
    label="in-process daemon, direct communication (requests to the replier's inbox)",
    headline=False,
    unavailable=lambda: missing_module("rvasync.transport.direct", "DirectChannel"),
)
#: The same with both transports attached to one standalone daemon: what direct
#: communication saves against the daemon path of the Rendezvous model (a daemon
#: process between the programs; with an in-process daemon the "hops" are calls).
STANDALONE_DIRECT = Variant(
    name="standalone-direct",
    label="standalone daemon, direct communication (requests to the replier's inbox)",
    headline=False,
    unavailable=lambda: missing_module("rvasync.transport.direct", "DirectChannel"),
)
#: The variants whose requests go to the replier's inbox over the direct channels.
DIRECT_VARIANTS = frozenset({DIRECT.name, STANDALONE_DIRECT.name})
#: One-to-one pub/sub only: the messages travel on a virtual circuit (rv.VcTransport).
CIRCUIT = Variant(
    name="ipm-circuit",
    label="in-process daemon, virtual circuit",
    headline=False,
    unavailable=lambda: missing("VcTransport"),
)
#: Request/reply only: the in-process daemon re-sending one prebuilt request (beside the
#: headline row, which builds a new message per request as programs do).
PREBUILT = Variant(
    name="ipm-prebuilt",
    label="in-process daemon, one prebuilt request re-sent",
    headline=False,
)
#: Where the circuit's publisher asks for an invitation.
CIRCUIT_ASK = "bench.circuit.ask"
STANDALONE_DAEMON = Variant(
    name="standalone",
    label="standalone daemon",
    headline=False,
    unavailable=lambda: missing_module("rvasync.cli.daemon", "run"),
)
#: The variants that run a standalone daemon process.
STANDALONE_VARIANTS = frozenset({STANDALONE_DAEMON.name, STANDALONE_DIRECT.name})


class RvService(UdpPort):
    """The service's UDP port, plus a standalone daemon process for that variant."""

    broker: Broker | None = None

    async def __aenter__(self) -> dict[str, Any]:
        env = await super().__aenter__()
        if self.variant.name in STANDALONE_VARIANTS:
            port = free_port()
            self.broker = Broker(
                [
                    sys.executable,
                    "-m",
                    "rvasync",
                    "daemon",
                    "--host",
                    LOOPBACK,
                    "--listen",
                    str(port),
                ],
                self.workdir / f"rvasync-daemon-{port}.log",
            )
            self.broker.start(port)
            env["daemon"] = f"{LOOPBACK}:{port}"
        return env

    async def __aexit__(self, *exc_info: object) -> None:
        if self.broker is not None:
            self.broker.stop()


class _RvNetwork:
    """One ``rv.Transport`` per process, on the service the runner chose."""

    environment = RvService
    env: dict[str, Any]
    index: int

    @classmethod
    def unavailable(cls) -> str | None:
        return missing("Transport", "Message")

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (IN_PROCESS_DAEMON, SERVICE_KEY, STANDALONE_DAEMON)

    async def connect(self) -> None:
        import rvasync as rv

        self.rv = rv
        self.listeners: list[Any] = []
        options: dict[str, Any] = {}
        if self.variant.name == BUSY_POLL.name:
            options["busy_poll"] = BUSY_POLL_SECONDS
        elif self.variant.name == NO_REPLY_POLL.name:
            options["reply_poll"] = 0.0
        elif self.variant.name == SERVICE_KEY.name:
            options["service_key"] = BENCH_SERVICE_KEY
        service = str(self.env["ports"][0])
        if self.variant.name in DIRECT_VARIANTS:
            service += ":"  # an ephemeral direct port
        self.transport = rv.Transport(
            service=service,
            network=None,
            daemon=self.env.get("daemon"),
            **options,
        )
        await asyncio.wait_for(self.transport.open(), 30)

    async def close(self) -> None:
        for listener in getattr(self, "listeners", ()):
            await asyncio.wait_for(listener.close(), 10)
        transport = getattr(self, "transport", None)
        if transport is not None:
            await asyncio.wait_for(transport.close(), 30)


@adapter
class RvNetworkPubSub(ListenerPubSub, _RvNetwork, PubSub):
    """Publish with ``await t.send(msg)``, receive with ``async for`` on a Listener.

    The circuit variant publishes on a virtual circuit terminal instead.
    """

    system = "rvasync"
    capability = "pubsub"

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (IN_PROCESS_DAEMON, SERVICE_KEY, CIRCUIT, STANDALONE_DAEMON)

    @classmethod
    def not_applicable(cls, scenario: Scenario, params: Params, variant: Variant) -> str | None:
        if variant.name != CIRCUIT.name:
            return None
        if int(params.get("subs", 1)) != 1 or int(params.get("pubs", 1)) != 1:
            return "a virtual circuit joins exactly two terminals (one publisher, one subscriber)"
        if int(params.get("messages", 0)) < 2:
            return "one message says nothing about a circuit's throughput"
        return None

    async def subscribe(self, subject: str) -> Any:
        if self.variant.name != CIRCUIT.name:
            return await super().subscribe(subject)
        rv, transport = self.rv, self.transport
        self.vc = rv.VcTransport.accept(transport)
        listener = self.vc.listen(subject)
        self.listeners.append(listener)
        asks = transport.listen(CIRCUIT_ASK)
        self.listeners.append(asks)
        connect_subject = self.vc.connect_subject

        async def invite() -> None:
            async for ask in asks:
                invitation = rv.Message(fields={}, reply_subject=connect_subject)
                await transport.send_reply(invitation, ask)

        self.inviter = asyncio.create_task(invite())
        return listener

    async def wait_subscribers(self, count: int, timeout: float) -> None:
        if self.variant.name != CIRCUIT.name:
            return
        rv, transport = self.rv, self.transport
        async with asyncio.timeout(timeout):
            while True:
                try:
                    invitation = await transport.send_request(rv.Message(CIRCUIT_ASK, {}), 1.0)
                    break
                except rv.RequestTimeout:
                    continue
            self.vc = rv.VcTransport.connect(transport, invitation.reply_subject)
            await self.vc.wait_connected()

    async def publish(self, handle: Any) -> None:
        if self.variant.name == CIRCUIT.name:
            await self.vc.send(handle)
        else:
            await self.transport.send(handle)

    async def publish_new(self, subject: str, payload: bytes) -> None:
        msg = self.rv.Message(subject, {"data": payload})
        if self.variant.name == CIRCUIT.name:
            await self.vc.send(msg)
        else:
            await self.transport.send(msg)

    async def close(self) -> None:
        inviter = getattr(self, "inviter", None)
        if inviter is not None:
            inviter.cancel()
        vc = getattr(self, "vc", None)
        if vc is not None and not vc.disconnected:
            await asyncio.wait_for(vc.close(), 30)
        await super().close()


@adapter
class RvNetworkReqRep(_RvNetwork, ReqRep):
    """``send_request`` against a listener answering with ``send_reply``."""

    system = "rvasync"
    capability = "reqrep"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: subject -> where its requests go (the replier's inbox on the direct rows)
        self.inboxes: dict[str, str] = {}
        #: payload -> the one request message of the prebuilt row
        self.prebuilt: dict[bytes, Any] = {}

    @classmethod
    def variants(cls) -> Sequence[Variant]:
        return (
            IN_PROCESS_DAEMON,
            PREBUILT,
            NO_REPLY_POLL,
            BUSY_POLL,
            SERVICE_KEY,
            DIRECT,
            STANDALONE_DAEMON,
            STANDALONE_DIRECT,
        )

    async def serve(self, subject: str) -> None:
        rv, transport = self.rv, self.transport
        if self.variant.name in DIRECT_VARIANTS:
            # Requests come to this inbox (direct); the subject only tells where it is.
            inbox = transport.create_inbox()
            where = transport.listen(subject)
            self.listeners.append(where)

            async def tell() -> None:
                async for ask in where:
                    await transport.send_reply(rv.Message(fields={"inbox": inbox}), ask)

            self.teller = asyncio.create_task(tell())
            subject = inbox
        listener = transport.listen(subject)
        self.listeners.append(listener)

        async def echo() -> None:
            async for request in listener:
                await transport.send_reply(rv.Message(fields={"data": request["data"]}), request)

        self.server = asyncio.create_task(echo())

    def prepare(self, subject: str, payload: bytes) -> Any:
        return self.rv.Message(subject, {"data": payload})

    async def request(self, handle: Any, timeout: float) -> bytes:
        reply = await self.transport.send_request(handle, timeout)
        return bytes(reply["data"])

    async def request_new(self, subject: str, payload: bytes, timeout: float) -> bytes:
        to = self.inboxes.get(subject)
        if to is None:
            to = self.inboxes[subject] = await self._destination(subject, timeout)
        if self.variant.name == PREBUILT.name:
            msg = self.prebuilt.get(payload)
            if msg is None:
                msg = self.prebuilt[payload] = self.rv.Message(to, {"data": payload})
        else:
            msg = self.rv.Message(to, {"data": payload})
        reply = await self.transport.send_request(msg, timeout)
        return bytes(reply["data"])

    async def _destination(self, subject: str, timeout: float) -> str:
        """Where requests on ``subject`` go: the subject, or (direct rows) the replier's
        inbox, asked for once (the first warm-up request)."""
        if self.variant.name not in DIRECT_VARIANTS:
            return subject
        answer = await self.transport.send_request(self.rv.Message(subject, {}), timeout)
        return str(answer["inbox"])

    async def close(self) -> None:
        for task in (getattr(self, "server", None), getattr(self, "teller", None)):
            if task is not None:
                task.cancel()
        await super().close()
