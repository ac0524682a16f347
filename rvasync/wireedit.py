"""Edits of an encoded message made without decoding it: a new address, one more field.

A routing daemon passes messages through. It receives a message's wire
bytes from a neighbor router and publishes them into its own network with
a new address (the subject and reply subject as that network names them)
and one field more (its routing tag). Decoding the whole message into a
:class:`~rvasync.message.Message`, changing it and encoding it again costs
far more than what changes; the functions here read and rewrite only the
head of the wire form (docs/messages.md): the header, the subject, the
reply subject, the label slot (nil, or the publication origin every send
stamps, passed on as it is) and the header of the field array. The field array is the
last element of the message, so a field is appended by writing it at the
end and counting it in the array's header.

The result is byte for byte what encoding the changed message would give
(the codecs write the shortest msgpack forms, and so does this module).
:func:`read_head` returns None for anything it does not read (not bytes,
not the expected layout, a certified-delivery label): the caller then
takes the general path (decode, change, encode), which also reports a
malformed message. The body of the fields is not checked here: it is
passed on as it came.
"""

from __future__ import annotations

from typing import NamedTuple

import msgpack

from rvasync._wire import (
    FIXSTR,
    FIXSTR_MAX,
    HEADER,
    MESSAGE_ARRAY,
    ORIGIN_SIZE,
    STR8,
    STR16,
    SUBJECT_TAG_OFFSET,
)

__all__ = ["Head", "StringField", "plain_subject", "read_head", "rewrite", "tag_run"]

NIL = 0xC0
BIN8 = 0xC4
STR32 = 0xDB
FIXARRAY = 0x90
FIXARRAY_MAX = 0x9F
ARRAY16 = 0xDC
ARRAY32 = 0xDD
#: Elements per field in the field array: name, id, type, value.
FIELD_ELEMENTS = 4
#: FieldType.STRING's wire code (rvasync.fieldtypes; a number here: no import cycle).
STRING_TYPE = 8

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_START = HEADER + bytes([MESSAGE_ARRAY])
_MIN_LEN = SUBJECT_TAG_OFFSET + 4  # subject, reply, cm and fields: one byte each at least


class Head(NamedTuple):
    """Where the parts of an encoded message are (offsets into its bytes)."""

    subject: str | None
    reply: str | None
    #: The label slot: nil, or a publication origin alone (a bin of ORIGIN_SIZE bytes);
    #: :func:`read_head` reads no other (a certified-delivery label). Copied as it is.
    cm_at: int
    #: The field array's header, and its first element.
    fields_at: int
    fields_body: int
    #: Elements in the field array (four per field).
    elements: int


def _str_at(data: bytes, at: int) -> tuple[str | None, int]:
    """The msgpack str or nil at ``at`` and the offset after it; ValueError otherwise."""
    tag = data[at]
    if FIXSTR <= tag <= FIXSTR_MAX:
        start, length = at + 1, tag - FIXSTR
    elif tag == NIL:
        return None, at + 1
    elif tag == STR8:
        start, length = at + 2, data[at + 1]
    elif tag == STR16:
        start, length = at + 3, int.from_bytes(data[at + 1 : at + 3], "big")
    elif tag == STR32:
        start, length = at + 5, int.from_bytes(data[at + 1 : at + 5], "big")
    else:
        raise ValueError("not a str")
    end = start + length
    if end > len(data):
        raise ValueError("truncated")
    return data[start:end].decode(), end


def read_head(data: object) -> Head | None:
    """The head of wire message ``data``, or None when it is not read here (see module)."""
    if not isinstance(data, bytes) or len(data) < _MIN_LEN or not data.startswith(_START):
        return None
    try:
        tag = data[SUBJECT_TAG_OFFSET]
        if FIXSTR <= tag <= FIXSTR_MAX:  # the usual subject, read inline
            at = SUBJECT_TAG_OFFSET + 1 + tag - FIXSTR
            subject: str | None = data[SUBJECT_TAG_OFFSET + 1 : at].decode()
        else:
            subject, at = _str_at(data, SUBJECT_TAG_OFFSET)
        if data[at] == NIL:
            reply: str | None = None
            cm_at = at + 1
        else:
            reply, cm_at = _str_at(data, at)
        label = data[cm_at]
        if label == NIL:
            at = cm_at + 1
        elif label == BIN8 and data[cm_at + 1] == ORIGIN_SIZE:
            # The origin every send stamps (docs/messages.md): passed on unchanged.
            at = cm_at + 2 + ORIGIN_SIZE
        else:
            return None
        tag = data[at]
        if FIXARRAY <= tag <= FIXARRAY_MAX:
            count, body = tag - FIXARRAY, at + 1
        elif tag == ARRAY16:
            count, body = int.from_bytes(data[at + 1 : at + 3], "big"), at + 3
        elif tag == ARRAY32:
            count, body = int.from_bytes(data[at + 1 : at + 5], "big"), at + 5
        else:
            return None
    except (IndexError, ValueError):
        return None
    if body > len(data) or count % FIELD_ELEMENTS:
        return None
    return Head(subject, reply, cm_at, at, body, count)


