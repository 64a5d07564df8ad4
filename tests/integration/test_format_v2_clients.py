"""Clients written since 2017 against brokers of release 2.1 whose topics are on message format
v2 (message.format.version 2.1): librdkafka produces batches with headers and zstd, kafka-python
finds the release on its own, and a client of the 0.10 era still reads and writes the same
topic through conversion. Replicated three ways, acks=all."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import run_tidelog, wait_for_leaders
from tests.integration.test_bad_input import connect, request
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Codec, iter_inner, iter_shallow
from tidelog.records.record_batch import BatchRecordInput, encode_batch, read_header

_count = iter(range(1_000_000))


def new_topic(cluster: LocalCluster, message_format: str = "2.1") -> str:
    name = f"v2-{next(_count)}"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, 1, 3, {"message.format.version": message_format})
    wait_for_leaders(cluster, name, 1)
    return name


def stored(cluster: LocalCluster, topic: str) -> list:
    """The shallow entries of every replica's segments of ``topic``, per broker."""
    return [
        [
            entry
            for path in sorted(Path(d).glob("*.log"))
            for entry in iter_shallow(path.read_bytes())
        ]
        for d in sorted(Path(cluster.directory).glob(f"broker-*/logs/{topic}-0"))
    ]


def librdkafka_produce(cluster: LocalCluster, topic: str, count: int, **config) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **config})
    failed = []
    for n in range(count):
        producer.produce(
            topic,
            key=b"key-%d" % n,
            value=b"value-%d" % n,
            headers=[("trace", b"t-%d" % n), ("empty", None)],
            on_delivery=lambda error, _: failed.append(error) if error else None,
        )
    assert producer.flush(30) == 0
    assert failed == []


def librdkafka_consume(cluster: LocalCluster, topic: str, count: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(300):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append(message)
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", ["zstd", "lz4", "none"])
def test_librdkafka_produces_batches_with_headers_and_reads_them_back(cluster_2_1, codec):
    topic = new_topic(cluster_2_1)

    librdkafka_produce(cluster_2_1, topic, 50, **{"compression.type": codec, "linger.ms": 20})
    got = librdkafka_consume(cluster_2_1, topic, 50)

    assert [m.value() for m in got] == [b"value-%d" % n for n in range(50)]
    assert got[7].headers() == [("trace", b"t-7"), ("empty", None)]
    replicas = stored(cluster_2_1, topic)
    assert len(replicas) == 3
    for entries in replicas:
        assert {entry.magic for entry in entries} == {2}
        assert {entry.codec for entry in entries} == {Codec[codec.upper()]}


def test_kafka_python_finds_release_2_1_on_its_own(cluster_2_1):
    topic = new_topic(cluster_2_1)
    # kafka-python 3 turns idempotence on against 0.11+ (InitProducerId, then sequences)
    producer = KafkaProducer(
        bootstrap_servers=cluster_2_1.bootstrap_servers, acks="all", compression_type="gzip"
    )
    assert producer.config["api_version"] >= (2, 1)
    assert producer.config["enable_idempotence"]
    sent = [
        producer.send(topic, key=b"k", value=b"v%d" % n, headers=[("n", b"%d" % n)])
        for n in range(20)
    ]
    assert [future.get(30).offset for future in sent] == list(range(20))
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=cluster_2_1.bootstrap_servers, consumer_timeout_ms=5000
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [(m.value, m.headers) for m in consumer][:20]
    consumer.close()

    assert got == [(b"v%d" % n, [("n", b"%d" % n)]) for n in range(20)]
    assert {entry.magic for entry in stored(cluster_2_1, topic)[0]} == {2}


def test_a_client_of_the_0_10_era_reads_and_writes_a_v2_topic(cluster_2_1):
    topic = new_topic(cluster_2_1)
    librdkafka_produce(cluster_2_1, topic, 10, **{"compression.type": "gzip"})
    old = {"bootstrap_servers": cluster_2_1.bootstrap_servers, "api_version": (0, 10, 1)}
    producer = KafkaProducer(acks="all", **old)
    sent = [producer.send(topic, key=b"k", value=b"value-%d" % n) for n in range(10, 15)]
    assert [future.get(30).offset for future in sent] == list(range(10, 15))
    producer.close()

    consumer = KafkaConsumer(consumer_timeout_ms=5000, **old)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m.value for m in consumer]
    consumer.close()

    assert got == [b"value-%d" % n for n in range(15)]
    # the old producer's messages were up-converted: the log holds batches only
    assert {entry.magic for entry in stored(cluster_2_1, topic)[0]} == {2}


def test_librdkafka_writing_to_a_topic_still_on_format_0_10_is_down_converted(cluster_2_1):
    topic = new_topic(cluster_2_1, message_format="0.10.0")
    producer = Producer({"bootstrap.servers": cluster_2_1.bootstrap_servers, "acks": "all"})
    for n in range(10):
        producer.produce(topic, value=b"value-%d" % n)
    assert producer.flush(30) == 0

    got = librdkafka_consume(cluster_2_1, topic, 10)

    assert [m.value() for m in got] == [b"value-%d" % n for n in range(10)]
    assert {entry.magic for entry in stored(cluster_2_1, topic)[0]} == {1}


def test_tidelogs_own_producer_sends_batches_with_headers(cluster_2_1):
    topic = new_topic(cluster_2_1)

    produced = run_tidelog(
        "perf", "produce", "--dir", str(cluster_2_1.directory), "--topic", topic,
        "--num-records", "500", "--record-size", "100", "--acks", "all",
        "--message-format", "2", "--compression", "zstd", "--header", "run=perf",
    )  # fmt: skip

    assert produced.returncode == 0, produced.stderr
    messages = [message for entry in stored(cluster_2_1, topic)[0] for message in iter_inner(entry)]
    assert [m.offset for m in messages] == list(range(500))
    assert {(m.magic, m.codec, m.headers) for m in messages} == {
        (2, Codec.ZSTD, (("run", b"perf"),))
    }


def test_record_times_whose_deltas_wrap_are_kept_as_kafka_keeps_them(cluster_2_1):
    """A batch's record time is its first time plus its delta, a sum Kafka makes in a long: a
    batch from -10 to the last millisecond of the range has a delta past it, which wraps."""
    topic = new_topic(cluster_2_1)
    latest = 2**63 - 1
    sent = [("early", -10), ("late", latest), ("compressed", latest - 3)]
    batches = [
        encode_batch(
            [BatchRecordInput(b"k", b"early", -10), BatchRecordInput(b"k", b"late", latest)]
        ),
        encode_batch([BatchRecordInput(b"k", b"compressed", latest - 3)], codec=Codec.GZIP),
    ]
    leader = faults._state(cluster_2_1, topic, 0).leader

    with connect(cluster_2_1, leader) as connection:
        answers = [
            request(connection, ApiKey.PRODUCE, 7, produce_body(topic, batch)) for batch in batches
        ]
    got = librdkafka_consume(cluster_2_1, topic, 3)

    assert [a["responses"][0]["partition_responses"][0]["error_code"] for a in answers] == [0, 0]
    assert [(m.value().decode(), m.timestamp()[1]) for m in got] == sent
    first, second = [read_header(entry.batch) for entry in stored(cluster_2_1, topic)[0]]
    assert (first.first_timestamp, first.max_timestamp) == (-10, latest)
    assert second.max_timestamp == latest - 3


def produce_body(topic: str, records: bytes) -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [{"topic": topic, "data": [{"partition": 0, "record_set": records}]}],
    }
