"""A compacted topic under load on three brokers: the cleaners run while producers write, and
a consumer reading from the start still ends every key on its last acknowledged value."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import admin, wait_for_leaders
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper

TOPIC = "accounts"
KEYS = 40


@pytest.fixture(scope="module")
def compacting_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("compaction"))
    cluster.up(
        3,
        overrides={"log.cleaner.backoff.ms": "200", "log.cleaner.dedupe.buffer.size": "1048576"},
        progress=lambda _: None,
    )
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.2",
    }
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, 2, 3, config)
    wait_for_leaders(cluster, TOPIC, 2)
    yield cluster
    cluster.down(progress=lambda _: None)


def cleaned_on_every_leader(cluster: LocalCluster) -> bool:
    for broker_id in cluster.state.brokers:
        described = admin(cluster, broker_id, f"/topics/{TOPIC}")
        for partition in described["partitions"]:
            if partition["leader"] == broker_id and "last_clean" not in partition:
                return False
    return True


def test_consumers_of_a_compacted_topic_end_each_key_on_its_last_acknowledged_value(
    compacting_cluster,
):
    cluster = compacting_cluster
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    last_acked: dict[bytes, bytes | None] = {}
    produced = 0
    try:
        deadline = time.monotonic() + 120
        round_number = 0
        while round_number < 30 or not cleaned_on_every_leader(cluster):
            assert time.monotonic() < deadline, "the cleaners never cleaned every leader's log"
            futures = []
            for key_number in range(KEYS):
                key = b"account-%02d" % key_number
                deleted = round_number >= 25 and key_number % 10 == 0
                value = None if deleted else b"balance-%02d-%04d" % (key_number, round_number)
                futures.append((key, value, producer.send(TOPIC, key=key, value=value)))
            for key, value, future in futures:
                future.get(timeout=30)
                last_acked[key] = value
                produced += 1
            round_number += 1
    finally:
        producer.close()

    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=None)
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(2)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        records = []
        wait_until(
            lambda: (
                records.extend(r for b in consumer.poll(500).values() for r in b)
                or all(consumer.position(p) >= ends[p] for p in partitions)
            ),
            60,
            "the consumer to reach the log end of both partitions",
        )
    finally:
        consumer.close()

    consumed_last: dict[bytes, bytes | None] = {}
    for partition in range(2):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == sorted(set(offsets)), "offsets must only grow"
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        consumed_last[record.key] = record.value
    assert consumed_last == last_acked
    assert len(records) < produced, "the cleaners removed nothing"
    described = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "describe", "--dir", str(cluster.directory),
         "--topic", TOPIC],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert described.count("LastClean: offsets ") == 2, described
