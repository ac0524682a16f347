"""Constants of the rvasync wire format, shared by both codec implementations.

The pure codec (``rvasync.fallback.codec``) and the compiled one
(``rvasync_native.codec``) must produce byte-identical output and accept
exactly the same inputs, so every number they both depend on lives here,
in a module that imports nothing from the rest of the package.
The format itself is described in ``docs/messages.md``.

The daemon reads the subject of an encoded message without decoding it (to
route it); that layout knowledge lives here too: the ``SUBJECT_*`` / ``STR*``
constants, used by both twins of ``daemonpath``, and :func:`peek_subject`.
"""

from __future__ import annotations

__all__ = [
    "ARRAY_ELEMENT",
    "DATETIME_MAX_SECONDS",
    "DATETIME_MIN_SECONDS",
    "FIELD_ID_MAX",
    "FIXSTR",
    "FIXSTR_MAX",
    "HEADER",
    "INT_RANGE",
    "LOOPBACK_DATAGRAM",
    "MAX_MESSAGE_SIZE",
    "MAX_NESTING_DEPTH",
    "MESSAGE_ARRAY",
    "NETWORK_DATAGRAM",
    "ORIGIN_SIZE",
    "STR8",
    "STR16",
    "SUBJECT_TAG_OFFSET",
    "U64_MAX",
    "WIRE_VERSION",
    "peek_subject",
]

#: Version of the layout after the magic bytes; bumped on any incompatible change.
WIRE_VERSION = 1

#: Every encoded message starts with these four bytes. 0xC1 is the one byte
#: msgpack never uses, so no plain msgpack document can pass for a message.
HEADER = b"\xc1RV" + bytes([WIRE_VERSION])

#: Bytes of a publication origin on the wire. ``Message.origin`` is an int in
#: ``[0, 2**128)``: the publishing transport's 64-bit id in the high half, its
#: send sequence in the low half. It travels big-endian in the node's label
#: slot, as a bin of this size alone, or as a CM label's 4th element.
ORIGIN_SIZE = 16

#: Largest encoded message, in bytes (encode and decode both refuse more).
MAX_MESSAGE_SIZE = 64 * 1024 * 1024

#: Datagram size on loopback (MTU 64 KiB: large datagrams are never IP-fragmented there)
#: and on real networks (one Ethernet frame, so one lost fragment never costs a datagram).
LOOPBACK_DATAGRAM = 60000
NETWORK_DATAGRAM = 1400

#: Deepest nesting of messages inside messages. The outermost message is at
#: depth 0, a message in one of its MSG/MSGARRAY fields at depth 1, and so on.
#: It bounds recursion in the codec and rejects hostile inputs early.
MAX_NESTING_DEPTH = 100

#: Field identifiers are unsigned 16-bit; 0 means "no identifier".
FIELD_ID_MAX = 0xFFFF

#: DateTime seconds are 40-bit signed.
DATETIME_MIN_SECONDS = -(2**39)
DATETIME_MAX_SECONDS = 2**39 - 1

U64_MAX = 2**64 - 1

#: Inclusive value range of every integer type, keyed by wire type code
#: (the ``FieldType`` values; kept numeric here so this module has no imports).
INT_RANGE: dict[int, tuple[int, int]] = {
    14: (-(2**7), 2**7 - 1),  # I8
    16: (-(2**15), 2**15 - 1),  # I16
    18: (-(2**31), 2**31 - 1),  # I32
    20: (-(2**63), 2**63 - 1),  # I64
    15: (0, 2**8 - 1),  # U8
    17: (0, 2**16 - 1),  # U16
    19: (0, 2**32 - 1),  # U32
    21: (0, U64_MAX),  # U64
    26: (0, 2**16 - 1),  # IPPORT16
}

#: Numeric array type code -> (struct format letter, element size in bytes,
#: scalar type code of one element). Arrays travel as little-endian packed bytes.
ARRAY_ELEMENT: dict[int, tuple[str, int, int]] = {
    34: ("b", 1, 14),  # I8ARRAY
    36: ("h", 2, 16),  # I16ARRAY
    38: ("i", 4, 18),  # I32ARRAY
    40: ("q", 8, 20),  # I64ARRAY
    35: ("B", 1, 15),  # U8ARRAY
    37: ("H", 2, 17),  # U16ARRAY
    39: ("I", 4, 19),  # U32ARRAY
    41: ("Q", 8, 21),  # U64ARRAY
    44: ("f", 4, 24),  # F32ARRAY
    45: ("d", 8, 25),  # F64ARRAY
}

# -- where the subject sits in an encoded message (read without decoding) -----
#
# An encoded message is HEADER then a msgpack array of 4 (subject, reply, cm,
# fields); the subject is its first element, a msgpack str (nil when absent).
# So the byte after the header is the fixarray tag of 4 elements, and the str's
# tag follows it: a fixstr (length in the tag), a str8 (one length byte) or a
# str16 (two length bytes, big-endian), then the subject's UTF-8 bytes.

#: The msgpack tag of the message array (fixarray of 4), at offset ``len(HEADER)``.
MESSAGE_ARRAY = 0x94
#: Offset of the subject's msgpack tag.
SUBJECT_TAG_OFFSET = len(HEADER) + 1
#: fixstr tags: FIXSTR + length, up to FIXSTR_MAX (31 bytes).
FIXSTR = 0xA0
FIXSTR_MAX = 0xBF
#: str8 tag (one length byte follows) and str16 tag (two length bytes follow).
STR8 = 0xD9
STR16 = 0xDA


def peek_subject(data: bytes) -> str | None:
    """The subject of an encoded message, read without decoding the rest.

    Returns None when the bytes do not start the way an encoded message does,
    the subject is absent, truncated or not UTF-8; the caller then decodes in
    full (and a malformed message fails there).
    """
    tag_at = SUBJECT_TAG_OFFSET
    if len(data) < tag_at + 2 or data[tag_at - 1] != MESSAGE_ARRAY:
        return None
    tag = data[tag_at]
    if FIXSTR <= tag <= FIXSTR_MAX:
        start, length = tag_at + 1, tag - FIXSTR
    elif tag == STR8:
        start, length = tag_at + 2, data[tag_at + 1]
    elif tag == STR16 and len(data) >= tag_at + 3:
        start, length = tag_at + 3, (data[tag_at + 1] << 8) | data[tag_at + 2]
    else:
        return None
    if start + length > len(data):
        return None
    try:
        return data[start : start + length].decode()
    except UnicodeDecodeError:
        return None
