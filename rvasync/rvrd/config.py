"""The router's configuration: a TOML file (or the same structure as a dict), validated.

Every error names where it is: the key path (``neighbor[2].cost``) and, when
read from a file, its line, so ``rvasync router --config`` reports a bad file
in one line. The format is documented in docs/routing.md.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rvasync.errors import InvalidArgument, InvalidSubject
from rvasync.security import Security
from rvasync.subjects import validate_subject

__all__ = [
    "DaemonLogin",
    "NeighborConfig",
    "NetworkConfig",
    "RouterConfig",
    "load_config",
    "parse_config",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


#: Keys of a [[network]] table that log the router in to a secure standalone daemon.
LOGIN_KEYS = ("daemon_cert", "user", "password_file", "user_cert", "user_key", "server_name")


@dataclass(frozen=True)
class DaemonLogin:
    """How the router logs in to a secure standalone daemon (the ``rv.Security`` options;
    the password is read from ``password_file``, its first line, when the router starts)."""

    daemon_cert: str | None = None
    user: str | None = None
    password_file: str | None = None
    user_cert: str | None = None
    user_key: str | None = None
    server_name: str | None = None

    def security(self) -> Security:
        password = None
        if self.password_file is not None:
            try:
                with open(self.password_file, encoding="utf-8") as f:
                    password = f.readline().rstrip("\r\n")
            except OSError as exc:
                raise InvalidArgument(
                    f"password_file {self.password_file}: {exc.strerror or exc}"
                ) from None
        return Security(
            daemon_cert=self.daemon_cert,
            user=self.user,
            password=password,
            user_cert=self.user_cert,
            user_key=self.user_key,
            server_name=self.server_name,
        )


@dataclass(frozen=True)
class NetworkConfig:
    """A local network the router attaches to (as a transport would)."""

    name: str
    service: str | None = None
    network: str | None = None
    daemon: str | None = None
    imports: tuple[str, ...] = (">",)
    exports: tuple[str, ...] = (">",)
    #: Import subject weights (pattern, weight): see docs/routing.md "Subject weights".
    weights: tuple[tuple[str, int], ...] = ()
    #: Logging in to a secure standalone ``daemon`` (None: a plain daemon, or in-process).
    login: DaemonLogin | None = None

    def security(self) -> Security | None:
        """The transport's ``security`` for this network (None: no login)."""
        return None if self.login is None else self.login.security()


@dataclass(frozen=True)
class NeighborConfig:
    """Another router: ``address`` (host:port) to dial, or None to wait for it to dial."""

    name: str
    address: tuple[str, int] | None = None
    cost: int = 1


@dataclass(frozen=True)
class RouterConfig:
    name: str
    listen: tuple[str, int] | None = None
    networks: tuple[NetworkConfig, ...] = ()
    neighbors: tuple[NeighborConfig, ...] = ()
    retry_min: float = 0.2
    retry_max: float = 10.0
    heartbeat: float = 1.0
    neighbor_timeout: float = 5.0
    #: The router's state file (rvasync.rvrd.state), or None.
    state: str | None = None


class _Where:
    """Turns a key path into "line N: path" using the source text when there is one."""

    def __init__(self, text: str | None, origin: str) -> None:
        self.lines = text.splitlines() if text is not None else None
        self.origin = origin

    def fail(self, path: str, problem: str, table: str | None = None, index: int = 0) -> None:
        line = self._line(path, table, index)
        where = f"{self.origin}:{line}: " if line else f"{self.origin}: "
        raise InvalidArgument(f"{where}{path}: {problem}")

    def _line(self, path: str, table: str | None, index: int) -> int | None:
        if self.lines is None:
            return None
        key = path.rsplit(".", 1)[-1].split("[", 1)[0]
        start = 0
        if table is not None:
            header = re.compile(rf"^\s*\[\[\s*{re.escape(table)}\s*\]\]")
            seen = -1
            for n, text in enumerate(self.lines):
                if header.match(text):
                    seen += 1
                    if seen == index:
                        start = n
                        break
            if key == table:
                return start + 1
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for n in range(start, len(self.lines)):
            if pattern.match(self.lines[n]):
                return n + 1
        return start + 1 if table is not None else None


