"""Subject syntax, wildcard matching and SubjectIndex: the specification's tables and limits.

Every test runs against each implementation of the ``subjects`` hot path
(pure twin, and the compiled one when built).
"""

from __future__ import annotations

import re

import pytest

import rvasync as rv
from rvasync import _accel
from rvasync.fallback import subjects as pure_subjects
from rvasync.subjects import (
    MAX_ELEMENT_LENGTH,
    MAX_SUBJECT_LENGTH,
    is_advisory,
    is_inbox,
    is_local,
    validate_name,
)


@pytest.fixture(params=_accel.implementations("subjects"), ids=lambda m: m.__name__)
def impl(request):
    module = request.param
    module.clear_caches()
    return module


# --- Table 10 and 11: valid and invalid subject names -----------------------------------

TABLE_10_VALID = [
    "NEWS.LOCAL.POLITICS.CITY_COUNCIL",
    "NEWS.NATIONAL.ARTS.MOVIES.REVIEWS",
    "CHAT.MRKTG.NEW_PRODUCTS",
    "CHAT.DEVELOPMENT.BIG_PROJECT.DESIGN",
    "News.Sports.Baseball",
    "finance",
    "This.long.subject_name.is.valid.even.though.quite.uninformative",
    # Chapter 3 examples.
    "RUN.HOME",
    "RUN.for.Elected_office.President",
]

TABLE_11_INVALID = [
    ("News..Natural_Disasters.Flood", "empty element at position 2 of 4 (two dots in a row)"),
    ("WRONG.", "empty element at position 2 of 2 (it ends with a dot)"),
    (".TRIPLE.WRONG..", "empty element at position 1 of 5 (it starts with a dot)"),
]


@pytest.mark.parametrize("subject", TABLE_10_VALID)
@pytest.mark.parametrize("wildcards", [False, True])
def test_table_10_valid_subjects(impl, subject, wildcards):
    impl.validate_subject(subject, wildcards=wildcards)
    impl.validate_subject(subject, wildcards=wildcards)  # the cached path agrees
    assert not impl.has_wildcards(subject)


@pytest.mark.parametrize(("subject", "reason"), TABLE_11_INVALID)
@pytest.mark.parametrize("wildcards", [False, True])
def test_table_11_invalid_subjects(impl, subject, reason, wildcards):
    with pytest.raises(rv.InvalidSubject, match=r"^subject ") as caught:
        impl.validate_subject(subject, wildcards=wildcards)
    assert reason in str(caught.value)
    assert repr(subject) in str(caught.value)


def test_empty_string_is_not_a_subject(impl):
    with pytest.raises(rv.InvalidSubject, match="empty"):
        impl.validate_subject("")


@pytest.mark.parametrize("value", [None, 5, b"RUN.HOME", ["RUN"], 3.5])
def test_non_strings_are_rejected(impl, value):
    with pytest.raises(rv.InvalidSubject, match=f"must be a str, not {type(value).__name__}"):
        impl.validate_subject(value)
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        impl.validate_subject(value, wildcards=True)


def test_invalid_subject_is_a_value_error():
    assert issubclass(rv.InvalidSubject, ValueError)
    assert issubclass(rv.InvalidSubject, rv.RvError)


def test_spaces_and_non_ascii_are_allowed_though_discouraged(impl):
    for subject in ("A B.C", "prix.€", "emoji.\U0001f600", "_x.y", "a._RV", "zero\u200bwidth"):
        impl.validate_subject(subject)


@pytest.mark.parametrize("char", ["\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f"])
def test_control_characters_are_refused_naming_the_character(impl, char):
    """Tools print subjects to terminals: one with a line break could forge a whole
    output line (issue 43), so the API refuses control characters everywhere a
    subject is checked (send, listen, reply subjects, names). Zero-width and other
    format characters stay legal (they belong to some scripts) and are escaped
    when printed."""
    subject = f"A.b{char}c.D"
    code = f"U+{ord(char):04X}"
    for check in (
        lambda: impl.validate_subject(subject),
        lambda: impl.validate_subject(subject, wildcards=True),
        lambda: impl.check_send_subject(subject),
        lambda: impl.check_listen_subject(subject),
        lambda: impl.check_send_subject(f"_INBOX.{char}"),
    ):
        with pytest.raises(rv.InvalidSubject, match=re.escape(f"control character {code}")):
            check()


