"""Pure-Python message codec (twin of ``rvasync_native.codec``).

The wire form is ``HEADER`` followed by one msgpack document; docs/messages.md
describes it. Encoding turns the message tree into plain lists and packs
them with msgpack in one call; decoding unpacks with msgpack's size limits
(declared lengths can never exceed the input) and then checks every node,
field, identifier, type code and value before building the Message, so a
bad input of any kind ends in MalformedMessage.
"""

from __future__ import annotations

import array
import ipaddress
import struct
import sys
from typing import Any, cast

import msgpack

from rvasync._wire import (
    ARRAY_ELEMENT,
    FIELD_ID_MAX,
    HEADER,
    INT_RANGE,
    MAX_MESSAGE_SIZE,
    MAX_NESTING_DEPTH,
    ORIGIN_SIZE,
    U64_MAX,
)
from rvasync.correlation import check_publisher_correlation
from rvasync.errors import InvalidArgument, MalformedMessage, MessageTooLarge
from rvasync.fieldtypes import FieldType, field_label
from rvasync.message import CmLabel, Message
from rvasync.rvdatetime import DateTime

__all__ = ["MAX_MESSAGE_SIZE", "check", "check_subject", "decode", "encode"]

_F32 = struct.Struct("<f")
_BIG_ENDIAN = sys.byteorder == "big"
_HEADER_LEN = len(HEADER)
_new = object.__new__
# One packer for the process: packing builtin types runs no Python code, so a
# call cannot interleave with another under the GIL, and a Packer resets its
# buffer when a pack fails.
_PACKER = msgpack.Packer(use_bin_type=True, autoreset=True)
_IPv4 = ipaddress.IPv4Address


def _array_code(fmt: str) -> str:
    """The ``array`` typecode with the wire element size (``i``/``l`` sizes vary by platform)."""
    size = struct.calcsize(fmt)
    if fmt in "fd":
        return fmt
    candidates = "bhilq" if fmt.islower() else "BHILQ"
    return next(c for c in candidates if array.array(c).itemsize == size)


#: FieldType code -> (array typecode, element size)
_ARRAY: dict[int, tuple[str, int]] = {
    code: (_array_code(fmt), size) for code, (fmt, size, _) in ARRAY_ELEMENT.items()
}

# =============================================================================
# encode
# =============================================================================


def _pack_numbers(ftype: FieldType, values: Any, name: str | None) -> bytes:
    typecode, _ = _ARRAY[ftype]
    try:
        if ftype is FieldType.F32ARRAY:
            # struct (unlike array) refuses finite values that overflow float32.
            return struct.pack(f"<{len(values)}f", *values)
        packed = array.array(typecode, values)
    except (TypeError, ValueError, OverflowError, struct.error) as exc:
        raise InvalidArgument(
            f"{field_label(name)}: {ftype.name} list was changed in place and no longer "
            f"holds valid elements ({exc})"
        ) from None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _check_str_list(values: list[Any], name: str | None) -> list[Any]:
    for index, item in enumerate(values):
        if not isinstance(item, str):
            raise InvalidArgument(
                f"{field_label(name)}: STRINGARRAY list was changed in place; element "
                f"{index} is a {type(item).__name__}, not a str"
            )
    return values


def _node(msg: Message, depth: int) -> list[Any]:
    subject = msg.subject
    if subject is not None and not isinstance(subject, str):
        raise InvalidArgument(
            f"message subject must be a str or None, got {type(subject).__name__}"
        )
    reply = msg.reply_subject
    if reply is not None and not isinstance(reply, str):
        raise InvalidArgument(
            f"message reply_subject must be a str or None, got {type(reply).__name__}"
        )
    label = msg.cm
    origin = msg.origin
    cm: list[Any] | bytes | None = None
    if origin is not None:
        cm = _origin_bytes(origin)
    correlation = msg.publisher_correlation
    if label is not None:
        if not isinstance(label, CmLabel):
            raise InvalidArgument(
                f"message cm must be a CmLabel or None, got {type(label).__name__}"
            )
        if correlation is not None:
            cm = [label.sender, label.sequence, label.time_limit, cm, _correlation(correlation)]
        elif cm is None:
            cm = [label.sender, label.sequence, label.time_limit]
        else:
            cm = [label.sender, label.sequence, label.time_limit, cm]
    elif correlation is not None:
        cm = [cm, _correlation(correlation)]
    flat: list[Any] = []
    for entry in msg._fields:
        ftype = entry[2]
        encoder = _ENCODERS.get(ftype)
        if encoder is None:
            flat += entry
        else:
            flat += (entry[0], entry[1], ftype, encoder(entry[3], entry[0], depth))
    return [subject, reply, cm, flat]


