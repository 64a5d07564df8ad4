"""Real clients of the Kafka 0.11+ era against brokers of release 2.1, on a topic in message
format v2: kcat (librdkafka) with record headers and zstd, aiokafka 0.14 with every codec, by
assignment and in a group; and clients of the 0.9/0.10 era still producing to and reading that
topic (the broker converts). (test_format_v2_clients.py has confluent-kafka and kafka-python 3
finding the release by itself.)
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import entries_on_disk, wait_for_leaders
from tests.integration.test_kcat import kcat
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper

# the topic setting that stores record batches (message format v2)
V2_FORMAT = {"message.format.version": "2.1"}


def new_v2_topic(cluster: LocalCluster, partitions: int = 1) -> str:
    name = f"v2-{uuid.uuid4().hex[:8]}"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, 3, V2_FORMAT)
    wait_for_leaders(cluster, name, partitions)
    return name


def poll_kafka_python(consumer: KafkaConsumer, count: int) -> list:
    records: list = []
    wait_until(
        lambda: (
            records.extend(r for batch in consumer.poll(500).values() for r in batch)
            or len(records) >= count
        ),
        30,
        f"{count} records for kafka-python",
    )
    return records


# -- kcat (librdkafka) ----------------------------------------------------------------------------


KCAT_CLIENTS = {
    "negotiated": [],
    # librdkafka with a 0.10.0 fallback still asks ApiVersions, so against a 2.1 broker it
    # speaks 2.1's protocol too (Produce v7, Fetch v10)
    "0.10.0-fallback": [
        "-X",
        "api.version.request=false",
        "-X",
        "broker.version.fallback=0.10.0.0",
    ],
}


@pytest.mark.parametrize("client", KCAT_CLIENTS)
def test_kcat_produces_zstd_with_headers_and_consumes_them(cluster_2_1, client):
    topic = new_v2_topic(cluster_2_1)
    options = KCAT_CLIENTS[client]
    for n in range(5):
        kcat(
            cluster_2_1, "-P", "-t", topic, "-K:", "-z", "zstd", "-H", f"n={n}", "-H", "a=b",
            *options, input=f"key-{n}:{'value' * 50}-{n}\n",
        )  # fmt: skip
    output = kcat(
        cluster_2_1, "-C", "-t", topic, "-o", "beginning", "-c", "5", "-e",
        "-f", "%o|%k|%h|%s\\n", *options,
    )  # fmt: skip
    assert output.splitlines() == [f"{n}|key-{n}|n={n},a=b|{'value' * 50}-{n}" for n in range(5)]
    assert {(m, c) for m, c, _ in entries_on_disk(cluster_2_1, topic)} == {(2, "zstd")}


# -- aiokafka 0.14 ----------------------------------------------------------------------------

AIOKAFKA_CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def test_aiokafka_produces_every_codec_and_consumes_by_assignment_and_in_a_group(cluster_2_1):
    topic = new_v2_topic(cluster_2_1)
    sent = asyncio.run(aiokafka_produce(cluster_2_1.bootstrap_servers, topic))
    stored = entries_on_disk(cluster_2_1, topic)
    assert {magic for magic, _, _ in stored} == {2}
    assert {codec for _, codec, _ in stored} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assigned = asyncio.run(aiokafka_consume(cluster_2_1.bootstrap_servers, topic, None, len(sent)))
    assert assigned == sent
    grouped = asyncio.run(
        aiokafka_consume(cluster_2_1.bootstrap_servers, topic, f"g-{topic}", len(sent))
    )
    assert grouped == sent


async def aiokafka_produce(bootstrap: str, topic: str) -> list[tuple]:
    sent = []
    for codec in AIOKAFKA_CODECS:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
        await producer.start()
        try:
            for n in range(3):
                value = f"{codec}-{n}".encode() * 30
                headers = [("codec", str(codec).encode())]
                await producer.send_and_wait(topic, value, key=b"k", headers=headers)
                sent.append((value, tuple(headers)))
        finally:
            await producer.stop()
    return sent


async def aiokafka_consume(bootstrap: str, topic: str, group: str | None, count: int) -> list:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    if group is None:
        consumer.assign([AioTopicPartition(topic, 0)])
    else:
        consumer.subscribe([topic])
    await consumer.start()
    try:
        got: list = []
        async with asyncio.timeout(60):
            while len(got) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                got += [(m.value, tuple(m.headers)) for ms in batches.values() for m in ms]
        if group is not None:
            await consumer.commit()
        return got
    finally:
        await consumer.stop()


# -- clients of the 0.9/0.10 era on a v2 topic -------------------------------------------------


def test_kafka_python_pinned_to_0_10_produces_to_and_reads_a_v2_topic(cluster_2_1):
    topic = new_v2_topic(cluster_2_1)
    new = KafkaProducer(bootstrap_servers=cluster_2_1.bootstrap_servers)  # idempotent
    old = KafkaProducer(bootstrap_servers=cluster_2_1.bootstrap_servers, api_version=(0, 10))
    try:
        for n in range(4):
            (old if n % 2 else new).send(topic, value=f"m{n}".encode()).get(30)
    finally:
        new.close()
        old.close()
    assert {magic for magic, _, _ in entries_on_disk(cluster_2_1, topic)} == {2}  # up-converted
    consumer = KafkaConsumer(
        bootstrap_servers=cluster_2_1.bootstrap_servers,
        api_version=(0, 10),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        records = poll_kafka_python(consumer, 4)  # down-converted to v1 for Fetch v2
    finally:
        consumer.close()
    assert [(r.offset, r.value) for r in records] == [(n, f"m{n}".encode()) for n in range(4)]


def test_kcat_of_the_0_9_era_produces_to_and_reads_a_v2_topic(cluster_2_1):
    topic = new_v2_topic(cluster_2_1)
    old = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0.1"]
    kcat(cluster_2_1, "-P", "-t", topic, "-K:", *old, input="a:1\nb:2\n")  # Produce v1, v0
    kcat(cluster_2_1, "-P", "-t", topic, "-K:", "-H", "h=1", input="c:3\n")  # Produce v7
    assert {magic for magic, _, _ in entries_on_disk(cluster_2_1, topic)} == {2}
    # Fetch v1 gets format v0: no timestamps, no headers
    output = kcat(
        cluster_2_1, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-e", "-f", "%o|%k|%s\\n",
        *old,
    )  # fmt: skip
    assert output.splitlines() == ["0|a|1", "1|b|2", "2|c|3"]