def test_other_rules_checked_from_the_left(impl):
    # The first broken rule (leftmost element) is the one reported.
    with pytest.raises(rv.InvalidSubject, match="position 2 of 4"):
        impl.validate_subject("a..b*c." + "x" * 10)


# --- Length limits ------------------------------------------------------------------------


def _subject_of_length(total: int) -> str:
    """A valid subject of exactly ``total`` characters, elements of at most 100 characters."""
    elements = []
    remaining = total
    while remaining > 0:
        size = min(100, remaining)
        if remaining - size == 1:  # avoid leaving room for only a dot
            size -= 1
        elements.append("x" * size)
        remaining -= size + 1
    subject = ".".join(elements)
    assert len(subject) == total
    return subject


def test_limits_are_the_documented_ones():
    assert MAX_SUBJECT_LENGTH == 255
    assert MAX_ELEMENT_LENGTH == 127


def test_total_length_boundary(impl):
    impl.validate_subject(_subject_of_length(255))
    impl.validate_subject(_subject_of_length(254))
    with pytest.raises(rv.InvalidSubject, match="256 characters long; the limit is 255"):
        impl.validate_subject(_subject_of_length(256))
    with pytest.raises(rv.InvalidSubject, match="the limit is 255"):
        impl.validate_subject("a." * 200 + "b")


def test_element_length_boundary(impl):
    impl.validate_subject("x" * 127)
    impl.validate_subject("A." + "x" * 127 + ".B")
    with pytest.raises(
        rv.InvalidSubject, match="element 1 is 128 characters long; the limit is 127"
    ):
        impl.validate_subject("x" * 128)
    with pytest.raises(rv.InvalidSubject, match="element 2 is 128 characters long"):
        impl.validate_subject("A." + "x" * 128 + ".B")
    with pytest.raises(rv.InvalidSubject, match="element 3 is 200 characters long"):
        impl.validate_subject("A.B." + "y" * 200)


def test_lengths_count_characters_not_bytes(impl):
    impl.validate_subject("é" * 127)
    impl.validate_subject("\U0001f600" * 127 + "." + "é" * 127)
    with pytest.raises(rv.InvalidSubject, match="128 characters"):
        impl.validate_subject("\U0001f600" * 128)


def test_many_elements_are_fine(impl):
    subject = ".".join(["a"] * 128)  # 255 characters
    impl.validate_subject(subject)
    assert impl.subject_matches(".".join(["*"] * 128), subject)
    assert impl.subject_matches("a.>", subject)


def test_huge_subjects_are_quoted_short(impl):
    with pytest.raises(rv.InvalidSubject) as caught:
        impl.validate_subject("z" * 100_000)
    assert len(str(caught.value)) < 200
    assert "100000 characters long" in str(caught.value)


# --- Table 13: wildcard matching ----------------------------------------------------------

TABLE_13 = [
    (
        "RUN.*",
        ["RUN.AWAY", "RUN.away"],
        [("RUN.Run.run", "extra element"), ("Run.away", "case"), ("RUN", "missing element")],
    ),
    (
        "Yankees.vs.*",
        ["Yankees.vs.Red_Sox", "Yankees.vs.Orioles"],
        [
            ("Giants.vs.Yankees", "position"),
            ("Yankees.beat.Sox", "vs differs from beat"),
            ("Yankees.vs", "missing element"),
        ],
    ),
    (
        "*.your.*",
        ["Amaze.your.friends", "Raise.your.salary", "Darn.your.socks"],
        [("your", "missing elements"), ("Pick.up.your.foot", "position")],
    ),
    (
        "RUN.>",
        ["RUN.DMC", "RUN.RUN", "RUN.SWIM.BIKE.SKATE"],
        [("HOME.RUN", "position"), ("Run.away", "case"), ("RUN", "missing element")],
    ),
]

