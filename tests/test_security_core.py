"""The secure daemon's sans-IO rules and files: permissions, failed-login limits,
credentials in HELLO, password hashes and the users file."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvasync.daemon.accept import HostSlots
from rvasync.daemon.auth import (
    hash_password,
    load_users,
    parse_users,
    verify_password,
)
from rvasync.daemon.rights import RouterGrant
from rvasync.errors import InvalidArgument
from rvasync.protocol import clientproto as cp
from rvasync.protocol.authcheck import (
    RESERVED,
    Access,
    SubjectPermissions,
    SubjectRights,
    pattern_covers,
    reserved_publish_refusal,
)
from rvasync.protocol.loginbrake import TRUSTED_HOSTS_PER_USER, FailureLimiter, LoginBrake
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
    rights = SubjectRights(user="alice", permissions=perms)
    assert rights.why_not_publish("_INBOX.7F000001.1.2") == ""  # answering a request
    assert perms.may_listen("PRICES.X") and perms.may_listen("ORDERS.>")
    assert not perms.may_listen(">") and not perms.may_listen("PRICES.>")
    assert not perms.unrestricted and SubjectPermissions().unrestricted
    assert SubjectPermissions.from_dict(perms.as_dict()) == perms
    for bad in (
        None,
        [],
        {"publish": "x"},
        {"publish": ["a..b"], "subscribe": []},
        {"publish": [], "subscribe": [], "router": "yes"},
    ):
        assert SubjectPermissions.from_dict(bad) is None
    no_replies = SubjectPermissions.of(None, None, reply=False, router=True)
    assert not no_replies.unrestricted
    assert SubjectPermissions.from_dict(no_replies.as_dict()) == no_replies


EVE = SubjectRights(user="eve", permissions=SubjectPermissions.of(["EVE.>"], ["EVE.>"]))
ALL = SubjectRights(user="carol")  # allowed everything a client may do
ROUTER = SubjectRights(user="r1", router=True)


@pytest.mark.parametrize(
    ("rights", "subject", "refused"),
    [
        # An inbox is one address: no wildcard, whatever the user may do; a made-up
        # name is not an inbox (issue 35, item 4).
        (EVE, "_INBOX.>", "wildcards"),
        (EVE, "_INBOX.7F000001.1.*", "wildcards"),
        (ALL, "_INBOX.>", "wildcards"),
        (ROUTER, "_INBOX.*", "wildcards"),
        (ALL, "_INBOX.foo", "not an inbox"),
        (EVE, "_INBOX.7F000001.1.2", ""),
        # Advisories and router records are the daemons' and routers' (item 5).
        (ALL, "_RV.WARN.SYSTEM.X", "routing daemons only"),
        (ALL, "_RVRD.LAN.HELLO", "routing daemons only"),
        (ROUTER, "_RV.WARN.SYSTEM.ROUTER.NEIGHBOR.CONNECTED", ""),
        (ROUTER, "_RVRD.LAN.LSA", ""),
        # The drivers' protocol subjects and _LOCAL follow the patterns.
        (ALL, "_RVCM.P2P.x.y", ""),
        (ALL, "_RVFT.G", ""),
        (ALL, "_RVCMQ.Q.x", ""),
        (ALL, "_LOCAL.X", ""),
        (EVE, "_RVCM.P2P.x.y", "may not publish"),
        (EVE, "_RVFT.G", "may not publish"),
        (EVE, "_RVCMQ.Q.x", "may not publish"),
        (EVE, "_LOCAL.X", "may not publish"),
        (EVE, "EVE.X", ""),
        (EVE, "ORDERS.X", "may not publish"),
    ],
)
def test_who_may_publish_reserved_subjects(rights, subject, refused):
    why = rights.why_not_publish(subject)
    assert (refused in why and bool(why)) if refused else why == "", why


def test_replies_need_the_reply_permission():
    mute = SubjectRights(user="m", permissions=SubjectPermissions.of(None, None, reply=False))
    assert "may not reply" in mute.why_not_publish("_INBOX.7F000001.1.2")
    assert mute.why_not_publish("ANY.THING") == ""


@pytest.mark.parametrize(
    ("rights", "subject", "refused"),
    [
        (ALL, "_RVRD.LAN.>", "routing daemons only"),
        (EVE, "_RVRD.LAN.HELLO", "routing daemons only"),
        (ROUTER, "_RVRD.LAN.>", ""),
        # Any concrete inbox may be listened to: inboxes are delivered by address, so a
        # restricted user's own create_inbox() works without _INBOX.> (item 6).
        (EVE, "_INBOX.7F000001.1.2", ""),
        (EVE, "_INBOX.*", "wildcards"),
        (EVE, "_RV.INFO.SYSTEM.>", "may not listen"),
        (ALL, "_RV.INFO.SYSTEM.>", ""),
        (ALL, ">", ""),
        (EVE, ">", "may not listen"),
    ],
)
def test_who_may_listen_to_reserved_subjects(rights, subject, refused):
    why = rights.why_not_listen(subject)
    assert (refused in why and bool(why)) if refused else why == "", why


def test_the_reserved_table_is_what_the_engine_enforces_for_every_session():
    for family in RESERVED:
        subject = f"{family.element}.A.B.C"
        refusal = reserved_publish_refusal(subject, router=False)
        assert (refusal is not None) == (family.publish is Access.ROUTERS), family
        assert reserved_publish_refusal(subject, router=True) is None
    assert reserved_publish_refusal("ORDINARY.X", router=False) is None


def test_the_router_role_is_granted_by_the_users_file_or_by_router_hosts():
    users = parse_users(
        {
            "users": {
                "r1": {"cert_subject": "CN=r1", "router": True},
                "alice": {"cert_subject": "CN=alice"},
            }
        },
        "test",
    )
    with_users = RouterGrant(None, with_users=True)
    assert with_users.refusal(False, users.by_name["alice"], "10.0.0.1") == ""  # not asked
    assert with_users.refusal(True, users.by_name["r1"], "10.0.0.1") == ""
    assert "router = true" in with_users.refusal(True, users.by_name["alice"], "127.0.0.1")
    assert "only a user" in with_users.refusal(True, None, "127.0.0.1")
    # Without users: the daemon's own configuration (default: this host).
    loopback = RouterGrant(None, with_users=False)
    assert loopback.refusal(True, None, "127.9.8.7") == ""
    assert loopback.refusal(True, None, "::1") == ""
    assert "router_hosts" in loopback.refusal(True, None, "192.0.2.1")
    assert "router_hosts" in loopback.refusal(True, None, "?")  # address unknown: refused
    lan = RouterGrant(["192.0.2.0/24"], with_users=False)
    assert lan.refusal(True, None, "192.0.2.1") == ""
    assert "router_hosts" in lan.refusal(True, None, "127.0.0.1")
    assert "router_hosts" in RouterGrant((), with_users=False).refusal(True, None, "127.0.0.1")
    with pytest.raises(InvalidArgument, match="router_hosts"):
        RouterGrant(["no network"], with_users=False)


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


# -- the login brake (simulated clock) -------------------------------------------------------


def test_the_brake_holds_per_user_across_many_hosts():
    """60 hosts guessing one user's password get about `user_free` checks, not 60 x 5
    (issue 35, item 2: the old brake, keyed by host and user, let 251 through in 12 s)."""
    brake = LoginBrake(host_free=10, user_free=5)
    now, checked = 0.0, 0
    for step in range(600):  # 12 s of one guess every 20 ms, from 60 hosts in turn
        now = step * 0.02
        host = f"127.0.1.{step % 60 + 1}"
        if brake.admit(host, "alice", True, now).wait == 0:
            brake.failed(host, "alice", True, now, trusted=False)
            checked += 1
    assert checked <= 5 + 4  # 5 free, then after 1, 2, 4 and 8 s of refusals
    # Another user from the same hosts is not braked by alice's count.
    assert brake.admit("127.0.1.1", "carol", True, now).wait == 0


def _sustained_checks(brake: LoginBrake, guess, minutes: int) -> list[int]:
    """Password checks per simulated minute of one guess every 0.1 s (``guess(i)``: the
    host and the real user name of the i-th guess), every one failing."""
    per_minute = [0] * minutes
    for i in range(minutes * 600):
        now = i * 0.1
        host, user = guess(i)
        if brake.admit(host, user, True, now).wait == 0:
            brake.failed(host, user, True, now, trusted=False)
            per_minute[int(now // 60)] += 1
    return per_minute


def test_a_sustained_attack_gets_about_one_check_a_minute_after_the_first():
    """The counts of a key under attack do not start over every window: the free
    failures come back only after a quiet window (before: 11 checks a minute per user
    and 16 per host for ever, the count restarting each time a block ended past the
    window). docs/security.md quotes these figures."""
    per_user = _sustained_checks(
        LoginBrake(), lambda i: (f"127.0.{i % 250}.{i // 250 % 250 + 1}", "alice"), 10
    )
    assert per_user[0] == 5 + 1 + 5  # 5 free, the 6th, then after 1, 2, 4, 8 and 16 s
    assert all(n <= 2 for n in per_user[1:]), per_user  # then one a minute (at most 60 s)
    assert sum(per_user[1:]) <= 10, per_user
    per_host = _sustained_checks(LoginBrake(), lambda i: ("127.0.0.9", f"user{i % 500}"), 10)
    assert per_host[0] == 10 + 1 + 5
    assert all(n <= 2 for n in per_host[1:]), per_host
    # A quiet window after the last block ends, and the key starts over.
    brake = LoginBrake()
    for _ in range(6):
        brake.failed("127.0.0.9", "alice", True, 0.0, trusted=False)
    assert brake.admit("127.0.0.8", "alice", True, 0.5).wait > 0
    assert brake.admit("127.0.0.8", "alice", True, 1.0 + 59.0).wait == 0  # not yet forgotten
    brake.failed("127.0.0.8", "alice", True, 60.0, trusted=False)
    assert brake.admit("127.0.0.8", "alice", True, 60.5).wait > 0  # still braked: 7th
    assert brake.admit("127.0.0.8", "alice", True, 62.0 + 60.0).wait == 0
    brake.failed("127.0.0.8", "alice", True, 122.0, trusted=False)
    assert brake.admit("127.0.0.8", "alice", True, 122.1).wait == 0  # forgotten: free again


def test_a_flood_of_other_names_cannot_erase_a_lockout():
    """10,000 failures under made-up names made the old brake forget a victim's lockout."""
    brake = LoginBrake(user_free=5, max_keys=1000)
    now = 100.0
    for _ in range(7):
        brake.failed("10.0.0.1", "alice", True, now, trusted=False)
    assert brake.admit("10.0.0.2", "alice", True, now).wait > 0
    for n in range(10_000):
        host = f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"
        brake.failed(host, f"nobody{n}", False, now, trusted=False)
    assert brake.admit("10.0.0.3", "alice", True, now).wait > 0
    assert len(brake) <= 2 * 1000 + 2  # hosts and made-up names: bounded


