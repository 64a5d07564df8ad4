"""The broker coordinating a group is killed (SIGKILL) mid-run: no committed offset is lost and
the group goes on with the next leader of its ``__consumer_offsets`` partition."""

from __future__ import annotations

import signal
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import wait_for_leaders
from tidelog.cluster.faults import _state, wait_for_full_isr, wait_until_leader
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.coordinator.records import OFFSETS_TOPIC, partition_for

TOPIC = "orders"
GROUP = "billing"


@pytest.fixture(scope="module")
def failover_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("failover"))
    cluster.up(3, progress=lambda _: None)
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, 2, 3)
    wait_for_leaders(cluster, TOPIC, 2)
    yield cluster
    cluster.down(progress=lambda _: None)


def produce(cluster: LocalCluster, start: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=10)
    try:
        for n in range(start, start + count):
            producer.send(TOPIC, key=b"%d" % n, value=b"%06d" % n)
        producer.flush(timeout=60)
    finally:
        producer.close()


def consumer(cluster: LocalCluster) -> KafkaConsumer:
    subscribed = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    subscribed.subscribe([TOPIC])
    return subscribed


def consume_and_commit(subscribed: KafkaConsumer, count: int, timeout: float = 90) -> list[bytes]:
    """Reads ``count`` messages, committing after each batch (retrying a commit that fails
    while the group moves to a new coordinator)."""
    found: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"consumed only {len(found)} of {count}"
        batches = subscribed.poll(timeout_ms=500)
        for batch in batches.values():
            found += [record.value for record in batch]
        if batches:
            while True:
                try:
                    subscribed.commit()
                    break
                except Exception:
                    assert time.monotonic() < deadline, "no commit succeeded"
                    subscribed.poll(timeout_ms=200)
    return found


def committed(cluster: LocalCluster) -> int:
    """The group's committed offsets summed over the topic, as a fresh client reads them."""
    reader = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=GROUP)
    try:
        return sum(reader.committed(TopicPartition(TOPIC, p)) or 0 for p in range(2))
    finally:
        reader.close()


def test_a_killed_coordinator_loses_no_committed_offset_and_the_group_goes_on(failover_cluster):
    cluster = failover_cluster
    produce(cluster, 0, 40)
    subscribed = consumer(cluster)
    try:
        assert sorted(consume_and_commit(subscribed, 40)) == [b"%06d" % n for n in range(40)]
        assert committed(cluster) == 40
        offsets_partition = partition_for(GROUP, 50)
        wait_for_full_isr(cluster, OFFSETS_TOPIC)
        coordinator = _state(cluster, OFFSETS_TOPIC, offsets_partition).leader

        cluster.signal_broker(coordinator, signal.SIGKILL)
        wait_until_leader(
            cluster,
            OFFSETS_TOPIC,
            lambda leader: leader not in (coordinator, -1),
            partition=offsets_partition,
        )

        wait_until(lambda: committed(cluster) == 40, 60, "the successor to serve 40 offsets")
        produce(cluster, 40, 20)
        assert sorted(consume_and_commit(subscribed, 20)) == [b"%06d" % n for n in range(40, 60)]
        assert committed(cluster) == 60
    finally:
        subscribed.close()
    cluster.start_broker(coordinator)
