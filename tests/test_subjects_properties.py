"""Property tests of subjects: reference models, twin parity, and a stateful SubjectIndex check.

The reference models below are deliberately naive (split and recurse, filter
every registration) so they are easy to trust; the implementations must agree
with them on generated input.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import rvasync as rv
from rvasync import _accel

IMPLEMENTATIONS = _accel.implementations("subjects")
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda m: m.__name__)
def impl(request):
    module = request.param
    module.clear_caches()
    return module


# --- Reference models ---------------------------------------------------------------------


def reference_matches(pattern: str, subject: str) -> bool:
    """Element-wise recursive matcher straight from the definition."""

    def walk(want: list[str], have: list[str]) -> bool:
        if not want:
            return not have
        if want[0] == ">":
            return len(have) >= 1
        if not have:
            return False
        return (want[0] == "*" or want[0] == have[0]) and walk(want[1:], have[1:])

    return walk(pattern.split("."), subject.split("."))


def reference_valid(subject: str, wildcards: bool) -> bool:
    if not 0 < len(subject) <= 255:
        return False
    elements = subject.split(".")
    for position, element in enumerate(elements):
        if not 0 < len(element) <= 127:
            return False
        if "*" in element or ">" in element:
            if not wildcards:
                return False
            if element != "*" and not (element == ">" and position == len(elements) - 1):
                return False
    return True


# --- Strategies ---------------------------------------------------------------------------

# Few literal values make matches likely; the extra characters exercise every
# string width of the native scan (1, 2 and 4 bytes per character).
LITERALS = st.sampled_from(["a", "b", "RUN", "é", "\U0001f600"])
subjects = st.lists(LITERALS, min_size=1, max_size=5).map(".".join)


@st.composite
def patterns(draw) -> str:
    elements = draw(st.lists(st.one_of(LITERALS, st.just("*")), min_size=0, max_size=5))
    if not elements or draw(st.booleans()):
        elements.append(">" if draw(st.booleans()) else draw(st.sampled_from(["*", "a"])))
    return ".".join(elements)


# Arbitrary text near the rules' edges: dots, wildcards, long runs.
EDGE_CHARS = st.sampled_from([".", "*", ">", "a", "Z", "_", " ", "é", "\U0001f600"])
edgy_text = st.one_of(
    st.text(EDGE_CHARS, max_size=12),
    st.lists(
        st.one_of(
            st.text(EDGE_CHARS, max_size=4),
            st.integers(120, 135).map(lambda n: "x" * n),
            st.sampled_from(["*", ">", ""]),
        ),
        min_size=1,
        max_size=4,
    ).map(".".join),
    st.integers(250, 260).map(lambda n: ("ab." * 100)[:n].strip(".")),
)


# --- Properties ---------------------------------------------------------------------------


@SETTINGS
@given(pattern=patterns(), subject=subjects)
def test_matching_agrees_with_reference(impl, pattern, subject):
    assert impl.subject_matches(pattern, subject) == reference_matches(pattern, subject)


@SETTINGS
@given(subject=subjects)
def test_subject_matches_itself_and_catch_alls(impl, subject):
    assert impl.subject_matches(subject, subject)
    assert impl.subject_matches(">", subject)
    depth = subject.count(".") + 1
    assert impl.subject_matches(".".join(["*"] * depth), subject)
    assert not impl.subject_matches(".".join(["*"] * (depth + 1)), subject)


@SETTINGS
@given(text=edgy_text, wildcards=st.booleans())
def test_validation_agrees_with_reference(impl, text, wildcards):
    expected = reference_valid(text, wildcards)
    for _ in range(2):  # uncached, then possibly cached
        if expected:
            impl.validate_subject(text, wildcards=wildcards)
        else:
            with pytest.raises(rv.InvalidSubject):
                impl.validate_subject(text, wildcards=wildcards)
    assert (impl.describe_invalid(text, wildcards) is None) == expected


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native subjects module not built")
@settings(max_examples=300, deadline=None)
@given(text=edgy_text, other=edgy_text, wildcards=st.booleans())
def test_twins_agree_exactly(text, other, wildcards):
    """Same acceptance, same error message, same match answer, same send verdict."""

    def outcome(function, *args):
        try:
            return ("ok", function(*args))
        except rv.RvError as error:
            return (type(error).__name__, str(error))

    pure, native = IMPLEMENTATIONS
    for module in IMPLEMENTATIONS:
        module.clear_caches()
    assert outcome(lambda s: pure.validate_subject(s, wildcards=wildcards), text) == outcome(
        lambda s: native.validate_subject(s, wildcards=wildcards), text
    )
    assert outcome(pure.subject_matches, text, other) == outcome(
        native.subject_matches, text, other
    )
    assert outcome(pure.check_send_subject, text) == outcome(native.check_send_subject, text)
    assert outcome(pure.check_listen_subject, text) == outcome(native.check_listen_subject, text)
    assert pure.has_wildcards(text) == native.has_wildcards(text)


@pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native subjects module not built")
@settings(max_examples=300, deadline=None)
@given(rest=edgy_text, repeat=st.booleans())
def test_twins_agree_on_inbox_sends(rest, repeat):
    """Inbox names take a path of their own on send (checked, never cached): same verdicts,
    the first time and again."""

    def outcome(function, text):
        try:
            return ("ok", function(text))
        except rv.RvError as error:
            return (type(error).__name__, str(error))

    pure, native = IMPLEMENTATIONS
    text = "_INBOX." + rest
    for _ in range(2 if repeat else 1):
        assert outcome(pure.check_send_subject, text) == outcome(native.check_send_subject, text)


# --- SubjectIndex against brute force -----------------------------------------------------

ITEMS = st.integers(0, 4)


def index_machine(module):
    class IndexMachine(RuleBasedStateMachine):
        """Random adds and removes; every match is compared with filtering all registrations."""

        def __init__(self):
            super().__init__()
            self.index = module.SubjectIndex(cache_size=16)
            self.registrations: list[tuple[str, int]] = []
            self.pattern_order: list[str] = []

        def expected(self, subject):
            return tuple(
                item for pattern, item in self.registrations if reference_matches(pattern, subject)
            )

        @rule(pattern=patterns(), item=ITEMS)
        def add(self, pattern, item):
            self.index.add(pattern, item)
            self.registrations.append((pattern, item))
            if pattern not in self.pattern_order:
                self.pattern_order.append(pattern)

        @rule(data=st.data())
        def remove_present(self, data):
            if not self.registrations:
                return
            pattern, item = data.draw(st.sampled_from(self.registrations))
            self.index.remove(pattern, item)
            self.registrations.remove((pattern, item))  # the oldest equal one, as documented
            if all(p != pattern for p, _ in self.registrations):
                self.pattern_order.remove(pattern)

        @rule(pattern=patterns(), item=ITEMS)
        def remove_absent(self, pattern, item):
            if (pattern, item) in self.registrations:
                return
            with pytest.raises(KeyError):
                self.index.remove(pattern, item)

        @rule(subject=subjects)
        def match(self, subject):
            expected = self.expected(subject)
            assert self.index.match(subject) == expected
            assert self.index.match(subject) == expected  # the cached answer too

        @invariant()
        def sizes_and_patterns(self):
            assert len(self.index) == len(self.registrations)
            assert bool(self.index) == bool(self.registrations)
            assert self.index.patterns() == tuple(self.pattern_order)

        @invariant()
        def common_subjects(self):
            # Subjects matched on every step keep cached answers alive across changes.
            for subject in ("a", "a.b", "RUN.a"):
                assert self.index.match(subject) == self.expected(subject)

    IndexMachine.TestCase.settings = settings(
        max_examples=60, stateful_step_count=30, deadline=None
    )
    return IndexMachine


TestIndexPure = index_machine(IMPLEMENTATIONS[0]).TestCase
if len(IMPLEMENTATIONS) > 1:
    TestIndexNative = index_machine(IMPLEMENTATIONS[1]).TestCase