def _origin_bytes(origin: Any) -> bytes:
    """The wire form of ``Message.origin``: an int in [0, 2**128), 16 bytes big-endian."""
    if origin.__class__ is int:
        try:
            return origin.to_bytes(ORIGIN_SIZE, "big")
        except OverflowError:
            pass
    raise InvalidArgument(
        f"message origin must be an int in [0, 2**{8 * ORIGIN_SIZE}) or None, got {origin!r}"
    )


def _correlation(value: Any) -> Any:
    try:
        return check_publisher_correlation(value)
    except InvalidArgument as exc:
        raise InvalidArgument(f"message publisher_correlation: {exc}") from None


def _child(value: Any, name: str | None, depth: int) -> list[Any]:
    if not isinstance(value, Message):
        raise InvalidArgument(
            f"{field_label(name)}: a MSGARRAY list was changed in place and holds a "
            f"{type(value).__name__}, not a Message"
        )
    if depth >= MAX_NESTING_DEPTH:
        raise InvalidArgument(
            f"{field_label(name)}: messages nested deeper than {MAX_NESTING_DEPTH} levels "
            f"cannot be encoded"
        )
    return _node(value, depth + 1)


def _enc_msg_array(value: list[Any], name: str | None, depth: int) -> list[Any]:
    return [_child(item, name, depth) for item in value]


_ENCODERS: dict[FieldType, Any] = {
    FieldType.MSG: _child,
    FieldType.DATETIME: lambda value, name, depth: value._wire(),
    FieldType.F32: lambda value, name, depth: _F32.pack(value),
    FieldType.IPADDR32: lambda value, name, depth: value.packed,
    FieldType.MSGARRAY: _enc_msg_array,
    FieldType.STRINGARRAY: lambda value, name, depth: _check_str_list(value, name),
}


def _numbers_encoder(ftype: FieldType) -> Any:
    def encode_numbers(value: Any, name: str | None, depth: int) -> bytes:
        return _pack_numbers(ftype, value, name)

    return encode_numbers


for _code in ARRAY_ELEMENT:
    _ENCODERS[FieldType(_code)] = _numbers_encoder(FieldType(_code))
del _code


def encode(msg: Message) -> bytes:
    """The wire form of ``msg``.

    Raises MessageTooLarge over MAX_MESSAGE_SIZE bytes, InvalidArgument for a
    message that cannot be represented (non-str subject, nesting deeper than
    MAX_NESTING_DEPTH, an array list changed in place to hold bad elements).
    """
    if not isinstance(msg, Message):
        raise InvalidArgument(f"encode needs a Message, got {type(msg).__name__}")
    try:
        body = _PACKER.pack(_node(msg, 0))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"message holds a string that is not valid Unicode ({exc.reason})"
        ) from None
    if len(body) + _HEADER_LEN > MAX_MESSAGE_SIZE:
        raise MessageTooLarge(
            f"encoded message is {len(body) + _HEADER_LEN} bytes, over the "
            f"{MAX_MESSAGE_SIZE}-byte limit"
        )
    return HEADER + body


# =============================================================================
# decode
# =============================================================================