# The wildcard table of chapter 3 adds a few rows of its own.
CHAPTER_3 = [
    (
        "RUN.*",
        ["RUN.AWAY", "RUN.away", "RUN.Home"],
        [
            ("RUN.Run.run", "extra element"),
            ("Run.away", "case"),
            ("RUN", "missing element"),
            ("HOME.RUN", "position"),
        ],
    ),
    (
        "RUN.>",
        ["RUN.AWAY", "RUN.Run.run", "RUN.SWIM.BIKE.SKI"],
        [("Run.away", "case"), ("RUN", "missing element")],
    ),
]

MATCHES = [(p, s) for p, good, _ in TABLE_13 + CHAPTER_3 for s in good]
NON_MATCHES = [(p, s, why) for p, _, bad in TABLE_13 + CHAPTER_3 for s, why in bad]


@pytest.mark.parametrize(("pattern", "subject"), MATCHES)
def test_wildcard_matches(impl, pattern, subject):
    impl.validate_subject(pattern, wildcards=True)
    assert impl.has_wildcards(pattern)
    assert impl.subject_matches(pattern, subject)


@pytest.mark.parametrize(("pattern", "subject", "reason"), NON_MATCHES)
def test_wildcard_non_matches(impl, pattern, subject, reason):
    assert not impl.subject_matches(pattern, subject), reason


@pytest.mark.parametrize("subject", ["RUN.AWAY", "a", "A.B.C.D"])
def test_literal_pattern_matches_only_itself(impl, subject):
    assert impl.subject_matches(subject, subject)
    assert not impl.subject_matches(subject, subject + "x")
    assert not impl.subject_matches(subject, subject + ".x")
    assert not impl.subject_matches(subject, subject.lower() if subject != subject.lower() else "Z")


def test_lone_wildcards(impl):
    assert impl.subject_matches(">", "a")
    assert impl.subject_matches(">", "a.b.c")
    assert impl.subject_matches("*", "a")
    assert not impl.subject_matches("*", "a.b")
    assert impl.subject_matches("*.>", "a.b")
    assert not impl.subject_matches("*.>", "a")
    assert impl.subject_matches("a.*.>", "a.b.c.d")
    assert not impl.subject_matches("a.*.>", "a.b")


def test_wildcard_characters_in_a_subject_are_text(impl):
    # A wildcard send reaches the patterns that match its text, nothing broader.
    assert impl.subject_matches("RUN.*", "RUN.*")
    assert impl.subject_matches("RUN.>", "RUN.>")
    assert not impl.subject_matches("RUN.AWAY", "RUN.*")
    assert not impl.subject_matches("RUN.AWAY", "RUN.>")


def test_subject_matches_validates_both_arguments(impl):
    with pytest.raises(rv.InvalidSubject, match="'\\*' must be a whole element"):
        impl.subject_matches("RU*.x", "RUN.x")
    with pytest.raises(rv.InvalidSubject, match="empty element"):
        impl.subject_matches("RUN.*", "RUN..x")
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        impl.subject_matches(None, "RUN")


def test_table_13_through_an_index(impl):
    index = impl.SubjectIndex()
    for pattern, _, _ in TABLE_13:
        index.add(pattern, pattern)
    for pattern, good, bad in TABLE_13:
        for subject in good:
            assert pattern in index.match(subject)
        for subject, reason in bad:
            assert pattern not in index.match(subject), reason


# --- Table 14: invalid wildcards ----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("abc*xyz", "'*' must be a whole element, but element 1 is 'abc*xyz'"),
        ("Foo.>.baz", "'>' must be the last element, but it is element 2 of 3"),
        ("a.*b", "'*' must be a whole element, but element 2 is '*b'"),
        ("a.**", "'*' must be a whole element, but element 2 is '**'"),
        ("a.b>", "'>' must be a whole element, but element 2 is 'b>'"),
        (">>", "'>' must be a whole element"),
        (">.a", "'>' must be the last element, but it is element 1 of 2"),
        ("a..*", "empty element at position 2 of 3"),
    ],
)
@pytest.mark.parametrize("wildcards", [True, False])
def test_table_14_invalid_wildcards(impl, pattern, message, wildcards):
    with pytest.raises(rv.InvalidSubject) as caught:
        impl.validate_subject(pattern, wildcards=wildcards)
    assert message in str(caught.value)


