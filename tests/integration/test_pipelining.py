"""Many small acks=all produce requests pipelined on one connection, as librdkafka sends them
at its defaults (one partition batch per request, many in flight), do not make a broker fall
behind for good: every request is answered, in order, within a bound."""

from __future__ import annotations

import asyncio
import time

from tidelog.cluster.faults import wait_for_full_isr
from tidelog.controller import topics, zookeeper
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set

PARTITIONS = 60
RATE = 1000  # requests a second on the one connection, each one single-record partition batch
SECONDS = 5
# Every answer comes within this of its request. Answered one request at a time, each acks=all
# request waits for its replication before the next is read, so at this rate the answers fall
# further behind with every request (about ten seconds behind by the end: 5,000 requests
# against a few hundred answered a second). 3 s leaves room for a loaded 2-core machine (2.1 s
# was seen at load 6 with two other clusters beside it) and still tells the two apart.
BOUND = 3.0  # s


async def produce_paced(port: int, topic: str, partitions: list[int]) -> list[tuple[int, float]]:
    """Sends RATE single-record acks=all requests a second for SECONDS, round robin over
    ``partitions``, on one connection without waiting for answers; returns (request number,
    seconds to its answer) in the order the answers came."""
    connection = await Connection.open("127.0.0.1", port, client_id="pipelining-test")
    answered: list[tuple[int, float]] = []
    failed: list[str] = []
    waiting = []
    value = b"v" * 472
    start = time.perf_counter()
    for number in range(RATE * SECONDS):
        delay = start + number / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        partition = partitions[number % len(partitions)]
        records = build_message_set(
            [Record(b"%08d" % number, value, int(time.time() * 1000))], magic=1
        )
        body = {
            "acks": -1,
            "timeout": 30000,
            "topic_data": [
                {"topic": topic, "data": [{"partition": partition, "record_set": records}]}
            ],
        }
        future = connection.send(ApiKey.PRODUCE, 2, body)
        sent = time.perf_counter()

        def note(done: asyncio.Future, number: int = number, sent: float = sent) -> None:
            answered.append((number, time.perf_counter() - sent))
            if not done.cancelled() and done.exception() is None:
                (answer,) = done.result()["responses"][0]["partition_responses"]
                if answer["error_code"]:
                    failed.append(f"request {number}: error {answer['error_code']}")

        future.add_done_callback(note)
        waiting.append(future)
    async with asyncio.timeout(120):
        await asyncio.gather(*waiting)
    await connection.close()
    assert failed == []
    return answered


def test_pipelined_small_acks_all_requests_are_answered_in_order_without_falling_behind(cluster):
    topic = "pipelined-acks-all"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_for_full_isr(cluster, topic)
    with zookeeper.session(cluster.zookeeper) as client:
        leaders = {
            p: zookeeper.read_partition_state(client, topic, p).leader for p in range(PARTITIONS)
        }
    led_by_1 = [p for p, leader in leaders.items() if leader == 1]

    answered = asyncio.run(produce_paced(cluster.broker(1).port, topic, led_by_1))

    assert [number for number, _ in answered] == list(range(RATE * SECONDS))  # in order
    slowest = max(seconds for _, seconds in answered)
    assert slowest < BOUND, f"an answer took {slowest:.1f} s (bound {BOUND} s)"