class _Bad(Exception):
    """A validation failure inside the tree; turned into MalformedMessage at the top.

    Value decoders raise it without saying which field; ``_message`` adds that,
    so the common (valid) path never formats a field label.
    """


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _dec_datetime(value: Any, depth: int) -> DateTime:
    if value.__class__ is not int:
        raise _Bad(f"DATETIME value must be an int, got {_type_name(value)}")
    if not -(2**63) <= value < 2**63:
        raise _Bad(f"DATETIME value {value} is not a signed 64-bit value")
    if value & 0xFFFFFF > 999_999:
        raise _Bad(f"DATETIME microseconds {value & 0xFFFFFF} over 999999")
    return DateTime._from_wire(value)


def _dec_bytes(value: Any, depth: int) -> bytes:
    if value.__class__ is not bytes:
        raise _Bad(f"value must be bin, got {_type_name(value)}")
    return value


def _dec_str(value: Any, depth: int) -> str:
    if value.__class__ is not str:
        raise _Bad(f"STRING value must be a str, got {_type_name(value)}")
    return value


def _dec_bool(value: Any, depth: int) -> bool:
    if value.__class__ is not bool:
        raise _Bad(f"BOOL value must be a bool, got {_type_name(value)}")
    return value


def _int_decoder(code: int) -> Any:
    lo, hi = INT_RANGE[code]
    tname = FieldType(code).name

    def dec_int(value: Any, depth: int) -> int:
        if value.__class__ is not int:
            raise _Bad(f"{tname} value must be an int, got {_type_name(value)}")
        if not lo <= value <= hi:
            raise _Bad(f"value {value} out of range for {tname} ({lo}..{hi})")
        return value

    return dec_int


def _dec_f32(value: Any, depth: int) -> float:
    if value.__class__ is not bytes or len(value) != 4:
        raise _Bad(f"F32 value must be 4 bytes of bin, got {_type_name(value)}")
    return cast(float, _F32.unpack(value)[0])


def _dec_f64(value: Any, depth: int) -> float:
    if value.__class__ is not float:
        raise _Bad(f"F64 value must be a float, got {_type_name(value)}")
    return value


def _dec_ipaddr(value: Any, depth: int) -> ipaddress.IPv4Address:
    if value.__class__ is not bytes or len(value) != 4:
        raise _Bad(f"IPADDR32 value must be 4 bytes of bin, got {_type_name(value)}")
    return _IPv4(value)


def _array_decoder(code: int) -> Any:
    typecode, size = _ARRAY[code]
    tname = FieldType(code).name

    def dec_array(value: Any, depth: int) -> list[Any]:
        if value.__class__ is not bytes:
            raise _Bad(f"{tname} value must be bin, got {_type_name(value)}")
        if len(value) % size:
            raise _Bad(f"{tname} holds {len(value)} bytes, not a multiple of {size}")
        numbers = array.array(typecode)
        numbers.frombytes(value)
        if _BIG_ENDIAN:
            numbers.byteswap()
        return numbers.tolist()

    return dec_array


def _dec_msg(value: Any, depth: int) -> Message:
    if depth >= MAX_NESTING_DEPTH:
        raise _Bad(f"messages nested deeper than {MAX_NESTING_DEPTH} levels")
    return _message(value, depth + 1)


def _dec_msg_array(value: Any, depth: int) -> list[Any]:
    if value.__class__ is not list:
        raise _Bad(f"MSGARRAY value must be an array, got {_type_name(value)}")
    out = []
    for index, item in enumerate(value):
        try:
            out.append(_dec_msg(item, depth))
        except _Bad as exc:
            raise _Bad(f"element {index}: {exc}") from None
    return out


def _dec_str_array(value: Any, depth: int) -> list[Any]:
    if value.__class__ is not list:
        raise _Bad(f"STRINGARRAY value must be an array, got {_type_name(value)}")
    for index, item in enumerate(value):
        if item.__class__ is not str:
            raise _Bad(f"STRINGARRAY element {index} must be a str, got {_type_name(item)}")
    return value


_DECODERS: dict[int, Any] = {
    FieldType.MSG: _dec_msg,
    FieldType.DATETIME: _dec_datetime,
    FieldType.OPAQUE: _dec_bytes,
    FieldType.XML: _dec_bytes,
    FieldType.STRING: _dec_str,
    FieldType.BOOL: _dec_bool,
    FieldType.F32: _dec_f32,
    FieldType.F64: _dec_f64,
    FieldType.IPADDR32: _dec_ipaddr,
    FieldType.MSGARRAY: _dec_msg_array,
    FieldType.STRINGARRAY: _dec_str_array,
}
for _code in INT_RANGE:
    _DECODERS[_code] = _int_decoder(_code)
