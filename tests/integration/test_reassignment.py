"""Partition reassignment as Kafka 0.10.1+ does it, driven by `tidelog topic reassign` with
Kafka's JSON files, on 4 brokers: every partition of a replication-factor-3 topic moves onto a
new set of brokers while a librdkafka producer runs with acks=all, with the controller killed
mid-move. Nothing acknowledged is lost, every replica ends with the same log, the old replicas'
directories are gone and /admin/reassign_partitions is cleared. Bad input changes nothing."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.acked_producer import AckedProducer
from tests.integration.conftest import admin, run_tidelog, wait_for_leaders
from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.config import BROKER_KEYS
from tidelog.controller import topics, zookeeper

PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("reassign"))
    cluster.up(
        4,
        overrides={"controlled.shutdown.retry.backoff.ms": "200", "min.insync.replicas": "2"},
        progress=lambda _: None,
    )
    yield cluster
    cluster.down(progress=lambda _: None)


def controller_of(cluster: LocalCluster) -> int:
    with zookeeper.session(cluster.zookeeper) as client:
        return zookeeper.read_controller(client)


def assignment_of(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, ...]]:
    with zookeeper.session(cluster.zookeeper) as client:
        found = zookeeper.read_topic(client, topic)
    assert found is not None
    return found.assignment


def reassignment_file(directory: Path, topic: str, target: dict[int, list[int]]) -> Path:
    path = directory / f"{topic}-reassignment.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": p, "replicas": r} for p, r in target.items()
                ],
            }
        )
    )
    return path


def reassign(cluster: LocalCluster, *arguments: str):
    return run_tidelog("topic", "reassign", "--dir", str(cluster.directory), *arguments)


def read_back(cluster: LocalCluster, topic: str, partitions: int = PARTITIONS) -> set:
    """Every (partition, offset, value) of ``topic`` as kafka-python reads it."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, enable_auto_commit=False)
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(wanted)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(wanted)
        found: set[tuple[int, int, bytes]] = set()
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in wanted):
            assert time.monotonic() < deadline, "reading the topic back took over 60 s"
            for records in consumer.poll(timeout_ms=500).values():
                found |= {(r.partition, r.offset, r.value) for r in records}
        return found
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("killed", "throttle"),
    [("controller", None), ("new replica", None), ("controller", "2000000")],
)
def test_every_partition_moves_to_a_new_set_with_a_broker_killed_mid_move(
    cluster, tmp_path, killed, throttle
):
    topic = f"moving-{killed.replace(' ', '-')}{'-throttled' if throttle else ''}"
    controller = controller_of(cluster)
    retired = next(b for b in (1, 2, 3, 4) if b != controller)
    staying = [b for b in (1, 2, 3, 4) if b != retired]
    newcomer = next(b for b in staying if b != controller)
    kept = [b for b in staying if b != newcomer]  # the controller and one more
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client, topic, -1, -1, assignment={p: [retired, *kept] for p in range(PARTITIONS)}
        )
    wait_for_leaders(cluster, topic, PARTITIONS)
    target = {p: [newcomer, *kept] if p % 2 else [*kept, newcomer] for p in range(PARTITIONS)}
    plan = reassignment_file(tmp_path, topic, target)
    producer = AckedProducer(cluster.bootstrap_servers, topic, PARTITIONS, rate=300).start()
    try:
        wait_until(lambda: producer.count() > 1500, 60, "1500 acknowledged messages")
        # the new replica cannot catch up while it is paused: the move stops half-way
        cluster.signal_broker(newcomer, signal.SIGSTOP)
        throttled = ["--throttle", throttle] if throttle else []
        started = reassign(cluster, "--execute", "--reassignment-json-file", str(plan), *throttled)
        assert started.returncode == 0, started.stderr
        assert "Successfully started reassignment of partitions." in started.stdout
        wait_until(
            lambda: all(len(r) == 4 for r in assignment_of(cluster, topic).values()),
            30,
            "the old and new replicas together in the assignment (the move's first step)",
        )
        if killed == "controller":
            cluster.signal_broker(controller, signal.SIGKILL)
            wait_until(
                lambda: controller_of(cluster) not in (controller, -1), 60, "a new controller"
            )
            cluster.signal_broker(newcomer, signal.SIGCONT)
            cluster.start_broker(controller)
        else:
            cluster.signal_broker(newcomer, signal.SIGKILL)
            cluster.start_broker(newcomer)

        def completed() -> bool:
            verified = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
            return verified.stdout.count("completed successfully") == PARTITIONS

        wait_until(completed, 90, "--verify to say every partition completed", interval=1)
        with zookeeper.session(cluster.zookeeper) as client:
            # --verify took the throttle off once every partition completed
            assert "follower.replication.throttled.replicas" not in zookeeper.read_topic_config(
                client, topic
            )
        settled = producer.count()
        wait_until(lambda: producer.count() > settled + 300, 30, "300 more acknowledgements")
    finally:
        producer.stop()

    assert producer.failed == []
    assert assignment_of(cluster, topic) == {p: tuple(r) for p, r in target.items()}
    with zookeeper.session(cluster.zookeeper) as client:
        assert client.exists(zookeeper.REASSIGN_PARTITIONS) is None
    wait_until(
        lambda: not list((cluster.directory / f"broker-{retired}" / "logs").glob(f"{topic}-*")),
        30,
        f"the retired replicas on broker {retired} to be deleted",
    )
    assert set(producer.acked) <= read_back(cluster, topic)
    wait_for_full_isr(cluster, topic)

    def converged() -> bool:
        ends = {
            p: {
                entry["log_end_offset"]
                for b in target[p]
                for entry in (admin(cluster, b, f"/topics/{topic}") or {}).get("partitions", [])
                if entry["partition"] == p and "log_end_offset" in entry
            }
            for p in range(PARTITIONS)
        }
        return all(len(offsets) == 1 for offsets in ends.values())

    wait_until(converged, 30, "every replica of every partition at the same log end offset")


