"""Consumer groups with real clients: kafka-python, confluent-kafka (librdkafka) and kcat -G.

Each test uses a group and topics of its own on the shared three-broker cluster; the group's
coordinator is the leader of its ``__consumer_offsets`` partition, created on first use.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
import traceback

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import ConsumerGroupState
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.integration.conftest import admin, codecs_on_disk
from tidelog.cluster.local import wait_until
from tidelog.coordinator.records import OFFSETS_TOPIC, partition_for

_groups = itertools.count()


def new_group() -> str:
    return f"group-{next(_groups)}-{time.monotonic_ns()}"


def produce(cluster, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all")
    try:
        for value in values:
            producer.send(topic, key=value, value=value)
        producer.flush(timeout=30)
    finally:
        producer.close()


def kafka_python_consumer(cluster, group: str, topic: str, **settings) -> KafkaConsumer:
    """A kafka-python consumer in ``group`` with the API versions it detects itself."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **settings,
    )
    consumer.subscribe([topic])
    return consumer


def poll_values(consumer: KafkaConsumer, count: int, timeout: float = 60) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < count:
        assert time.monotonic() < deadline, f"consumed only {len(values)} of {count} messages"
        for batch in consumer.poll(timeout_ms=500).values():
            values += [record.value for record in batch]
    return values


def values(prefix: str, count: int, start: int = 0) -> list[bytes]:
    return [f"{prefix}-{n:04d}".encode() for n in range(start, start + count)]


# -- kafka-python ----------------------------------------------------------------------------------


def test_kafka_python_group_commits_and_a_restarted_consumer_resumes_after_the_commit(
    cluster, new_topic
):
    topic, group = new_topic(partitions=3), new_group()
    produce(cluster, topic, values("first", 30))

    consumer = kafka_python_consumer(cluster, group, topic, enable_auto_commit=False)
    try:
        assert sorted(poll_values(consumer, 30)) == values("first", 30)
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(3)}
    finally:
        consumer.close()
    assert sum(committed.values()) == 30

    produce(cluster, topic, values("second", 12))
    restarted = kafka_python_consumer(cluster, group, topic, enable_auto_commit=False)
    try:
        assert sorted(poll_values(restarted, 12)) == values("second", 12)
        assert not any(restarted.poll(timeout_ms=1000).values())  # nothing read twice
    finally:
        restarted.close()


class PollingConsumer:
    """A kafka-python consumer polled in a thread of its own, as an application runs one (a
    member rejoins a rebalance only from its poll, so two members polled by one thread would
    wait on each other)."""

    def __init__(self, cluster, group: str, topic: str) -> None:
        # metadata read every second (kafka-python: every 5 minutes): a group leader whose
        # metadata did not have the topic yet assigns nothing, and the group rebalances only
        # once its metadata shows the partitions
        self.consumer = kafka_python_consumer(cluster, group, topic, metadata_max_age_ms=1000)
        self.values: list[bytes] = []
        self.assignment: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for batch in self.consumer.poll(timeout_ms=200).values():
                self.values += [record.value for record in batch]
            self.assignment = {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.close()

    def stuck_where(self) -> str:
        """Where this consumer's polling thread and kafka-python's own threads (its IO loops,
        any heartbeat thread) are now: a CI run found a member that sent neither a heartbeat
        nor a join for a minute after its generation became stable, the brokers' coordinator
        expiring it on time, and its test thread never saw an assignment (its poll not
        returning, or returning with none: not known yet)."""
        frames = sys._current_frames()
        named = {t.ident: t.name for t in threading.enumerate()}
        wanted = [self._thread.ident] + [
            ident
            for ident, name in named.items()
            if name.startswith("kafka-io") or "heartbeat" in name.lower()
        ]
        return "".join(
            f"\n-- thread {named.get(ident)}:\n" + "".join(traceback.format_stack(frames[ident]))
            for ident in wanted
            if ident in frames
        )


def test_two_kafka_python_consumers_split_the_partitions_and_one_takes_all_when_the_other_stops(
    cluster, new_topic
):
    topic, group = new_topic(partitions=4), new_group()
    first = PollingConsumer(cluster, group, topic)
    second = PollingConsumer(cluster, group, topic)

    def held() -> str:
        return (
            f"the first holding {first.assignment or '{}'}, the second {second.assignment or '{}'}"
            f"; the first consumer's threads:{first.stuck_where()}"
        )

    try:

        def split() -> bool:
            a, b = first.assignment, second.assignment
            return len(a) == 2 and len(b) == 2 and not a & b

        wait_until(split, 60, "the two consumers to hold two partitions each", state=held)
        second.close()
        wait_until(
            lambda: first.assignment == {0, 1, 2, 3},
            60,
            "the remaining consumer to take all four partitions",
            state=held,
        )
        produce(cluster, topic, values("after", 20))
        wait_until(lambda: len(first.values) >= 20, 60, "the remaining consumer to read 20")
        assert sorted(first.values) == values("after", 20)
    finally:
        first.close()


# -- where a group lives --------------------------------------------------------------------------


def test_the_offsets_topic_is_compacted_internal_and_leads_the_group(cluster, new_topic):
    topic, group = new_topic(), new_group()
    produce(cluster, topic, values("x", 3))
    consumer = kafka_python_consumer(cluster, group, topic, enable_auto_commit=False)
    try:
        poll_values(consumer, 3)
        consumer.commit()
    finally:
        consumer.close()

    described = admin(cluster, 1, f"/topics/{OFFSETS_TOPIC}")
    assert len(described["partitions"]) == 50
    assert described["config"]["cleanup.policy"] == "compact"
    partition = described["partitions"][partition_for(group, 50)]
    assert len(partition["replicas"]) == 3


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------


def confluent_consumer(cluster, group: str, **settings) -> ConfluentConsumer:
    return ConfluentConsumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            **settings,
        }
    )


