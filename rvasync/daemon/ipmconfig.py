"""The in-process daemon's configuration file: TOML keys named after ``rv.Daemon``'s parameters.

The spec's IPM takes its parameters from four places, highest first: the
program's code, a configuration file the program names, a configuration file
found implicitly, and the defaults. rvasync maps them to:

* code: ``rv.Daemon(reliability=..., ...)`` started before the first
  transport (or keyword arguments to :meth:`~rvasync.Daemon.from_file`, which
  override the file's keys);
* an explicit file: ``rv.Daemon.from_file(path)``;
* the implicit file: ``$RVASYNC_IPM_CONFIG`` if set (the file must exist),
  else ``rvasync-ipm.toml`` in the working directory if there is one, read
  only when the program starts no daemon itself;
* the defaults: those of ``rv.Daemon``, with the in-process reliability
  interval of 5 seconds.

A file is flat TOML: ``reliability = 2.5``, ``max_datagram = 1400``. Every
problem (bad TOML, an unknown key, a table, a value the parameter refuses)
raises :class:`~rvasync.errors.InvalidArgument` naming the file, the line and
the key. Parameters are read when the loop's in-process daemon starts and are
frozen from then on (docs/daemon.md, "Configuring the in-process daemon").
"""

from __future__ import annotations

import inspect
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rvasync.errors import InvalidArgument, RvError

__all__ = ["ENV_VAR", "IMPLICIT_NAME", "STANDALONE_ONLY", "implicit_file", "read_config"]

#: The implicit configuration file, looked for in the working directory.
IMPLICIT_NAME = "rvasync-ipm.toml"
#: The environment variable naming the implicit configuration file instead.
ENV_VAR = "RVASYNC_IPM_CONFIG"

#: Parameters a file cannot give (objects, not values).
_NOT_IN_FILES = frozenset({"self", "security"})
#: Parameters of a daemon serving standalone clients over TCP: an implicit file cannot
#: give them, since the daemon a transport starts on first use serves no TCP port.
STANDALONE_ONLY = ("listen", "host", "idle_exit", "max_consumer_buffer")


def implicit_file() -> Path | None:
    """The implicit configuration file, or None when there is none.

    ``$RVASYNC_IPM_CONFIG`` names it (it must then exist: a name pointing at
    nothing is an error, not a silent default), else ``rvasync-ipm.toml`` in
    the working directory, if present.
    """
    named = os.environ.get(ENV_VAR)
    if named:
        path = Path(named)
        if not path.is_file():
            raise InvalidArgument(
                f"{ENV_VAR}={named!r}: no such configuration file for the in-process daemon"
            )
        return path
    local = Path.cwd() / IMPLICIT_NAME
    return local if local.is_file() else None


def _key_lines(text: str) -> dict[str, int]:
    """The line where each top-level key is set (1-based)."""
    lines: dict[str, int] = {}
    pattern = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*=""")
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):
            break  # keys after a table header belong to the table
        match = pattern.match(line)
        if match is not None:
            key = next(group for group in match.groups() if group is not None)
            lines.setdefault(key, number)
    return lines


def _table_line(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("[") and key in stripped:
            return number
    return _key_lines(text).get(key, 1)


def read_config(
    path: str | os.PathLike[str],
    accepts: Callable[..., Any],
    *,
    refuse: tuple[str, ...] = (),
    why: str = "",
) -> dict[str, Any]:
    """The parameters in the file at ``path``, checked against ``accepts`` (``Daemon``).

    Each key must be a parameter of ``accepts`` and not one of ``refuse``
    (the error then says ``why``); the values together must be accepted by it
    (it is called once to check them). Errors name the file, the line and the key.
    """
    where = os.fspath(path)
    try:
        text = Path(where).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidArgument(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InvalidArgument(
            f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{where}: not valid TOML: {exc}") from None
    known = [name for name in inspect.signature(accepts).parameters if name not in _NOT_IN_FILES]
    lines = _key_lines(text)
    for key, value in data.items():
        if isinstance(value, dict):
            raise InvalidArgument(
                f"{where}, line {_table_line(text, key)}: [{key}] is a table; the file holds "
                "rv.Daemon's parameters as top-level keys (reliability = 2.5 ...)"
            )
        if key not in known:
            raise InvalidArgument(
                f"{where}, line {lines.get(key, 1)}: unknown key {key!r}; "
                f"the keys are rv.Daemon's parameters: {', '.join(known)}"
            )
        if key in refuse:
            raise InvalidArgument(f"{where}, line {lines.get(key, 1)}, key {key!r}: {why}")
    try:
        accepts(**data)
    except RvError as exc:
        problem = str(exc)
        # The key the message names first (its subject: "peer_timeout (2) must exceed ...").
        found = [
            (match.start(), key)
            for key in data
            if (match := re.search(rf"\b{re.escape(key)}\b", problem)) is not None
        ]
        key = min(found)[1] if found else next(iter(data))
        raise InvalidArgument(
            f"{where}, line {lines.get(key, 1)}, key {key!r}: {problem}"
        ) from None
    return data