def test_a_host_a_user_logged_in_from_is_not_locked_out_by_attacks_from_elsewhere():
    brake = LoginBrake(user_free=5)
    now = 0.0
    admitted = brake.admit("127.0.0.1", "alice", True, now)
    brake.failed("127.0.0.1", "alice", True, now, trusted=admitted.trusted)
    brake.succeeded("127.0.0.1", "alice", trusted=admitted.trusted)
    for n in range(100):
        brake.failed(f"127.0.1.{n}", "alice", True, now, trusted=False)
    assert brake.admit("127.0.5.5", "alice", True, now).wait > 0
    home = brake.admit("127.0.0.1", "alice", True, now)
    assert home.wait == 0 and home.trusted
    # Its own count: guesses from the trusted host are braked too, but on their own.
    for _ in range(6):
        brake.failed("127.0.0.1", "alice", True, now, trusted=True)
    assert brake.admit("127.0.0.1", "alice", True, now).wait > 0


def test_a_success_gives_back_its_count_and_trusted_hosts_are_bounded_per_user():
    brake = LoginBrake(host_free=2, user_free=2)
    for n in range(TRUSTED_HOSTS_PER_USER + 5):
        host = f"10.0.0.{n}"
        admitted = brake.admit(host, "bob", True, 0.0)
        assert admitted.wait == 0
        brake.failed(host, "bob", True, 0.0, trusted=False)
        brake.succeeded(host, "bob", trusted=False)
    assert brake.trusted("10.0.0.20", "bob") and not brake.trusted("10.0.0.0", "bob")
    brake.keep_users(["alice"])
    assert not brake.trusted("10.0.0.20", "bob")


