"""Bad input to every ``rvasync`` subcommand: a clear one-line error, never a traceback.

Each row runs ``python -m rvasync ARGS`` in a subprocess (so the real entry
point, argparse's exits and stderr are what is checked) and asserts:

* the exit status (2: a usage error or a bad value, like argparse's own);
* stderr is one line, ``rvasync[ CMD]: ...``, naming the argument and the
  problem (every expected fragment is in that line): an argument error prints
  no usage block (``rvasync.cli._args.ArgumentParser``);
* no ``Traceback`` and no ``internal error`` (the CLI's last-resort line for a bug).

``{tmp}``, ``{file}`` (garbage bytes), ``{empty}``, ``{dir}``, ``{missing}``,
``{dead}`` (a loopback ``host:port`` nobody listens on), ``{junkd}`` (a loopback
server that answers in HTTP) are filled in per test.
Commands that could wait for messages get ``--timeout``/``--duration`` so a
row that wrongly succeeds still ends.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import rvasync
from rvasync.message import Message
from rvasync.testing import free_port

ROOT = str(Path(rvasync.__file__).resolve().parent.parent)
TIMEOUT = 60.0

# (id, args, expected fragments of the error line, exit status[, stdin bytes])
Case = tuple

CASES: list[Case] = [
    # -- the program itself ---------------------------------------------------------------
    ("no-command", [], ["rvasync:", "COMMAND", "required"]),
    ("unknown-command", ["bogus"], ["rvasync:", "COMMAND", "invalid choice: 'bogus'"]),
    ("empty-command", [""], ["rvasync:", "COMMAND", "invalid choice: ''"]),
    ("unknown-option", ["--bogus"], ["rvasync:", "COMMAND", "required"]),
    ("unknown-option-after-command", ["info", "--bogus"], ["rvasync info:", "--bogus"]),
    # -- info -------------------------------------------------------------------------------
    ("info-unknown-option", ["info", "--json", "--bogus"], ["unrecognized arguments: --bogus"]),
    ("info-extra-argument", ["info", "extra"], ["unrecognized arguments: extra"]),
    # -- subject ----------------------------------------------------------------------------
    ("subject-none", ["subject"], ["rvasync subject:", "SUBJECT", "required"]),
    ("subject-match-empty", ["subject", "--match", "", "A"], ["--match", "empty"]),
    ("subject-match-bad", ["subject", "--match", "A..B", "A"], ["--match 'A..B'", "empty element"]),
    ("subject-match-gt", ["subject", "--match", ">.A", "A.A"], ["--match '>.A'", "last element"]),
    ("subject-match-missing", ["subject", "A", "--match"], ["--match", "expected one argument"]),
    # -- decode -----------------------------------------------------------------------------
    ("decode-no-file", ["decode"], ["rvasync decode:", "FILE", "required"]),
    ("decode-missing", ["decode", "{missing}"], ["cannot read", "No such file"]),
    ("decode-directory", ["decode", "{dir}"], ["cannot read", "Is a directory"]),
    ("decode-garbage", ["decode", "{file}"], ["rvasync decode:", "not an rvasync message"]),
    ("decode-empty", ["decode", "{empty}"], ["rvasync decode:", "message"]),
    ("decode-truncated", ["decode", "{truncated}"], ["rvasync decode:", "truncated"]),
    ("decode-stdin-empty", ["decode", "-"], ["rvasync decode:", "message"]),
    ("decode-stdin-garbage", ["decode", "-"], ["rvasync decode:", "message"], 2, b"\xff\xfejunk"),
    ("decode-huge", ["decode", "{big}"], ["'{big}'", "more than one message can"]),
    ("decode-indent-text", ["decode", "--indent", "abc", "{file}"], ["--indent", "'abc'"]),
    ("decode-indent-negative", ["decode", "--indent", "-1", "{file}"], ["--indent", "0..16"]),
    ("decode-indent-huge", ["decode", "--indent", "1000000000", "{file}"], ["--indent", "0..16"]),
    # -- daemon -----------------------------------------------------------------------------
    ("daemon-listen-text", ["daemon", "--listen", "abc"], ["--listen", "'abc' is not a port"]),
    ("daemon-listen-negative", ["daemon", "--listen", "-1"], ["--listen", "0..65535"]),
    ("daemon-listen-huge", ["daemon", "--listen", "70000"], ["--listen", "0..65535"]),
    ("daemon-listen-float", ["daemon", "--listen", "7500.5"], ["--listen", "not a port"]),
    ("daemon-host-empty", ["daemon", "--host", ""], ["--host", "must not be empty"]),
    ("daemon-reliability-text", ["daemon", "--reliability", "abc"], ["--reliability", "'abc'"]),
    (
        "daemon-reliability-negative",
        ["daemon", "--reliability", "-1"],
        ["--reliability", "0 or more"],
    ),
    ("daemon-reliability-nan", ["daemon", "--reliability", "nan"], ["--reliability", "finite"]),
    # issue #24: bounded reliability, the service key file, a port of 5000 digits
    ("daemon-reliability-1e308", ["daemon", "--reliability", "1e308"], ["reliability", "at most"]),
    ("daemon-key-missing", ["daemon", "--service-key-file", "{missing}"], ["--service-key-file"]),
    ("daemon-key-empty", ["daemon", "--service-key-file", "{empty}"], ["16..4096 bytes"]),
    ("daemon-max-retention-0", ["daemon", "--max-retention", "0"], ["--max-retention"]),
    (
        "send-daemon-5000-digits",
        ["send", "--daemon", "9" * 5000, "A.B", "x"],
        ["--daemon", "within 1..65535"],
    ),
    ("daemon-reliability-inf", ["daemon", "--reliability", "inf"], ["--reliability", "finite"]),
    ("daemon-idle-exit-zero", ["daemon", "--idle-exit", "0"], ["--idle-exit", "more than 0"]),
    ("daemon-idle-exit-negative", ["daemon", "--idle-exit", "-5"], ["--idle-exit", "more than 0"]),
    ("daemon-idle-exit-nan", ["daemon", "--idle-exit", "nan"], ["--idle-exit", "finite"]),
    ("daemon-idle-exit-inf", ["daemon", "--idle-exit", "1e400"], ["--idle-exit", "finite"]),
    (
        "daemon-buffer-zero",
        ["daemon", "--max-consumer-buffer", "0"],
        ["--max-consumer-buffer", "1.."],
    ),
    (
        "daemon-buffer-text",
        ["daemon", "--max-consumer-buffer", "lots"],
        ["--max-consumer-buffer", "'lots'"],
    ),
    (
        "daemon-buffer-huge",
        ["daemon", "--max-consumer-buffer", str(2**80)],
        ["--max-consumer-buffer", "1.."],
    ),
    ("daemon-busy-poll-big", ["daemon", "--busy-poll", "5"], ["--busy-poll", "0..1"]),
    ("daemon-busy-poll-negative", ["daemon", "--busy-poll", "-0.1"], ["--busy-poll", "0 or more"]),
    ("daemon-busy-poll-nan", ["daemon", "--busy-poll", "nan"], ["--busy-poll", "finite"]),
    ("daemon-loop-junk", ["daemon", "--loop", "bogus"], ["--loop", "invalid choice: 'bogus'"]),
    # -- send: subject and fields -------------------------------------------------------
    ("send-no-subject", ["send"], ["rvasync send:", "SUBJECT", "required"]),
    ("send-subject-empty", ["send", ""], ["SUBJECT", "empty"]),
    ("send-subject-empty-element", ["send", "A..B"], ["SUBJECT", "'A..B'", "empty element"]),
    ("send-subject-bad-wildcard", ["send", "A.>.B"], ["SUBJECT", "'A.>.B'", "last element"]),
    ("send-subject-too-long", ["send", "A." * 200 + "B"], ["SUBJECT", "255"]),
    ("send-subject-reserved", ["send", "_RV.X"], ["SUBJECT", "'_RV.X'", "reserved"]),
    ("send-subject-reserved-other", ["send", "_FOO.X"], ["SUBJECT", "'_FOO'", "reserved"]),
    ("send-unknown-option", ["send", "A", "x=1", "--bogus"], ["unrecognized arguments: --bogus"]),
    ("send-subject-not-utf8", ["send", "A.\udcff"], ["SUBJECT", "not UTF-8"]),
    ("send-field-not-utf8", ["send", "A", "x=\udcff"], ["field 'x'", "Unicode"]),
    ("send-field-typed-no-name", ["send", "A", ":I8=1"], ["field ':I8=1'", "name", "empty"]),
    (
        "send-field-bad-type",
        ["send", "A", "n:BADTYPE=1"],
        ["field 'n:BADTYPE=1'", "not a field type"],
    ),
    ("send-field-empty-type", ["send", "A", "n:=1"], ["field 'n:=1'", "not a field type"]),
    ("send-field-int-text", ["send", "A", "n:I32=abc"], ["field 'n:I32=abc'", "abc"]),
    ("send-field-int-float", ["send", "A", "n:I8=1.5"], ["field 'n:I8=1.5'", "1.5"]),
    ("send-field-int-empty", ["send", "A", "n:I64="], ["field 'n:I64='"]),
    ("send-field-u8-range", ["send", "A", "n:U8=300"], ["field 'n'", "out of range for U8"]),
    ("send-field-u8-negative", ["send", "A", "n:U8=-1"], ["field 'n'", "out of range for U8"]),
    ("send-field-i32-range", ["send", "A", "n:I32=99999999999"], ["field 'n'", "I32"]),
    ("send-field-port-range", ["send", "A", "p:IPPORT16=70000"], ["field 'p'", "IPPORT16"]),
    ("send-field-float-text", ["send", "A", "x:F64=abc"], ["field 'x:F64=abc'", "float"]),
    ("send-field-bool", ["send", "A", "b:BOOL=maybe"], ["field 'b:BOOL=maybe'", "not a boolean"]),
    ("send-field-ip", ["send", "A", "ip:IPADDR32=junk"], ["field 'ip:IPADDR32=junk'"]),
    ("send-field-ipv6", ["send", "A", "ip:IPADDR32=::1"], ["field 'ip:IPADDR32=::1'"]),
    ("send-field-datetime-text", ["send", "A", "d:DATETIME=junk"], ["field 'd:DATETIME=junk'"]),
    ("send-field-datetime-nan", ["send", "A", "d:DATETIME=nan"], ["field 'd:DATETIME=nan'", "nan"]),
    ("send-field-datetime-huge", ["send", "A", "d:DATETIME=1e30"], ["field 'd:DATETIME=1e30'"]),
    ("send-field-array-hole", ["send", "A", "xs:I8ARRAY=1,,2"], ["field 'xs:I8ARRAY=1,,2'"]),
    ("send-field-array-range", ["send", "A", "xs:U8ARRAY=1,300"], ["field 'xs'", "U8"]),
    ("send-field-msg-json", ["send", "A", "m:MSG={"], ["field 'm:MSG={'", "not JSON"]),
    ("send-field-msg-form", ["send", "A", "m:MSG=[]"], ["field 'm:MSG=[]'", "message form"]),
    ("send-field-msgarray", ["send", "A", "m:MSGARRAY={}"], ["field 'm:MSGARRAY={}'", "list"]),
    ("send-field-reserved", ["send", "A", "_x=1"], ["'_x'", "reserved"]),
    # -- send: --json ---------------------------------------------------------------------
    ("send-json-broken", ["send", "A", "--json", "{"], ["--json", "not JSON"]),
    ("send-json-list", ["send", "A", "--json", "[]"], ["--json", "'fields' list"]),
    ("send-json-fields", ["send", "A", "--json", '{"fields": 3}'], ["--json", "'fields' list"]),
    (
        "send-json-field-int",
        ["send", "A", "--json", '{"fields": [1]}'],
        ["--json", "field 0", "object"],
    ),
    (
        "send-json-field-no-type",
        ["send", "A", "--json", '{"fields": [{"name": "a", "value": 1}]}'],
        ["--json", "field 0", "missing key 'type'"],
    ),
    (
        "send-json-field-bad-type",
        ["send", "A", "--json", '{"fields": [{"name": "a", "type": "BAD", "value": 1}]}'],
        ["--json", "field 0", "'BAD' is not a field type"],
    ),
    (
        "send-json-field-range",
        ["send", "A", "--json", '{"fields": [{"name": "a", "type": "U8", "value": 300}]}'],
        ["--json", "field 0", "out of range for U8"],
    ),
    (
        "send-json-field-bytes",
        ["send", "A", "--json", '{"fields": [{"name": "a", "type": "OPAQUE", "value": "z"}]}'],
        ["--json", "field 0", "OPAQUE"],
    ),
    (
        "send-json-field-datetime",
        ["send", "A", "--json", '{"fields": [{"name": "a", "type": "DATETIME", "value": "x"}]}'],
        ["--json", "field 0", "DATETIME", "seconds"],
    ),
    (
        "send-json-reply-type",
        ["send", "A", "--json", '{"fields": [], "reply_subject": 5}'],
        ["--json", "'reply_subject'", "string"],
    ),
    (
        "send-json-reply-syntax",
        ["send", "A", "--json", '{"fields": [], "reply_subject": "A..B"}'],
        ["--json", "reply_subject", "empty element"],
    ),
    ("send-json-deep", ["send", "A", "--json", "[" * 100_000], ["--json", "nested too deeply"]),
    ("send-json-stdin-empty", ["send", "A", "--json", "-"], ["--json", "not JSON"]),
    (
        "send-json-stdin-binary",
        ["send", "A", "--json", "-"],
        ["--json -", "not UTF-8"],
        2,
        b"\xff\xfe{",
    ),
    ("send-json-missing", ["send", "A", "--json"], ["--json", "expected one argument"]),
    # -- send: options --------------------------------------------------------------------
    (
        "send-reply-bad",
        ["send", "A", "--reply-subject", "A..B"],
        ["--reply-subject", "empty element"],
    ),
    ("send-reply-empty", ["send", "A", "--reply-subject", ""], ["--reply-subject", "empty"]),
    (
        "send-count-text",
        ["send", "A", "--count", "abc"],
        ["--count", "'abc' is not a whole number"],
    ),
    ("send-count-zero", ["send", "A", "--count", "0"], ["--count", "at least 1"]),
    ("send-count-negative", ["send", "A", "--count", "-3"], ["--count", "at least 1"]),
    ("send-count-float", ["send", "A", "--count", "2.5"], ["--count", "not a whole number"]),
    ("send-interval-text", ["send", "A", "--interval", "soon"], ["--interval", "'soon'"]),
    ("send-interval-negative", ["send", "A", "--interval", "-1"], ["--interval", "0 or more"]),
    (
        "send-interval-nan",
        ["send", "A", "--interval", "nan", "--count", "2"],
        ["--interval", "finite"],
    ),
    (
        "send-interval-inf",
        ["send", "A", "--interval", "inf", "--count", "2"],
        ["--interval", "finite"],
    ),
    # -- transport options (send, listen, record share them) ------------------------------
    ("send-daemon-junk", ["send", "A", "--daemon", "junk"], ["--daemon", "'junk'", "1..65535"]),
    ("send-daemon-empty", ["send", "A", "--daemon", ""], ["--daemon", "must not be empty"]),
    ("send-daemon-port-zero", ["send", "A", "--daemon", "127.0.0.1:0"], ["--daemon", "1..65535"]),
    (
        "send-daemon-port-huge",
        ["send", "A", "--daemon", "127.0.0.1:99999"],
        ["--daemon", "1..65535"],
    ),
    ("send-daemon-too-many", ["send", "A", "--daemon", "a:b:c"], ["--daemon", "'a:b:c'"]),
    ("send-daemon-ssl", ["send", "A", "--daemon", "ssl:127.0.0.1:1"], ["--daemon", "ssl"]),
    (
        "send-daemon-unreachable",
        ["send", "A", "x=1", "--daemon", "{dead}"],
        ["rvasync send:", "{dead}"],
    ),
    ("send-daemon-not-a-daemon", ["send", "A", "--daemon", "{junkd}"], ["{junkd}", "bad frame"]),
    ("send-service-junk", ["send", "A", "--service", "junk"], ["rvasync send:", "service 'junk'"]),
    ("send-service-zero", ["send", "A", "--service", "0"], ["service '0'", "1..65535"]),
    ("send-service-huge", ["send", "A", "--service", "99999"], ["service '99999'", "1..65535"]),
    ("send-service-two-part", ["send", "A", "--service", "7500:abc"], ["service '7500:abc'"]),
    ("send-network-parts", ["send", "A", "--network", ";;;"], ["network ';;;'", "parts"]),
    ("send-network-group", ["send", "A", "--network", "lo;junk"], ["network 'lo;junk'", "'junk'"]),
    ("send-network-unicast", ["send", "A", "--network", "lo;10.0.0.1"], ["network", "multicast"]),
    (
        "send-network-send",
        ["send", "A", "--network", "lo;239.1.1.1;junk"],
        ["network", "send address"],
    ),
    (
        "send-network-interface",
        ["send", "A", "--network", "no-such-if0"],
        ["network", "no-such-if0"],
    ),
    # -- listen -----------------------------------------------------------------------------
    ("listen-no-subject", ["listen"], ["rvasync listen:", "SUBJECT", "required"]),
    ("listen-subject-empty", ["listen", "", "--timeout", "1"], ["SUBJECT", "empty"]),
    ("listen-subject-bad", ["listen", "A..B", "--timeout", "1"], ["SUBJECT", "empty element"]),
    ("listen-subject-gt", ["listen", "A.>.B", "--timeout", "1"], ["SUBJECT", "last element"]),
    ("listen-subject-star", ["listen", "A.B*", "--timeout", "1"], ["SUBJECT", "'A.B*'"]),
    ("listen-inbox-wildcard", ["listen", "_INBOX.>", "--timeout", "1"], ["SUBJECT", "wildcards"]),
    ("listen-subject-not-utf8", ["listen", "A.\udcff", "--timeout", "1"], ["SUBJECT", "UTF-8"]),
    (
        "listen-count-text",
        ["listen", "A", "--count", "x"],
        ["--count", "'x' is not a whole number"],
    ),
    ("listen-count-zero", ["listen", "A", "--count", "0"], ["--count", "at least 1"]),
    ("listen-timeout-text", ["listen", "A", "--timeout", "x"], ["--timeout", "'x'"]),
    ("listen-timeout-zero", ["listen", "A", "--timeout", "0"], ["--timeout", "more than 0"]),
    ("listen-timeout-negative", ["listen", "A", "--timeout", "-1"], ["--timeout", "more than 0"]),
    ("listen-timeout-nan", ["listen", "A", "--timeout", "nan"], ["--timeout", "finite"]),
    ("listen-timeout-inf", ["listen", "A", "--timeout", "1e400"], ["--timeout", "finite"]),
    (
        "listen-daemon-junk",
        ["listen", "A", "--timeout", "1", "--daemon", "x:y"],
        ["--daemon", "'x:y'"],
    ),
    (
        "listen-daemon-not-a-daemon",
        ["listen", "A", "--timeout", "1", "--daemon", "{junkd}"],
        ["{junkd}", "bad frame"],
    ),
    (
        "listen-daemon-unreachable",
        ["listen", "A", "--timeout", "1", "--daemon", "{dead}"],
        ["{dead}"],
    ),
    (
        "listen-service-junk",
        ["listen", "A", "--timeout", "1", "--service", "junk"],
        ["service 'junk'"],
    ),
    (
        "listen-network-junk",
        ["listen", "A", "--timeout", "1", "--network", "lo;x"],
        ["network 'lo;x'"],
    ),
    ("listen-unknown-option", ["listen", "A", "--bogus"], ["unrecognized arguments: --bogus"]),
    ("send-text-control-subject", ["send", "A\nB", "hi"], ["SUBJECT", "control character U+000A"]),
    # -- the Rendezvous tools' counterparts (cm, dq, ft) --------------------------------------
    ("cm-no-tool", ["cm"], ["rvasync cm:", "TOOL", "required"]),
    ("cm-send-no-message", ["cm", "send", "A"], ["rvasync cm send:", "MESSAGE", "required"]),
    ("cm-send-rounds-zero", ["cm", "send", "-rounds", "0", "A", "x"], ["-rounds", "at least 1"]),
    ("cm-send-reserved", ["cm", "send", "_RV.X", "x"], ["SUBJECT", "reserved"]),
    ("cm-send-wildcard", ["cm", "send", "A.*", "x"], ["SUBJECT", "'A.*'", "wildcards"]),
    ("cm-listen-no-subject", ["cm", "listen"], ["rvasync cm listen:", "SUBJECT", "required"]),
    ("cm-listen-bad-subject", ["cm", "listen", "A..B", "--timeout", "1"], ["empty element"]),
    (
        "cm-listen-reserved-name",
        ["cm", "listen", "-cmname", "_X", "A", "--timeout", "1"],
        ["'_X'", "reserved"],
    ),
    (
        "cm-listen-ledger-dir",
        ["cm", "listen", "-ledger", "{dir}", "A", "--timeout", "1"],
        ["ledger", "directory"],
    ),
    ("dq-no-tool", ["dq"], ["rvasync dq:", "TOOL", "required"]),
    ("dq-listen-no-subject", ["dq", "listen"], ["rvasync dq listen:", "SUBJECT", "required"]),
    (
        "dq-listen-weight-zero",
        ["dq", "listen", "-workerWeight", "0", "A", "--timeout", "1"],
        ["-workerWeight", "at least 1"],
    ),
    (
        "dq-listen-activation-below-heartbeat",
        ["dq", "listen", "-heartbeat", "2", "-activation", "1", "A", "--timeout", "1"],
        ["activation"],
    ),
    ("ft-no-tool", ["ft"], ["rvasync ft:", "TOOL", "required"]),
    ("ft-monitor-bad-group", ["ft", "monitor", "-group", "A..B"], ["'A..B'", "empty element"]),
    ("ft-time-weight-text", ["ft", "time", "heavy"], ["WEIGHT", "whole number"]),
    ("ft-time-weight-huge", ["ft", "time", "70000"], ["WEIGHT", "1..65535"]),
    (
        "ft-time-heartbeat-not-below-activation",
        ["ft", "time", "-heartbeat", "2", "-activation", "1"],
        ["heartbeat", "activation"],
    ),
    # -- record -----------------------------------------------------------------------------
    ("record-no-to", ["record", "A"], ["rvasync record:", "--to", "required"]),
    ("record-no-subject", ["record", "--to", "{tmp}/cap"], ["SUBJECT", "required"]),
    ("record-subject-bad", ["record", "A..B", "--to", "{tmp}/cap"], ["SUBJECT", "empty element"]),
    ("record-to-empty", ["record", "A", "--to", ""], ["--to", "must not be empty"]),
    (
        "record-to-file",
        ["record", "A", "--to", "{file}", "--duration", "5"],
        ["capture directory", "{file}"],
    ),
    (
        "record-to-under-file",
        ["record", "A", "--to", "{file}/cap", "--duration", "5"],
        ["capture directory", "Not a directory"],
    ),
    (
        "record-roll-size-text",
        ["record", "A", "--to", "{tmp}/c", "--roll-size", "big"],
        ["--roll-size", "not a size"],
    ),
    (
        "record-roll-size-zero",
        ["record", "A", "--to", "{tmp}/c", "--roll-size", "0"],
        ["--roll-size", "at least 1"],
    ),
    (
        "record-roll-size-neg",
        ["record", "A", "--to", "{tmp}/c", "--roll-size", "-5"],
        ["--roll-size", "not a size"],
    ),
    (
        "record-roll-size-unit",
        ["record", "A", "--to", "{tmp}/c", "--roll-size", "5XB"],
        ["--roll-size", "not a size"],
    ),
    (
        "record-roll-interval-zero",
        ["record", "A", "--to", "{tmp}/c", "--roll-interval", "0"],
        ["--roll-interval", "more than 0"],
    ),
    (
        "record-roll-interval-nan",
        ["record", "A", "--to", "{tmp}/c", "--roll-interval", "nan"],
        ["--roll-interval", "finite"],
    ),
    (
        "record-roll-interval-inf",
        ["record", "A", "--to", "{tmp}/c", "--roll-interval", "inf"],
        ["--roll-interval", "finite"],
    ),
    (
        "record-count-zero",
        ["record", "A", "--to", "{tmp}/c", "--count", "0"],
        ["--count", "at least 1"],
    ),
    (
        "record-count-text",
        ["record", "A", "--to", "{tmp}/c", "--count", "many"],
        ["--count", "'many'"],
    ),
    (
        "record-duration-zero",
        ["record", "A", "--to", "{tmp}/c", "--duration", "0"],
        ["--duration", "more than 0"],
    ),
    (
        "record-duration-nan",
        ["record", "A", "--to", "{tmp}/c", "--duration", "nan"],
        ["--duration", "finite"],
    ),
    (
        "record-duration-inf",
        ["record", "A", "--to", "{tmp}/c", "--duration", "inf"],
        ["--duration", "finite"],
    ),
    (
        "record-duration-text",
        ["record", "A", "--to", "{tmp}/c", "--duration", "x"],
        ["--duration", "'x'"],
    ),
    (
        "record-certified-alone",
        ["record", "A", "--to", "{tmp}/c", "--certified", "X"],
        ["--certified", "--ledger"],
    ),
    (
        "record-ledger-alone",
        ["record", "A", "--to", "{tmp}/c", "--ledger", "{tmp}/l"],
        ["--certified", "--ledger"],
    ),
    (
        "record-certified-empty",
        ["record", "A", "--to", "{tmp}/c", "--certified", "", "--ledger", "{tmp}/l"],
        ["--certified", "must not be empty"],
    ),
    (
        "record-ledger-empty",
        ["record", "A", "--to", "{tmp}/c", "--certified", "X", "--ledger", ""],
        ["--ledger", "must not be empty"],
    ),
    (
        "record-certified-bad",
        [
            "record",
            "A",
            "--to",
            "{tmp}/c",
            "--certified",
            "A..B",
            "--ledger",
            "{tmp}/l",
            "--duration",
            "5",
        ],
        ["--certified 'A..B'", "empty element"],
    ),
    (
        "record-ledger-no-dir",
        [
            "record",
            "A",
            "--to",
            "{tmp}/c",
            "--certified",
            "X",
            "--ledger",
            "{missing}/l",
            "--duration",
            "5",
        ],
        ["--ledger", "does not exist"],
    ),
    (
        "record-ledger-directory",
        [
            "record",
            "A",
            "--to",
            "{tmp}/c",
            "--certified",
            "X",
            "--ledger",
            "{dir}",
            "--duration",
            "5",
        ],
        ["ledger", "directory"],
    ),
    (
        "record-ledger-garbage",
        [
            "record",
            "A",
            "--to",
            "{tmp}/c",
            "--certified",
            "X",
            "--ledger",
            "{file}",
            "--duration",
            "5",
        ],
        ["ledger", "{file}", "not a ledger file"],
    ),
    (
        "record-daemon-junk",
        ["record", "A", "--to", "{tmp}/c", "--daemon", "junk"],
        ["--daemon", "'junk'"],
    ),
    (
        "record-daemon-unreachable",
        ["record", "A", "--to", "{tmp}/c", "--duration", "5", "--daemon", "{dead}"],
        ["rvasync record:", "{dead}"],
    ),
    (
        "record-service-junk",
        ["record", "A", "--to", "{tmp}/c", "--duration", "5", "--service", "junk"],
        ["service 'junk'"],
    ),
    (
        "record-network-junk",
        ["record", "A", "--to", "{tmp}/c", "--duration", "5", "--network", ";;;"],
        ["network ';;;'"],
    ),
]


@pytest.fixture
def junk_daemon() -> Iterator[str]:
    """A loopback TCP server that answers every connection with HTTP, not the daemon protocol."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot a daemon\r\n" * 8)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.fixture
