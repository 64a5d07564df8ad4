"""Idempotent producers (KIP-98) on real brokers of release 2.1: producer ids from ZooKeeper
blocks, a retried batch answered with its first offset on the leader, after a clean restart
(its snapshot), after a SIGKILL (rebuilt from the log) and on a new leader (kept from what it
fetched), UNKNOWN_PRODUCER_ID once retention took a producer's last batch (librdkafka starts
over; kafka-python 3.0 sees it as retention's but its retried batch fails), and librdkafka
and kafka-python producers under leader SIGKILLs that lose, repeat and reorder nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError, UnknownProducerIdError

from tests.integration.acked_producer import AckedProducer
from tests.integration.conftest import wait_for_leaders
from tests.integration.test_bad_input import connect, request
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.protocol.schemas import ApiKey
from tidelog.records.record_batch import BatchRecordInput, encode_batch, read_header

_names = iter(range(1_000_000))
OVERRIDES = {
    "broker.protocol.max.version": "2.1",
    "inter.broker.protocol.version": "2.1",
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "500",
    "log.retention.check.interval.ms": "300",
    "producer.id.expiration.check.interval.ms": "300",
}
WEEK_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms's default


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("idempotence"))
    local.up(3, overrides=OVERRIDES, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


def new_topic(cluster: LocalCluster, partitions: int = 1, replicas: int = 3, **config) -> str:
    name = f"idem-{next(_names)}"
    settings = {"message.format.version": "2.1", "min.insync.replicas": str(min(replicas, 2))}
    settings.update({key.replace("_", "."): value for key, value in config.items()})
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, partitions, replicas, settings)
    wait_for_leaders(cluster, name, partitions)
    faults.wait_for_full_isr(cluster, name)
    return name


def leader_of(cluster: LocalCluster, topic: str, partition: int = 0) -> int:
    return faults._state(cluster, topic, partition).leader


def init_producer_id(cluster: LocalCluster, broker_id: int, transactional_id=None) -> dict:
    with connect(cluster, broker_id) as connection:
        body = {"transactional_id": transactional_id, "transaction_timeout_ms": 60000}
        return request(connection, ApiKey.INIT_PRODUCER_ID, 1, body)


def produce(
    cluster: LocalCluster, topic: str, producer: tuple[int, int], sequence: int, age_ms: int = 0
) -> dict:
    """One batch of two records from ``producer`` (id, epoch) at ``sequence``, acks=all, to
    the leader, timestamped ``age_ms`` ago; its partition's answer."""
    at = int(time.time() * 1000) - age_ms
    records = encode_batch(
        [BatchRecordInput(b"k", b"m-%d" % (sequence + n), at) for n in (0, 1)],
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=sequence,
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10000,
        "topic_data": [{"topic": topic, "data": [{"partition": 0, "record_set": records}]}],
    }
    with connect(cluster, leader_of(cluster, topic)) as connection:
        answer = request(connection, ApiKey.PRODUCE, 7, body)
    return answer["responses"][0]["partition_responses"][0]


def offset_of(answer: dict) -> int:
    assert answer["error_code"] == 0, ErrorCode(answer["error_code"]).name
    return answer["base_offset"]


def test_producer_ids_come_from_blocks_taken_in_zookeeper(cluster):
    first = init_producer_id(cluster, 1)
    second = init_producer_id(cluster, 1)
    other = init_producer_id(cluster, 2)

    assert first["error_code"] == second["error_code"] == other["error_code"] == 0
    assert second["producer_id"] == first["producer_id"] + 1
    assert first["producer_epoch"] == 0
    # each broker has a block of its own
    assert abs(other["producer_id"] - first["producer_id"]) >= 1000
    with zookeeper.session(cluster.zookeeper) as client:
        block = json.loads(client.get("/latest_producer_id_block")[0])
    assert block["version"] == 1 and block["broker"] in (1, 2)
    assert int(block["block_end"]) - int(block["block_start"]) == 999