def load_config(path: str | Path) -> RouterConfig:
    """Read and validate a TOML configuration file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(
            f"{p}: cannot read the router configuration: {exc.strerror}"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{p}: not valid TOML: {exc}") from None
    return parse_config(data, text=text, origin=str(p))


def parse_config(
    data: Mapping[str, Any], *, text: str | None = None, origin: str = "router config"
) -> RouterConfig:
    """Validate the configuration structure (as read from TOML)."""
    w = _Where(text, origin)
    if not isinstance(data, Mapping):
        w.fail("(top)", "the configuration must be a table")
    known = {"router", "network", "neighbor"}
    for key in data:
        if key not in known:
            w.fail(str(key), f"unknown section (expected one of {sorted(known)})")
    router = data.get("router")
    if not isinstance(router, Mapping):
        w.fail("router", "missing [router] table (with at least name = ...)")
    assert isinstance(router, Mapping)
    _only(
        w,
        "router",
        router,
        {"name", "listen", "retry_min", "retry_max", "heartbeat", "neighbor_timeout", "state"},
    )
    name = _name(w, "router.name", router.get("name"))
    listen = None
    if "listen" in router:
        listen = _address(w, "router.listen", router["listen"], allow_zero=True)
    retry_min = _seconds(w, "router.retry_min", router.get("retry_min", 0.2))
    retry_max = _seconds(w, "router.retry_max", router.get("retry_max", 10.0))
    if retry_max < retry_min:
        w.fail("router.retry_max", f"must be >= retry_min ({retry_min})")
    heartbeat = _seconds(w, "router.heartbeat", router.get("heartbeat", 1.0))
    timeout = _seconds(w, "router.neighbor_timeout", router.get("neighbor_timeout", 5.0))
    if timeout <= heartbeat:
        w.fail("router.neighbor_timeout", f"must be longer than heartbeat ({heartbeat})")
    state = router.get("state")
    if state is not None and (not isinstance(state, str) or not state):
        w.fail("router.state", f"must be the path of the router's state file, got {state!r}")

    networks = []
    raw_nets = data.get("network", [])
    if not isinstance(raw_nets, list) or not raw_nets:
        w.fail("network", "at least one [[network]] table is required")
    seen: set[str] = set()
    for i, net in enumerate(raw_nets):
        path = f"network[{i}]"
        if not isinstance(net, Mapping):
            w.fail(path, "must be a table", "network", i)
        _only(
            w,
            path,
            net,
            {"name", "service", "network", "daemon", "import", "export", "weights", *LOGIN_KEYS},
            "network",
            i,
        )
        nname = _name(w, f"{path}.name", net.get("name"), "network", i)
        if nname in seen:
            w.fail(f"{path}.name", f"network {nname!r} is listed twice", "network", i)
        seen.add(nname)
        values: dict[str, str | None] = {}
        for key in ("service", "network", "daemon"):
            value = net.get(key)
            if value is not None and not isinstance(value, str | int):
                w.fail(f"{path}.{key}", "must be a string", "network", i)
            values[key] = None if value is None else str(value)
        networks.append(
            NetworkConfig(
                name=nname,
                service=values["service"],
                network=values["network"],
                daemon=values["daemon"],
                imports=_patterns(w, f"{path}.import", net.get("import", [">"]), "network", i),
                exports=_patterns(w, f"{path}.export", net.get("export", [">"]), "network", i),
                weights=_weights(w, f"{path}.weights", net.get("weights", {}), i),
                login=_login(w, path, net, i),
            )
        )

    neighbors = []
    raw_nbrs = data.get("neighbor", [])
    if not isinstance(raw_nbrs, list):
        w.fail("neighbor", "must be an array of [[neighbor]] tables")
    seen = set()
    for i, nbr in enumerate(raw_nbrs):
        path = f"neighbor[{i}]"
        if not isinstance(nbr, Mapping):
            w.fail(path, "must be a table", "neighbor", i)
        _only(w, path, nbr, {"name", "address", "cost"}, "neighbor", i)
        nname = _name(w, f"{path}.name", nbr.get("name"), "neighbor", i)
        if nname == name:
            w.fail(f"{path}.name", "a router cannot be its own neighbor", "neighbor", i)
        if nname in seen:
            w.fail(f"{path}.name", f"neighbor {nname!r} is listed twice", "neighbor", i)
        seen.add(nname)
        address = None
        if "address" in nbr:
            address = _address(w, f"{path}.address", nbr["address"], table="neighbor", index=i)
        cost = nbr.get("cost", 1)
        if not isinstance(cost, int) or isinstance(cost, bool) or not 1 <= cost <= 1_000_000:
            w.fail(
                f"{path}.cost", f"must be an integer from 1 to 1000000, got {cost!r}", "neighbor", i
            )
        neighbors.append(NeighborConfig(nname, address, cost))
    return RouterConfig(
        name=name,
        listen=listen,
        networks=tuple(networks),
        neighbors=tuple(neighbors),
        retry_min=retry_min,
        retry_max=retry_max,
        heartbeat=heartbeat,
        neighbor_timeout=timeout,
        state=state,
    )


def _login(w: _Where, path: str, net: Mapping[str, Any], index: int) -> DaemonLogin | None:
    """The [[network]]'s login to a secure daemon, checked as rv.Security checks it."""
    given = {key: net[key] for key in LOGIN_KEYS if key in net}
    if not given:
        return None
    for key, value in given.items():
        if not isinstance(value, str) or not value:
            w.fail(f"{path}.{key}", "must be a non-empty string", "network", index)
    if net.get("daemon") is None:
        w.fail(f"{path}.{next(iter(given))}", "a login needs daemon = host:port", "network", index)
    if "password_file" in given and "user" not in given:
        w.fail(f"{path}.password_file", "needs user = ...", "network", index)
    if "user" in given and not ("password_file" in given or "user_cert" in given):
        w.fail(f"{path}.user", "needs password_file or user_cert", "network", index)
    return DaemonLogin(**given)


