"""The controller's requests reach every live broker, once each and in order, whatever the link
does to them: a broker that drops a request gets it again, and a late copy of an attempt that
timed out never undoes a newer request.

The broker side is tidelog's own ControlRequests behind a real aiohttp server on 127.0.0.1; the
link's faults (an error answer, an answer held past controller.socket.timeout.ms) are injected
in front of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tidelog.broker.control import ControlRequests
from tidelog.broker.metadata import BrokerEndpoint, MetadataCache
from tidelog.controller.control_plane import ControlPlane

TIMEOUT_MS = 300


def endpoint(broker_id: int, admin: str | None = None) -> dict:
    return BrokerEndpoint(broker_id, "127.0.0.1", 9000 + broker_id, None, admin).to_json()


def update_metadata(epoch: int, sequence: int, brokers: list[int]) -> dict:
    return {
        "controller_id": 1,
        "controller_epoch": epoch,
        "sequence": sequence,
        "brokers": [endpoint(b) for b in brokers],
        "partitions": [],
    }


class FaultyBroker:
    """A broker's control requests behind a link that fails the requests ``drop`` names (by
    arrival number, from 1: answered 503) and holds those ``hold`` names for ``hold_s``
    before handing them on (their answer comes after the controller gave up on it)."""

    def __init__(self, drop: set[int] = frozenset(), hold: set[int] = frozenset()) -> None:
        self.metadata = MetadataCache()
        self.control = ControlRequests(2, self.metadata, lambda: None, lambda *_: None)
        self.drop, self.hold = drop, hold
        self.hold_s = 3 * TIMEOUT_MS / 1000
        self.arrivals = 0
        self.applied: list[int] = []  # sequence numbers applied, in order

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals += 1
        arrival = self.arrivals
        body = await request.json()
        if arrival in self.drop:
            return web.json_response({"error": "dropped by the link"}, status=503)
        if arrival in self.hold:
            await asyncio.sleep(self.hold_s)
        if request.match_info["kind"] == "stop-replica":
            return web.json_response(self.control.stop_replica(body))
        answer = self.control.update_metadata(body)
        if not answer.get("superseded"):
            self.applied.append(body["sequence"])
        return web.json_response(answer)


@contextlib.asynccontextmanager
async def serving(broker: FaultyBroker) -> AsyncIterator[BrokerEndpoint]:
    app = web.Application()
    app.add_routes([web.post("/control/{kind}", broker.handle)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield BrokerEndpoint(2, "127.0.0.1", 9002, None, f"127.0.0.1:{port}")
    finally:
        await runner.cleanup()


async def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited {timeout} s for {what}"
        await asyncio.sleep(0.02)


def test_an_older_update_metadata_arriving_late_does_not_bring_back_a_gone_broker():
    broker = FaultyBroker()
    broker.control.update_metadata(update_metadata(5, 2, [1, 2]))

    late = broker.control.update_metadata(update_metadata(5, 1, [1, 2, 3]))

    assert late["error_code"] == 0 and late["superseded"]
    assert sorted(broker.metadata.brokers) == [1, 2]
    newer_controller = broker.control.update_metadata(update_metadata(6, 1, [1, 2, 3]))
    assert newer_controller["error_code"] == 0
    assert sorted(broker.metadata.brokers) == [1, 2, 3]


async def run_plane(broker: FaultyBroker, requests: list[list[int]]) -> ControlPlane:
    async with serving(broker) as target:
        plane = ControlPlane(1, TIMEOUT_MS)
        await plane.start_epoch(7)
        try:
            for brokers in requests:
                plane.enqueue(
                    target,
                    "update-metadata",
                    {"brokers": [endpoint(b) for b in brokers], "partitions": []},
                )
            await wait_for(
                lambda: broker.applied and broker.applied[-1] == len(requests),
                "the last request to be applied",
            )
            await asyncio.sleep(broker.hold_s)  # any late copy arrives meanwhile
        finally:
            await plane.close()
    return plane


@pytest.mark.parametrize("dropped", [{1}, {1, 2, 3}])
def test_a_dropped_request_is_sent_again_until_the_broker_answers(dropped):
    broker = FaultyBroker(drop=dropped)

    asyncio.run(run_plane(broker, [[1, 2, 3], [1, 2]]))

    assert broker.applied == [1, 2]
    assert sorted(broker.metadata.brokers) == [1, 2]


def test_a_late_copy_of_a_timed_out_request_never_undoes_a_newer_one():
    broker = FaultyBroker(hold={1})

    asyncio.run(run_plane(broker, [[1, 2, 3], [1, 2]]))

    # the first attempt of request 1 timed out and was sent again; its late copy came after
    # request 2 and was not applied
    assert broker.arrivals == 3
    assert broker.applied == [1, 2]
    assert sorted(broker.metadata.brokers) == [1, 2]


def test_a_stop_replica_refused_partition_by_partition_is_not_counted_as_acknowledged(caplog):
    broker = FaultyBroker()  # not shutting down: a StopReplica without delete is refused

    async def stop() -> list[int]:
        async with serving(broker) as target:
            plane = ControlPlane(1, TIMEOUT_MS)
            await plane.start_epoch(7)
            metadata = MetadataCache()
            metadata.brokers[2] = target
            try:
                return await plane.stop_replicas(metadata, [("t", 0, 2), ("t", 1, 2)], False)
            finally:
                await plane.close()

    acknowledged = asyncio.run(stop())

    assert acknowledged == []
    [refusal] = [r.getMessage() for r in caplog.records if "refused stop-replica" in r.getMessage()]
    assert "t-0 INVALID_REQUEST" in refusal and "t-1 INVALID_REQUEST" in refusal
