"""Argument types for the ``rvasync`` subcommands.

Each is an argparse ``type=`` that turns an option's text into its value or
raises :class:`argparse.ArgumentTypeError` with a message saying what is
wrong; argparse prefixes the option's name and :class:`ArgumentParser` prints
that as one line and exits with status 2 (``rvasync send: error: argument
--count: 'abc' is not a whole number (rvasync send --help shows the usage)``).
Checking at parse time means a bad value is refused before any transport,
daemon or file is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections.abc import Callable
from typing import NoReturn

from rvasync.errors import InvalidArgument, InvalidSubject, NotPermitted
from rvasync.subjects import check_listen_subject, check_send_subject, validate_subject

__all__ = [
    "ArgumentParser",
    "busy_poll",
    "byte_count",
    "certified_subject",
    "count",
    "daemon_param",
    "indent",
    "listen_subject",
    "loop_factory",
    "nonempty",
    "port",
    "rv_option",
    "seconds",
    "send_subject",
    "service_key_file",
    "subject",
    "tool_group",
    "weight",
]


def count(text: str) -> int:
    """A whole number, at least 1 (``--count``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def weight(text: str) -> int:
    """A fault-tolerance weight: a whole number within 1..65535 (a Rendezvous u16)."""
    value = count(text)
    if value > 0xFFFF:
        raise argparse.ArgumentTypeError(f"{value}: a weight is within 1..65535")
    return value


def seconds(*, zero: bool = False) -> Callable[[str], float]:
    """A finite number of seconds, positive (or 0 and more with ``zero=True``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds")
        if value < 0 or (value == 0 and not zero):
            need = "0 or more" if zero else "more than 0"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {need} seconds")
        return value

    parse.__name__ = "seconds"
    return parse


def byte_count(text: str) -> int:
    """A whole number of bytes, at least 1, at most 2**63 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{value}: must be within 1..{2**63 - 1} bytes")
    return value


def busy_poll(text: str) -> float:
    """A busy-poll window: 0 to :data:`rvasync.busypoll.MAX_WINDOW` seconds."""
    from rvasync.busypoll import MAX_WINDOW

    value = seconds(zero=True)(text)
    if value > MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"{text!r}: must be within 0..{MAX_WINDOW} seconds")
    return value


def service_key_file(text: str) -> bytes:
    """A file holding the service key: its bytes, without surrounding white space."""
    from rvasync.protocol.servicekey import check_service_key

    try:
        with open(text, "rb") as f:
            data = f.read(1 << 16)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.strerror or exc}") from None
    key = data.strip()
    try:
        check_service_key(key, "the service key")
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return key


def port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"{value}: a port is within 0..65535")
    return value


def indent(text: str) -> int:
    """JSON indentation: 0 to 16 spaces."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= 16:
        raise argparse.ArgumentTypeError(f"{value}: indentation is within 0..16 spaces")
    return value


def nonempty(text: str) -> str:
    """Any text but the empty (or all-blank) one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def daemon_param(text: str) -> str:
    """A daemon parameter (``PORT``, ``HOST:PORT``, ``tcp:HOST:PORT``), checked now.

    The empty string is refused: to a transport it means the local standalone
    daemon on 7500, which is not what leaving ``--daemon`` out means here
    (an in-process daemon).
    """
    from rvasync.protocol.clientproto.address import parse_daemon

    if not text.strip():
        raise argparse.ArgumentTypeError(
            "must not be empty (give PORT or HOST:PORT; leave the option out for an "
            "in-process daemon)"
        )
    try:
        parse_daemon(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _utf8(text: str) -> None:
    """Arguments that were not UTF-8 arrive with surrogate escapes; refuse those."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")
        raise argparse.ArgumentTypeError(f"{shown!r} is not UTF-8 text") from None


def subject(*, wildcards: bool) -> Callable[[str], str]:
    """A subject name (with ``*`` and ``>`` only when ``wildcards``)."""

    def parse(text: str) -> str:
        _utf8(text)
        try:
            validate_subject(text, wildcards=wildcards)
        except InvalidSubject as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    parse.__name__ = "subject"
    return parse


def send_subject(text: str) -> str:
    """A subject one may send to: valid, and not reserved (``_RV.``, ``_FOO.``)."""
    _utf8(text)
    try:
        check_send_subject(text)
    except (InvalidSubject, NotPermitted) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def certified_subject(text: str) -> str:
    """A subject a certified message may go to: sendable, and without wildcards."""
    send_subject(text)
    from rvasync.subjects import has_wildcards

    if has_wildcards(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: certified delivery needs a concrete subject, without wildcards"
        )
    return text


def listen_subject(text: str) -> str:
    """A subject pattern one may listen to (wildcards allowed, not in an inbox)."""
    _utf8(text)
    try:
        check_listen_subject(text)
    except (InvalidSubject, NotPermitted) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


Subparsers = argparse._SubParsersAction  # the type of ``add_subparsers()``'s result


def tool_group(
    sub: Subparsers[argparse.ArgumentParser], name: str, what: str, doc: str | None
) -> Subparsers[argparse.ArgumentParser]:
    """A command made of tools (``rvasync cm send``): its parser, and the tools' subparsers.

    ``doc`` is the module docstring; its text after the first paragraph
    describes the group in ``--help``.
    """
    p = sub.add_parser(name, help=what, description=doc.split("\n\n", 1)[1] if doc else None)
    return p.add_subparsers(dest="tool", metavar="TOOL", required=True)


def rv_option(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    name: str,
    parse: Callable[[str], object] | None,
    default: object,
    what: str,
) -> None:
    """Add the option ``--NAME`` that also answers to the Rendezvous tools' ``-NAME``.

    ``parse`` checks the value (an argparse ``type=``; None keeps the text),
    ``what`` is the help text; a seconds option shows ``S`` as its value.
    """
    seconds_like = getattr(parse, "__name__", "") == "seconds"
    if default is None:
        shown = what
    elif isinstance(default, float):
        shown = f"{what} (default {default:g})"
    else:
        shown = f"{what} (default {default})"
    p.add_argument(
        f"--{name}",
        f"-{name}",
        type=str if parse is None else parse,
        default=default,
        metavar="S" if seconds_like else None,
        help=shown,
    )


#: Choices of the ``--loop`` option of the long-running commands (daemon, router).
LOOP_CHOICES = ("auto", "asyncio", "uvloop")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for ``--loop CHOICE`` (None: asyncio's own loop).

    ``auto`` takes uvloop when it is installed: the daemon and the router
    spend much of each message in the event loop's socket handling, which
    uvloop does in C. ``uvloop`` when it is not installed is an error.
    """
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise InvalidArgument("--loop uvloop: uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


class ArgumentParser(argparse.ArgumentParser):
    """The parser of ``rvasync`` and of every subcommand: an argument error is one line.

    argparse prints its whole usage block (6 to 9 lines for most commands)
    before the error; every other error of the ``rvasync`` commands is one
    line, so this one is too, with the way to the usage. Subparsers made with
    ``add_subparsers()`` are of their parent's class, so every subcommand and
    tool (``rvasync cm send``) inherits this without naming it.
    """

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (PROG --help shows the usage)`` and exit with status 2."""
        text = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {text} ({self.prog} --help shows the usage)\n")