def confluent_values(consumer: ConfluentConsumer, count: int, timeout: float = 60) -> list[bytes]:
    found: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"consumed only {len(found)} of {count} messages"
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        found.append(message.value())
    return found


@pytest.mark.parametrize("commit", ["auto", "manual"])
def test_confluent_consumer_commits_and_resumes_after_its_last_commit(cluster, new_topic, commit):
    topic, group = new_topic(partitions=3), new_group()
    produce(cluster, topic, values("first", 30))
    settings = (
        {"enable.auto.commit": True, "auto.commit.interval.ms": 200}
        if commit == "auto"
        else {"enable.auto.commit": False}
    )

    consumer = confluent_consumer(cluster, group, **settings)
    consumer.subscribe([topic])
    try:
        assert sorted(confluent_values(consumer, 30)) == values("first", 30)
        if commit == "manual":
            consumer.commit(asynchronous=False)
        else:

            def all_committed() -> bool:
                wanted = [ConfluentPartition(topic, p) for p in range(3)]
                offsets = consumer.committed(wanted, timeout=10)
                return sum(max(tp.offset, 0) for tp in offsets) == 30

            wait_until(all_committed, 30, "the auto-commit of all 30 offsets")
    finally:
        consumer.close()  # also commits, with auto-commit

    produce(cluster, topic, values("second", 9))
    restarted = confluent_consumer(cluster, group, **settings)
    restarted.subscribe([topic])
    try:
        assert sorted(confluent_values(restarted, 9)) == values("second", 9)
        assert restarted.poll(1.0) is None  # nothing read twice
    finally:
        restarted.close()


# -- kcat -G ---------------------------------------------------------------------------------------


def test_kcat_balanced_consumer_reads_every_partition_and_commits(cluster, new_topic):
    topic, group = new_topic(partitions=3), new_group()
    produce(cluster, topic, values("kcat", 30))

    result = subprocess.run(
        ["kcat", "-b", cluster.bootstrap_servers, "-G", group, "-c", "30", "-f", "%s\\n",
         "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", topic],
        capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == [v.decode() for v in values("kcat", 30)]
    consumer = confluent_consumer(cluster, group)
    try:
        offsets = consumer.committed([ConfluentPartition(topic, p) for p in range(3)], timeout=10)
    finally:
        consumer.close()
    assert sum(max(tp.offset, 0) for tp in offsets) == 30


# -- librdkafka stores lz4 now that it sees GroupCoordinator ---------------------------------------


@pytest.mark.parametrize("client", ["kcat", "confluent-kafka"])
def test_librdkafka_with_default_settings_stores_lz4_as_lz4(cluster, new_topic, client):
    topic = new_topic()
    # Values that compress even alone: librdkafka sends a batch uncompressed when lz4 would make
    # it larger, as it does for a batch of one short message, and how the 50 lines fall into
    # batches depends on timing.
    lines = [f"key-{n}:value-{n}-{'x' * 200}" for n in range(50)]
    if client == "kcat":
        result = subprocess.run(
            ["kcat", "-b", cluster.bootstrap_servers, "-P", "-t", topic, "-K:", "-z", "lz4"],
            input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    else:
        producer = ConfluentProducer(
            {"bootstrap.servers": cluster.bootstrap_servers, "compression.type": "lz4"}
        )
        for line in lines:
            key, _, value = line.partition(":")
            producer.produce(topic, key=key.encode(), value=value.encode())
        assert producer.flush(30) == 0

    wait_until(lambda: codecs_on_disk(cluster, topic), 10, f"{topic}-0 to hold messages")
    assert codecs_on_disk(cluster, topic) == {"lz4"}


def test_confluent_admin_client_lists_and_describes_a_stable_group(cluster, new_topic):
    topic, group = new_topic(partitions=2), new_group()
    produce(cluster, topic, values("described", 4))
    consumer = confluent_consumer(cluster, group)
    consumer.subscribe([topic])
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    try:
        confluent_values(consumer, 4)
        listed = client.list_consumer_groups(request_timeout=10).result(timeout=30)
        assert group in {g.group_id for g in listed.valid}

        described = client.describe_consumer_groups([group], request_timeout=10)[group]
        description = described.result(timeout=30)
        assert description.state == ConsumerGroupState.STABLE
        assert description.partition_assignor == "range"
        (member,) = description.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
    finally:
        consumer.close()
