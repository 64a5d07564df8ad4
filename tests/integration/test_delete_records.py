"""DeleteRecords on brokers of Kafka 2.1's protocol: the leader moves its log start, every
replica's follows through the replica fetch, and the answer waits for them; consumers then
start at the new log start, fetches below it are out of range, retention deletes the segments
below it, and a leader change or a restart keeps it. Through kafka-python's
KafkaAdminClient.delete_records, confluent-kafka's AdminClient.delete_records,
kafka-delete-records.sh and request by request for the errors Kafka 2.1 gives.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors

from tests.integration.conftest import RELEASE_2_1, admin, wait_for_leaders
from tests.integration.test_admin_2_1 import wait_until
from tests.integration.test_bad_input import closed_by_broker, connect, request, still_serves
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.frames import encode_request
from tidelog.protocol.schemas import ApiKey

REPO = Path(__file__).resolve().parents[2]
_names = itertools.count()

# format v2 (kafka-python 3 produces idempotently); retention runs every second, so that the
# segments below a new log start go within a test
SETTINGS = {
    **RELEASE_2_1,
    "log.message.format.version": "2.1",
    "log.retention.check.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("delete-records"))
    local.up(3, overrides=SETTINGS, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(f"127.0.0.1:{cluster.broker(b).port}" for b in cluster.broker_ids)


def new_topic(cluster: LocalCluster, **config: str) -> str:
    """A topic of one partition on all three brokers, in small segments."""
    name = f"delrec-{next(_names)}"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, 1, 3, {"segment.bytes": "400", **config})
    wait_for_leaders(cluster, name, 1)
    return name


def produce(cluster: LocalCluster, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0)
    try:
        for n in range(count):
            producer.send(topic, f"record-{n}".encode(), partition=0).get(timeout=30)
    finally:
        producer.close()


def partition_on(cluster: LocalCluster, broker_id: int, topic: str) -> dict:
    described = admin(cluster, broker_id, f"/topics/{topic}")
    assert described is not None, f"broker {broker_id} does not know {topic}"
    return described["partitions"][0]


def log_starts(cluster: LocalCluster, topic: str) -> dict[int, int]:
    """Each broker's log start offset of the topic's partition 0, as its own log holds it."""
    return {b: partition_on(cluster, b, topic)["log_start_offset"] for b in cluster.broker_ids}


def leader_of(cluster: LocalCluster, topic: str) -> int:
    return partition_on(cluster, cluster.broker_ids[0], topic)["leader"]


def earliest(cluster: LocalCluster, topic: str, broker_id: int) -> tuple[int, int]:
    """ListOffsets v1 earliest from ``broker_id``: (error code, offset)."""
    with connect(cluster, broker_id) as connection:
        answer = request(
            connection,
            ApiKey.LIST_OFFSETS,
            1,
            {
                "replica_id": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "timestamp": -2}]}],
            },
        )
    (partition,) = answer["responses"][0]["partition_responses"]
    return partition["error_code"], partition["offset"]


def fetch_error_at(cluster: LocalCluster, topic: str, offset: int) -> int:
    """The error code of a consumer's Fetch v4 of ``offset`` from the leader."""
    with connect(cluster, leader_of(cluster, topic)) as connection:
        answer = request(
            connection,
            ApiKey.FETCH,
            4,
            {
                "replica_id": -1,
                "max_wait_time": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": offset, "max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        )
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def delete_records(
    cluster: LocalCluster,
    broker_id: int,
    version: int,
    wanted: dict[tuple[str, int], int],
    timeout: int = 5000,
) -> dict[tuple[str, int], tuple[int, int]]:
    """A DeleteRecords request to ``broker_id``: (error code, low watermark) per partition."""
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), offset in wanted.items():
        by_topic.setdefault(topic, []).append({"partition": partition, "offset": offset})
    with connect(cluster, broker_id) as connection:
        answer = request(
            connection,
            ApiKey.DELETE_RECORDS,
            version,
            {
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
                "timeout": timeout,
            },
        )
    assert answer["throttle_time_ms"] == 0
    return {
        (t["topic"], p["partition"]): (p["error_code"], p["low_watermark"])
        for t in answer["topics"]
        for p in t["partitions"]
    }


