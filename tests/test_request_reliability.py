"""``await t.request_reliability(seconds)`` on an open transport, in-process and standalone.

The daemon retains a service's data for the largest request of its transports
there: a request raises the interval at once, a smaller one lowers it only to
what the other transports still ask for.
"""

from __future__ import annotations

import pytest

import rvasync as rv
from rvasync.daemon.engine import IN_PROCESS_RELIABILITY, running_in_process_daemon


def service_reliability(daemon: rv.Daemon, service: str) -> float:
    return daemon.services[int(service)].reliability


async def test_in_process_requests_raise_and_lower_the_interval(rv_service) -> None:
    service, network = rv_service
    async with rv.Transport(service, network) as a, rv.Transport(service, network) as b:
        daemon = running_in_process_daemon()
        assert daemon is not None
        assert service_reliability(daemon, service) == IN_PROCESS_RELIABILITY
        await a.request_reliability(30)
        assert service_reliability(daemon, service) == 30 and a.reliability == 30
        await b.request_reliability(12.5)
        assert service_reliability(daemon, service) == 30  # a still asks for more
        await a.request_reliability(1)
        assert service_reliability(daemon, service) == 12.5  # now b's is the largest
        await b.close()
        assert service_reliability(daemon, service) == 1  # only a's request is left


async def test_through_a_standalone_daemon(rv_service) -> None:
    service, network = rv_service
    daemon = rv.Daemon(listen=0)
    await daemon.start()
    try:
        where = f"127.0.0.1:{daemon.listen_port}"
        async with (
            rv.Transport(service, network, where) as quiet,
            rv.Transport(service, network, where) as t,
        ):
            assert service_reliability(daemon, service) == 60.0
            await t.request_reliability(120)
            assert service_reliability(daemon, service) == 120
            await t.request_reliability(0.5)
            # the other transport asks for nothing in particular: the daemon's default
            assert service_reliability(daemon, service) == 60.0
            await quiet.close()
            assert service_reliability(daemon, service) == 0.5
    finally:
        await daemon.stop()


@pytest.mark.parametrize("bad", [-1, 3601, float("nan"), float("inf"), "10", True, None])
async def test_values_outside_the_bounds_are_refused(rv_transport, bad) -> None:
    with pytest.raises(rv.InvalidArgument, match="request_reliability"):
        await rv_transport.request_reliability(bad)


async def test_a_transport_that_is_not_open_refuses(rv_service) -> None:
    t = rv.Transport(*rv_service)
    with pytest.raises(rv.TransportClosed, match="not open"):
        await t.request_reliability(10)
    await t.open()
    await t.close()
    with pytest.raises(rv.TransportClosed):
        await t.request_reliability(10)
