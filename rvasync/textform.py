"""The Rendezvous text form of messages (``str(msg)``), its reader, and terminal-safe text.

Rendezvous programs log and compare messages in one familiar shape:
``{DATA="hello" N=-120 OUTER={INNER=1} XS=[1 2 3]}``. This module writes that
form for :meth:`rvasync.Message.__str__` and reads it back for
:meth:`rvasync.Message.from_text`. The form says *what* a field holds, not its
exact type: an I8 and an I64 both print as a number, opaque data prints as its
size only. So reading back gives each value the type the text implies
(integers I64, or U64 above the I64 range; numbers with a point or exponent
F64; quoted text STRING; ``TRUE``/``FALSE`` BOOL; dotted quads IPADDR32;
datetimes DATETIME; braces MSG; brackets the matching array type), and
refuses the placeholders of opaque and XML data, whose bytes are not there.

Text that came from the wire reaches terminals and logs through here, so
nothing printed can carry a control character: strings and odd field names
are quoted with backslash escapes, and :func:`printable` escapes a subject or
any other text the same way (docs/messages.md, "The text form").
"""

from __future__ import annotations

import ipaddress
import math
import re
import struct
from collections.abc import Callable, Iterable
from typing import Any

from rvasync._wire import INT_RANGE, MAX_NESTING_DEPTH, U64_MAX
from rvasync.errors import InvalidArgument
from rvasync.fieldtypes import FieldType
from rvasync.rvdatetime import DateTime

__all__ = ["format_entries", "format_value", "parse_entries", "printable", "quoted"]

#: One field as the message stores it: (name, id, type, value).
Entry = tuple[str | None, int, FieldType, Any]

_F32 = struct.Struct("<f")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Characters a bare field name may not hold (they delimit the form).
_NAME_DELIMITERS = frozenset(' ={}[]"\\')

_INT_TYPES = frozenset(FieldType[n] for n in ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"))


# -- escaping ---------------------------------------------------------------------------


def _escape_char(char: str) -> str:
    known = _ESCAPES.get(char)
    if known is not None:
        return known
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, backslash: bool = True) -> str:
    """``text`` with every character a terminal would act on escaped (``\\n``, ``\\u200b`` ...).

    What the tools and log lines print from the wire (subjects, names, any
    string) goes through this: a control, format (zero-width, bidirectional),
    separator or unassigned character becomes a backslash escape, and so does
    the backslash itself (unless ``backslash=False``: text that already holds
    escapes, such as an error message quoting a repr), so the result is one
    unambiguous line.
    """
    if text.isprintable() and (not backslash or "\\" not in text):
        return text
    return "".join(
        char if char.isprintable() and (char != "\\" or not backslash) else _escape_char(char)
        for char in text
    )


def quoted(text: str) -> str:
    """``text`` in double quotes, escaped as :func:`printable` does, quotes included."""
    if text.isprintable() and "\\" not in text and '"' not in text:
        return f'"{text}"'
    escaped = "".join(
        char if char.isprintable() and char not in '\\"' else _escape_char(char) for char in text
    )
    return f'"{escaped}"'


# -- writing ------------------------------------------------------------------------------


def _name(name: str | None) -> str:
    if name is None:
        return ""
    if name.isprintable() and not (_NAME_DELIMITERS & set(name)):
        return name
    return quoted(name)


