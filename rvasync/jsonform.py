"""A readable JSON form of messages, for command-line tools, logs and captures.

Every field keeps its name, id and type beside a JSON-friendly value, so the
form says exactly what the message holds: bytes as base64, datetimes as
ISO-8601 UTC text (with the raw seconds and microseconds when Python cannot
represent the instant), IP addresses as dotted text, nested messages as nested
forms. ``from_jsonable`` reverses it exactly.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from typing import Any

from rvasync.errors import ConversionError, InvalidArgument
from rvasync.fieldtypes import FieldType
from rvasync.message import Field, Message
from rvasync.rvdatetime import DateTime

__all__ = ["from_json", "from_jsonable", "to_json", "to_jsonable"]

_BYTES_TYPES = {FieldType.OPAQUE, FieldType.XML}


def _value_to_jsonable(ftype: FieldType, value: Any) -> Any:
    if ftype is FieldType.MSG:
        return to_jsonable(value)
    if ftype is FieldType.MSGARRAY:
        return [to_jsonable(m) for m in value]
    if ftype in _BYTES_TYPES:
        return base64.b64encode(value).decode("ascii")
    if ftype is FieldType.DATETIME:
        return {"seconds": value.seconds, "microseconds": value.microseconds, "iso": _iso(value)}
    if ftype is FieldType.IPADDR32:
        return str(value)
    if ftype in (FieldType.F32, FieldType.F64) and value != value:  # NaN is not JSON
        return "NaN"
    if ftype in (FieldType.F32, FieldType.F64) and value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if ftype in (FieldType.F32ARRAY, FieldType.F64ARRAY):
        return [_value_to_jsonable(FieldType.F64, v) for v in value]
    return list(value) if isinstance(value, (list, tuple)) else value


def _iso(value: DateTime) -> str | None:
    try:
        return value.to_datetime().isoformat()
    except (InvalidArgument, ConversionError, OverflowError, ValueError):
        return None


def to_jsonable(msg: Message) -> dict[str, Any]:
    """The message as plain dicts, lists, strings and numbers."""
    return {
        "subject": msg.subject,
        "reply_subject": msg.reply_subject,
        "fields": [
            {
                "name": f.name,
                "id": f.id,
                "type": f.type.name,
                "value": _value_to_jsonable(f.type, f.value),
            }
            for f in msg
        ],
    }


def to_json(msg: Message, *, indent: int | None = None) -> str:
    """The message as JSON text (see :func:`to_jsonable`).

    Non-ASCII text stays readable, but every character a terminal would act
    on (controls, zero-width and bidirectional marks, line separators) is
    written as a ``\\u`` escape, so printing the JSON of a message from the
    wire is as safe as printing its text form.
    """
    return _terminal_safe(json.dumps(to_jsonable(msg), indent=indent, ensure_ascii=False))


def _terminal_safe(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _value_from_jsonable(ftype: FieldType, value: Any) -> Any:
    if ftype is FieldType.MSG:
        return from_jsonable(value)
    if ftype is FieldType.MSGARRAY:
        return [from_jsonable(m) for m in value]
    if ftype in _BYTES_TYPES:
        if not isinstance(value, str):
            raise TypeError(f"{ftype.name} values are base64 text")
        return base64.b64decode(value, validate=True)
    if ftype is FieldType.DATETIME:
        if not isinstance(value, dict):
            raise TypeError("a DATETIME value is an object with 'seconds' and 'microseconds'")
        return DateTime(value["seconds"], value.get("microseconds", 0))
    if ftype is FieldType.IPADDR32:
        return ipaddress.IPv4Address(value)
    if ftype in (FieldType.F32, FieldType.F64):
        return float(value)
    if ftype in (FieldType.F32ARRAY, FieldType.F64ARRAY):
        return [float(v) for v in value]
    return value


def from_jsonable(data: Any) -> Message:
    """Rebuild a message from :func:`to_jsonable`'s form; bad input raises InvalidArgument."""
    if not isinstance(data, dict) or not isinstance(data.get("fields", []), list):
        raise InvalidArgument("a message form is an object with a 'fields' list")
    for key in ("subject", "reply_subject"):
        if not isinstance(data.get(key), str | None):
            raise InvalidArgument(
                f"{key!r} of the message form must be a string or null, "
                f"got {type(data[key]).__name__}"
            )
    fields = []
    for position, entry in enumerate(data.get("fields", [])):
        try:
            fields.append(_field_from_jsonable(entry))
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise InvalidArgument(
                f"field {position} of the message form is invalid: {_reason(exc)}"
            ) from None
    return Message(data.get("subject"), fields, reply_subject=data.get("reply_subject"))


def _field_from_jsonable(entry: Any) -> Field:
    if not isinstance(entry, dict):
        raise TypeError(f"a field is an object with 'type' and 'value', got {type(entry).__name__}")
    for key in ("type", "value"):
        if key not in entry:
            raise KeyError(key)
    type_name = entry["type"]
    if not isinstance(type_name, str) or type_name not in FieldType.__members__:
        raise ValueError(f"type {type_name!r} is not a field type name (STRING, I32, MSG ...)")
    ftype = FieldType[type_name]
    try:
        value = _value_from_jsonable(ftype, entry["value"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, InvalidArgument | ConversionError):
            raise
        shown = repr(entry["value"])
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ValueError(f"value {shown} is not valid for {ftype.name}: {_reason(exc)}") from None
    return Field(entry.get("name"), entry.get("id", 0), ftype, value)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing key {exc.args[0]!r}" if exc.args else "missing key"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc) or type(exc).__name__


def from_json(text: str) -> Message:
    """Rebuild a message from :func:`to_json`'s text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"not JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgument("not usable JSON: nested too deeply") from None
    try:
        return from_jsonable(data)
    except RecursionError:
        raise InvalidArgument("the message form is nested too deeply") from None