@pytest.mark.parametrize(("pattern", "element"), [("RUN.*", "2"), ("RUN.>", "2"), ("*", "1")])
def test_wildcards_refused_unless_asked_for(impl, pattern, element):
    with pytest.raises(rv.InvalidSubject, match=f"element {element} is the wildcard"):
        impl.validate_subject(pattern)
    impl.validate_subject(pattern, wildcards=True)
    # Caching under one rule set must not leak into the other.
    with pytest.raises(rv.InvalidSubject, match="wildcards are not allowed"):
        impl.validate_subject(pattern)


def test_has_wildcards(impl):
    assert impl.has_wildcards("*")
    assert impl.has_wildcards(">")
    assert impl.has_wildcards("a.*.b")
    assert impl.has_wildcards("a.>")
    assert not impl.has_wildcards("a.b")
    assert not impl.has_wildcards("a*b.c>")


# --- Sending, listening, reserved prefixes (Tables 12 and 15) -----------------------------


@pytest.mark.parametrize(
    ("subject", "named"),
    [
        ("_RV.INFO.SYSTEM.HOST.STATUS", "'_RV.'"),
        ("_RV", "'_RV.'"),
        ("_FOO.bar", "'_FOO'"),
        ("_", "'_'"),
        ("_INBOXES.x", "'_INBOXES'"),
        ("_LOCALX.y", "'_LOCALX'"),
        ("_inbox.abc", "'_inbox'"),
    ],
)
def test_sending_to_reserved_subjects_is_not_permitted(impl, subject, named):
    for _ in range(2):  # refusals are never cached as acceptances
        with pytest.raises(rv.NotPermitted) as caught:
            impl.check_send_subject(subject)
        assert named in str(caught.value)
        assert not isinstance(caught.value, rv.InvalidSubject)


@pytest.mark.parametrize(
    "subject",
    ["_INBOX.abc.123", "_LOCAL.A.B.C", "_LOCAL", "A._RV", "A_.B", "NEWS.SPORTS", "RUN.*", "RUN.>"],
)
def test_sending_to_open_subjects(impl, subject):
    impl.check_send_subject(subject)
    impl.check_send_subject(subject)


def test_wildcard_sends_are_allowed_but_detectable(impl):
    # Plain transports accept them; certified delivery uses has_wildcards to refuse them.
    impl.check_send_subject("ORDERS.*")
    assert impl.has_wildcards("ORDERS.*")


def test_inbox_names_cannot_carry_wildcards(impl):
    with pytest.raises(rv.NotPermitted, match="inbox names"):
        impl.check_send_subject("_INBOX.>")
    with pytest.raises(rv.NotPermitted, match="inbox names"):
        impl.check_listen_subject("_INBOX.abc.*")


def test_send_check_reports_syntax_as_invalid_subject(impl):
    with pytest.raises(rv.InvalidSubject, match="empty element"):
        impl.check_send_subject("A..B")
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        impl.check_send_subject(None)
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        impl.check_send_subject(["A"])
    with pytest.raises(rv.InvalidSubject, match="must be a whole element"):
        impl.check_send_subject("A.B*")


@pytest.mark.parametrize("subject", ["_RV.>", "_RV.*.SYSTEM.>", "_FOO.*", "_INBOX.abc", ">", "*.x"])
def test_listening_allows_reserved_subjects(impl, subject):
    impl.check_listen_subject(subject)


def test_listen_check_reports_syntax(impl):
    with pytest.raises(rv.InvalidSubject, match="last element"):
        impl.check_listen_subject("a.>.b")