def _only(
    w: _Where,
    path: str,
    table: Mapping[str, Any],
    allowed: set[str],
    name: str | None = None,
    index: int = 0,
) -> None:
    for key in table:
        if key not in allowed:
            w.fail(f"{path}.{key}", f"unknown key (expected one of {sorted(allowed)})", name, index)


def _name(w: _Where, path: str, value: Any, table: str | None = None, index: int = 0) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        w.fail(path, f"must be 1-64 letters, digits, '-' or '_', got {value!r}", table, index)
    assert isinstance(value, str)
    return value


def _seconds(w: _Where, path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        w.fail(path, f"must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        w.fail(path, f"must be > 0 seconds, got {value!r}")
    return float(value)


def _address(
    w: _Where,
    path: str,
    value: Any,
    *,
    allow_zero: bool = False,
    table: str | None = None,
    index: int = 0,
) -> tuple[str, int]:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str):
        w.fail(path, f"must be 'host:port' or a port, got {value!r}", table, index)
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    low = 0 if allow_zero else 1
    if not low <= port <= 65535 or not host:
        w.fail(
            path,
            f"must be 'host:port' with a port from {low} to 65535, got {value!r}",
            table,
            index,
        )
    return host, port


#: Largest subject weight.
MAX_WEIGHT = 1_000_000


def _weights(w: _Where, path: str, value: Any, index: int) -> tuple[tuple[str, int], ...]:
    """``weights = { "PATTERN" = weight, ... }``: integers from 1 to MAX_WEIGHT."""
    if not isinstance(value, Mapping):
        w.fail(path, 'must be a table of "subject pattern" = weight', "network", index)
    out = []
    for pattern, weight in value.items():
        _patterns(w, path, [pattern], "network", index)
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= MAX_WEIGHT:
            w.fail(
                path,
                f"weight of {pattern!r} must be an integer from 1 to {MAX_WEIGHT}, got {weight!r}",
                "network",
                index,
            )
        out.append((str(pattern), int(weight)))
    return tuple(out)


def _patterns(w: _Where, path: str, value: Any, table: str, index: int) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        w.fail(path, "must be a non-empty list of subject patterns", table, index)
    for pattern in value:
        if not isinstance(pattern, str):
            w.fail(path, f"subject patterns must be strings, got {pattern!r}", table, index)
        try:
            validate_subject(pattern, wildcards=True)
        except InvalidSubject as exc:
            w.fail(path, f"bad subject pattern {pattern!r}: {exc}", table, index)
        if pattern.split(".", 1)[0] in ("_INBOX", "_LOCAL", "_RV", "_RVRD"):
            w.fail(
                path,
                f"{pattern!r}: inbox, _LOCAL, _RV and _RVRD subjects never cross routers",
                table,
                index,
            )
    return tuple(value)
