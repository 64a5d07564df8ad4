"""One connection's requests take effect in the order they were sent, with the real handler:
a fetch sent before a produce on the same connection does not see it (as with one request
served at a time), though produces are read ahead of their answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop

from tests.conftest import message_set
from tidelog.broker.handlers import RequestHandler
from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, PartitionState, TopicMetadata
from tidelog.broker.metrics import Metrics
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.broker.server import KafkaServer
from tidelog.clock import ManualClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.manager import LogManager
from tidelog.protocol.frames import SIZE, decode_response, encode_request
from tidelog.protocol.schemas import ApiKey

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
FETCH = {
    "replica_id": -1,
    "max_wait_time": 0,
    "min_bytes": 0,
    "topics": [
        {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "max_bytes": 1 << 20}]}
    ],
}


def produce(count: int) -> dict:
    data = [{"partition": 0, "record_set": message_set(count)}]
    return {"acks": 1, "timeout": 1000, "topic_data": [{"topic": "t", "data": data}]}


async def answers_to(tmp_path: Path, *requests: tuple[ApiKey, dict]) -> list[dict]:
    """The answers of one broker leading t-0 to ``requests``, sent in one write."""
    clock = ManualClock()
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=clock
    )
    logs.startup()
    metadata = MetadataCache()
    metadata.topics["t"] = TopicMetadata("t", {0: (1,)}, {0: PartitionState(1, 3, (1,))})
    replicas = ReplicaManager(1, logs, metadata, clock)
    metrics = Metrics()
    handler = RequestHandler(1, replicas, metadata, metrics, clock, auto_create_topics=False)
    server = KafkaServer(handler, metrics, host="127.0.0.1", port=0, max_request_bytes=1 << 20)
    await server.bind()
    metadata.brokers[1] = BrokerEndpoint(1, "127.0.0.1", server.port)
    replicas.apply_metadata()
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            b"".join(
                encode_request(api, 2, number, "c", body)
                for number, (api, body) in enumerate(requests)
            )
        )
        answers = []
        for api, _ in requests:
            (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
            answers.append(decode_response(api, 2, await reader.readexactly(size))[1])
        writer.close()
        return answers
    finally:
        await server.stop()
        logs.shutdown()


def test_a_fetch_does_not_see_a_produce_sent_after_it_on_its_connection(tmp_path):
    fetched, produced = asyncio.run(
        answers_to(tmp_path, (ApiKey.FETCH, FETCH), (ApiKey.PRODUCE, produce(3)))
    )
    partition = fetched["responses"][0]["partition_responses"][0]
    assert partition["high_watermark"] == 0 and not partition["record_set"]
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0


def test_a_fetch_sees_a_produce_sent_before_it_on_its_connection(tmp_path):
    _, fetched = asyncio.run(
        answers_to(tmp_path, (ApiKey.PRODUCE, produce(3)), (ApiKey.FETCH, FETCH))
    )
    assert fetched["responses"][0]["partition_responses"][0]["high_watermark"] == 3


async def served_after_start(tmp_path: Path) -> dict:
    """A client that connects and sends ApiVersions between the broker's bind (its port taken
    and registered) and its start gets its answer once the broker starts."""
    clock = ManualClock()
    metadata, metrics = MetadataCache(), Metrics()
    logs = LogManager(
        [tmp_path], parse_config({"log.dirs": str(tmp_path)}, BROKER_KEYS), clock=clock
    )
    replicas = ReplicaManager(1, logs, metadata, clock)
    handler = RequestHandler(1, replicas, metadata, metrics, clock, auto_create_topics=False)
    server = KafkaServer(handler, metrics, host="127.0.0.1", port=0, max_request_bytes=1 << 20)
    await server.bind()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_request(ApiKey.API_VERSIONS, 0, 1, "early", {}))
        await writer.drain()
        await asyncio.sleep(0.2)  # the broker still starting: nothing is served yet
        await server.start()
        (size,) = SIZE.unpack(await asyncio.wait_for(reader.readexactly(SIZE.size), 10))
        answer = decode_response(ApiKey.API_VERSIONS, 0, await reader.readexactly(size))[1]
        writer.close()
        return answer
    finally:
        await server.stop()


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_connection_made_while_the_broker_starts_waits_and_is_served(tmp_path, loop):
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        answer = runner.run(served_after_start(tmp_path))

    assert answer["error_code"] == 0