def first_offset_consumed(cluster: LocalCluster, topic: str) -> int:
    """The offset of the first record a new kafka-python consumer reads from the earliest."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(cluster), auto_offset_reset="earliest", enable_auto_commit=False
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        for _ in range(30):
            batches = consumer.poll(timeout_ms=1000)
            for records in batches.values():
                return records[0].offset
        raise AssertionError(f"nothing consumed from {topic}")
    finally:
        consumer.close()


def no_segment_below(cluster: LocalCluster, topic: str, offset: int) -> bool:
    """Whether every broker's log of the topic has lost the segments wholly below ``offset``."""
    return all(
        all(s["next_offset"] > offset for s in partition_on(cluster, b, topic)["segments"])
        for b in cluster.broker_ids
    )


# -- through the clients -------------------------------------------------------------------------


def test_kafka_python_deletes_below_an_offset_and_every_replica_follows(cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 30)
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        answer = client.delete_records({TopicPartition(topic, 0): 12}, timeout_ms=10000)
    finally:
        client.close()
    # answered once every live replica's log start reached the offset: the low watermark
    assert answer[TopicPartition(topic, 0)]["low_watermark"] == 12
    assert log_starts(cluster, topic) == {1: 12, 2: 12, 3: 12}
    assert earliest(cluster, topic, leader_of(cluster, topic)) == (0, 12)
    assert first_offset_consumed(cluster, topic) == 12
    assert fetch_error_at(cluster, topic, 11) == 1  # OFFSET_OUT_OF_RANGE below the log start
    assert fetch_error_at(cluster, topic, 12) == 0
    # the retention pass deletes the segments wholly below it, on the leader and followers
    wait_until(
        f"the segments of {topic} below 12 deleted", lambda: no_segment_below(cluster, topic, 12)
    )
    assert log_starts(cluster, topic) == {1: 12, 2: 12, 3: 12}


