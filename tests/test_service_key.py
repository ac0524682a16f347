"""The service key (issue #24): a keyed MAC on every datagram between daemons.

Unit properties of the MAC, then real daemons over loopback: keyed daemons
talk; a forger (raw UDP, valid protocol framing, no key) and a daemon without
the key are not heard, and what they sent is counted.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st
from netutil import WAIT, LoopThread, until

import rvasync as rv
from rvasync import _accel, codec
from rvasync.daemon.params import DEFAULT_GROUP
from rvasync.message import Message
from rvasync.protocol.servicekey import TAG_SIZE, DatagramMac, check_service_key
from rvasync.transport.network import Transport

KEY = b"0123456789abcdef-secret"


@given(st.binary(min_size=1, max_size=3000), st.integers(1, 65535))
def test_sealed_datagrams_open_and_tampered_ones_do_not(data, port):
    mac = DatagramMac(KEY, port)
    sealed = mac.seal(data)
    assert len(sealed) == len(data) + TAG_SIZE
    assert mac.open(sealed) == data
    flipped = bytes([sealed[0] ^ 1]) + sealed[1:]
    assert mac.open(flipped) is None
    assert mac.open(data) is None  # untagged (a forger's datagram)
    assert DatagramMac(KEY, port % 65535 + 1).open(sealed) is None  # another service
    assert DatagramMac(KEY + b"x", port).open(sealed) is None  # another key


@given(st.lists(st.binary(max_size=500), min_size=1, max_size=4))
def test_gathered_parts_are_sealed_as_their_concatenation(parts):
    mac = DatagramMac(KEY, 7500)
    sealed = mac.seal_parts([memoryview(p) for p in parts])
    assert b"".join(bytes(p) for p in sealed) == mac.seal(b"".join(parts))


@pytest.mark.parametrize("bad", [b"short", "", 12345, b"x" * 5000])
def test_bad_keys_are_refused(bad):
    with pytest.raises(rv.InvalidArgument, match="service_key"):
        check_service_key(bad)
    with pytest.raises(rv.InvalidArgument, match="service_key"):
        Transport("7500", service_key=bad)


def test_a_standalone_daemon_takes_its_key_from_its_own_configuration():
    with pytest.raises(rv.InvalidArgument, match="service-key-file"):
        Transport("7500", daemon="7500", service_key=KEY)


@pytest.fixture
def service(rv_service):
    return rv_service[0]


@pytest.fixture
def other_loop():
    lt = LoopThread()
    yield lt
    lt.stop()


async def _open(service, **kwargs):
    return await Transport(service, **kwargs).open()


async def _send(transport, msg):
    await transport.send(msg)


def forged_datagram(session: int, subject: str, payload: dict) -> bytes:
    """What a forger sends: valid reliable framing around a valid message, no key."""
    frame = _accel.load("rmframe")
    packer = frame.Packer(60000, session, 0)
    packer.add(codec.encode(Message(subject, payload)))
    packer.flush()
    return packer.take()[0]


def send_raw(datagram: bytes, service: str, address) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
        s.sendto(datagram, (DEFAULT_GROUP, int(service)))
        s.sendto(datagram, address)


async def test_keyed_daemons_talk_and_forgeries_are_dropped_and_counted(service, other_loop):
    a = await other_loop.run(_open(service, service_key=KEY))
    async with Transport(service, service_key=KEY) as b:
        news = b.listen("NEWS")
        await asyncio.sleep(0.01)
        await other_loop.run(_send(a, Message("NEWS", {"n": 1})))
        assert (await news.get(WAIT))["n"] == 1
        endpoint = b.link.session._service
        send_raw(forged_datagram(0xF00D, "NEWS", {"n": 666}), service, endpoint.address)
        await until(lambda: endpoint.counters.datagrams_unauthenticated >= 2)
        await other_loop.run(_send(a, Message("NEWS", {"n": 2})))
        assert (await news.get(WAIT))["n"] == 2  # the forged message never arrives
        assert b.link.session._service.core.peers().keys().isdisjoint({0xF00D})
        status = dict((n, v) for n, v, _ in endpoint.host_status())
        assert status["unauth"] >= 2


async def test_without_a_key_the_same_forgery_is_delivered(service):
    """What the key protects against: the unkeyed service hears anyone."""
    async with Transport(service) as b:
        news = b.listen("NEWS")
        await asyncio.sleep(0.01)
        endpoint = b.link.session._service
        send_raw(forged_datagram(0xF00D, "NEWS", {"n": 666}), service, endpoint.address)
        assert (await news.get(WAIT))["n"] == 666


async def test_a_daemon_without_the_key_is_not_heard(service, other_loop):
    a = await other_loop.run(_open(service))
    async with Transport(service, service_key=KEY) as b:
        news = b.listen("NEWS")
        await asyncio.sleep(0.01)
        await other_loop.run(_send(a, Message("NEWS", {"n": 1})))
        endpoint = b.link.session._service
        await until(lambda: endpoint.counters.datagrams_unauthenticated >= 1)
        with pytest.raises(asyncio.TimeoutError):
            await news.get(0.3)


async def test_one_service_runs_with_one_key_per_daemon(service):
    async with Transport(service, service_key=KEY):
        with pytest.raises(rv.NotPermitted, match="another service key"):
            await Transport(service, service_key=KEY + b"2").open()
        async with Transport(service):  # a session without a key joins the service as it is
            pass


async def test_a_key_is_not_added_to_a_service_open_without_one(service):
    async with Transport(service):
        with pytest.raises(rv.NotPermitted, match="without a service key"):
            await Transport(service, service_key=KEY).open()