def test_bad_reassignments_are_refused_and_change_nothing(cluster, tmp_path):
    with zookeeper.session(cluster.zookeeper) as client:
        if zookeeper.read_topic(client, "still") is None:
            topics.create_topic(client, "still", 2, 2)
    wait_for_leaders(cluster, "still", 2)
    before = assignment_of(cluster, "still")
    cases = {
        "{not json": "is not JSON",
        json.dumps({"version": 1, "partitions": []}): "is empty",
        json.dumps({"partitions": [{"topic": "still", "partition": 0}]}): "is not",
        json.dumps(
            {"partitions": [{"topic": "still", "partition": 0, "replicas": [1, 9]}]}
        ): "brokers [9] are not registered",
        json.dumps(
            {"partitions": [{"topic": "still", "partition": 7, "replicas": [1, 2]}]}
        ): "non-existent partitions: [still,7]",
        json.dumps(
            {
                "partitions": [
                    {"topic": "still", "partition": 0, "replicas": [1, 2]},
                    {"topic": "still", "partition": 0, "replicas": [3, 4]},
                ]
            }
        ): "duplicate topic partitions: [still,0]",
        json.dumps(
            {"partitions": [{"topic": "still", "partition": 0, "replicas": [3, 3]}]}
        ): "multiple entries for 3",
    }
    for text, said in cases.items():
        plan = tmp_path / "bad.json"
        plan.write_text(text)
        refused = reassign(cluster, "--execute", "--reassignment-json-file", str(plan))
        assert refused.returncode != 0, text
        assert said in refused.stderr, (text, refused.stderr)
    with zookeeper.session(cluster.zookeeper) as client:
        assert client.exists(zookeeper.REASSIGN_PARTITIONS) is None
    assert assignment_of(cluster, "still") == before


def test_a_partition_is_never_moved_twice_at_once(cluster, tmp_path):
    with zookeeper.session(cluster.zookeeper) as client:
        if zookeeper.read_topic(client, "twice") is None:
            topics.create_topic(client, "twice", 1, 2, assignment={0: [1, 2]})
    wait_for_leaders(cluster, "twice", 1)
    controller = controller_of(cluster)
    # onto brokers other than the controller, which may lose its ZooKeeper session while
    # stopped: the move must be accepted, only the second refused
    others = [b for b in (3, 4, 1, 2) if b != controller]
    target = others[:2]
    first = reassignment_file(tmp_path, "twice", {0: target})
    second = tmp_path / "second.json"
    second.write_text(
        json.dumps({"partitions": [{"topic": "twice", "partition": 0, "replicas": [2, 1]}]})
    )
    cluster.signal_broker(controller, signal.SIGSTOP)  # the first move waits for it
    try:
        assert (
            reassign(cluster, "--execute", "--reassignment-json-file", str(first)).returncode == 0
        )
        refused = reassign(cluster, "--execute", "--reassignment-json-file", str(second))
        assert refused.returncode != 0
        assert "a partition reassignment is under way (twice-0)" in refused.stderr
    finally:
        cluster.signal_broker(controller, signal.SIGCONT)

    wait_until(
        lambda: assignment_of(cluster, "twice") == {0: tuple(target)},
        60,
        "the first move to finish",
    )
    verified = reassign(cluster, "--verify", "--reassignment-json-file", str(first))
    assert "Reassignment of partition [twice,0] completed successfully" in verified.stdout