def test_a_transactional_id_is_refused_as_not_authorized(cluster):
    answer = init_producer_id(cluster, 1, transactional_id="tx-1")
    assert answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def snapshots(cluster: LocalCluster, broker_id: int, topic: str) -> list[int]:
    directory = next(Path(cluster.directory).glob(f"broker-{broker_id}/logs/{topic}-0"))
    return sorted(int(path.name.split(".")[0]) for path in directory.glob("*.snapshot"))


def test_a_retry_is_answered_with_its_first_offset_across_restarts_and_a_leader_change(cluster):
    topic = new_topic(cluster, replicas=1)
    broker = leader_of(cluster, topic)
    answer = init_producer_id(cluster, broker)
    producer = (answer["producer_id"], answer["producer_epoch"])
    assert offset_of(produce(cluster, topic, producer, 0)) == 0
    assert offset_of(produce(cluster, topic, producer, 2)) == 2
    assert offset_of(produce(cluster, topic, producer, 2)) == 2  # a duplicate: not appended

    cluster.stop_broker(broker)  # a clean shutdown: a snapshot at the log end
    assert snapshots(cluster, broker, topic)[-1] == 4
    cluster.start_broker(broker)
    wait_for_leaders(cluster, topic, 1)
    assert offset_of(produce(cluster, topic, producer, 2)) == 2
    assert offset_of(produce(cluster, topic, producer, 4)) == 4

    cluster.signal_broker(broker, signal.SIGKILL)  # no snapshot of offset 4: rebuilt from the log
    cluster.start_broker(broker)
    wait_for_leaders(cluster, topic, 1)
    assert offset_of(produce(cluster, topic, producer, 4)) == 4
    assert offset_of(produce(cluster, topic, producer, 6)) == 6
    assert produce(cluster, topic, producer, 10)["error_code"] == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    assert produce(cluster, topic, (producer[0], -1), 8)["error_code"] == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert produce(cluster, topic, producer, -1)["error_code"] == ErrorCode.CORRUPT_MESSAGE


def test_a_new_leader_knows_the_batches_it_replicated(cluster):
    topic = new_topic(cluster)
    old_leader = leader_of(cluster, topic)
    answer = init_producer_id(cluster, old_leader)
    producer = (answer["producer_id"], answer["producer_epoch"])
    assert offset_of(produce(cluster, topic, producer, 0)) == 0
    assert offset_of(produce(cluster, topic, producer, 2)) == 2

    cluster.signal_broker(old_leader, signal.SIGKILL)
    try:
        faults.wait_until_leader(cluster, topic, lambda leader: leader not in (old_leader, -1))
        wait_until(
            lambda: produce(cluster, topic, producer, 2)["error_code"] == 0,
            30,
            "the new leader to take produce requests",
        )
        assert offset_of(produce(cluster, topic, producer, 2)) == 2
        assert offset_of(produce(cluster, topic, producer, 4)) == 4
    finally:
        cluster.start_broker(old_leader)
    faults.wait_for_full_isr(cluster, topic)


