"""Format v2 where the log cleaner and the remote tier meet it, through brokers of release 2.1
whose own format is 2.1 (log.message.format.version=2.1): a compacted topic that librdkafka
writes keyed records with headers to, cleaned and read back as the last value of each key with
its headers; a consumer group whose commits go to a v2, compacted __consumer_offsets that the
cleaner cleans while the group keeps its offsets; a tiered topic of batches read back from the
remote tier by a v2 fetcher and by a 0.10 one (down-converted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as RdTopicPartition

from tests.integration.conftest import RELEASE_2_1, admin, wait_for_leaders
from tests.integration.test_kafka_python import consume as python_consume
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.records.format import Codec, iter_shallow

BROKER = {
    **RELEASE_2_1,
    "log.message.format.version": "2.1",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.dedupe.buffer.size": "1048576",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "2",
    "offsets.topic.segment.bytes": "4096",  # commits roll it, so the cleaner has work
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "300",
    "log.retention.check.interval.ms": "300",
    "remote.fetch.max.wait.ms": "10000",
}
KEYS = 20
ROUNDS = 25


@pytest.fixture(scope="module")
def v2_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("v2-clean-tier"))
    cluster.up(2, overrides=BROKER, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def create(cluster: LocalCluster, name: str, **config: str) -> str:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, 1, 2, {k.replace("_", "."): v for k, v in config.items()})
    wait_for_leaders(cluster, name, 1)
    return name


def leader_view(cluster: LocalCluster, topic: str) -> dict:
    for broker_id in cluster.state.brokers:
        described = admin(cluster, broker_id, f"/topics/{topic}")
        if described:
            entry = described["partitions"][0]
            if entry["leader"] == broker_id and "log_end_offset" in entry:
                return entry
    return {}


def leader_entries(cluster: LocalCluster, topic: str) -> list:
    """The shallow entries of the leader's segments of ``topic``-0."""
    directory = Path(cluster.directory) / f"broker-{leader_view(cluster, topic)['leader']}"
    return [
        entry
        for path in sorted((directory / "logs" / f"{topic}-0").glob("*.log"))
        for entry in iter_shallow(path.read_bytes())
    ]


def consume_from_start(cluster: LocalCluster, topic: str, end: int) -> list:
    """Every record of ``topic``-0 below ``end``, read by librdkafka (Fetch v4+)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "reader"})
    consumer.assign([RdTopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list = []
    try:
        wait_until(
            lambda: (
                got.extend(m for m in consumer.consume(500, 0.5) if not m.error())
                or (got and got[-1].offset() >= end - 1)
            ),
            60,
            f"librdkafka to read {topic}-0 up to offset {end}",
        )
    finally:
        consumer.close()
    return got


def test_a_compacted_v2_topic_reads_back_as_the_last_value_and_headers_of_each_key(v2_cluster):
    topic = create(
        v2_cluster,
        "accounts-v2",
        cleanup_policy="compact",
        segment_bytes="4096",
        min_cleanable_dirty_ratio="0.1",
        compression_type="producer",
    )
    producer = Producer(
        {
            "bootstrap.servers": v2_cluster.bootstrap_servers,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
        }
    )
    last: dict[bytes, tuple[bytes | None, list]] = {}
    for round_number in range(ROUNDS):
        for key_number in range(KEYS):
            key = b"account-%02d" % key_number
            deleted = round_number == ROUNDS - 1 and key_number % 5 == 0
            value = None if deleted else b"balance-%02d-%03d" % (key_number, round_number)
            headers = [("round", b"%d" % round_number), ("source", b"test")]
            producer.produce(topic, key=key, value=value, headers=headers)
            last[key] = (value, headers)
        producer.flush(30)
    assert producer.flush(30) == 0
    produced = KEYS * ROUNDS

    wait_until(
        lambda: "last_clean" in leader_view(v2_cluster, topic),
        60,
        f"the leader's cleaner to clean {topic}-0",
    )
    got = consume_from_start(v2_cluster, topic, produced)

    consumed = {m.key(): (m.value(), m.headers()) for m in got}
    assert consumed == {k: (v, [(n, h) for n, h in hs]) for k, (v, hs) in last.items()}
    assert len(got) < produced, "the cleaner removed nothing"
    offsets = [m.offset() for m in got]
    assert offsets == sorted(set(offsets))
    entries = leader_entries(v2_cluster, topic)
    assert {e.magic for e in entries} == {2}
    assert {e.codec for e in entries} == {Codec.LZ4}  # rewritten batches recompressed


def test_a_group_commits_to_a_v2_offsets_topic_that_the_cleaner_cleans(v2_cluster):
    topic = create(v2_cluster, "events-v2")
    producer = Producer({"bootstrap.servers": v2_cluster.bootstrap_servers, "acks": "all"})
    for n in range(300):
        producer.produce(topic, value=b"event-%d" % n)
    assert producer.flush(30) == 0

    def member() -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": v2_cluster.bootstrap_servers,
                "group.id": "auditors",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        return consumer

    consumer = member()
    read: list = []
    try:
        while len(read) < 250:  # one commit per message: many batches on __consumer_offsets
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                read.append(message.offset())
                consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    assert read == list(range(250))

    wait_until(
        lambda: "last_clean" in leader_view(v2_cluster, "__consumer_offsets"),
        60,
        "the cleaner to clean __consumer_offsets-0",
    )
    entries = leader_entries(v2_cluster, "__consumer_offsets")
    assert {e.magic for e in entries} == {2}
    assert len(entries) < 250, "the cleaner left every commit"

    consumer = member()  # the group goes on from its committed offset
    try:
        message = None
        wait_until(
            lambda: (message := consumer.poll(1.0)) is not None and not message.error()
            and (read.append(message.offset()) or True),
            60,
            "the group's next member to read its first message",
        )  # fmt: skip
    finally:
        consumer.close()
    assert read[-1] == 250


def test_a_tiered_v2_topic_is_read_back_from_the_remote_tier(v2_cluster):
    topic = create(
        v2_cluster,
        "tiered-v2",
        remote_storage_enable="true",
        segment_bytes="16384",
        local_retention_bytes="16384",
        remote_log_index_interval_bytes="4096",
    )
    producer = Producer(  # batches of a few KiB: a batch never splits across segments
        {
            "bootstrap.servers": v2_cluster.bootstrap_servers,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 4096,
        }
    )
    count = 1500
    for n in range(count):
        producer.produce(topic, key=b"%d" % n, value=b"%06d-" % n + b"x" * 40,
                         headers=[("n", b"%d" % n)])  # fmt: skip
    assert producer.flush(30) == 0

    def offloaded() -> bool:
        view = leader_view(v2_cluster, topic)
        return (
            view.get("log_end_offset") == count
            and view.get("local_log_start_offset", 0) > 100
            and view.get("remote_segments", 0) > 0
        )

    wait_until(offloaded, 60, f"{topic}-0 to move its older segments to the tier")
    assert leader_view(v2_cluster, topic)["log_start_offset"] == 0

    got = consume_from_start(v2_cluster, topic, count)
    assert [m.offset() for m in got] == list(range(count))
    assert got[5].value() == b"000005-" + b"x" * 40 and got[5].headers() == [("n", b"5")]
    # a 0.10 fetcher (Fetch v3) gets the remote batches down-converted
    records = python_consume(v2_cluster, topic, (0, 10, 1), count, timeout=60)
    assert [r.offset for r in records] == list(range(count))
    assert records[5].value == b"000005-" + b"x" * 40