def test_subject_classes():
    assert is_inbox("_INBOX.abc.1")
    assert is_inbox("_INBOX")
    assert not is_inbox("_INBOXES.a")
    assert not is_inbox("A._INBOX")
    assert is_local("_LOCAL.A.B.C")
    assert not is_local("_LOCALS.A")
    assert is_advisory("_RV.WARN.SYSTEM.X")
    assert not is_advisory("_RVX.A")
    assert not is_advisory("RV.A")


def test_validate_name():
    validate_name("ORDERS.PROCESSOR", what="correspondent name")
    with pytest.raises(rv.InvalidSubject, match=r"^correspondent name is empty"):
        validate_name("", what="correspondent name")
    with pytest.raises(rv.InvalidSubject, match=r"^group name 'A\.\*': element 2 is the wildcard"):
        validate_name("A.*", what="group name")
    with pytest.raises(rv.InvalidSubject, match="reserved element '_RV'"):
        validate_name("_RV.X", what="correspondent name")
    validate_name("_GROUP.X", what="group name", allow_reserved=True)


# --- Validation caches ----------------------------------------------------------------------


def test_inbox_names_are_checked_on_send_but_not_remembered(impl):
    # Every request gets a new inbox: caching each would only evict reusable subjects.
    for n in range(100):
        impl.check_send_subject(f"_INBOX.7f000001abcd.1.{n}")
    if impl is pure_subjects:
        assert not any(s.startswith("_INBOX.") for s in pure_subjects._sendable)
    with pytest.raises(rv.InvalidSubject, match="empty element"):
        impl.check_send_subject("_INBOX.7f000001abcd..1")
    with pytest.raises(rv.NotPermitted, match="inbox names"):
        impl.check_send_subject("_INBOX.7f000001abcd.*")


def test_validation_cache_stays_bounded(impl):
    limit = pure_subjects.VALIDATION_CACHE_LIMIT
    for n in range(limit + 50):
        impl.validate_subject(f"A.{n}")
        impl.check_send_subject(f"B.{n}")
    if impl is pure_subjects:
        assert len(pure_subjects._valid_plain) <= limit
        assert len(pure_subjects._sendable) <= limit
    # Still correct after starting over.
    impl.validate_subject("A.1")
    with pytest.raises(rv.InvalidSubject):
        impl.validate_subject("A..1")


# --- SubjectIndex ---------------------------------------------------------------------------


def test_index_match_order_and_registrations(impl):
    index = impl.SubjectIndex()
    index.add("RUN.>", "a")
    index.add("RUN.*", "b")
    index.add("RUN.AWAY", "c")
    index.add(">", "d")
    index.add("RUN.*", "b")  # a second registration of the same pair, like a second listener
    assert index.match("RUN.AWAY") == ("a", "b", "c", "d", "b")
    assert index.match("RUN.x.y") == ("a", "d")
    assert index.match("HOME") == ("d",)
    assert len(index) == 5
    assert index
    assert index.patterns() == ("RUN.>", "RUN.*", "RUN.AWAY", ">")


def test_index_same_item_under_two_patterns_appears_twice(impl):
    index = impl.SubjectIndex()
    item = object()
    index.add("A.*", item)
    index.add("A.B", item)
    assert index.match("A.B") == (item, item)
    assert index.match("A.C") == (item,)


def test_index_remove_takes_the_oldest_equal_registration(impl):
    index = impl.SubjectIndex()
    index.add("A.*", ("x", 1))
    index.add("A.B", "middle")
    index.add("A.*", ("x", 1))
    index.add("A.*", "last")
    index.remove("A.*", ("x", 1))  # equal, not identical
    assert index.match("A.B") == ("middle", ("x", 1), "last")
    index.remove("A.*", ("x", 1))
    assert index.match("A.B") == ("middle", "last")
    assert len(index) == 2