for _code in ARRAY_ELEMENT:
    _DECODERS[_code] = _array_decoder(_code)
del _code
#: type code -> (FieldType, decoder); a list for a fast bounds-checked lookup.
_BY_CODE: list[tuple[FieldType, Any] | None] = [None] * (max(_DECODERS) + 1)
for _ftype in FieldType:
    _BY_CODE[_ftype] = (_ftype, _DECODERS[_ftype])
del _ftype
_N_CODES = len(_BY_CODE)


def _origin(value: Any) -> int:
    if value.__class__ is not bytes or len(value) != ORIGIN_SIZE:
        raise _Bad(f"origin must be bin of {ORIGIN_SIZE} bytes, got {_type_name(value)}")
    return int.from_bytes(value, "big")


def _label_slot(value: Any) -> tuple[CmLabel | None, int | None, Any]:
    """The label slot: a CM label (array of 3), an origin (bin), or both (array of 4);
    with the publisher's correlation id, [origin or nil, id] or [label..., origin or nil, id]."""
    if value.__class__ is bytes:
        return None, _origin(value), None
    if value.__class__ is not list or len(value) not in (2, 3, 4, 5):
        raise _Bad(
            "CM label must be an array of 3 (or 4 with an origin), or a publisher's "
            f"[origin, correlation id] (2, or 5 with a label), got {_type_name(value)}"
        )
    if len(value) == 2:
        return None, _optional_origin(value[0]), _read_correlation(value[1])
    label = _cm_label(value[0], value[1], value[2])
    if len(value) == 5:
        return label, _optional_origin(value[3]), _read_correlation(value[4])
    return label, _origin(value[3]) if len(value) == 4 else None, None


def _optional_origin(value: Any) -> int | None:
    return None if value is None else _origin(value)


def _read_correlation(value: Any) -> Any:
    if value.__class__ is str and value:
        return value
    if value.__class__ is bytes and value.strip(b"\0"):
        return value
    if value.__class__ is int and value:
        return value
    what = _type_name(value)
    if value.__class__ in (str, bytes, int):
        what = f"an empty or zero {what}"
    raise _Bad(
        "publisher correlation id must be a non-empty str, a non-zero bin or a non-zero int, "
        f"got {what}"
    )


def _cm_label(sender: Any, sequence: Any, limit: Any) -> CmLabel:
    if sender.__class__ is not str or not sender:
        raise _Bad("CM label sender must be a non-empty str")
    if sequence is not None and not (sequence.__class__ is int and 0 <= sequence <= U64_MAX):
        raise _Bad(f"CM label sequence must be nil or an unsigned int, got {sequence!r}")
    if limit.__class__ is not float:
        raise _Bad(f"CM label time_limit must be a float, got {_type_name(limit)}")
    if not 0.0 <= limit < _INF:
        raise _Bad(f"CM label time_limit must be finite and >= 0, got {limit}")
    return CmLabel(sender, sequence, limit)


_INF = float("inf")