def test_unknown_producer_id_once_retention_took_the_last_batch_and_librdkafka_recovers(cluster):
    topic = new_topic(cluster, replicas=1, retention_ms="1500")
    broker = leader_of(cluster, topic)
    answer = init_producer_id(cluster, broker)
    producer = (answer["producer_id"], answer["producer_epoch"])
    assert offset_of(produce(cluster, topic, producer, 0)) == 0
    librdkafka = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True}
    )
    failed: list = []
    librdkafka.produce(topic, b"first", partition=0, on_delivery=lambda e, _: failed.append(e))
    assert librdkafka.flush(30) == 0

    wait_until(
        lambda: produce_start(cluster, topic) >= 3, 30, f"retention to delete {topic}'s records"
    )

    refused = produce(cluster, topic, producer, 2)
    assert refused["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
    assert refused["log_start_offset"] >= 3  # above the producer's last offset: its state went
    librdkafka.produce(topic, b"second", partition=0, on_delivery=lambda e, _: failed.append(e))
    assert librdkafka.flush(30) == 0
    assert failed == [None, None]
    # librdkafka was refused too (its last batch went with the same segments), and started over
    refusals = cluster.broker(broker).log_path.read_text().count("UNKNOWN_PRODUCER_ID")
    assert refusals >= 2


def test_kafka_python_takes_the_refusal_for_retention_and_its_batch_fails_not_lost(cluster, caplog):
    """kafka-python 3.0's sender (its KAFKA-5793 branch): UNKNOWN_PRODUCER_ID with a log start
    offset above the last offset it had acknowledged means retention took its state, not its
    data, and it sets the partition's sequence back to 0. Unlike the Java producer it does not
    renumber the batch it retries (that batch keeps sequence 1, which Kafka 2.1 refuses as
    this broker does; Kafka 2.5+ would take it, KIP-360), so the batch is refused until
    delivery_timeout_ms fails it: reported to the application, never written."""
    topic = new_topic(cluster, replicas=1, retention_ms="1500")
    broker = leader_of(cluster, topic)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        acks="all",
        request_timeout_ms=2000,
        delivery_timeout_ms=4000,
    )
    try:
        assert producer.config["enable_idempotence"]
        first = producer.send(topic, b"first", partition=0).get(30)
        wait_until(
            lambda: produce_start(cluster, topic) > first.offset,
            30,
            f"retention to delete {topic}'s records",
        )
        with caplog.at_level("WARNING", logger="kafka.producer.sender"):
            refused = producer.send(topic, b"second", partition=0)
            # failed by the sender at the deadline, or expired waiting for its next retry
            with pytest.raises((UnknownProducerIdError, KafkaTimeoutError)):
                refused.get(30)
    finally:
        producer.close(0)

    taken_for_retention = (
        f"UnknownProducerIdError for TopicPartition(topic='{topic}', partition=0) appears to "
        f"be retention-based (log_start_offset={first.offset + 1}, "
        f"last_acked_offset={first.offset})"
    )
    assert taken_for_retention in caplog.text
    assert produce_start(cluster, topic) == first.offset + 1  # nothing of it was written
    with connect(cluster, broker) as connection:
        body = {
            "replica_id": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "timestamp": -1}]}],
        }
        answer = request(connection, ApiKey.LIST_OFFSETS, 1, body)
    assert answer["responses"][0]["partition_responses"][0]["offset"] == first.offset + 1


def test_a_producer_idle_past_transactional_id_expiration_ms_is_forgotten(cluster):
    topic = new_topic(cluster, replicas=1, retention_ms="-1")  # the batch stays: only expiry
    broker = leader_of(cluster, topic)
    answer = init_producer_id(cluster, broker)
    producer = (answer["producer_id"], answer["producer_epoch"])
    # expiry goes by the producer's last batch's timestamp: one a week and a minute old
    assert offset_of(produce(cluster, topic, producer, 0, age_ms=WEEK_MS + 60000)) == 0

    wait_until(
        lambda: f"{topic}-0: 1 producer ids expired" in cluster.broker(broker).log_path.read_text(),
        30,
        f"broker {broker} to expire the producer of {topic}",
    )
    assert produce(cluster, topic, producer, 2)["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID


def produce_start(cluster: LocalCluster, topic: str) -> int:
    """The log start offset of partition 0 (ListOffsets v1, earliest)."""
    body = {
        "replica_id": -1,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "timestamp": -2}]}],
    }
    with connect(cluster, leader_of(cluster, topic)) as connection:
        answer = request(connection, ApiKey.LIST_OFFSETS, 1, body)
    return answer["responses"][0]["partition_responses"][0]["offset"]


