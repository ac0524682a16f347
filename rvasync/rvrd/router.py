"""Router: the routing daemon's asyncio driver around the sans-IO :class:`RouterCore`.

It owns the sockets and tasks: one :class:`~rvasync.rvrd.attach.Attachment`
per local network, a TCP server for neighbors that dial in, a dial loop with
exponential backoff per neighbor that has an address, one reader task per
established link, and a ticker (link pings, acknowledgements, loss reports).
Every decision (what to listen to, where a message goes, what was lost) is
the core's; this module only carries them out.

Advisories: ``_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.CONNECTED`` / ``.DISCONNECTED``
(fields ``router``, ``neighbor``, ``reason``) on every attached network, and
``_RV.ERROR.SYSTEM.DATALOSS.ROUTER`` where the core says (its ``Present``
outputs; fields ``router``, ``lost``, ``exact``, ``reason`` and, when known,
``network``, ``origin``, ``subject``, ``since``, ``until``): a count is
aggregated per tick, a window is presented at once, where it falls in the
stream (docs/routing.md, "What a router outage loses").
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack

from rvasync._logging import stderr_logger
from rvasync.advisories import log_unheard
from rvasync.advmsg import SYSTEM, AdvisoryClass, make_advisory
from rvasync.daemon.service import REANNOUNCE_HEARTBEATS
from rvasync.errors import InvalidArgument, TransportClosed
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol.rvrd import (
    Deliver,
    DeliverRun,
    ListenSet,
    LossReport,
    NetworkPolicy,
    Output,
    Present,
    RouterCore,
    SendFrame,
    SendLan,
    TopologyChanged,
)
from rvasync.protocol.rvrd import frames as link_frames
from rvasync.rvdatetime import DateTime
from rvasync.rvrd.attach import Attachment, Tag
from rvasync.rvrd.config import RouterConfig, load_config, parse_config
from rvasync.rvrd.links import NeighborLink
from rvasync.rvrd.state import RouterState

__all__ = ["Router"]

TICK = 0.25
#: Seconds after its start when a router's networks have announced their interest: after
#: the daemons' last re-announcement (at their default 1 s heartbeat), with a margin.
SETTLE_AFTER = REANNOUNCE_HEARTBEATS[-1] * 1.0 + 2.0


class Router:
    """A routing daemon. ``config``: a :class:`RouterConfig`, a TOML file path, or a dict
    with the file's structure. ``await router.start()`` (or ``async with``)."""

    def __init__(self, config: RouterConfig | str | Path | Mapping[str, Any]) -> None:
        if isinstance(config, RouterConfig):
            self.config = config
        elif isinstance(config, str | Path):
            self.config = load_config(config)
        elif isinstance(config, Mapping):
            self.config = parse_config(config)
        else:
            raise InvalidArgument(
                f"config must be a RouterConfig, a file path or a dict, got {type(config).__name__}"
            )
        cfg = self.config
        self.name = cfg.name
        #: This start of the router: a number never used before by its name (a restarted
        #: router is a new incarnation; see RouterCore).
        self.incarnation = secrets.randbits(48)
        self.core = RouterCore(
            cfg.name,
            {n.name: NetworkPolicy(n.imports, n.exports, n.weights) for n in cfg.networks},
            incarnation=self.incarnation,
        )
        self._state = RouterState(cfg.state, cfg.name) if cfg.state is not None else None
        self._log = stderr_logger()
        self.attachments: dict[str, Attachment] = {}
        self._links: dict[str, NeighborLink] = {}
        self._neighbors = {n.name: n for n in cfg.neighbors}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        #: Counted losses to present at the next tick, aggregated: (network, report with
        #: lost 0) -> messages.
        self._losses: dict[tuple[str, LossReport], int] = {}
        #: (network, LAN peer) -> when it was last heard
        self._lan_heard: dict[tuple[str, str], float] = {}
        self._changed = asyncio.Event()
        self._closed = False
        self._started = False
        self.port: int | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Router:
        if self._started:
            return self
        self._started = True
        try:
            for net in self.config.networks:
                attachment = Attachment(
                    self.name,
                    net,
                    on_message=self._on_message,
                    on_batch=self._on_batch,
                    on_interest=self._on_interest,
                    on_lan=self._on_lan,
                    on_error=self._error,
                )
                self.attachments[net.name] = attachment
            self._run(self.core.start())
            for attachment in self.attachments.values():
                await attachment.open()
            if self._state is not None:
                self._state.begin(self.incarnation)
                since = self._state.predecessor_alive
                if since is not None:
                    self._run(self.core.restarted(since, time.time()))
            if self.config.listen is not None:
                host, port = self.config.listen
                self._server = await asyncio.get_running_loop().create_server(
                    lambda: self._new_link(None), host, port
                )
                self.port = self._server.sockets[0].getsockname()[1]
            for nbr in self.config.neighbors:
                if nbr.address is not None:
                    self._spawn(self._dial_loop(nbr.name))
            self._spawn(self._ticker())
            self._spawn(self._settle_interest())
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        for link in list(self._links.values()):
            link.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for attachment in self.attachments.values():
            with contextlib.suppress(Exception):
                await attachment.close()

    async def __aenter__(self) -> Router:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ status

    @property
    def neighbors(self) -> list[str]:
        """Neighbors whose links are up."""
        return sorted(self._links)

    def listening(self, network: str) -> frozenset[str]:
        """Subjects the router listens to on ``network`` for the rest of the domain."""
        return self.attachments[network].listening

    def reachable(self) -> frozenset[str]:
        """Routers this one has a path to (itself included)."""
        return frozenset(self.core.topology.reachable)

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` is true (re-checked on every routing change)."""
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK):
                        await self._changed.wait()

    # ------------------------------------------------------------------ core I/O

    def _run(self, outputs: list[Output]) -> None:
        """Carry out the core's outputs, in order."""
        #: Consecutive deliveries into one network under one subject (a batch passing
        #: through): published together, in order, before any other output.
        run: list[Deliver] = []
        for out in outputs:
            # Class identity, not isinstance: no call per output on the path of every batch.
            if out.__class__ is Deliver:
                if run and (out.network != run[0].network or out.subject != run[0].subject):
                    self._deliver(run)
                    run = []
                run.append(out)
                continue
            if run:
                self._deliver(run)
                run = []
            if out.__class__ is DeliverRun:
                self._deliver_batch(out)
            elif out.__class__ is SendFrame:
                self._send_frame(out)
            else:
                self._carry(out)
        if run:
            self._deliver(run)

    def _carry(self, out: Output) -> None:
        """The outputs that are not on the path of every message."""
        if isinstance(out, SendLan):
            self.attachments[out.network].publish_record(link_frames.encode(out.frame))
        elif isinstance(out, ListenSet):
            self._log.info(
                "listening for the domain",
                router=self.name,
                network=out.network,
                subjects=sorted(out.subjects),
            )
            self.attachments[out.network].set_listens(out.subjects)
            self._changed.set()
        elif isinstance(out, Present):
            self._present(out)
        elif isinstance(out, TopologyChanged):
            self._log.info(
                "routing domain changed", router=self.name, reachable=sorted(out.reachable)
            )
            self._changed.set()

    def _send_frame(self, out: SendFrame) -> None:
        link = self._links.get(out.neighbor)
        frame = out.frame
        if link is not None and link.send(frame):
            return
        if (
            link is not None
            and not link.closed
            and isinstance(frame, link_frames.DataFrame | link_frames.BatchFrame)
        ):
            # Refused by a link too far behind: counted (a closed link's core counts it).
            self._run(self.core.unsent(out.neighbor, frame))

    def _deliver(self, run: list[Deliver]) -> None:
        """Publish consecutive deliveries of one subject into one network."""
        first = run[0]
        attachment = self.attachments[first.network]
        if len(run) == 1:
            lost = 0 if attachment.deliver(first.subject, first.payload, first.tag) else 1
        else:
            lost = attachment.deliver_run(
                first.subject, [out.payload for out in run], [out.tag for out in run]
            )
        if lost:
            self._run(self.core.publish_failed(first.network, first.subject, lost))

    def _deliver_batch(self, out: DeliverRun) -> None:
        """Publish a batch passing through into one network."""
        lost = self.attachments[out.network].deliver_batch(
            out.subject, out.payloads, out.origin, out.importer, out.seq, out.hops
        )
        if lost:
            self._run(self.core.publish_failed(out.network, out.subject, lost))

    def _on_message(self, network: str, subject: str, payload: bytes, tag: Tag | None) -> None:
        if self._closed:
            return
        try:
            self._run(self.core.import_message(network, subject, payload, tag))
        except Exception:
            self._error("routing a message", network=network, subject=subject)

    def _on_batch(self, network: str, subject: str, payloads: list[bytes]) -> None:
        if self._closed:
            return
        try:
            self._run(self.core.import_batch(network, subject, payloads))
        except Exception:
            self._error("routing messages", network=network, subject=subject)

    def _on_lan(self, network: str, peer: str, frame: bytes | None) -> None:
        """Another router was heard on ``network`` (a presence or a record)."""
        if self._closed:
            return
        try:
            self._lan_heard[(network, peer)] = asyncio.get_running_loop().time()
            self._run(self.core.lan_peer_up(network, peer))
            if frame is not None:
                self._run(self.core.receive_lan(network, peer, msgpack.unpackb(frame, raw=False)))
            self._changed.set()
        except Exception:
            self._error("a LAN peer's record", network=network, peer=peer)

    def _on_interest(self, network: str, subject: str, added: bool) -> None:
        if self._closed:
            return
        self._log.info(
            "interest on a network", router=self.name, network=network, subject=subject,
            listening=added,
        )  # fmt: skip
        core = self.core
        outs = (
            core.add_interest(network, subject) if added else core.remove_interest(network, subject)
        )
        self._run(outs)
        self._changed.set()

    def _error(self, doing: str, **details: Any) -> None:
        self._log.exception("router error; it carries on", router=self.name, doing=doing, **details)

    # ------------------------------------------------------------------ advisories

    def _present(self, out: Present) -> None:
        """A DATALOSS the core asks for: a count waits for the tick (aggregated); a window
        leaves at once, so that it falls where the gap is in the network's stream."""
        report = out.report
        if not report.exact:
            self.attachments[out.network].publish_advisory(self._dataloss(report, report.lost))
            return
        key = (out.network, LossReport(report.router, 0, report.target, 0, True, report.reason,
                                       report.origin, report.subject))  # fmt: skip
        self._losses[key] = self._losses.get(key, 0) + report.lost

    def _flush_losses(self) -> None:
        losses, self._losses = self._losses, {}
        for (network, report), count in losses.items():
            self.attachments[network].publish_advisory(self._dataloss(report, count))

    @staticmethod
    def _dataloss(report: LossReport, lost: int) -> Message:
        fields: list[tuple[str, Any, Any]] = [
            ("router", report.router, FieldType.STRING),
            ("lost", lost, FieldType.U32),
            ("exact", report.exact, FieldType.BOOL),
            ("reason", report.reason, FieldType.STRING),
        ]
        for name, value in (
            ("network", report.target),
            ("origin", report.origin),
            ("subject", report.subject),
        ):
            if value is not None:
                fields.append((name, value, FieldType.STRING))
        for name, when in (("since", report.since), ("until", report.until)):
            if when is not None:
                fields.append((name, DateTime.from_timestamp(when), FieldType.DATETIME))
        return make_advisory(AdvisoryClass.ERROR, SYSTEM, "DATALOSS.ROUTER", fields=fields)

    def _neighbor_advisory(self, name: str, up: bool, reason: str) -> None:
        self._advise(
            make_advisory(
                AdvisoryClass.WARN,
                SYSTEM,
                "ROUTER.NEIGHBOR.CONNECTED" if up else "ROUTER.NEIGHBOR.DISCONNECTED",
                fields=[
                    ("router", self.name, FieldType.STRING),
                    ("neighbor", name, FieldType.STRING),
                    ("reason", reason, FieldType.STRING),
                ],
            )
        )

    def _advise(self, advisory: Message) -> None:
        """Publish ``advisory`` on every attached network; logged at DEBUG once it is out.

        The networks' listeners are who it is for. Only one that no network
        took (every publish failed, or no network attached) is logged at its
        own level, so that it is never lost silently.
        """
        published = [a.publish_advisory(advisory) for a in self.attachments.values()]
        if any(published):
            details = {f.name: f.value for f in advisory}
            self._log.debug("router advisory", subject=advisory.subject, fields=details)
        else:
            log_unheard(advisory)

    # ------------------------------------------------------------------ links

    def _new_link(self, expect: str | None) -> NeighborLink:
        """A protocol for one connection (dialed to ``expect``, or accepted: None)."""

        def hello(link: NeighborLink, name: str, incarnation: int) -> str | None:
            nbr = self._neighbors.get(name)
            if self._closed:
                return "the router is closing"
            if nbr is None:
                return f"router {name!r} is not a configured neighbor"
            if expect is not None and name != expect:
                return f"expected router {expect!r}, reached {name!r}"
            if name in self._links:
                return f"a link to {name!r} is already up"
            link.cost = nbr.cost
            self._links[name] = link
            self._run(self.core.link_up(name, nbr.cost, incarnation, time.time()))
            self._neighbor_advisory(name, True, "connected")
            self._changed.set()
            return None

        return NeighborLink(
            self.name,
            incarnation=self.incarnation,
            on_hello=hello,
            on_frame=self._link_frame,
            on_lost=self._link_lost,
            handshake_timeout=self.config.neighbor_timeout,
        )

    def _link_frame(self, link: NeighborLink, frame: list[Any]) -> None:
        self._run(self.core.receive(link.name, frame))

    def _link_lost(self, link: NeighborLink, reason: str) -> None:
        name = link.name
        if self._links.get(name) is not link:
            return
        del self._links[name]
        if self._closed:
            return
        self._log.warning("neighbor link lost", router=self.name, neighbor=name, reason=reason)
        self._run(self.core.link_down(name, time.time()))
        self._neighbor_advisory(name, False, reason)
        self._flush_losses()
        self._changed.set()

    async def _dial_loop(self, name: str) -> None:
        cfg = self.config
        nbr = self._neighbors[name]
        assert nbr.address is not None
        loop = asyncio.get_running_loop()
        delay = cfg.retry_min
        while not self._closed:
            if name in self._links:
                await asyncio.sleep(TICK)
                continue
            established = False
            try:
                async with asyncio.timeout(cfg.neighbor_timeout):
                    _, link = await loop.create_connection(
                        lambda: self._new_link(name), *nbr.address
                    )
                established = await asyncio.shield(link.done)
            except (OSError, TimeoutError) as exc:
                self._log.debug(
                    "neighbor not reachable",
                    router=self.name,
                    neighbor=name,
                    error=str(exc),
                    retry_in=delay,
                )
            if established:
                delay = cfg.retry_min
                continue
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(cfg.retry_max, delay * 2)

    async def _settle_interest(self) -> None:
        """Once this router's networks' daemons have announced what they listen to (they do
        when they discover its daemon, and twice more: REANNOUNCE_HEARTBEATS), stop
        advertising the predecessor's interest (RouterCore.interest_settled)."""
        await asyncio.sleep(max(self.config.neighbor_timeout, SETTLE_AFTER))
        if not self._closed:
            self._run(self.core.interest_settled())

    async def _ticker(self) -> None:
        loop = asyncio.get_running_loop()
        next_ping = 0.0
        while not self._closed:
            await asyncio.sleep(TICK)
            now = loop.time()
            try:
                self._run(self.core.tick(now))
                if now >= next_ping:
                    next_ping = now + self.config.heartbeat
                    for link in list(self._links.values()):
                        link.ping()
                    for attachment in self.attachments.values():
                        attachment.hello()
                    if self._state is not None:
                        self._state.alive()
                limit = self.config.neighbor_timeout
                for link in list(self._links.values()):
                    if link.silent_for(now) > limit:
                        link.fail(f"neighbor silent for {limit:g} s")
                for (network, peer), heard in list(self._lan_heard.items()):
                    if now - heard > limit:
                        del self._lan_heard[(network, peer)]
                        self._log.warning(
                            "LAN peer silent", router=self.name, network=network, peer=peer
                        )
                        self._run(self.core.lan_peer_down(network, peer))
                        self._changed.set()
                self._flush_losses()
            except TransportClosed:
                return
            except Exception:
                self._error("ticking")