def _f32_text(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (``0.1``, not ``0.100000001``)."""
    if not math.isfinite(value):
        return repr(value)
    for digits in range(1, 10):
        shortest = float(f"{value:.{digits}g}")
        try:
            narrowed = _F32.unpack(_F32.pack(shortest))[0]
        except OverflowError:  # rounded up past the largest float32
            continue
        if narrowed == value:
            # Written as Python writes that double, so F64 reads it back to the same text.
            return repr(shortest)
    return repr(value)  # pragma: no cover - nine digits always identify a float32


def _days_to_civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01, proleptic Gregorian, year 0 allowed."""
    days += 719468
    era = days // 146097
    doe = days - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _civil_to_days(year: int, month: int, day: int) -> int:
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _datetime_text(value: DateTime) -> str:
    """``2024-05-06 07:08:09.123456000Z``: UTC, Common Era years (no year zero), any year."""
    days, rest = divmod(value.seconds, 86400)
    year, month, day = _days_to_civil(days)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    shown = f"{year:04d}" if year > 0 else f"-{1 - year:04d}"
    return (
        f"{shown}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
        f".{value.microseconds:06d}000Z"
    )


def _number_list(ftype: FieldType, values: Iterable[Any]) -> str:
    if ftype is FieldType.F32ARRAY:
        return "[" + " ".join(_f32_text(v) for v in values) + "]"
    if ftype is FieldType.F64ARRAY:
        return "[" + " ".join(repr(float(v)) for v in values) + "]"
    return "[" + " ".join(str(v) for v in values) + "]"


#: The text form of each type's value (the numeric arrays not named: ``_number_list``).
_FORMATS: dict[FieldType, Callable[[Any], str]] = {
    FieldType.STRING: quoted,
    FieldType.MSG: str,
    FieldType.BOOL: lambda value: "TRUE" if value else "FALSE",
    FieldType.IPPORT16: str,
    FieldType.F64: lambda value: repr(float(value)),
    FieldType.F32: _f32_text,
    FieldType.DATETIME: _datetime_text,
    FieldType.IPADDR32: str,
    FieldType.OPAQUE: lambda value: f"[{len(value)} opaque bytes]",
    FieldType.XML: lambda value: f"[XML document: {len(value)} bytes]",
    FieldType.STRINGARRAY: lambda value: "[" + " ".join(quoted(v) for v in value) + "]",
    FieldType.MSGARRAY: lambda value: "[" + " ".join(str(m) for m in value) + "]",
    **dict.fromkeys(_INT_TYPES, str),
}


def format_value(ftype: FieldType, value: Any) -> str:
    """The text form of one field value of type ``ftype``."""
    formatter = _FORMATS.get(ftype)
    return formatter(value) if formatter is not None else _number_list(ftype, value)


def format_entries(entries: Iterable[Entry]) -> str:
    """``{name=value ...}`` for a message's fields, in order, one space apart."""
    return "{" + " ".join(f"{_name(e[0])}={format_value(e[2], e[3])}" for e in entries) + "}"


# -- reading ------------------------------------------------------------------------------

_DATETIME = re.compile(r"(-?)(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")
_IPV4 = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}")
_INT = re.compile(r"[-+]?\d+")
_FLOAT = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)")
_PLACEHOLDER = re.compile(r"\[(?:\d+ opaque bytes|XML document: \d+ bytes)\]")
_BARE_END = frozenset(" }]")
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}

#: Builds a Message from parsed entries (name, type, value); supplied by the caller.
MakeMessage = Callable[[list[tuple[str | None, FieldType, Any]]], Any]