def test_made_up_names_are_braked_like_real_ones():
    """The brake's answers do not tell which names exist."""
    brake = LoginBrake(host_free=100, user_free=3)
    for name, known in (("alice", True), ("zed", False)):
        for _ in range(4):
            brake.failed("10.0.0.1", name, known, 0.0, trusted=False)
        assert brake.admit("10.0.0.9", name, known, 0.0).wait == pytest.approx(1.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["h1", "h2", "h3"]),
            st.sampled_from(["alice", "bob", "zed"]),
            st.floats(0, 20),
            st.booleans(),
        ),
        max_size=80,
    )
)
def test_the_brake_never_waits_beyond_max_delay_and_stays_bounded(events):
    brake = LoginBrake(host_free=2, user_free=1, max_delay=4, max_keys=2, trusted_hosts=2)
    now = 0.0
    for host, user, step, good in events:
        now += step
        known = user != "zed"
        admitted = brake.admit(host, user, known, now)
        assert 0 <= admitted.wait <= 4
        if admitted.wait:
            continue
        brake.failed(host, user, known, now, trusted=admitted.trusted)
        if good and known:
            brake.succeeded(host, user, trusted=admitted.trusted)
        assert len(brake.hosts) <= 2 and len(brake.names) <= 2


# -- admission of connections (HostSlots) ---------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["take", "release"]), st.integers(0, 5), st.integers(0, 30)),
        max_size=120,
    )
)
def test_host_slots_stay_within_bounds_and_make_room_only_from_the_largest(events):
    slots = HostSlots(per_host=3, total=6, what="test")
    live: list = []  # (slot, its connection's "closed" flag)
    for step, (what, host_n, pick) in enumerate(events):
        host = f"10.0.0.{host_n}"
        if what == "release" and live:
            slot, closed = live.pop(pick % len(live))
            slot.release()
            continue
        before = {h: slots.held_by(h) for h in {s.host for s, _ in live}}
        largest = max(before.values(), default=0)
        full = slots.in_use >= slots.total
        slot = slots.take(host, float(step))
        if slot is None:
            # Refused: its host is full, or nobody holds more than it does.
            assert before.get(host, 0) >= 3 or (full and largest <= before.get(host, 0))
        else:
            closed = [False]
            slot.close_with(lambda c=closed: c.__setitem__(0, True))
            live.append((slot, closed))
            if full:  # room made: the oldest slot of a host holding the most was closed
                gone = [(s, c) for s, c in live if c[0]]
                assert len(gone) == 1
                victim = gone[0][0]
                assert before[victim.host] == largest > before.get(host, 0)
                candidates = [
                    s.taken_at for s, _ in live if s is not slot and before[s.host] == largest
                ]
                assert victim.taken_at == min(candidates)  # the oldest of them
                live.remove(gone[0])
                victim.release()  # its connection's release, later: a no-op
        assert slots.in_use == len(live) <= 6
        assert all(slots.held_by(h) <= 3 for h in {s.host for s, _ in live})
    # A host holding nothing always gets in while another holds two or more.
    if any(slots.held_by(h) >= 2 for h in {s.host for s, _ in live}):
        assert slots.take("10.9.9.9", 1e9) is not None
