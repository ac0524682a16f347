"""Reproducers of the defects the fuzzers found, each now raising its documented error."""

from __future__ import annotations

import pathlib

import pytest

from rvasync.daemon.params import parse_network, parse_service
from rvasync.errors import InvalidArgument

from .boundaries import boundaries, clientproto

REPRO = pathlib.Path(__file__).parent / "repro"


def boundary(name: str, twin: str = "-"):
    (found,) = [b for b in boundaries() if b.name == name and b.twin in (twin, "-")][:1]
    return found


# -- HELLO parameters (the daemon parses what a client sends) ---------------------------------


@pytest.mark.parametrize("service", ["7\x00", "a\x00b", "²", "١٢", "\x00"])
def test_a_hostile_hello_service_is_an_invalid_argument(service):
    with pytest.raises(InvalidArgument):
        parse_service(service)


@pytest.mark.parametrize(
    "network", ["a\x00b", "lo\x00", ";\x00", "a..b", "é..", "x" * 300], ids=str
)
def test_a_hostile_hello_network_is_an_invalid_argument(network):
    with pytest.raises(InvalidArgument):
        parse_network(network)


def test_ascii_ports_still_parse():
    assert parse_service(" 7500 ").port == 7500


def test_the_fuzzed_hello_frame_that_found_it():
    # HELLO {version 1, service "75\x7f\x00", ...}: getservbyname raised ValueError.
    data = bytes.fromhex(
        "000000580185a776657273696f6e01a773657276696365a437357f00a76e6574776f726baa3b32"
        "33392e312e312e31ab6465736372697074696f6eab66757a7a20636c69656e74ab72656c696162"
        "696c697479cb404e000000000000"
    )
    (hello,) = clientproto().FrameDecoder().feed(data)
    assert hello.service == "75\x7f\x00"
    with pytest.raises(InvalidArgument):
        parse_service(hello.service)
    boundary("clientproto", "pure").consume(data)  # documented outcome: no exception
