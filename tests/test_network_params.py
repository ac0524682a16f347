"""Service, network and daemon parameters: parsing, defaults and the errors they give."""

import socket

import pytest

import rvasync as rv
from rvasync.daemon.params import (
    DEFAULT_GROUP,
    DaemonAddress,
    parse_daemon,
    parse_network,
    parse_service,
)
from rvasync.daemon.udp import address_hex, parse_address_hex


def _rendezvous_port() -> int:
    try:
        return socket.getservbyname("rendezvous", "udp")
    except OSError:
        return 7500


def test_service_default_number_and_name():
    assert parse_service(None).port == _rendezvous_port()
    assert parse_service("").port == _rendezvous_port()
    assert parse_service("7890").port == 7890
    name = "domain"  # in every services database
    assert parse_service(name).port == socket.getservbyname(name, "udp")
    assert parse_service(name).text == name


@pytest.mark.parametrize(
    ("service", "match"),
    [
        ("0", "1..65535"),
        ("70000", "1..65535"),
        ("no-such-service-xyz", "no UDP service"),
        ("7500:7500", "different ports"),
        ("7500:7501:7502", "at most two parts"),
        ("7500:abc", "direct part"),
        ("abc:7501", "no UDP service"),
        ("75 00", "white space"),
        (" 7500", "white space"),
        ("7500 ", "white space"),
        ("7500\t", "white space"),
        ("7500: 7501", "white space"),
        (" :7501", "white space"),
        (7500, "must be a str"),
    ],
)
def test_service_errors(service, match):
    with pytest.raises(rv.InvalidArgument, match=match):
        parse_service(service)


@pytest.mark.parametrize("service", [" 7500", "7500 ", "\u20037500", "7500 :7501"])
def test_a_transport_refuses_a_service_with_white_space_when_it_is_made(service):
    """The issue's case: ``service=" 7500"`` was taken for 7500 (a typing mistake opened
    a service its user never named); now the transport refuses it at once."""
    with pytest.raises(rv.InvalidArgument, match="white space"):
        rv.Transport(service=service)
    with pytest.raises(rv.InvalidArgument, match="white space"):
        rv.Transport(service=service, daemon="7500")


def test_network_default_is_loopback_with_ttl_zero():
    net = parse_network(None)
    assert net.interface == "127.0.0.1"
    assert net.groups == (DEFAULT_GROUP,)
    assert net.send_address == DEFAULT_GROUP
    assert net.ttl == 0 and net.loopback
    # the rv_service fixture's network means the same thing
    assert parse_network("127.0.0.1").key == net.key
    assert parse_network("lo").key == net.key


def test_network_three_parts():
    net = parse_network("127.0.0.1;239.1.1.1,239.1.1.5;239.1.1.6")
    assert net.groups == ("239.1.1.1", "239.1.1.5")
    assert net.send_address == "239.1.1.6"
    net = parse_network("127.0.0.1;239.1.1.1")
    assert net.send_address == "239.1.1.1"
    net = parse_network(";;239.1.1.6")
    assert net.interface == "127.0.0.1" and net.groups == ("239.1.1.6",)


def test_network_non_loopback_interface_gets_ttl_one():
    net = parse_network("192.0.2.77;239.1.1.1")
    assert net.ttl == 1 and not net.loopback


@pytest.mark.parametrize(
    ("network", "match"),
    [
        ("127.0.0.1;10.0.0.1", "not a multicast address"),
        ("127.0.0.1;239.1.1.1;nope", "send address"),
        ("127.0.0.1;239.1.1.1;239.1.1.2;x", "at most three parts"),
        ("239.1.1.1", "address of an interface"),
        ("no-such-interface-or-host.invalid", "not an IPv4 address, an interface name"),
        (42, "must be a str"),
    ],
)
def test_network_errors(network, match):
    with pytest.raises(rv.InvalidArgument, match=match):
        parse_network(network)


def test_network_number_matches_loopback_interface():
    assert parse_network("127").interface == "127.0.0.1"


@pytest.mark.parametrize(
    ("daemon", "expected"),
    [
        (None, DaemonAddress("127.0.0.1", 7500, True)),
        ("7600", DaemonAddress("127.0.0.1", 7600, True)),
        ("tcp:7600", DaemonAddress("127.0.0.1", 7600, True)),
        ("127.0.0.1:7600", DaemonAddress("127.0.0.1", 7600, False)),
        ("somehost:7600", DaemonAddress("somehost", 7600, False)),
        ("tcp:somehost:7600", DaemonAddress("somehost", 7600, False)),
    ],
)
def test_daemon_parameter(daemon, expected):
    assert parse_daemon(daemon) == expected


@pytest.mark.parametrize(
    ("daemon", "match"),
    [("ssl:host:1", "not supported"), ("a:b:c", "expected"), ("host:0", "1..65535"), ("x", "port")],
)
def test_daemon_parameter_errors(daemon, match):
    with pytest.raises(rv.InvalidArgument, match=match):
        parse_daemon(daemon)


def test_address_hex_round_trip():
    assert address_hex(("127.0.0.1", 54321)) == "7F000001D431"
    assert parse_address_hex("7F000001D431") == ("127.0.0.1", 54321)
    assert parse_address_hex("7F000001D43") is None
    assert parse_address_hex("7F0000010000") is None
    assert parse_address_hex("zz000001D431") is None
