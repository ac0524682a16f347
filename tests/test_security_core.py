"""The secure daemon's sans-IO rules and files: permissions, failed-login limits,
credentials in HELLO, password hashes and the users file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.daemon.auth import (
    hash_password,
    load_users,
    parse_users,
    verify_password,
)
from rvasync.errors import InvalidArgument
from rvasync.protocol import clientproto as cp
from rvasync.protocol.authcheck import FailureLimiter, SubjectPermissions, pattern_covers
from rvasync.subjects import subject_matches

# -- subject permissions -------------------------------------------------------------------

_literal = st.sampled_from(["A", "B", "C"])
_element = st.one_of(_literal, st.just("*"))


@st.composite
def _patterns(draw: st.DrawFn) -> str:
    elements = draw(st.lists(_element, min_size=1, max_size=4))
    if draw(st.booleans()):
        elements.append(">")
    return ".".join(elements)


@st.composite
def _subjects(draw: st.DrawFn) -> str:
    return ".".join(draw(st.lists(_literal, min_size=1, max_size=6)))


@settings(max_examples=300, deadline=None)
@given(_patterns(), _patterns(), st.lists(_subjects(), min_size=1, max_size=30))
def test_a_covering_pattern_matches_everything_the_covered_one_does(allowed, wanted, subjects):
    if pattern_covers(allowed, wanted):
        for subject in subjects:
            if subject_matches(wanted, subject):
                assert subject_matches(allowed, subject), (allowed, wanted, subject)


@settings(max_examples=300, deadline=None)
@given(_patterns(), _subjects())
def test_on_a_literal_subject_covering_is_matching(pattern, subject):
    assert pattern_covers(pattern, subject) == subject_matches(pattern, subject)


@pytest.mark.parametrize(
    ("allowed", "wanted", "covers"),
    [
        (">", ">", True),
        ("ORDERS.>", ">", False),
        ("ORDERS.>", "ORDERS.*", True),
        ("ORDERS.>", "ORDERS", False),
        ("ORDERS.*", "ORDERS.>", False),
        ("ORDERS.*", "ORDERS.EU", True),
        ("ORDERS.*", "ORDERS.EU.X", False),
        ("*.EU", "ORDERS.EU", True),
        ("ORDERS.EU", "ORDERS.*", False),
    ],
)
def test_pattern_covers_examples(allowed, wanted, covers):
    assert pattern_covers(allowed, wanted) is covers


def test_permissions_refuse_outside_the_patterns_and_allow_replies():
    perms = SubjectPermissions.of(["ORDERS.>"], ["ORDERS.>", "PRICES.*"])
    assert perms.may_publish("ORDERS.EU")
    assert not perms.may_publish("PRICES.X")
    assert perms.may_publish("_INBOX.7F000001.1.2")  # answering a request
    assert perms.may_listen("PRICES.X") and perms.may_listen("ORDERS.>")
    assert not perms.may_listen(">") and not perms.may_listen("PRICES.>")
    assert not perms.unrestricted and SubjectPermissions().unrestricted
    assert SubjectPermissions.from_dict(perms.as_dict()) == perms
    for bad in (None, [], {"publish": "x"}, {"publish": ["a..b"], "subscribe": []}):
        assert SubjectPermissions.from_dict(bad) is None


@pytest.mark.parametrize("bad", ["", "a..b", ">.a", 7])
def test_bad_patterns_are_refused(bad):
    with pytest.raises(InvalidArgument):
        SubjectPermissions.of([bad], None)


# -- failed-login limiter (simulated clock) -------------------------------------------------


def test_limiter_lets_a_few_failures_through_then_backs_off():
    limiter = FailureLimiter(free=3, window=60, first_delay=1, max_delay=8)
    now = 1000.0
    for _ in range(3):
        assert limiter.retry_after("k", now) == 0
        limiter.failed("k", now)
    assert limiter.retry_after("k", now) == 0  # the 4th attempt may still try
    limiter.failed("k", now)
    assert limiter.retry_after("k", now) == pytest.approx(1)
    assert limiter.retry_after("other", now) == 0  # keys are independent
    delays = []
    for _ in range(6):
        now += 100  # beyond every delay, inside no window: the count goes on while blocked
        limiter.failed("k", now - 100 + 0.5)
        delays.append(limiter.retry_after("k", now - 100 + 0.5))
    assert max(delays) <= 8
    limiter.succeeded("k")
    assert limiter.retry_after("k", now) == 0
    assert limiter.refused >= 1


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0, 30), st.booleans()),
        max_size=60,
    )
)
def test_limiter_never_blocks_beyond_max_delay_and_forgets_success(events):
    limiter = FailureLimiter(free=2, window=10, first_delay=0.5, max_delay=4, max_keys=2)
    now = 0.0
    for key, step, good in events:
        now += step
        wait = limiter.retry_after(key, now)
        assert 0 <= wait <= 4
        if wait:
            continue
        if good:
            limiter.succeeded(key)
            assert limiter.retry_after(key, now) == 0
        else:
            limiter.failed(key, now)
        assert len(limiter) <= 2


# -- credentials in HELLO ---------------------------------------------------------------------


def test_hello_carries_credentials_and_hides_the_password():
    hello = cp.Hello(service="7500", user="alice", password="s3cret")
    assert "s3cret" not in repr(hello)
    conn = cp.Connection(cp.Role.DAEMON)
    [received] = conn.receive_data(cp.encode(hello))
    assert received == hello
    plain = cp.Hello(service="7500")
    assert b"user" not in cp.encode(plain)  # an old-style HELLO is unchanged


@pytest.mark.parametrize("field", ["user", "password"])
def test_hello_with_a_non_text_credential_is_a_protocol_error(field):
    import struct

    import msgpack

    body = msgpack.packb({"version": cp.PROTOCOL_VERSION, field: 12})
    frame = struct.pack(">IB", len(body) + 1, cp.FrameType.HELLO) + body
    conn = cp.Connection(cp.Role.DAEMON)
    with pytest.raises(cp.ProtocolError, match=f"HELLO {field}"):
        conn.receive_data(frame)


# -- password hashes and the users file --------------------------------------------------------


def test_password_hashes_verify_and_are_salted():
    secret = "correct horse battery staple"
    first, second = hash_password(secret), hash_password(secret)
    assert first != second and "horse" not in first
    assert verify_password(secret, first) and verify_password(secret, second)
    assert not verify_password(secret.upper(), first)
    with pytest.raises(InvalidArgument):
        verify_password(secret, "md5$abc")
    with pytest.raises(InvalidArgument):
        hash_password("")


def test_users_file_is_read_and_checked(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(
        f"""
