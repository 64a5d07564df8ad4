"""More partitions for a topic (`tidelog topic alter --partitions N`): the new ones are spread as
Kafka spreads them, every broker serves them, and a group's consumers rebalance onto them. A
count that does not grow or an assignment on unknown brokers is refused and changes nothing."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.integration.conftest import run_tidelog, wait_for_leaders
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode, KafkaError


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("partitions"))
    cluster.up(3, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def assignment_of(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, ...]]:
    with zookeeper.session(cluster.zookeeper) as client:
        found = zookeeper.read_topic(client, topic)
    assert found is not None
    return found.assignment


def test_added_partitions_are_spread_as_kafkas_add_partitions_spreads_them():
    # AdminUtils.assignReplicasToBrokers(4 brokers, 4 partitions, replication factor 3,
    # fixedStartIndex 2, startPartitionId 6): the shift starts at the start index and grows at
    # each multiple of the broker count crossed from partition 6 on
    added = topics.assign_replicas([1, 2, 3, 4], 4, 3, start_index=2, shift=2, first_partition=6)
    assert added == {6: [1, 4, 2], 7: [2, 1, 3], 8: [3, 4, 1], 9: [4, 1, 2]}


def test_a_group_consumer_picks_up_added_partitions(cluster):
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "growing", 2, 2)
    wait_for_leaders(cluster, "growing", 2)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="growers",
        auto_offset_reset="earliest",
        metadata_max_age_ms=1000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    consumer.subscribe(["growing"])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer never got its partitions"
            consumer.poll(timeout_ms=200)

        added = run_tidelog(
            "topic", "alter", "--dir", str(cluster.directory), "--topic", "growing",
            "--partitions", "4",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert "added partition 2 on" in added.stdout and "partition 3 on" in added.stdout
        wait_for_leaders(cluster, "growing", 4)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
        for partition in range(4):
            producer.send("growing", value=b"to %d" % partition, partition=partition)
        producer.flush(30)
        producer.close()

        received: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(received) < 4:
            assert time.monotonic() < deadline, f"the consumer read only {sorted(received)}"
            for records in consumer.poll(timeout_ms=300).values():
                received |= {record.value for record in records}
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2, 3}
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--partitions", "2"], "can only be increased"),
        (["--partitions", "3", "--replica-assignment", "1:9"], "brokers [9] are not live"),
        (["--partitions", "3", "--replica-assignment", "1"], "replication factor is 2"),
        (["--partitions", "4", "--replica-assignment", "1:2"], "2 are being added"),
        (["--partitions", "3", "--replica-assignment", "1:x"], "broker ids separated by ':'"),
    ],
)
def test_bad_partition_counts_and_assignments_change_nothing(cluster, arguments, said):
    with zookeeper.session(cluster.zookeeper) as client:
        if zookeeper.read_topic(client, "fixed") is None:
            topics.create_topic(client, "fixed", 2, 2)
    before = assignment_of(cluster, "fixed")

    refused = run_tidelog(
        "topic", "alter", "--dir", str(cluster.directory), "--topic", "fixed", *arguments
    )

    assert refused.returncode != 0
    assert said in refused.stderr
    assert assignment_of(cluster, "fixed") == before


def test_partitions_added_while_another_admin_adds_some_go_on_top_of_theirs(cluster, monkeypatch):
    """The topic's node is written with a compare-and-set: a change that lands between the
    read and the write makes the request read the topic again and be judged against it, so
    the partitions are added on top, or the request is refused if it no longer adds any."""
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "raced", 2, 2)
        read_brokers = zookeeper.read_brokers
        concurrent = [3]  # what another admin raises the topic to, once, mid-request

        def another_admin_between_the_read_and_the_write(zk, *args, **kwargs):
            if concurrent:
                monkeypatch.setattr(zookeeper, "read_brokers", read_brokers)  # for the other
                topics.add_partitions(zk, "raced", concurrent.pop(0))
                monkeypatch.setattr(zookeeper, "read_brokers", between)
            return read_brokers(zk, *args, **kwargs)

        between = another_admin_between_the_read_and_the_write
        monkeypatch.setattr(zookeeper, "read_brokers", between)
        added = topics.add_partitions(client, "raced", 5)
        assert sorted(added) == [3, 4] and len(assignment_of(cluster, "raced")) == 5
        concurrent.append(6)
        with pytest.raises(KafkaError) as refused:
            topics.add_partitions(client, "raced", 6)  # the other admin got there first
        assert refused.value.code == ErrorCode.INVALID_PARTITIONS
    assert len(assignment_of(cluster, "raced")) == 6
    wait_for_leaders(cluster, "raced", 6)


def test_partitions_added_to_a_topic_deleted_meanwhile_are_refused_as_unknown(cluster, monkeypatch):
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "vanishing", 1, 1)
        read_brokers = zookeeper.read_brokers

        def deleted_between_the_read_and_the_write(zk, *args, **kwargs):
            zookeeper.delete_topic_nodes(zk, "vanishing")
            return read_brokers(zk, *args, **kwargs)

        monkeypatch.setattr(zookeeper, "read_brokers", deleted_between_the_read_and_the_write)
        with pytest.raises(KafkaError) as refused:
            topics.add_partitions(client, "vanishing", 3)

    assert refused.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