def test_a_throttled_move_keeps_to_its_rate_and_verify_removes_the_throttle(cluster, tmp_path):
    rate = 400_000  # bytes a second, per broker
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "heavy", -1, -1, assignment={0: [1, 2], 1: [2, 1]})
    wait_for_leaders(cluster, "heavy", 2)
    history = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    for n in range(3200):
        history.send("heavy", value=b"%07d" % n + b"x" * 1017, partition=n % 2)
    history.flush(60)
    history.close()
    plan = reassignment_file(tmp_path, "heavy", {0: [3, 4], 1: [4, 3]})
    producer = AckedProducer(cluster.bootstrap_servers, "heavy", 2, rate=100).start()
    try:
        wait_until(lambda: producer.count() > 100, 60, "100 acknowledged messages")
        began = time.monotonic()
        started = reassign(
            cluster, "--execute", "--reassignment-json-file", str(plan), "--throttle", str(rate)
        )
        assert started.returncode == 0, started.stderr
        assert f"The throttle limit was set to {rate} B/s" in started.stdout
        with zookeeper.session(cluster.zookeeper) as client:
            config = zookeeper.read_topic_config(client, "heavy")
        assert config["leader.replication.throttled.replicas"] == "0:1,0:2,1:2,1:1"
        assert config["follower.replication.throttled.replicas"] == "0:3,0:4,1:4,1:3"
        wait_until(
            lambda: assignment_of(cluster, "heavy") == {0: (3, 4), 1: (4, 3)},
            120,
            "the throttled move to finish",
            interval=0.2,
        )
        took = time.monotonic() - began
    finally:
        producer.stop()

    # Each old leader sent its partition's history (1,600 values of 1,024 bytes at least) to
    # both new replicas through its leader quota: a second of credit, and one partition's read
    # (replica.fetch.max.bytes) past it, since the quota is checked before each read. A new
    # replica rejoins once it holds the history, whatever its own quota (Kafka's rules).
    sent = 2 * 1600 * 1024
    least = (sent - BROKER_KEYS["replica.fetch.max.bytes"].default) / rate - 1
    assert took >= least, f"the throttled move took {took:.1f} s, at least {least:.1f} s"
    assert producer.failed == []
    verified = reassign(cluster, "--verify", "--reassignment-json-file", str(plan))
    assert verified.stdout.count("completed successfully") == 2
    assert "Throttle was removed." in verified.stdout
    with zookeeper.session(cluster.zookeeper) as client:
        config = zookeeper.read_topic_config(client, "heavy")
        assert "leader.replication.throttled.replicas" not in config
        for broker_id in (1, 2, 3, 4):
            data = client.exists(zookeeper.broker_config_path(broker_id))
            if data is not None:
                document = zookeeper.parse_entity_config(
                    client.get(zookeeper.broker_config_path(broker_id))[0]
                )
                assert "leader.replication.throttled.rate" not in document
    assert set(producer.acked) <= read_back(cluster, "heavy", 2)


def test_a_reassignment_raises_the_replication_factor(cluster, tmp_path):
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "grows", -1, -1, assignment={0: [2], 1: [3]})
    wait_for_leaders(cluster, "grows", 2)
    plan = reassignment_file(tmp_path, "grows", {0: [2, 3, 4], 1: [3, 4, 1]})

    started = reassign(cluster, "--execute", "--reassignment-json-file", str(plan))

    assert started.returncode == 0, started.stderr
    wait_until(
        lambda: assignment_of(cluster, "grows") == {0: (2, 3, 4), 1: (3, 4, 1)},
        60,
        "replication factor 3",
    )
    wait_for_full_isr(cluster, "grows")
