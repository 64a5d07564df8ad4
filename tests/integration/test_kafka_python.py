"""kafka-python (PyPI) against a tidelog cluster, at the API versions of 0.9, 0.10.0 and 0.10.1."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record import MemoryRecords

from tests.integration.conftest import codecs_on_disk
from tidelog.records.format import iter_deep

API_VERSIONS = [(0, 9), (0, 10, 0), (0, 10, 1)]
CODECS = [None, "gzip", "snappy", "lz4"]


def produce(cluster, topic, api_version, messages, compression=None, acks=1):
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        api_version=api_version,
        compression_type=compression,
        acks=acks,
        linger_ms=5,
    )
    try:
        futures = [producer.send(topic, key=k, value=v, **extra) for k, v, extra in messages]
        producer.flush()
        return [future.get(timeout=30) for future in futures]
    finally:
        producer.close()


def consume(cluster, topic, api_version, count, timeout=30.0):
    """``count`` messages from the start of every partition, read by kafka-python at
    ``api_version`` with partitions assigned explicitly (no subscription to wait on)."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        api_version=api_version,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    deadline = time.monotonic() + timeout
    try:
        numbers = consumer.partitions_for_topic(topic)
        while not numbers and time.monotonic() < deadline:
            time.sleep(0.2)
            numbers = consumer.partitions_for_topic(topic)
        consumer.assign([TopicPartition(topic, number) for number in sorted(numbers or [])])
        records = []
        while len(records) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        return sorted(records, key=lambda r: (r.partition, r.offset))[:count]
    finally:
        consumer.close()


def consume_all(cluster, topic, api_version=(0, 10, 1)):
    """Every message of every partition, up to the log end offsets at the time of the call."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        api_version=api_version,
        enable_auto_commit=False,
        group_id=None,
    )
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        records = []
        while any(consumer.position(p) < ends[p] for p in partitions):
            for batch in consumer.poll(timeout_ms=1000).values():
                records += batch
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("api_version", API_VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("compression", CODECS, ids=lambda c: c or "none")
def test_kafka_python_produces_and_consumes(cluster, new_topic, api_version, compression):
    topic = new_topic()
    messages = [(b"key-%d" % n, b"value-%d" % n, {}) for n in range(30)]
    messages += [(b"null-value", None, {}), (None, b"no-key", {})]

    acked = produce(cluster, topic, api_version, messages, compression)
    records = consume(cluster, topic, api_version, len(messages))
    assert codecs_on_disk(cluster, topic) == {compression or "none"}  # stored as sent

    assert [m.offset for m in acked] == list(range(len(messages)))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (n, key, value) for n, (key, value, _) in enumerate(messages)
    ]
    if api_version == (0, 9):
        assert {r.timestamp for r in records} in ({None}, {-1})
    else:
        assert all(r.timestamp > 1_600_000_000_000 for r in records)


def test_offsets_for_times_agrees_with_a_brute_force_scan(cluster, new_topic):
    topic = new_topic()
    chance = random.Random(11)
    base = 1_700_000_000_000
    stamps = [base + chance.randrange(0, 100_000) for _ in range(200)]  # CreateTime, unordered
    produce(
        cluster,
        topic,
        (0, 10, 1),
        [(b"k", b"v%d" % n, {"timestamp_ms": t}) for n, t in enumerate(stamps)],
    )
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1), group_id=None
    )
    partition = TopicPartition(topic, 0)
    try:
        for target in [base - 1, *(base + chance.randrange(0, 100_001) for _ in range(40))]:
            found = consumer.offsets_for_times({partition: target})[partition]
            expected = next(((offset, t) for offset, t in enumerate(stamps) if t >= target), None)
            if expected is None:
                assert found is None
            else:
                assert (found.offset, found.timestamp) == expected
        assert consumer.offsets_for_times({partition: base + 100_001})[partition] is None
    finally:
        consumer.close()


def test_log_append_time_timestamps_never_go_backwards(cluster, new_topic):
    topic = new_topic(message_timestamp_type="LogAppendTime")
    for round_number in range(5):
        produce(
            cluster,
            topic,
            (0, 10, 1),
            [(b"k", b"r%d-%d" % (round_number, n), {"timestamp_ms": 1}) for n in range(20)],
            compression="gzip" if round_number % 2 else None,
        )

    records = consume(cluster, topic, (0, 10, 1), 100)

    timestamps = [r.timestamp for r in records]
    assert len(records) == 100
    assert timestamps == sorted(timestamps)
    assert min(timestamps) > 1_600_000_000_000  # the producer's timestamp 1 was replaced
    assert {r.timestamp_type for r in records} == {1}


@pytest.mark.parametrize(
    ("format_version", "producer", "consumer"),
    [
        ("0.9.0", (0, 10, 1), (0, 10, 1)),
        ("0.10.0", (0, 10, 1), (0, 9)),
        ("0.9.0", (0, 9), (0, 10, 0)),
    ],
)
def test_a_topic_of_either_format_is_read_by_clients_of_either_version(
    cluster, new_topic, format_version, producer, consumer
):
    topic = new_topic(message_format_version=format_version)
    messages = [(b"k%d" % n, b"v%d" % n, {}) for n in range(25)]

    produce(cluster, topic, producer, messages, compression="snappy")
    records = consume(cluster, topic, consumer, 25)

    assert [(r.offset, r.key, r.value) for r in records] == [
        (n, k, v) for n, (k, v, _) in enumerate(messages)
    ]


def test_log_files_written_through_the_broker_read_back_with_memory_records(cluster, new_topic):
    topic = new_topic()
    messages = [(b"k%d" % n, b"v" * n, {}) for n in range(50)]
    for compression in CODECS:
        produce(cluster, topic, (0, 10, 1), messages, compression=compression)

    segment_files = sorted(Path(cluster.directory).glob(f"broker-*/logs/{topic}-0/*.log"))
    data = b"".join(path.read_bytes() for path in segment_files)
    reader, theirs = MemoryRecords(data), []
    while (batch := reader.next_batch()) is not None:
        theirs += [(r.offset, r.timestamp, r.key, r.value) for r in batch]

    assert theirs == [(m.offset, m.timestamp, m.key, m.value) for m in iter_deep(data)]
    assert [offset for offset, *_ in theirs] == list(range(200))


def test_acks_zero_gets_no_response_and_the_messages_still_land(cluster, new_topic):
    topic = new_topic()
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, api_version=(0, 10, 1), acks=0
    )
    try:
        for n in range(50):
            producer.send(topic, value=b"fire-and-forget-%d" % n)
        producer.flush()
    finally:
        producer.close()

    records = consume(cluster, topic, (0, 10, 1), 50)

    assert [r.value for r in records] == [b"fire-and-forget-%d" % n for n in range(50)]