class _Reader:
    """A recursive-descent reader of the text form; errors name the column."""

    def __init__(self, text: str, make: MakeMessage) -> None:
        self.text = text
        self.pos = 0
        self.make = make

    def fail(self, problem: str) -> InvalidArgument:
        return InvalidArgument(f"text form, column {self.pos + 1}: {problem}")

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def expect(self, char: str) -> None:
        if self.text[self.pos : self.pos + 1] != char:
            found = self.text[self.pos : self.pos + 1] or "the end"
            raise self.fail(f"expected {char!r}, found {found!r}")
        self.pos += 1

    def message(self, depth: int) -> Any:
        if depth > MAX_NESTING_DEPTH:
            raise self.fail(f"messages nested deeper than {MAX_NESTING_DEPTH} levels")
        self.expect("{")
        entries: list[tuple[str | None, FieldType, Any]] = []
        self.skip_spaces()
        while self.text[self.pos : self.pos + 1] != "}":
            name = self.field_name()
            self.expect("=")
            ftype, value = self.value(depth, name)
            entries.append((name, ftype, value))
            if self.pos >= len(self.text):
                raise self.fail("the message is not closed with '}'")
            if self.text[self.pos] not in " }":
                raise self.fail("fields are separated by one space")
            self.skip_spaces()
        self.pos += 1
        return self.make(entries)

    def field_name(self) -> str | None:
        if self.text[self.pos : self.pos + 1] == '"':
            return self.string()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in '={}[]" ':
            self.pos += 1
        if self.pos >= len(self.text):
            raise self.fail("the message is not closed with '}'")
        return self.text[start : self.pos] or None

    def string(self) -> str:
        self.expect('"')
        out: list[str] = []
        text = self.text
        while True:
            end = self.pos
            while end < len(text) and text[end] not in '"\\':
                end += 1
            out.append(text[self.pos : end])
            self.pos = end
            if end >= len(text):
                raise self.fail("a string is not closed with '\"'")
            if text[end] == '"':
                self.pos += 1
                return "".join(out)
            out.append(self.escape())

    def escape(self) -> str:
        code = self.text[self.pos + 1 : self.pos + 2]
        if code in _UNESCAPE:
            self.pos += 2
            return _UNESCAPE[code]
        width = _HEX_DIGITS.get(code)
        digits = self.text[self.pos + 2 : self.pos + 2 + (width or 0)]
        if (
            width is None
            or len(digits) != width
            or not all(c in "0123456789abcdefABCDEF" for c in digits)
        ):
            raise self.fail(f"unknown escape {self.text[self.pos : self.pos + 2]!r} in a string")
        self.pos += 2 + width
        return chr(min(int(digits, 16), 0x10FFFF))

    def value(self, depth: int, name: str | None) -> tuple[FieldType, Any]:
        char = self.text[self.pos : self.pos + 1]
        if char == "{":
            return FieldType.MSG, self.message(depth + 1)
        if char == '"':
            return FieldType.STRING, self.string()
        if char == "[":
            return self.array(depth, name)
        return self.scalar(name)

    def scalar(self, name: str | None) -> tuple[FieldType, Any]:
        moment = _DATETIME.match(self.text, self.pos)
        if moment is not None:
            self.pos = moment.end()
            return FieldType.DATETIME, _read_datetime(moment, self)
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _BARE_END:
            self.pos += 1
        token = self.text[start : self.pos]
        if token in ("TRUE", "FALSE"):
            return FieldType.BOOL, token == "TRUE"
        if _IPV4.fullmatch(token):
            try:
                return FieldType.IPADDR32, ipaddress.IPv4Address(token)
            except ValueError:
                pass
        if _INT.fullmatch(token):
            number = int(token)
            lo, hi = INT_RANGE[FieldType.I64]
            if lo <= number <= hi:
                return FieldType.I64, number
            if 0 <= number <= U64_MAX:
                return FieldType.U64, number
            raise self.fail(f"{token} is outside every integer type's range")
        if _FLOAT.fullmatch(token):
            return FieldType.F64, float(token)
        self.pos = start
        shown = token or self.text[start : start + 1] or "the end"
        raise self.fail(f"{shown!r} is not a value of the text form ({_label(name)})")

    def array(self, depth: int, name: str | None) -> tuple[FieldType, Any]:
        if _PLACEHOLDER.match(self.text, self.pos):
            raise self.fail(
                f"{_label(name)}: the text form shows opaque and XML data by size only; "
                "its bytes cannot be read back"
            )
        self.expect("[")
        items: list[tuple[FieldType, Any]] = []
        self.skip_spaces()
        while self.text[self.pos : self.pos + 1] != "]":
            if self.pos >= len(self.text):
                raise self.fail("an array is not closed with ']'")
            items.append(self.value(depth, name))
            self.skip_spaces()
        self.pos += 1
        return _array_of(items, name, self)


def _label(name: str | None) -> str:
    return "unnamed field" if name is None else f"field {name!r}"


def _read_datetime(moment: re.Match[str], reader: _Reader) -> DateTime:
    sign, year_text, *rest = moment.groups()
    month, day, hour, minute, second = (int(part) for part in rest[:5])
    fraction = (rest[5] or "").ljust(9, "0")
    year = int(year_text) if not sign else 1 - int(year_text)
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        raise reader.fail(f"{moment.group(0)!r} is not a valid date and time")
    if fraction[6:] != "000":
        raise reader.fail("a datetime holds microseconds; its last three digits must be 000")
    seconds = _civil_to_days(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    try:
        return DateTime(seconds, int(fraction[:6]))
    except InvalidArgument as exc:
        raise reader.fail(str(exc)) from None


def _array_of(
    items: list[tuple[FieldType, Any]], name: str | None, reader: _Reader
) -> tuple[FieldType, list[Any]]:
    kinds = {ftype for ftype, _ in items}
    values = [value for _, value in items]
    if not kinds or kinds == {FieldType.I64}:
        return FieldType.I64ARRAY, values
    if kinds <= {FieldType.I64, FieldType.U64}:
        return FieldType.U64ARRAY, values
    if kinds <= {FieldType.I64, FieldType.U64, FieldType.F64}:
        return FieldType.F64ARRAY, [float(v) for v in values]
    if kinds == {FieldType.STRING}:
        return FieldType.STRINGARRAY, values
    if kinds == {FieldType.MSG}:
        return FieldType.MSGARRAY, values
    shown = ", ".join(sorted(k.name for k in kinds))
    raise reader.fail(f"{_label(name)}: no array type holds elements of types {shown}")


def parse_entries(text: str, make: MakeMessage) -> Any:
    """Read one message in the text form (``make`` builds each message from its entries).

    Raises InvalidArgument naming the column of the first problem.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"the text form is a str, got {type(text).__name__}")
    reader = _Reader(text.strip(" "), make)
    result = reader.message(0)
    if reader.pos != len(reader.text):
        raise reader.fail("text after the end of the message")
    return result