def _array_header(count: int) -> bytes:
    if count <= FIXARRAY_MAX - FIXARRAY:
        return bytes((FIXARRAY + count,))
    if count <= 0xFFFF:
        return bytes((ARRAY16,)) + count.to_bytes(2, "big")
    return bytes((ARRAY32,)) + count.to_bytes(4, "big")


class StringField:
    """Encodes a STRING field named ``name`` (no id) for :func:`rewrite`, one value at a time.

    The name, id and type are encoded once; :meth:`encode` adds the value.
    UnicodeEncodeError for a name or value that is not valid Unicode.
    """

    __slots__ = ("_head",)

    def __init__(self, name: str) -> None:
        self._head: bytes = _pack(name) + b"\x00" + bytes((STRING_TYPE,))

    @property
    def head(self) -> bytes:
        """The field's name, id and type, encoded (the value follows them)."""
        return self._head

    def encode(self, value: str) -> bytes:
        """The field holding ``value``, in wire form."""
        return self._head + _pack(value)


def rewrite(
    data: bytes, head: Head, subject: str, reply: str | None, field: bytes | None = None
) -> bytes:
    """``data`` (read by :func:`read_head` into ``head``) with the address ``subject`` /
    ``reply`` and, if given, the encoded ``field`` (:meth:`StringField.encode`) appended."""
    if subject == head.subject and reply == head.reply:
        if field is None:
            return data
        start = data[: head.cm_at]
    else:
        start = _START + _pack(subject) + _pack(reply)
    if field is None:
        return start + data[head.cm_at :]
    return b"".join(
        (
            start,
            data[head.cm_at : head.fields_at],
            _array_header(head.elements + FIELD_ELEMENTS),
            data[head.fields_body :],
            field,
        )
    )


_SUBJECT_AT = SUBJECT_TAG_OFFSET + 1
_HEADER_LEN = len(_START)
#: Most field-array elements a message may have for :func:`tag_run` (with the tag's four
#: more, still a fixarray).
_RUN_MAX_ELEMENTS = FIXARRAY_MAX - FIXARRAY - FIELD_ELEMENTS


def plain_subject(data: bytes) -> str | None:
    """The subject of wire message ``data`` when it is a short one (a fixstr) and the
    message has no reply subject; None for anything else (then :func:`read_head`).

    What a router needs of most messages programs publish: it sends them on as
    they are. Nothing after the reply subject is read.
    """
    if len(data) < _MIN_LEN:
        return None
    tag = data[SUBJECT_TAG_OFFSET]
    if not FIXSTR < tag <= FIXSTR_MAX:
        return None
    end = _SUBJECT_AT + tag - FIXSTR
    if end >= len(data) or data[end] != NIL or not data.startswith(_START):
        return None
    try:
        return data[_SUBJECT_AT:end].decode()
    except UnicodeDecodeError:
        return None


def _str_header(length: int) -> bytes:
    if length <= FIXSTR_MAX - FIXSTR:
        return bytes((FIXSTR + length,))
    if length <= 0xFF:
        return bytes((STR8, length))
    return bytes((STR16,)) + length.to_bytes(2, "big")


def tag_run(
    payloads: list[bytes], subject: str, field: StringField, before: str, first: int, after: str
) -> list[bytes] | None:
    """Each of ``payloads`` with ``field`` appended, holding ``f"{before}{first + i}{after}"``
    for the i-th: what :func:`rewrite` gives with the address unchanged, for a batch of
    the usual shape, written without reading each head in full.

    That shape: every message's subject is ``subject``, with no reply subject, a nil or
    origin-only label slot and at most two fields (with the tag, the field array stays a
    fixarray).
    None as soon as one is not (nor for values of 64 KiB or more): the caller then reads
    each with :func:`read_head`.
    """
    start = _HEADER_LEN
    field_head = field.head
    size, value_head = -1, b""
    out: list[bytes] = []
    append = out.append
    try:
        key = _pack(subject)
        at = start + len(key)
        for i, data in enumerate(payloads):
            if data[start:at] != key or data[at] != NIL or not data.startswith(_START):
                return None
            label = data[at + 1]
            if label == NIL:
                fields_at = at + 2
            elif label == BIN8 and data[at + 2] == ORIGIN_SIZE:
                fields_at = at + 3 + ORIGIN_SIZE
            else:
                return None
            tag = data[fields_at]
            count = tag - FIXARRAY
            if not 0 <= count <= _RUN_MAX_ELEMENTS or count % FIELD_ELEMENTS:
                return None
            value = f"{before}{first + i}{after}".encode()
            length = len(value)
            if length != size:  # the value's msgpack str header, made again when it grows
                if length > 0xFFFF:
                    return None
                size, value_head = length, _str_header(length)
            append(
                b"".join(
                    (
                        data[:fields_at],
                        bytes((tag + FIELD_ELEMENTS,)),
                        data[fields_at + 1 :],
                        field_head,
                        value_head,
                        value,
                    )
                )
            )
    except (IndexError, TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return None
    return out
