"""Reproducers of the defects the fuzzers found, each now raising its documented error."""

from __future__ import annotations

import pathlib

import pytest

from rvasync import _accel
from rvasync.daemon.params import parse_network, parse_service
from rvasync.errors import InvalidArgument

from .boundaries import boundaries, clientproto, host_status_of

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
    assert parse_service("7500").port == 7500
    # White space around a port is a typing mistake now refused (issue 43).
    with pytest.raises(InvalidArgument, match="white space"):
        parse_service(" 7500 ")


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


# -- reliable datagrams -----------------------------------------------------------------------


@pytest.mark.parametrize("frame", _accel.implementations("rmframe"), ids=lambda m: m.__name__)
def test_forged_heartbeats_claiming_huge_streams_leave_host_status_reportable(frame):
    """Three heartbeats each claiming a stream of 2**64-2 datagrams made the loss counters
    pass 2**64, and every HOST.STATUS after that failed (InvalidArgument, contained);
    saturating them then pinned them at 2**64-1 for the daemon's life (issue 34 item 6).
    A claim that cannot be true is now dropped and counted."""
    from rvasync.protocol.reliable import ReliableEndpoint

    ep = ReliableEndpoint(now=0.0, session_id=77, frame=frame)
    for session in (5, 6, 7):
        liar = frame.build_heartbeat(session, 0, [(0, 0, 0, 1, 1, 2**64 - 2, 1)])
        ep.receive_datagram(liar, ("liar", session), 0.5)
    for now in (1.0, 2.0, 5.0, 12.0, 30.0):
        ep.handle_timer(now)
        ep.datagrams_to_send()
        ep.events()
    assert ep.stats.internal_errors == 0
    assert ep.stats.implausible == 3
    status = host_status_of(ep)
    assert status["pm"] == status["idl"] == 0 and status["implausible"] == 3


# -- capture files ----------------------------------------------------------------------------


pytest.importorskip("pyarrow")


def test_a_parquet_footer_with_non_utf8_names_is_a_capture_error():
    from rvasync.spark.capture import CaptureError

    data = bytes.fromhex((REPRO / "capture-metadata-not-utf8.parquet.hex").read_text().strip())
    with pytest.raises(CaptureError, match="unreadable"):
        boundary("capture").consume(data)


def test_capture_columns_of_the_wrong_types_are_a_capture_error(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rvasync.spark.capture import CAPTURE_COLUMNS, CaptureError

    columns = {name: pa.array([1, 2], pa.int64()) for name in CAPTURE_COLUMNS}
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(CaptureError, match="not an rvasync capture"):
        boundary("capture").consume(path.read_bytes())


@pytest.mark.parametrize(
    "marker",
    [
        b'{"format": "rvasync-capture", "version": 1, "committed": 6, "rows": 1\x80}',
        b"\xff\xfe{}",
        b"[" * 100000 + b"]" * 100000,
        b'{"format": "rvasync-capture", "version": 1, "committed": -1, "rows": 0}',
        b"[]",
    ],
    ids=["not-utf8", "bom", "nested-100000", "negative", "a-list"],
)
def test_a_damaged_marker_is_a_capture_error(marker):
    from rvasync.spark.capture import CaptureError

    with pytest.raises(CaptureError, match="is corrupt"):
        boundary("capture_marker").consume(marker)


def test_schema_sampling_skips_rows_that_do_not_decode_as_a_read_does(tmp_path):
    pytest.importorskip("pyspark")
    from rvasync.message import Message
    from rvasync.spark.capture import CaptureWriter, as_location, fields_json, rows_to_batch
    from rvasync.spark.scan import _sample_types

    good = Message("S", {"n": 1})
    with CaptureWriter(tmp_path) as writer:
        columns = [
            ["S", "S"],
            [None, None],
            [None, None],
            [None, None],
            [1, 2],
            [b"\xc1RV\x01junk", good.to_bytes()],
            ["{}", fields_json(good)],
        ]
        writer.append(rows_to_batch(columns))
        writer.commit()
    seen = _sample_types([as_location(tmp_path)], {"n"}, 10)
    assert [t.name for t in seen["n"]] == ["I64"]


# -- the status page's HTTP boundary ---------------------------------------------------------


def test_a_basic_authorization_that_is_not_ascii_is_refused_not_a_server_error():
    """The http fuzzer's find: 'Authorization: Basic b\\xc1BzOm9wcy1wdw==' made base64
    raise ValueError (not binascii.Error), which the page answered 500 with a traceback."""
    pytest.importorskip("aiohttp")
    data = bytes.fromhex(
        "474554202f6d65747269637320485454502f312e300d0a417574686f72697a6174696f6e3a20"
        "42617369632062c1427a4f6d39776379317764773d3d0d0a0d0a"
    )
    assert boundary("http").consume(data) == b"401"