def test_tidelogs_perf_producer_sends_each_partition_one_unbroken_sequence(cluster):
    topic = new_topic(cluster, partitions=3)
    settings = ProducerSettings(
        topic, 3000, 100, acks=-1, batch_size=2000, message_format=2, idempotent=True
    )

    summary, errors = asyncio.run(
        run_producer(cluster.bootstrap_servers, settings, progress=lambda _: None)
    )

    assert errors == {} and summary.records == 3000
    for partition in range(3):
        path = next(
            Path(cluster.directory).glob(
                f"broker-{leader_of(cluster, topic, partition)}/logs/{topic}-{partition}"
            )
        )
        headers = [
            read_header(data, position)
            for segment in sorted(path.glob("*.log"))
            for data in [segment.read_bytes()]
            for position in batch_positions(data)
        ]
        assert len({h.producer_id for h in headers}) == 1 and headers[0].producer_id >= 0
        assert [h.base_sequence for h in headers] == [h.base_offset for h in headers]


def batch_positions(data: bytes) -> list[int]:
    positions, position = [], 0
    while position + 12 <= len(data):
        positions.append(position)
        position += 12 + struct.unpack_from(">i", data, position + 8)[0]
    return positions


class KafkaPythonProducer:
    """kafka-python 3 (idempotent on its own against 2.1) sending numbered messages
    round-robin over the partitions from a thread; ``acked`` as AckedProducer's."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int, rate: int) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
        assert self.producer.config["enable_idempotence"]
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sent, started = 0, time.monotonic()
        while not self._stop.is_set():
            pause = started + sent / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, 0.05))
                continue
            value = b"%08d" % sent
            future = self.producer.send(self.topic, value, partition=sent % self.partitions)
            future.add_callback(lambda m, v=value: self.acked.append((m.partition, m.offset, v)))
            future.add_errback(lambda e: self.failed.append(repr(e)))
            sent += 1
        self.producer.flush(60)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)
        self.producer.close(10)


def read_back(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
        }
    )
    ends = {
        p: consumer.get_watermark_offsets(ConfluentPartition(topic, p))[1]
        for p in range(partitions)
    }
    consumer.assign([ConfluentPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    while any(len(got[p]) < ends[p] for p in got) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got[message.partition()].append(message.value())
    consumer.close()
    return got


def assert_exactly_once_in_order(acked, got: dict[int, list[bytes]]) -> None:
    for partition, values in got.items():
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        assert values == sorted(values), f"partition {partition} out of order"
        wanted = {v for p, _, v in acked if p == partition}
        assert wanted <= set(values), f"partition {partition} lost {sorted(wanted - set(values))}"


def test_idempotent_clients_lose_repeat_and_reorder_nothing_under_leader_sigkills(cluster):
    partitions = 3
    first, second = new_topic(cluster, partitions), new_topic(cluster, partitions)
    librdkafka = AckedProducer(
        cluster.bootstrap_servers,
        first,
        partitions,
        rate=150,
        extra={"enable.idempotence": True, "linger.ms": 5},
    ).start()
    kafka_python = KafkaPythonProducer(cluster.bootstrap_servers, second, partitions, rate=150)

    def both_acknowledge_another(count: int) -> None:
        wanted = (len(librdkafka.acked) + count, len(kafka_python.acked) + count)
        wait_until(
            lambda: len(librdkafka.acked) >= wanted[0] and len(kafka_python.acked) >= wanted[1],
            60,
            f"both producers to have {count} more messages acknowledged",
        )

    try:
        for partition in (0, 1):
            both_acknowledge_another(150)
            leader = leader_of(cluster, first, partition)
            cluster.signal_broker(leader, signal.SIGKILL)
            faults.wait_until_leader(
                cluster, first, lambda now, gone=leader: now not in (gone, -1), partition=partition
            )
            cluster.start_broker(leader)
            faults.wait_for_full_isr(cluster, first)
            faults.wait_for_full_isr(cluster, second)
        both_acknowledge_another(150)
    finally:
        librdkafka.stop()
        kafka_python.stop()

    assert librdkafka.failed == [] and kafka_python.failed == []
    assert len(librdkafka.acked) > 300 and len(kafka_python.acked) > 300
    assert_exactly_once_in_order(librdkafka.acked, read_back(cluster, first, partitions))
    assert_exactly_once_in_order(kafka_python.acked, read_back(cluster, second, partitions))