def test_confluent_deletes_up_to_the_high_watermark(cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 20)
    client = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    futures = client.delete_records([ConfluentPartition(topic, 0, -1)], operation_timeout=10)
    (deleted,) = [future.result(timeout=30) for future in futures.values()]
    assert deleted.low_watermark == 20  # -1: the high watermark
    assert log_starts(cluster, topic) == {1: 20, 2: 20, 3: 20}
    produce(cluster, topic, 3)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(cluster),
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([ConfluentPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        message = None
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        assert (message.offset(), message.value()) == (20, b"record-0")
    finally:
        consumer.close()


# -- a leader change and a restart keep the new log start ---------------------------------------


def test_the_log_start_survives_a_leader_change_and_a_restart(cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 25)
    old_leader = leader_of(cluster, topic)
    assert delete_records(cluster, old_leader, 1, {(topic, 0): 9}) == {(topic, 0): (0, 9)}
    cluster.stop_broker(old_leader)  # clean: the checkpoint is written
    try:
        wait_until(
            f"a new leader of {topic}",
            lambda: leader_of_among(cluster, topic, old_leader) not in (-1, old_leader),
        )
        new_leader = leader_of_among(cluster, topic, old_leader)
        assert earliest(cluster, topic, new_leader) == (0, 9)
        assert first_offset_consumed(cluster, topic) == 9
    finally:
        cluster.start_broker(old_leader)
    # the restarted broker read its log start from its checkpoint
    assert partition_on(cluster, old_leader, topic)["log_start_offset"] == 9
    wait_until(
        f"broker {old_leader} back in the ISR of {topic}",
        lambda: sorted(partition_on(cluster, new_leader, topic)["isr"]) == [1, 2, 3],
    )
    assert log_starts(cluster, topic) == {1: 9, 2: 9, 3: 9}


def leader_of_among(cluster: LocalCluster, topic: str, stopped: int) -> int:
    asked = next(b for b in cluster.broker_ids if b != stopped)
    return partition_on(cluster, asked, topic)["leader"]


# -- what Kafka 2.1 refuses ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_errors_kafka_gives_on_each_version(cluster, version):
    topic = new_topic(cluster)
    compacted = new_topic(cluster, **{"cleanup.policy": "compact"})
    produce(cluster, topic, 5)
    leader = leader_of(cluster, topic)
    answer = delete_records(
        cluster,
        leader,
        version,
        {
            (topic, 0): 6,  # above the high watermark 5
            (topic, 7): 1,  # no such partition
            (f"no-such-{topic}", 0): 1,
        },
    )
    assert answer == {
        (topic, 0): (1, -1),  # OFFSET_OUT_OF_RANGE
        (topic, 7): (3, -1),  # UNKNOWN_TOPIC_OR_PARTITION
        (f"no-such-{topic}", 0): (3, -1),
    }
    assert delete_records(cluster, leader, version, {(topic, 0): -2}) == {(topic, 0): (1, -1)}
    follower = next(b for b in cluster.broker_ids if b != leader)
    assert delete_records(cluster, follower, version, {(topic, 0): 2}) == {(topic, 0): (6, -1)}
    compacted_leader = leader_of(cluster, compacted)
    assert delete_records(cluster, compacted_leader, version, {(compacted, 0): 0}) == {
        (compacted, 0): (44, -1)  # POLICY_VIOLATION
    }
    # none of them moved the log start; an offset at or below it answers at once
    assert log_starts(cluster, topic) == {1: 0, 2: 0, 3: 0}
    assert delete_records(cluster, leader, version, {(topic, 0): 0}) == {(topic, 0): (0, 0)}


def test_a_follower_that_does_not_fetch_makes_it_time_out(cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 10)
    leader = leader_of(cluster, topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    cluster.signal_broker(follower, signal.SIGSTOP)
    try:
        answer = delete_records(cluster, leader, 1, {(topic, 0): 4}, timeout=300)
    finally:
        cluster.signal_broker(follower, signal.SIGCONT)
    assert answer == {(topic, 0): (7, -1)}  # REQUEST_TIMED_OUT
    # the leader moved its log start all the same, and the follower takes it once it fetches
    assert partition_on(cluster, leader, topic)["log_start_offset"] == 4
    wait_until(
        f"broker {follower}'s log start of {topic} at 4",
        lambda: partition_on(cluster, follower, topic)["log_start_offset"] == 4,
    )
    assert delete_records(cluster, leader, 0, {(topic, 0): 4}) == {(topic, 0): (0, 4)}


@pytest.mark.parametrize("version", [0, 1])
def test_a_cut_short_or_longer_request_closes_only_its_connection(cluster, version):
    body = {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 1}]}],
        "timeout": 10,
    }
    whole = encode_request(ApiKey.DELETE_RECORDS, version, 1, "probe", body)[4:]
    for broken in (whole[:-1], whole + b"\x00"):
        with connect(cluster) as connection:
            connection.sendall(len(broken).to_bytes(4, "big") + broken)
            assert closed_by_broker(connection)
    assert still_serves(cluster)


def test_kafka_python_raises_kafkas_error(cluster):
    topic = new_topic(cluster)
    produce(cluster, topic, 3)
    client = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    try:
        with pytest.raises(kafka_errors.OffsetOutOfRangeError):
            client.delete_records({TopicPartition(topic, 0): 4}, timeout_ms=5000)
    finally:
        client.close()


# -- kafka-delete-records.sh --------------------------------------------------------------------