def test_index_remove_absent_raises_key_error(impl):
    index = impl.SubjectIndex()
    index.add("A.B", 1)
    for pattern, item in [("A.B", 2), ("A.C", 1), ("A.*", 1), ("A..B", 1), (5, 1), (["A"], 1)]:
        with pytest.raises(KeyError):
            index.remove(pattern, item)
    assert index.match("A.B") == (1,)
    index.remove("A.B", 1)
    with pytest.raises(KeyError):
        index.remove("A.B", 1)
    assert len(index) == 0
    assert not index
    assert index.patterns() == ()


def test_index_rejects_bad_patterns_and_subjects(impl):
    index = impl.SubjectIndex()
    with pytest.raises(rv.InvalidSubject, match="must be the last element"):
        index.add("Foo.>.baz", 1)
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        index.add(None, 1)
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        index.match(5)
    with pytest.raises(rv.InvalidSubject, match="must be a str"):
        index.match(["A"])
    assert len(index) == 0


def test_index_cache_is_never_stale(impl):
    index = impl.SubjectIndex()
    assert index.match("A.B") == ()
    index.add("A.B", "literal")
    assert index.match("A.B") == ("literal",)
    index.add("A.*", "star")
    assert index.match("A.B") == ("literal", "star")
    index.add("Z.Z", "other")  # a literal elsewhere leaves A.B's answer alone
    assert index.match("A.B") == ("literal", "star")
    index.remove("A.B", "literal")
    assert index.match("A.B") == ("star",)
    index.add(">", "all")
    assert index.match("A.B") == ("star", "all")
    index.remove("A.*", "star")
    index.remove(">", "all")
    assert index.match("A.B") == ()
    index.clear()
    assert index.match("Z.Z") == ()
    assert len(index) == 0


@pytest.mark.parametrize("cache_size", [0, 1, 3])
def test_index_small_caches(impl, cache_size):
    index = impl.SubjectIndex(cache_size=cache_size)
    for n in range(10):
        index.add(f"S.{n}", n)
    index.add("S.*", "any")
    for _ in range(3):
        for n in range(10):
            assert index.match(f"S.{n}") == (n, "any")


@pytest.mark.parametrize("cache_size", [-1, 1.5, "8", True])
def test_index_cache_size_is_checked(impl, cache_size):
    with pytest.raises(ValueError, match="cache_size"):
        impl.SubjectIndex(cache_size=cache_size)


def test_index_is_generic(impl):
    alias = impl.SubjectIndex[int]
    assert alias.__origin__ is impl.SubjectIndex


def test_index_with_many_registrations(impl):
    index = impl.SubjectIndex()
    count = 20_000
    for n in range(count):
        index.add(f"MKT.{n % 7}.SYM{n}", n)
    index.add("MKT.3.>", "section")
    index.add("MKT.*.SYM42", "42")
    index.add("*.*.*", "three")
    assert len(index) == count + 3
    assert index.match("MKT.0.SYM42") == (42, "42", "three")
    assert index.match("MKT.3.SYM3") == (3, "section", "three")
    assert index.match("MKT.3.SYM4") == ("section", "three")
    assert index.match("MKT.3.SYM4.x") == ("section",)
    for n in range(0, count, 2):
        index.remove(f"MKT.{n % 7}.SYM{n}", n)
    assert index.match("MKT.0.SYM42") == ("42", "three")
    assert index.match("MKT.1.SYM43") == (43, "three")
    assert len(index) == count // 2 + 3


def test_index_prunes_empty_branches():
    index = pure_subjects.SubjectIndex()
    patterns = ["A.B.C", "A.*.C", "A.>", "*.*", ">", "A.B.C.D.E"]
    for pattern in patterns:
        index.add(pattern, pattern)
    for pattern in patterns:
        index.remove(pattern, pattern)
    assert index._root.is_empty()


# --- Module surface -------------------------------------------------------------------------


def test_twins_share_one_interface(impl):
    for name in pure_subjects.__all__:
        assert hasattr(impl, name), name


def test_public_module_uses_the_loaded_implementation():
    import rvasync.subjects as public

    loaded = _accel.load("subjects")
    assert public.SubjectIndex is loaded.SubjectIndex
    assert public.validate_subject is loaded.validate_subject
    for name in public.__all__:
        assert hasattr(public, name), name
