"""``rvasync subject``: check subject names and wildcard matches from the shell."""

from __future__ import annotations

import argparse

from rvasync.errors import InvalidSubject
from rvasync.subjects import subject_matches, validate_subject
from rvasync.textform import printable


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "subject",
        help="validate subject names; with --match, test them against a wildcard pattern",
    )
    p.add_argument("subjects", nargs="+", metavar="SUBJECT")
    p.add_argument("--wildcards", action="store_true", help="accept wildcard subjects")
    p.add_argument("--match", metavar="PATTERN", help="report which subjects PATTERN matches")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    if args.match is not None:
        try:
            validate_subject(args.match, wildcards=True)
        except InvalidSubject as exc:
            raise InvalidSubject(f"--match {args.match!r}: {exc}") from None
    for subject in args.subjects:
        try:
            validate_subject(subject, wildcards=args.wildcards)
        except InvalidSubject as exc:
            print(f"invalid  {subject!r}: {exc}")
            status = 1
            continue
        if args.match is None:
            print(f"valid    {printable(subject)}")
        elif subject_matches(args.match, subject):
            print(f"matches  {printable(subject)}")
        else:
            print(f"no match {printable(subject)}")
            status = 1
    return status