def run_tool(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(REPO / "bin" / "kafka-delete-records.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_kafka_delete_records_sh_prints_kafkas_lines(cluster, tmp_path):
    topic = new_topic(cluster)
    produce(cluster, topic, 8)
    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 5},
                    {"topic": topic, "partition": 3, "offset": 1},
                ],
                "version": 1,
            }
        )
    )
    done = run_tool("--bootstrap-server", bootstrap(cluster), "--offset-json-file", str(plan))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "Executing records delete operation",
        "Records delete operation completed:",
        f"partition: {topic}-0\tlow_watermark: 5",
    ]
    assert lines[3].startswith(f"partition: {topic}-3\terror: ")
    assert log_starts(cluster, topic) == {1: 5, 2: 5, 3: 5}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "The input string is not a valid JSON"),
        ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
        ('{"version": 1}', "Missing partitions field"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
            ' {"topic": "a", "partition": 0, "offset": 2}]}',
            "Offset json file contains duplicate topic partitions: a-0",
        ),
        (
            '{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}',
            '"partition" is an integer',
        ),
    ],
)
def test_kafka_delete_records_sh_refuses_a_bad_file_by_name(cluster, tmp_path, content, message):
    plan = tmp_path / "offsets.json"
    plan.write_text(content)
    done = run_tool("--bootstrap-server", bootstrap(cluster), "--offset-json-file", str(plan))
    assert done.returncode == 1
    assert message in done.stderr


def test_kafka_delete_records_sh_needs_both_options(cluster):
    done = run_tool("--bootstrap-server", bootstrap(cluster))
    assert done.returncode == 1
    assert 'Missing required argument "[offset-json-file]"' in done.stderr


def test_a_2_1_broker_advertises_delete_records_v1(cluster):
    with connect(cluster) as connection:
        answer = request(connection, ApiKey.API_VERSIONS, 2, {})
    served = {v["api_key"]: (v["min_version"], v["max_version"]) for v in answer["api_versions"]}
    assert served[ApiKey.DELETE_RECORDS] == (0, 1)


def test_kafka_delete_records_sh_takes_a_request_timeout_and_refuses_other_properties(
    cluster, tmp_path
):
    topic = new_topic(cluster)
    produce(cluster, topic, 4)
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 2}]}))
    properties = tmp_path / "admin.properties"
    properties.write_text("# the admin client's\nsasl.mechanism=PLAIN\n")
    argv = ("--bootstrap-server", bootstrap(cluster), "--offset-json-file", str(plan))
    refused = run_tool(*argv, "--command-config", str(properties))
    assert refused.returncode == 1
    assert "sasl.mechanism" in refused.stderr and "request.timeout.ms" in refused.stderr
    properties.write_text("request.timeout.ms=20000\n")
    done = run_tool(*argv, "--command-config", str(properties))
    assert done.returncode == 0, done.stderr
    assert f"partition: {topic}-0\tlow_watermark: 2" in done.stdout.splitlines()


def test_followers_below_1_1_take_and_report_the_log_start_through_replica_fetch_v1(
    tmp_path_factory,
):
    """inter.broker.protocol.version 1.0: followers fetch by tidelog's REPLICA_FETCH (v1, with
    log starts as Kafka's Fetch v5), and a DeleteRecords of a 1.0 broker completes."""
    older = LocalCluster(tmp_path_factory.mktemp("delete-records-1-0"))
    older.up(
        3,
        overrides={
            "broker.protocol.max.version": "1.0",
            "inter.broker.protocol.version": "1.0",
            "log.message.format.version": "1.0",
        },
        progress=lambda _: None,
    )
    try:
        topic = new_topic(older)
        produce(older, topic, 10)
        leader = leader_of(older, topic)
        assert delete_records(older, leader, 0, {(topic, 0): 7}) == {(topic, 0): (0, 7)}
        assert log_starts(older, topic) == {1: 7, 2: 7, 3: 7}
    finally:
        older.down(progress=lambda _: None)
