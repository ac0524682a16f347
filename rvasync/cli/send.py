"""``rvasync send``: publish a message from the shell (the tibrvsend role).

``rvasync send SUBJECT TEXT...`` sends one message per TEXT, with the text in a
STRING field named DATA, as tibrvsend does (and prints its ``Publishing:``
line for each). Arguments of the form ``name=value`` (an int, else a float,
else a string) or ``name:TYPE=value`` with a FieldType name (``n:U8=7``,
``when:DATETIME=now``, ``xs:F32ARRAY=1,2.5``, ``sub:MSG={json form}``) are
fields instead, added to every message sent; an argument is a field when the
part before its first ``=`` is a name without spaces (send a text that looks
like one as ``DATA:STRING=...``). ``--json`` starts from a whole message in
the JSON form of :mod:`rvasync.jsonform`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import json
import os
import re
import sys
from typing import Any

from rvasync.cli import _args
from rvasync.errors import InvalidArgument, InvalidSubject, RvError
from rvasync.fieldtypes import FieldType
from rvasync.jsonform import from_json, from_jsonable
from rvasync.message import Message
from rvasync.rvdatetime import DateTime
from rvasync.subjects import validate_subject
from rvasync.textform import printable, quoted

__all__ = ["add_transport_options", "open_transport", "parse_field", "register"]

_INT_TYPES = {
    FieldType.I8,
    FieldType.I16,
    FieldType.I32,
    FieldType.I64,
    FieldType.U8,
    FieldType.U16,
    FieldType.U32,
    FieldType.U64,
    FieldType.IPPORT16,
}
_INT_ARRAYS = {
    FieldType.I8ARRAY,
    FieldType.I16ARRAY,
    FieldType.I32ARRAY,
    FieldType.I64ARRAY,
    FieldType.U8ARRAY,
    FieldType.U16ARRAY,
    FieldType.U32ARRAY,
    FieldType.U64ARRAY,
}


#: A field argument: a name without spaces (and an optional :TYPE) before the first '='.
_FIELD_ARGUMENT = re.compile(r"[^\s=]+=")


def add_transport_options(p: argparse.ArgumentParser) -> None:
    """The --service/--network/--daemon options shared by the network tools.

    Each also answers to its Rendezvous spelling with one dash (``-service
    7566``), so command lines written for the tibrv tools work unchanged.
    """
    p.add_argument("--service", "-service", default=None, help="service (UDP port or name)")
    p.add_argument(
        "--network", "-network", default=None, help="network 'interface;groups;send-address'"
    )
    p.add_argument(
        "--daemon",
        "-daemon",
        type=_args.daemon_param,
        default=None,
        help="standalone daemon: PORT (started if not running) or HOST:PORT; "
        "default: an in-process daemon",
    )
    secure = p.add_argument_group(
        "secure daemon (TLS; see docs/security.md)",
    )
    secure.add_argument(
        "--daemon-cert",
        metavar="PEM",
        default=None,
        help="the daemon's certificate or its CA (turns TLS on)",
    )
    secure.add_argument("--user", default=None, help="user name to log in with")
    secure.add_argument(
        "--password",
        default=None,
        help="the user's password (visible to other local users in the process list: "
        "prefer the RVASYNC_PASSWORD environment variable)",
    )
    secure.add_argument("--user-cert", metavar="PEM", default=None, help="client certificate")
    secure.add_argument("--user-key", metavar="PEM", default=None, help="its private key")


def security_of(args: argparse.Namespace) -> Any:
    """An rv.Security from the secure-daemon options, or None when none was given."""
    daemon_cert = getattr(args, "daemon_cert", None)
    user = getattr(args, "user", None)
    user_cert = getattr(args, "user_cert", None)
    user_key = getattr(args, "user_key", None)
    password = getattr(args, "password", None)
    if user is not None and password is None and user_cert is None:
        password = os.environ.get("RVASYNC_PASSWORD") or None
    if daemon_cert is None and user is None and user_cert is None and password is None:
        return None
    from rvasync.security import Security

    return Security(
        daemon_cert=daemon_cert,
        user=user,
        password=password,
        user_cert=user_cert,
        user_key=user_key,
    )


def open_transport(args: argparse.Namespace, description: str) -> Any:
    """The network transport the options describe (an async context manager)."""
    from rvasync.transport.network import Transport

    security = security_of(args)
    if security is not None and args.daemon is None:
        raise InvalidArgument("the secure-daemon options need --daemon HOST:PORT")
    return Transport(
        args.service, args.network, args.daemon, description=description, security=security
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "send",
        help="send a message (fields as name=value or name:TYPE=value)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.add_argument("subject", type=_args.send_subject, metavar="SUBJECT")
    p.add_argument(
        "fields",
        nargs="*",
        metavar="TEXT|FIELD",
        help="a text (one message each, in a DATA field), or name=value / name:TYPE=value",
    )
    p.add_argument("--json", metavar="MESSAGE_JSON", help="the message as JSON (- for stdin)")
    p.add_argument(
        "--reply-subject",
        type=_args.subject(wildcards=True),
        default=None,
        help="reply subject to set on the message",
    )
    p.add_argument(
        "--count", type=_args.count, default=1, help="how many times to send (default 1)"
    )
    p.add_argument(
        "--interval",
        type=_args.seconds(zero=True),
        default=0.0,
        metavar="S",
        help="seconds between sends (default 0)",
    )
    add_transport_options(p)
    p.set_defaults(handler=run)


def build_message(args: argparse.Namespace) -> Message:
    """The message the command line describes (its fields; texts are added per send)."""
    if args.json is not None:
        try:
            text = sys.stdin.buffer.read().decode() if args.json == "-" else args.json
        except UnicodeDecodeError as exc:
            raise InvalidArgument(
                f"--json -: standard input is not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        try:
            msg = from_json(text)
        except InvalidArgument as exc:
            raise InvalidArgument(f"--json: {exc}") from None
    else:
        msg = Message()
    msg.subject = args.subject
    if args.reply_subject is not None:
        msg.reply_subject = args.reply_subject
    elif msg.reply_subject is not None:
        try:
            validate_subject(msg.reply_subject, wildcards=True)
        except InvalidSubject as exc:
            raise InvalidArgument(f"--json: reply_subject: {exc}") from None
    for spec in args.fields:
        if is_field_argument(spec):
            name, value, ftype = parse_field(spec)
            msg.add(name, value, ftype)
    return msg


def is_field_argument(spec: str) -> bool:
    """True for ``name=value`` / ``name:TYPE=value``; anything else is a text for DATA."""
    return _FIELD_ARGUMENT.match(spec) is not None


def messages_to_send(args: argparse.Namespace) -> list[Message]:
    """One message per text argument (the text in DATA), or the one message of the fields."""
    base = build_message(args)
    texts = [spec for spec in args.fields if not is_field_argument(spec)]
    if not texts:
        return [base]
    sends = []
    for text in texts:
        msg = base.copy()
        msg.add("DATA", text)
        sends.append(msg)
    return sends


async def run(args: argparse.Namespace) -> int:
    sends = messages_to_send(args)
    with_texts = any(not is_field_argument(spec) for spec in args.fields)
    async with open_transport(args, "rvasync send") as transport:
        for n in range(args.count):
            for msg in sends:
                if (n or msg is not sends[0]) and args.interval:
                    await asyncio.sleep(args.interval)
                if with_texts:
                    print(
                        f"Publishing: subject={printable(args.subject)} {quoted(msg['DATA'])}",
                        flush=True,
                    )
                await transport.send(msg)
    if not with_texts:
        plural = "" if args.count == 1 else "s"
        print(f"sent {args.count} message{plural} to {args.subject}", flush=True)
    return 0


def parse_field(spec: str) -> tuple[str, Any, FieldType | None]:
    """``name=value`` or ``name:TYPE=value`` -> (name, Python value, type or None)."""
    name, sep, text = spec.partition("=")
    if not sep or not name:
        raise InvalidArgument(f"field {spec!r}: expected name=value or name:TYPE=value")
    base, colon, type_name = name.rpartition(":")
    if colon and not base:
        raise InvalidArgument(f"field {spec!r}: the name before ':{type_name}' is empty")
    if colon:
        try:
            ftype = FieldType[type_name.upper()]
        except KeyError:
            names = ", ".join(t.name for t in FieldType)
            raise InvalidArgument(
                f"field {spec!r}: {type_name!r} is not a field type (one of {names})"
            ) from None
        try:
            return base, _typed(ftype, text), ftype
        except (ValueError, TypeError, RvError, json.JSONDecodeError) as exc:
            raise InvalidArgument(f"field {spec!r}: {exc}") from None
    return name, _inferred(text), None


def _inferred(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    # "nan", "inf" and friends stay text unless typed explicitly.
    return value if text.strip().lower() not in ("nan", "inf", "-inf", "infinity") else text


def _typed(ftype: FieldType, text: str) -> Any:
    if ftype in _INT_TYPES:
        return int(text, 0)
    if ftype in (FieldType.F32, FieldType.F64):
        return float(text)
    if ftype is FieldType.BOOL:
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{text!r} is not a boolean (true/false)")
    if ftype is FieldType.STRING:
        return text
    if ftype in (FieldType.OPAQUE, FieldType.XML):
        return text.encode("utf-8")
    if ftype is FieldType.DATETIME:
        return _datetime(text)
    if ftype is FieldType.IPADDR32:
        return ipaddress.IPv4Address(text)
    if ftype in _INT_ARRAYS:
        return [int(item, 0) for item in _items(text)]
    if ftype in (FieldType.F32ARRAY, FieldType.F64ARRAY):
        return [float(item) for item in _items(text)]
    if ftype is FieldType.STRINGARRAY:
        return _items(text)
    if ftype is FieldType.MSG:
        return from_json(text)
    if ftype is FieldType.MSGARRAY:
        forms = json.loads(text)
        if not isinstance(forms, list):
            raise ValueError("MSGARRAY takes a JSON list of message forms")
        return [from_jsonable(form) for form in forms]
    raise ValueError(f"no text form for {ftype.name}")  # pragma: no cover - all types listed


def _items(text: str) -> list[str]:
    return [] if not text else text.split(",")


def _datetime(text: str) -> DateTime:
    if text.strip().lower() == "now":
        return DateTime.now()
    try:
        return DateTime.from_timestamp(float(text))
    except ValueError:
        pass
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return DateTime.from_datetime(moment)
