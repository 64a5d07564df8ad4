"""Spark reads tidelog: the segment data source against kafka-python's consumption of the same
topics from real brokers (local segments, and a remote tier), a timestamp filter that skips
bytes, and the streaming reader following a live topic."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.integration.test_kafka_python import consume_all
from tests.integration.test_kafka_python import produce as produce_messages
from tests.integration.test_tiered import TIERED_BROKER, create, value, wait_offloaded
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.pipeline.source import scan_stats

pytestmark = pytest.mark.integration

FORMATS = {0: ("0.9.0", (0, 9)), 1: ("0.10.0", (0, 10, 1))}
CODECS = [None, "gzip", "snappy", "lz4"]


def produce(cluster, topic, api_version, count, compression=None, timestamp=None):
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        api_version=api_version,
        compression_type=compression,
        linger_ms=5,
        batch_size=4096,
    )
    try:
        for number in range(count):
            extra = {} if timestamp is None else {"timestamp_ms": timestamp(number)}
            key = None if number % 7 == 0 else b"key-%d" % (number % 5)
            producer.send(topic, key=key, value=b"value-%06d" % number + b"x" * 100, **extra)
        producer.flush()
    finally:
        producer.close()


def client_rows(records):
    """kafka-python's records as the data source's rows (v0: timestamp -1, no type)."""
    return sorted(
        (
            r.partition,
            r.offset,
            r.timestamp if r.timestamp is not None else -1,
            -1 if r.timestamp_type is None or r.timestamp == -1 else r.timestamp_type,
            r.key,
            r.value,
        )
        for r in records
    )


def spark_rows(rows):
    return sorted(
        (
            r.partition,
            r.offset,
            r.timestamp,
            r.timestamp_type,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
        )
        for r in rows
    )


def test_rows_equal_what_kafka_python_consumes(cluster, new_topic, spark):
    topics = {}
    for magic, (message_format, api_version) in FORMATS.items():
        for codec in CODECS:
            topic = new_topic(
                partitions=2, message_format_version=message_format, segment_bytes="8192"
            )
            produce(cluster, topic, api_version, 300, compression=codec)
            topics[topic] = (magic, codec or "none")

    frame = spark.read.format("tidelog").load(str(cluster.directory))
    by_topic: dict[str, list] = {}
    for row in frame.where(frame.topic.isin(list(topics))).collect():
        by_topic.setdefault(row.topic, []).append(row)

    for topic, (magic, codec) in topics.items():
        rows = by_topic[topic]
        assert spark_rows(rows) == client_rows(consume_all(cluster, topic)), topic
        assert {(r.magic, r.codec, r.tier) for r in rows} == {(magic, codec, "local")}, topic
        assert len(rows) == 300


def test_a_timestamp_filter_reads_fewer_bytes_than_a_full_scan(cluster, new_topic, spark, tmp_path):
    topic = new_topic(partitions=1, segment_bytes="8192", index_interval_bytes="512")
    start = int(time.time() * 1000) - 60_000
    produce(cluster, topic, (0, 10, 1), 1000, timestamp=lambda n: start + n * 10)
    cutoff = start + 900 * 10

    def query(where: str, stats: str) -> list:
        frame = (
            spark.read.format("tidelog")
            .option("topic", topic)
            .option("scanStatsDir", str(tmp_path / stats))
            .load(str(cluster.directory))
        )
        return frame.where(where).collect()

    everything = query("true", "full")
    recent = query(f"timestamp >= {cutoff}", "filtered")

    expected = [r for r in client_rows(consume_all(cluster, topic)) if r[2] >= cutoff]
    assert spark_rows(recent) == expected and len(expected) == 100
    full, filtered = scan_stats(tmp_path / "full"), scan_stats(tmp_path / "filtered")
    assert full.rows == len(everything) == 1000 and full.bytes_skipped == 0
    assert filtered.segment_bytes == full.segment_bytes
    assert filtered.bytes_read < full.bytes_read / 4
    assert filtered.bytes_skipped > 0.75 * full.segment_bytes
    offsets = query("offset >= 500 and offset < 520", "offsets")
    assert sorted(r.offset for r in offsets) == list(range(500, 520))
    assert scan_stats(tmp_path / "offsets").bytes_read < full.bytes_read / 4


def start_stream(spark, cluster, topic: str, name: str):
    """The streaming query, into a memory table ``name``. Spark starts the Python source in a
    worker that must connect back within a fixed 10 s; on a machine loaded enough to miss that,
    the query dies before its first batch, and is started again (three tries in all)."""
    for attempt in (1, 2, 3):
        stream = (
            spark.readStream.format("tidelog")
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .load()
        )
        query = (
            stream.writeStream.format("memory")
            .queryName(name)
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        wait_until(
            lambda query=query: query.lastProgress is not None or not query.isActive,
            120,
            "the streaming query's first batch",
        )
        failure = query.exception()
        if failure is None:
            return query
        if attempt == 3 or "failed to connect back" not in str(failure):
            raise AssertionError(f"the streaming query failed: {failure}")
    raise AssertionError("unreachable")


def test_the_stream_picks_up_records_produced_after_it_started(cluster, new_topic, spark):
    topic = new_topic(partitions=2)
    produce(cluster, topic, (0, 10, 1), 50)
    name = f"stream_{topic.replace('-', '_')}"
    query = start_stream(spark, cluster, topic, name)
    try:

        def count() -> int:
            if not query.isActive:
                raise AssertionError(f"the streaming query stopped: {query.exception()}")
            return spark.sql(f"select count(*) from {name}").collect()[0][0]

        wait_until(lambda: count() == 50, 90, "the stream to read the 50 records produced first")
        produce(cluster, topic, (0, 10, 1), 70, compression="lz4")
        wait_until(lambda: count() == 120, 90, "the stream to read 70 records produced later")
        rows = spark.sql(f"select * from {name}").collect()
        assert spark_rows(rows) == client_rows(consume_all(cluster, topic))
        progress = query.lastProgress["sources"][0]["endOffset"]
        assert sum(int(offset) for offset in _offsets(progress).values()) == 120
    finally:
        query.stop()


def _offsets(progress) -> dict:
    import json

    return json.loads(progress) if isinstance(progress, str) else progress


RECORDS = 1000


def every_copy_starts_above_zero(cluster_dir, topic: str, partition: int) -> bool:
    """Whether every broker's copy of the partition has deleted its oldest local segments (a
    follower does so a task interval after its leader): the data source reads one copy, and
    rows it reads from local segments are tier 'local'."""
    copies = list(Path(cluster_dir).glob(f"broker-*/logs/{topic}-{partition}"))
    return bool(copies) and all(
        min((int(log.stem) for log in copy.glob("*.log")), default=0) > 0 for copy in copies
    )


def test_rows_of_a_topic_with_a_remote_tier_equal_what_kafka_python_consumes(
    spark, tmp_path_factory, tmp_path
):
    tiered = LocalCluster(tmp_path_factory.mktemp("pipeline-tiered"))
    tiered.up(2, overrides=TIERED_BROKER, progress=lambda _: None)
    start = int(time.time() * 1000) - 60_000
    try:
        topics = {  # topic -> (magic, codec, partitions)
            create(tiered, 2, 1, message_format_version="0.10.0"): (1, "none", 1),
            create(tiered, 2, 2, message_format_version="0.9.0"): (0, "gzip", 2),
        }
        for topic, (magic, codec, partitions) in topics.items():
            extra = (lambda n: {"timestamp_ms": start + n * 10}) if magic else (lambda n: {})
            produce_messages(
                tiered,
                topic,
                (0, 10, 1) if magic else (0, 9),
                [
                    (None, value(n), {"partition": n % partitions, **extra(n)})
                    for n in range(RECORDS)
                ],
                compression=None if codec == "none" else codec,
                acks=-1,
            )
            for partition in range(partitions):
                wait_offloaded(tiered, topic, RECORDS // partitions, partition)
                wait_until(
                    partial(every_copy_starts_above_zero, tiered.directory, topic, partition),
                    60,
                    f"every replica of {topic}-{partition} to delete what the tier holds",
                )
        consumed = {topic: client_rows(consume_all(tiered, topic)) for topic in topics}
    finally:
        tiered.down(progress=lambda _: None)  # the files stay as they are from here on

    def load(topic: str, stats: str):
        return (
            spark.read.format("tidelog")
            .option("topic", topic)
            .option("scanStatsDir", str(tmp_path / stats))
            .load(str(tiered.directory))
        )

    for topic, (magic, codec, partitions) in topics.items():
        rows = load(topic, f"all-{topic}").collect()
        assert spark_rows(rows) == consumed[topic] and len(rows) == RECORDS, topic
        assert {(r.magic, r.codec) for r in rows} == {(magic, codec)}, topic
        for partition in range(partitions):
            tiers = [r.tier for r in sorted(rows, key=lambda r: r.offset)
                     if r.partition == partition]  # fmt: skip
            remote = tiers.count("remote")
            # the older part from the tier, the newer from local segments, nothing in between
            assert 0 < remote < len(tiers) and tiers == ["remote"] * remote + ["local"] * (
                len(tiers) - remote
            ), (topic, partition)
        assert scan_stats(tmp_path / f"all-{topic}", "remote").rows == sum(
            r.tier == "remote" for r in rows
        )

    topic = next(iter(topics))  # format v1: a timestamp filter skips remote ranges
    cutoff = start + 600 * 10  # the 600th record: older than what stays local
    recent = load(topic, "recent").where(f"timestamp >= {cutoff}").collect()
    assert spark_rows(recent) == [r for r in consumed[topic] if r[2] >= cutoff]
    assert any(r.tier == "remote" for r in recent)
    full, filtered = (scan_stats(tmp_path / name, "remote") for name in (f"all-{topic}", "recent"))
    assert filtered.segment_bytes == full.segment_bytes
    assert 0 < filtered.bytes_read < full.bytes_read / 2


def test_spark_reads_v2_batches_with_their_headers(cluster_2_1, spark):
    """librdkafka's batches with headers on a v2 topic of 2.1 brokers, read by Spark."""
    from tests.integration.test_format_v2_clients import librdkafka_produce, new_topic

    topic = new_topic(cluster_2_1)
    librdkafka_produce(cluster_2_1, topic, 40, **{"compression.type": "zstd"})

    frame = spark.read.format("tidelog").load(str(cluster_2_1.directory))
    rows = frame.where(frame.topic == topic).collect()

    leader_rows = {r.offset: r for r in rows}  # every replica holds the same records
    assert sorted(leader_rows) == list(range(40))
    assert {(r.magic, r.codec) for r in rows} == {(2, "zstd")}
    assert bytes(leader_rows[3].value) == b"value-3"
    assert [
        (h.key, None if h.value is None else bytes(h.value)) for h in leader_rows[3].headers
    ] == [
        ("trace", b"t-3"),
        ("empty", None),
    ]