def _message(node: Any, depth: int) -> Message:
    if node.__class__ is not list or len(node) != 4:
        raise _Bad(
            f"a message must be an array of 4 (subject, reply, cm, fields), got {_type_name(node)}"
        )
    subject, reply, cm, flat = node
    if subject is not None and subject.__class__ is not str:
        raise _Bad(f"subject must be a str or nil, got {_type_name(subject)}")
    if reply is not None and reply.__class__ is not str:
        raise _Bad(f"reply subject must be a str or nil, got {_type_name(reply)}")
    origin = correlation = None
    if cm is not None:
        cm, origin, correlation = _label_slot(cm)
    if flat.__class__ is not list:
        raise _Bad(f"fields must be an array, got {_type_name(flat)}")
    if len(flat) & 3:
        raise _Bad(f"fields array has {len(flat)} items, not a multiple of 4")
    fields: list[Any] = []
    ids: dict[Any, Any] | None = None
    by_code = _BY_CODE
    items = iter(flat)
    for name, field_id, code, value in zip(items, items, items, items, strict=True):
        try:
            if name is not None and (name.__class__ is not str or not name):
                raise _Bad(f"name must be a non-empty str or nil, got {name!r}")
            if field_id.__class__ is not int or not 0 <= field_id <= FIELD_ID_MAX:
                raise _Bad(f"field id must be an int 0..65535, got {field_id!r}")
            entry = by_code[code] if code.__class__ is int and 0 <= code < _N_CODES else None
            if entry is None:
                raise _Bad(f"unknown field type code {code!r}")
            item = (name, field_id, entry[0], entry[1](value, depth))
            if field_id:
                if name is None:
                    raise _Bad(f"field id {field_id} on an unnamed field")
                if ids is None:
                    ids = {}
                elif field_id in ids:
                    raise _Bad(f"duplicate field id {field_id}")
                ids[field_id] = item
        except _Bad as exc:
            where = f"field {name!r}" if name.__class__ is str and name else f"field {len(fields)}"
            raise _Bad(f"{where}: {exc}") from None
        fields.append(item)
    msg = _new(Message)
    msg.subject = subject
    msg.reply_subject = reply
    msg.listener = None
    msg.closure = None
    msg.cm = cm
    msg.origin = origin
    msg.publisher_correlation = correlation
    msg._fields = fields
    msg._ids = ids
    msg._shared = False
    return msg


def _as_view(data: Any) -> memoryview:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MalformedMessage(
            f"decode needs bytes, bytearray or memoryview, got {type(data).__name__}"
        )
    view = memoryview(data)
    if view.ndim != 1 or view.format not in ("B", "b", "c") or not view.c_contiguous:
        view = memoryview(view.tobytes())
    elif view.format != "B":
        view = view.cast("B")
    return view


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The Message whose wire form is ``data``.

    Any bad input raises MalformedMessage naming the problem (MessageTooLarge
    for input over MAX_MESSAGE_SIZE); no other exception escapes.
    """
    view = _as_view(data)
    size = view.nbytes
    if size > MAX_MESSAGE_SIZE:
        raise MessageTooLarge(f"input is {size} bytes, over the {MAX_MESSAGE_SIZE}-byte limit")
    if size < _HEADER_LEN or view[: _HEADER_LEN - 1] != HEADER[:-1]:
        raise MalformedMessage("not an rvasync message (missing the \\xc1RV header)")
    if view[_HEADER_LEN - 1] != HEADER[-1]:
        raise MalformedMessage(
            f"unsupported wire format version {view[_HEADER_LEN - 1]} "
            f"(this build reads {HEADER[-1]})"
        )
    try:
        tree = msgpack.unpackb(
            view[_HEADER_LEN:],
            raw=False,
            use_list=True,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=0,
            max_ext_len=0,
        )
    except msgpack.ExtraData:
        raise MalformedMessage("trailing bytes after the message") from None
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        if "incomplete input" in reason:
            raise MalformedMessage("truncated message: data ends inside a value") from None
        raise MalformedMessage(f"invalid msgpack body: {reason}") from None
    try:
        return _message(tree, 0)
    except _Bad as exc:
        raise MalformedMessage(str(exc)) from None
    except Exception as exc:  # a check this module forgot must still not escape as non-RvError
        raise MalformedMessage(f"invalid message: {type(exc).__name__}: {exc}") from None


def check(data: bytes | bytearray | memoryview) -> None:
    """Raise exactly what :func:`decode` raises for ``data``, else return None.

    The daemon checks every message a client publishes before passing it on,
    without needing the Message. Here that is a decode whose result is dropped
    (msgpack builds the tree anyway); the compiled twin parses without building.
    """
    decode(data)


def check_subject(data: bytes | bytearray | memoryview) -> str | None:
    """:func:`check`, then the message's subject (None when it has none).

    What the daemon needs of each message a client publishes, in one call.
    """
    return decode(data).subject