def places(tmp_path: Path, junk_daemon: str) -> dict[str, str]:
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\xc1\x00 this is not a message \x00\xff" * 4)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(Message("A.B", {"n": 7, "s": "text" * 10}).to_bytes()[:-9])
    big = tmp_path / "big.bin"
    with big.open("wb") as fh:  # sparse: over the 64 MiB message limit, nothing on disk
        fh.truncate(65 * 1024 * 1024)
    directory = tmp_path / "a-directory"
    directory.mkdir()
    return {
        "tmp": str(tmp_path),
        "file": str(garbage),
        "empty": str(empty),
        "truncated": str(truncated),
        "big": str(big),
        "dir": str(directory),
        "missing": str(tmp_path / "no-such-thing"),
        "dead": f"127.0.0.1:{free_port(socket.SOCK_STREAM)}",
        "junkd": junk_daemon,
    }


def run_rvasync(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    env.pop("RVASYNC_TRACEBACK", None)
    done = subprocess.run(
        [sys.executable, "-m", "rvasync", *args],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def _fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_clear_line(case: Case, places: dict[str, str]) -> None:
    _, args, fragments, *rest = case
    status = rest[0] if rest else 2
    stdin = rest[1] if len(rest) > 1 else b""
    args = [_fill(arg, places) for arg in args]
    done = run_rvasync(args, stdin)
    err = done.stderr
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    assert done.returncode == status, (done.returncode, done.stdout, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"not one line on stderr: {err!r}; stdout: {done.stdout!r}"
    last = lines[-1]
    command = args[0] if args and not args[0].startswith("-") and args[0] in _COMMANDS else ""
    if command in _TOOL_GROUPS and len(args) > 1 and args[1] in _TOOL_GROUPS[command]:
        command = f"{command} {args[1]}"
    prefix = f"rvasync {command}:" if command else "rvasync:"
    assert last.startswith(prefix), err
    for fragment in fragments:
        assert _fill(fragment, places) in last, f"{fragment!r} not in {last!r}"


_COMMANDS = {"info", "subject", "decode", "daemon", "send", "listen", "record", "cm", "dq", "ft"}
#: Commands made of a group and a tool (``rvasync cm send``): their errors name both.
_TOOL_GROUPS = {"cm": {"send", "listen"}, "dq": {"listen"}, "ft": {"monitor", "time"}}


def test_the_table_covers_every_subcommand() -> None:
    seen = {case[1][0] for case in CASES if case[1]}
    assert seen >= _COMMANDS


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files whatever their mode"
)
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.bin"
    path.write_bytes(Message("A", {"n": 1}).to_bytes())
    path.chmod(0)
    done = run_rvasync(["decode", str(path)])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("rvasync decode: cannot read")
    assert "Permission denied" in done.stderr


def test_an_unexpected_error_is_one_line_with_status_1(monkeypatch, capsys) -> None:
    """The last resort: a bug in a handler is one line (status 1), not a traceback."""
    from rvasync.cli import info, main

    def broken(args: object) -> int:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(info, "run", broken)
    monkeypatch.delenv("RVASYNC_TRACEBACK", raising=False)
    assert main(["info"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("rvasync info: internal error (ZeroDivisionError: boom)")
    monkeypatch.setenv("RVASYNC_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(["info"])


def test_an_os_error_is_one_line_naming_the_file(monkeypatch, capsys) -> None:
    from rvasync.cli import info, main

    def failing(args: object) -> int:
        raise PermissionError(13, "Permission denied", "/some/file")

    monkeypatch.setattr(info, "run", failing)
    assert main(["info"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rvasync info: '/some/file': Permission denied"]


def test_a_closed_output_pipe_ends_quietly(tmp_path: Path) -> None:
    """``rvasync decode big.bin | head -c 10``: no traceback, no 'Exception ignored'."""
    path = tmp_path / "big.bin"
    path.write_bytes(Message("A", {"s": "x" * 300_000}).to_bytes())  # JSON over a pipe's buffer
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rvasync", "decode", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode("utf-8", "replace")
        status = proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert err == ""
    assert status == 1
