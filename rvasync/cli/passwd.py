"""``rvasync passwd``: add a user to a secure daemon's users file, or change their password.

The password is read from the terminal (twice) or, when stdin is not a
terminal, from its first line, hashed with scrypt and stored in the users
file; nothing else stores it. A running daemon picks the change up by
itself (it re-reads the file when it changes; SIGHUP forces it).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import tomllib
from typing import Any

from rvasync.daemon.auth import hash_password, parse_users
from rvasync.errors import InvalidArgument


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "passwd",
        help="add a user to a secure daemon's users file or set their password",
        description="Set USER's password in the users FILE (created if missing), and "
        "optionally their subject permissions. See docs/security.md.",
    )
    p.add_argument("file", metavar="FILE", help="the users file (TOML)")
    p.add_argument("user", metavar="USER", help="user name")
    p.add_argument(
        "--publish",
        nargs="+",
        metavar="PATTERN",
        default=None,
        help="subject patterns the user may publish to (default: keep; new users: all)",
    )
    p.add_argument(
        "--subscribe",
        nargs="+",
        metavar="PATTERN",
        default=None,
        help="subject patterns the user may listen to (default: keep; new users: all)",
    )
    p.add_argument(
        "--reply",
        choices=("yes", "no"),
        default=None,
        help="may the user answer requests (send to inboxes)? (default: keep; new users: yes)",
    )
    p.add_argument(
        "--router",
        choices=("yes", "no"),
        default=None,
        help="may the user connect as a routing daemon? (default: keep; new users: no)",
    )
    p.add_argument("--cert-subject", default=None, help="client certificate subject, e.g. CN=bob")
    p.add_argument(
        "--no-password",
        action="store_true",
        help="do not set a password (a user who logs in by certificate only)",
    )
    p.set_defaults(handler=run)


def _read_password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if first != getpass.getpass("again: "):
            raise InvalidArgument("the two passwords differ; nothing changed")
        return first
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise InvalidArgument("no password on stdin; nothing changed")
    return line


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise InvalidArgument(f"users file: cannot write a {type(value).__name__}")


def dump_users(data: dict[str, Any]) -> str:
    """The users table as TOML (what this command writes; comments are not kept)."""
    lines = ["# rvasync users file (docs/security.md); written by rvasync passwd", ""]
    for name, entry in data.get("users", {}).items():
        lines.append(f"[users.{json.dumps(name)}]")
        for key, value in entry.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not args.user or any(c in args.user for c in "\r\n"):
        raise InvalidArgument(f"bad user name {args.user!r}")
    data: dict[str, Any] = {"users": {}}
    if os.path.exists(args.file):
        try:
            with open(args.file, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgument(f"users file {args.file}: not valid TOML: {exc}") from None
        data.setdefault("users", {})
    entry: dict[str, Any] = dict(data["users"].get(args.user, {}))
    if not args.no_password:
        entry["password"] = hash_password(_read_password())
    if args.cert_subject is not None:
        entry["cert_subject"] = args.cert_subject
    if args.publish is not None:
        entry["publish"] = args.publish
    if args.subscribe is not None:
        entry["subscribe"] = args.subscribe
    for key in ("reply", "router"):
        choice = getattr(args, key)
        if choice is not None:
            entry[key] = choice == "yes"
    data["users"][args.user] = entry
    parse_users(data, f"users file {args.file}")  # refuse to write a file the daemon refuses
    tmp = f"{args.file}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(dump_users(data))
    os.replace(tmp, args.file)
    print(f"user {args.user!r} written to {args.file}")
    return 0
