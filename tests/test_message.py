"""Message, Field and CmLabel: the in-memory model and its copy-on-write sharing."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rvasync as rv
from rvasync.fieldtypes import FieldType
from rvasync.message import CmLabel, Field, Message

F = FieldType


# -- construction and basic access ---------------------------------------------------


def test_mapping_constructor_infers_types() -> None:
    msg = Message("A.B", {"n": 1, "s": "x", "f": 1.5}, reply_subject="R")
    assert (msg.subject, msg.reply_subject) == ("A.B", "R")
    assert [(f.name, f.type) for f in msg] == [("n", F.I64), ("s", F.STRING), ("f", F.F64)]
    assert msg.listener is None and msg.closure is None and msg.cm is None


def test_field_iterable_constructor() -> None:
    fields = [Field("a", 3, F.U8, 5), Field(None, 0, None, "anon")]
    msg = Message("S", fields)
    assert list(msg) == fields
    assert msg.field_by_id(3).value == 5
    assert Message("T", msg) == Message("T", fields)  # a Message is an iterable of Fields
    with pytest.raises(rv.ConversionError):
        Message("S", [("a", 1)])  # type: ignore[list-item]
    with pytest.raises(rv.ConversionError):
        Message("S", 5)  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidArgument):
        Message("S", [Field("_private", 0, None, 1)])


def test_subject_attributes_are_plain() -> None:
    msg = Message()
    assert msg.subject is None and msg.reply_subject is None
    msg.subject = "X.Y"
    msg.reply_subject = "_INBOX.1"
    assert (msg.subject, msg.reply_subject) == ("X.Y", "_INBOX.1")


def test_add_allows_repeated_names() -> None:
    msg = Message()
    msg.add("x", 1)
    msg.add("x", 2, F.U16, 7)
    assert list(msg) == [Field("x", 0, F.I64, 1), Field("x", 7, F.U16, 2)]
    assert msg["x"] == 1
    assert msg.get_all("x") == [1, 2]
    assert len(msg) == 2


def test_add_accepts_type_codes() -> None:
    msg = Message()
    msg.add("x", 3, int(F.U8))
    assert msg.field("x").type is F.U8
    with pytest.raises(rv.InvalidArgument):
        msg.add("y", 3, 2)
    with pytest.raises(rv.ConversionError):
        msg.add("y", 3, "U8")  # type: ignore[arg-type]


def test_errors_name_the_field() -> None:
    msg = Message()
    with pytest.raises(rv.InvalidArgument) as info:
        msg.add("level", 300, F.U8)
    assert "'level'" in str(info.value) and "U8" in str(info.value) and "300" in str(info.value)
    with pytest.raises(rv.ConversionError) as info2:
        msg.add("level", "high", F.I32)
    assert "'level'" in str(info2.value) and "I32" in str(info2.value)
    assert len(msg) == 0  # failed adds leave the message unchanged


def test_getitem_get_field_contains() -> None:
    msg = Message(None, {"a": 1})
    assert msg["a"] == 1 and msg.get("a") == 1
    assert msg.get("zz") is None and msg.get("zz", 5) == 5
    with pytest.raises(KeyError):
        _ = msg["zz"]
    with pytest.raises(KeyError):
        msg.field("zz")
    assert "a" in msg and "zz" not in msg and 1 not in msg


def test_setitem_updates_first_keeping_type_and_id() -> None:
    msg = Message()
    msg.add("v", 1, F.U8, 4)
    msg.add("v", 2, F.U8)
    msg["v"] = 9
    assert msg.field("v") == Field("v", 4, F.U8, 9)
    assert msg.field_by_id(4).value == 9
    assert msg.get_all("v") == [9, 2]
    with pytest.raises(rv.InvalidArgument):
        msg["v"] = 256
    with pytest.raises(rv.ConversionError):
        msg["v"] = "nine"
    assert msg["v"] == 9
    msg["new"] = "added"
    assert msg.field("new").type is F.STRING


def test_delete_and_remove() -> None:
    msg = Message()
    msg.add("a", 1, field_id=1)
    msg.add("a", 2)
    msg.add("b", 3, field_id=2)
    del msg["a"]
    assert msg.get_all("a") == [2]
    with pytest.raises(KeyError):
        msg.field_by_id(1)
    removed = msg.remove("b")
    assert removed == Field("b", 2, F.I64, 3)
    assert msg.remove("b") is None
    with pytest.raises(KeyError):
        del msg["b"]
    msg.add("c", 4, field_id=9)
    assert msg.remove_by_id(9) == Field("c", 9, F.I64, 4)
    assert msg.remove_by_id(9) is None
    assert [f.value for f in msg] == [2]


def test_empty_message_is_truthy() -> None:
    assert Message()
    assert len(Message()) == 0


# -- names and identifiers -------------------------------------------------------------


def test_reserved_names() -> None:
    msg = Message()
    for attempt in (
        lambda: msg.add("_data_", 1),
        lambda: msg.__setitem__("_x", 1),
        lambda: Message(None, {"_x": 1}),
    ):
        with pytest.raises(rv.InvalidArgument, match="reserved"):
            attempt()
    msg._add_reserved("_data_", 5)
    assert msg["_data_"] == 5
    with pytest.raises(rv.InvalidArgument):
        msg["_data_"] = 6
    assert msg.remove("_data_") is not None


def test_field_names() -> None:
    msg = Message()
    msg.add(None, 1)
    assert msg.field(None).value == 1  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidArgument):
        msg.add("", 1)
    with pytest.raises(rv.ConversionError):
        msg.add(5, 1)  # type: ignore[arg-type]
    with pytest.raises(rv.InvalidArgument):
        msg.add("bad\udc80", 1)


def test_field_id_rules() -> None:
    msg = Message()
    msg.add("a", 1, field_id=1)
    msg.add("b", 1, field_id=65535)
    for bad in (-1, 65536):
        with pytest.raises(rv.InvalidArgument, match="out of range"):
            msg.add("c", 1, field_id=bad)
    with pytest.raises(rv.InvalidArgument, match="already used"):
        msg.add("c", 1, field_id=1)
    with pytest.raises(rv.InvalidArgument, match="needs a field name"):
        msg.add(None, 1, field_id=5)
    with pytest.raises(rv.ConversionError):
        msg.add("c", 1, field_id=True)  # type: ignore[arg-type]
    with pytest.raises(rv.ConversionError):
        msg.add("c", 1, field_id="1")  # type: ignore[arg-type]
    assert len(msg) == 2


def test_nested_messages_are_separate_id_spaces() -> None:
    inner = Message()
    inner.add("x", 1, field_id=1)
    outer = Message()
    outer.add("x", 2, field_id=1)
    outer.add("sub", inner, field_id=2)
    assert outer.field_by_id(2).value.field_by_id(1).value == 1


@given(st.lists(st.tuples(st.sampled_from("adrx"), st.integers(0, 40)), max_size=60))
@settings(max_examples=60)
def test_field_by_id_matches_a_linear_scan(ops: list[tuple[str, int]]) -> None:
    """Whatever sequence of adds, deletes and updates, the id index agrees with the fields."""
    msg = Message()
    for step, (op, key) in enumerate(ops):
        name = f"n{key % 7}"
        if op == "a":
            try:
                msg.add(name, key, field_id=key)
            except rv.InvalidArgument:
                assert key and any(f.id == key for f in msg)
        elif op == "d" and name in msg:
            del msg[name]
        elif op == "r":
            msg.remove_by_id(key)
        elif op == "x" and name in msg:
            msg[name] = key + 100
        if step % 3 == 0:
            msg = msg.copy()  # exercise the copy-on-write path too
    expected = {f.id: f for f in msg if f.id}
    assert len(expected) == sum(1 for f in msg if f.id)
    for field_id in range(1, 41):
        if field_id in expected:
            assert msg.field_by_id(field_id) == expected[field_id]
        else:
            with pytest.raises(KeyError):
                msg.field_by_id(field_id)


# -- Field ----------------------------------------------------------------------------


def test_field_is_immutable_with_count() -> None:
    field = Field("arr", 0, F.I8ARRAY, [1, 2, 3])
    assert field.count == 3
    assert Field("s", 0, None, "abc").count == 1
    with pytest.raises(AttributeError):
        field.value = [1]  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del field.name
    assert repr(Field("x", 2, F.U8, 1)) == "Field('x', 2, FieldType.U8, 1)"
    assert pickle.loads(pickle.dumps(field)) == field


def test_changing_a_snapshot_is_impossible_but_message_changes_are_not_seen() -> None:
    msg = Message(None, {"a": 1})
    snapshot = msg.field("a")
    msg["a"] = 2
    assert snapshot.value == 1 and msg["a"] == 2


# -- equality, repr, copies ---------------------------------------------------------------


def test_equality() -> None:
    a = Message("S", {"x": 1})
    assert a == Message("S", {"x": 1})
    assert a != Message("T", {"x": 1})
    assert a != Message("S", {"x": 1}, reply_subject="R")
    assert a != Message("S", [Field("x", 0, F.I32, 1)])
    assert a != Message("S", [Field("x", 1, None, 1)])
    assert a != Message("S", {"x": 1, "y": 2})
    assert a != "S"
    nan = Message("S", [Field("f", 0, F.F64, math.nan), Field("v", 0, F.F32ARRAY, [math.nan])])
    assert nan == Message(
        "S", [Field("f", 0, F.F64, float("nan")), Field("v", 0, F.F32ARRAY, [float("nan")])]
    )
    with pytest.raises(TypeError):
        hash(a)


def test_repr_is_short_and_informative() -> None:
    msg = Message("A", reply_subject="R")
    msg.add("x", 1, field_id=3)
    msg.add("blob", b"z" * 500)
    for i in range(30):
        msg.add(None, i)
    msg.cm = CmLabel("me", 1, 0)
    text = repr(msg)
    assert "x#3:I64=1" in text and "subject='A'" in text and "reply_subject='R'" in text
    assert "more" in text and len(text) < 800 and "cm=CmLabel" in text


def test_nested_message_is_copied_when_added() -> None:
    inner = Message("in", {"a": 1})
    outer = Message("out", {"sub": inner})
    inner["a"] = 2
    inner.add("b", 3)
    assert outer["sub"] == Message("in", {"a": 1})
    # a message added to itself is a snapshot, not a cycle
    outer.add("self", outer)
    assert outer["self"] == Message("out", {"sub": Message("in", {"a": 1})})


def test_copy_and_deepcopy() -> None:
    msg = Message("S", {"list": [1, 2], "sub": Message(None, {"a": 1})})
    msg.add("i", 5, field_id=1)
    msg.listener, msg.closure, msg.cm = "L", "C", CmLabel("x", None, 1.0)
    shallow = copy.copy(msg)
    assert shallow == msg and shallow is not msg
    assert (shallow.listener, shallow.closure, shallow.cm) == ("L", "C", msg.cm)
    deep = copy.deepcopy(msg)
    assert deep == msg and deep.field_by_id(1).value == 5
    deep["list"].append(3)
    deep["sub"]["a"] = 9
    assert msg["list"] == [1, 2] and msg["sub"]["a"] == 1
    assert deep.listener == "L"


def test_pickle_round_trip() -> None:
    msg = Message("S", {"a": 1, "b": [1.5]})
    msg.cm = CmLabel("sender", 4, 2.5)
    back = pickle.loads(pickle.dumps(msg))
    assert back == msg and back.cm == msg.cm


# -- copy-on-write delivery copies -------------------------------------------------------------


def test_delivery_copy_shares_until_written() -> None:
    original = Message("S", {"a": 1}, reply_subject="R")
    original.cm = CmLabel("me", 1, 0)
    copy1 = original.delivery_copy("listener-1", "closure-1")
    copy2 = original.delivery_copy("listener-2", None)
    assert copy1 == original == copy2
    assert (copy1.listener, copy1.closure) == ("listener-1", "closure-1")
    assert (copy2.listener, copy2.closure) == ("listener-2", None)
    assert copy1.cm is original.cm and original.listener is None
    assert copy1._fields is original._fields  # shared, not copied

    copy1["a"] = 2
    copy1.add("only1", True, field_id=5)
    assert original["a"] == 1 and copy2["a"] == 1
    assert "only1" not in original and "only1" not in copy2
    with pytest.raises(KeyError):
        original.field_by_id(5)

    original.add("late", 1)  # the sender changes its message after sending
    assert "late" not in copy2 and "late" not in copy1
    del copy2["a"]
    assert original["a"] == 1 and copy1["a"] == 2

    copy1.subject = "changed"
    assert original.subject == "S"


def test_ids_are_copied_on_write() -> None:
    original = Message()
    original.add("a", 1, field_id=1)
    shared = original.delivery_copy(None, None)
    shared["a"] = 7
    assert original.field_by_id(1).value == 1 and shared.field_by_id(1).value == 7
    shared.remove_by_id(1)
    assert original.field_by_id(1).value == 1


def test_share_protects_what_was_sent() -> None:
    msg = Message("S", {"a": 1})
    sent_fields = msg._fields
    msg._share()
    msg["a"] = 2
    msg.add("b", 2)
    assert sent_fields == [("a", 0, F.I64, 1)]
    assert msg["a"] == 2


def test_nested_values_are_not_deep_copied() -> None:
    """Documented limit: sub-messages and array lists are shared between delivery copies."""
    original = Message("S", {"list": [1, 2]})
    delivered = original.delivery_copy(None, None)
    assert delivered["list"] is original["list"]


# -- CmLabel ------------------------------------------------------------------------------


def test_cm_label() -> None:
    label = CmLabel("sender.name", 12, 30)
    assert label.time_limit == 30.0 and type(label.time_limit) is float
    assert CmLabel("s", None, 0).sequence is None
    with pytest.raises(AttributeError):
        label.sequence = 5  # type: ignore[misc]
    assert label == CmLabel("sender.name", 12, 30.0)
    assert hash(label) == hash(CmLabel("sender.name", 12, 30.0))
    for args, error in [
        (("", 1, 0), rv.InvalidArgument),
        ((5, 1, 0), rv.ConversionError),
        (("s", -1, 0), rv.InvalidArgument),
        (("s", 2**64, 0), rv.InvalidArgument),
        (("s", True, 0), rv.ConversionError),
        (("s", 1, -1), rv.InvalidArgument),
        (("s", 1, math.inf), rv.InvalidArgument),
        (("s", 1, "5"), rv.ConversionError),
    ]:
        with pytest.raises(error):
            CmLabel(*args)


def test_a_dict_value_becomes_a_nested_message() -> None:
    """Both twins of Message(...)/add hand dicts to the same checks (tests/test_msgbuild.py)."""
    msg = Message("ORDERS.NEW", {"customer": {"name": "Ada", "tags": ["a", "b"], "addr": {}}})
    customer = msg.field("customer")
    assert customer.type == FieldType.MSG and isinstance(customer.value, Message)
    assert customer.value.subject is None
    assert [(f.name, f.type) for f in customer.value] == [
        ("name", FieldType.STRING),
        ("tags", FieldType.STRINGARRAY),
        ("addr", FieldType.MSG),
    ]
    assert len(customer.value["addr"]) == 0
    assert Message.from_bytes(msg.to_bytes()) == msg
    msg.add("lines", [{"sku": "A1"}, Message(None, {"sku": "B2"})])
    assert msg.field("lines").type == FieldType.MSGARRAY
    assert [line["sku"] for line in msg["lines"]] == ["A1", "B2"]
    msg.add("typed", {"n": 1}, FieldType.MSG)
    msg["customer"] = {"name": "Grace"}  # keeps the field's type: MSG
    assert msg["customer"] == Message(None, {"name": "Grace"})


def test_a_dict_is_a_snapshot() -> None:
    inner = {"n": 1}
    msg = Message("A", {"inner": inner})
    inner["n"] = 2
    assert msg["inner"]["n"] == 1


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        ({3: "x"}, rv.ConversionError, "field 'd': field name must be a str or None, got int"),
        ({"_x": 1}, rv.InvalidArgument, "field 'd': field name '_x' is reserved"),
        ({"a": {"b": None}}, rv.ConversionError, "field 'd': field 'a': field 'b': no field type"),
        ({"a": {"u": 2**70}}, rv.InvalidArgument, "field 'd': field 'a': field 'u': value"),
    ],
)
def test_a_bad_dict_names_the_path_to_the_bad_field(value, error, text) -> None:
    with pytest.raises(error) as caught:
        Message("A", {"d": value})
    assert str(caught.value).startswith(text)


def test_a_dict_that_contains_itself_is_refused() -> None:
    looped: dict[str, object] = {}
    looped["self"] = looped
    with pytest.raises(rv.InvalidArgument, match=r"nested too deeply .*contain itself"):
        Message("A", {"d": looped})