[users.alice]
password = "{hash_password("a")}"
publish = ["ORDERS.>"]

[users.bob]
cert_subject = "CN=bob"
"""
    )
    users = load_users(str(path))
    assert users.by_name["alice"].permissions.publish == ("ORDERS.>",)
    assert users.by_name["alice"].permissions.subscribe == (">",)
    assert users.by_subject["CN=bob"].name == "bob"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[users.a]\npublish = ['x']\n", "neither a password nor a cert_subject"),
        ("[users.a]\npassword = 'plain'\n", "scrypt"),
        ("[users.a]\ncert_subject = 'CN=a'\nsubscribe = 'x'\n", "list of subject patterns"),
        ("[users.a]\ncert_subject = 'CN=a'\nsubscribe = ['a..b']\n", "empty element"),
        ("[users.a]\ncert_subject = 'CN=a'\ncolour = 1\n", "unknown keys"),
        ("[users.a]\ncert_subject = 'CN=a'\n[users.b]\ncert_subject = 'CN=a'\n", "used twice"),
        ("[other]\n", "unknown top-level"),
        ("users = [", "not valid TOML"),
    ],
)
def test_bad_users_files_name_the_problem(tmp_path, text, problem):
    path = tmp_path / "users.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument, match=problem):
        load_users(str(path))


def test_users_file_missing_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidArgument, match="users file"):
        load_users(str(tmp_path / "nope.toml"))
    with pytest.raises(InvalidArgument):
        parse_users({"users": []})
