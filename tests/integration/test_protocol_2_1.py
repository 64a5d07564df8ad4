"""A cluster of Kafka 2.1 brokers (broker.protocol.max.version and inter.broker.protocol.version
2.1) answering every version of the APIs that carry records and offsets, request by request
(test_admin_2_1 has the groups, topic admin and admin APIs):
ApiVersions v0-v2, Produce v0-v7, Fetch v0-v10 (fetch sessions declined, leader epochs
fenced), ListOffsets v0-v4 and OffsetsForLeaderEpoch v0-v2.
"""

from __future__ import annotations

import struct
import urllib.request

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.conftest import admin, wait_for_leaders
from tests.integration.test_bad_input import (
    closed_by_broker,
    connect,
    produce_body,
    receive,
    request,
    still_serves,
)
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.frames import decode_response, encode_request
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set

# Kafka 2.1's versions (ApiVersionsResponse of a 2.1.0 broker) of the APIs tidelog serves:
# records and offsets, Metadata, the groups, topic admin, and the admin APIs clients call
KAFKA_2_1 = {0: 7, 1: 10, 2: 4, 18: 2, 23: 2, 3: 7, 8: 6, 9: 5, 10: 2, 11: 3, 12: 2, 13: 2}
KAFKA_2_1 |= {14: 2, 15: 2, 16: 2, 19: 3, 20: 3, 21: 1, 32: 2, 33: 1, 35: 1, 37: 1}


@pytest.fixture(scope="module")
def brokers(cluster_2_1):
    return cluster_2_1


_count = iter(range(1_000_000))
TEN_MESSAGES = build_message_set([Record(b"k", f"v{n}".encode(), 0) for n in range(10)], magic=1)


@pytest.fixture
def topic(brokers):
    """A new one-partition topic on all three brokers, holding ten v1 messages ("v0".."v9")."""
    name = f"t21-{next(_count)}"
    with zookeeper.session(brokers.zookeeper) as client:
        topics.create_topic(client, name, 1, 3, {})
    wait_for_leaders(brokers, name, 1)
    with connect(brokers, leader_of(brokers, name)) as connection:
        answer = request(connection, ApiKey.PRODUCE, 2, produce_body(name, TEN_MESSAGES, acks=-1))
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    return name


@pytest.fixture(scope="module")
def moved(brokers):
    """A topic like ``topic``'s whose leader has changed once (its leader epoch is 1 or more)."""
    name = "t21-moved"
    with zookeeper.session(brokers.zookeeper) as client:
        topics.create_topic(client, name, 1, 3, {})
    wait_for_leaders(brokers, name, 1)
    brokers.restart_broker(leader_of(brokers, name), progress=lambda _: None)
    wait_for_leaders(brokers, name, 1)
    assert leader_epoch(brokers, name) >= 1
    return name


def leader_of(cluster: LocalCluster, name: str) -> int:
    with zookeeper.session(cluster.zookeeper) as client:
        state = zookeeper.read_partition_state(client, name, 0)
    assert state is not None
    return state.leader


def leader_epoch(cluster: LocalCluster, name: str) -> int:
    with zookeeper.session(cluster.zookeeper) as client:
        state = zookeeper.read_partition_state(client, name, 0)
    assert state is not None
    return state.leader_epoch


def v2_batch(transactional: bool = False) -> bytes:
    """One record batch built by kafka-python (an encoder independent of tidelog's)."""
    builder = DefaultRecordBatchBuilder(2, 0, transactional, 7, 0, 0, 1 << 20)
    builder.append(0, 1_700_000_000_000, b"k", b"v", [])
    return bytes(builder.build())


def fetch_body(version: int, name: str, offset: int = 0, **extra) -> dict:
    partition = {
        "partition": 0,
        "current_leader_epoch": extra.pop("current_leader_epoch", -1),
        "fetch_offset": offset,
        "log_start_offset": -1,
        "max_bytes": 1 << 20,
    }
    return {
        "replica_id": -1,
        "max_wait_time": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": 0,
        "topics": [{"topic": name, "partitions": [partition]}],
        "forgotten_topics_data": [],
        **extra,
    }


def advertised(cluster: LocalCluster, version: int) -> dict[int, int]:
    with connect(cluster) as connection:
        answer = request(connection, ApiKey.API_VERSIONS, version, {})
    assert answer["error_code"] == 0
    return {v["api_key"]: v["max_version"] for v in answer["api_versions"]}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_2_1_broker_advertises_kafka_2_1s_versions_at_every_api_versions_version(
    brokers, version
):
    served = advertised(brokers, version)
    assert {key: served[key] for key in KAFKA_2_1} == KAFKA_2_1
    assert 10001 not in served  # REPLICA_FETCH is between brokers only


def test_api_versions_too_new_gets_unsupported_version_listing_what_is_served(brokers, cluster):
    for local, top in ((brokers, 2), (cluster, 0)):  # a 2.1 broker, and today's default 0.10.1
        with connect(local) as connection:
            # as librdkafka sends it: v3, with its software name and version (compact strings)
            header = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 42, 1) + b"c" + b"\x00"
            frame = header + b"\x0alibrdkafka\x062.3.0\x00"
            connection.sendall(struct.pack(">i", len(frame)) + frame)
            # answered in a v0 body whatever version was asked
            size = int.from_bytes(receive(connection, 4), "big")
            correlation_id, body = decode_response(
                ApiKey.API_VERSIONS, 0, receive(connection, size)
            )
            assert (correlation_id, body["error_code"]) == (42, 35)
            assert body["api_versions"] == [{"api_key": 18, "min_version": 0, "max_version": top}]
            # the client retries at that version on the same connection
            again = request(connection, ApiKey.API_VERSIONS, top, {})
            assert again["error_code"] == 0 and len(again["api_versions"]) > 10


def test_a_transactional_producer_is_refused_on_every_partition(brokers, topic):
    leader = leader_of(brokers, topic)
    for transactional_id, transactional in (("txn-1", True), ("txn-1", False), (None, True)):
        body = {
            "transactional_id": transactional_id,
            **produce_body(topic, v2_batch(transactional), acks=-1),
        }
        with connect(brokers, leader) as connection:
            answer = request(connection, ApiKey.PRODUCE, 3, body)
        (partition,) = answer["responses"][0]["partition_responses"]
        assert partition["error_code"] == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert partition["base_offset"] == -1
    with connect(brokers, leader) as connection:  # nothing was appended
        answer = request(connection, ApiKey.LIST_OFFSETS, 1, list_offsets_body(topic, -1))
    assert answer["responses"][0]["partition_responses"][0]["offset"] == 10


@pytest.mark.parametrize(
    "record_set",
    [
        build_message_set([Record(b"k", b"v", 0)], magic=1),
        b"",
        v2_batch() + v2_batch(),
    ],
    ids=["magic-1", "empty", "two-batches"],
)
def test_a_produce_v3_kafka_cannot_parse_closes_only_its_connection(brokers, topic, record_set):
    body = {"transactional_id": None, **produce_body(topic, record_set)}
    with connect(brokers, leader_of(brokers, topic)) as connection:
        connection.sendall(encode_request(ApiKey.PRODUCE, 3, 1, "c", body))
        assert closed_by_broker(connection)
    assert still_serves(brokers)


@pytest.mark.parametrize("version", [4, 5, 6, 7, 8, 9, 10])
def test_fetch_v4_plus_sends_the_stored_data_with_the_stable_and_start_offsets(
    brokers, topic, version
):
    with connect(brokers, leader_of(brokers, topic)) as connection:
        answer = request(connection, ApiKey.FETCH, version, fetch_body(version, topic))
    (partition,) = answer["responses"][0]["partition_responses"]
    assert partition["error_code"] == 0
    assert partition["high_watermark"] == partition["last_stable_offset"] == 10
    assert partition["aborted_transactions"] is None  # read_uncommitted
    if version >= 5:
        assert partition["log_start_offset"] == 0
    if version >= 7:
        assert (answer["error_code"], answer["session_id"]) == (0, 0)  # no session kept
    # the stored v1 messages go as they are: Fetch v4+ reads every format
    assert bytes(partition["record_set"]) == TEN_MESSAGES


def test_read_committed_reads_the_same_with_no_aborted_transactions(brokers, topic):
    with connect(brokers, leader_of(brokers, topic)) as connection:
        body = fetch_body(10, topic, isolation_level=1)
        answer = request(connection, ApiKey.FETCH, 10, body)
    (partition,) = answer["responses"][0]["partition_responses"]
    assert partition["aborted_transactions"] == []
    assert partition["last_stable_offset"] == 10 and len(bytes(partition["record_set"])) > 0


def test_an_incremental_fetch_finds_no_session_and_a_final_one_is_answered_in_full(brokers, topic):
    with connect(brokers, leader_of(brokers, topic)) as connection:
        body = fetch_body(7, topic, session_id=123, session_epoch=1)
        answer = request(connection, ApiKey.FETCH, 7, body)
        assert (answer["error_code"], answer["session_id"], answer["responses"]) == (70, 0, [])
        body = fetch_body(7, topic, session_id=123, session_epoch=-1)
        answer = request(connection, ApiKey.FETCH, 7, body)
    assert (answer["error_code"], answer["session_id"]) == (0, 0)
    assert answer["responses"][0]["partition_responses"][0]["high_watermark"] == 10


def list_offsets_body(name: str, timestamp: int, current_leader_epoch: int = -1) -> dict:
    partition = {
        "partition": 0,
        "timestamp": timestamp,
        "current_leader_epoch": current_leader_epoch,
    }
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"topic": name, "partitions": [partition]}],
    }


def test_list_offsets_v2_to_v4_with_the_leader_epoch_of_the_offset(brokers, topic):
    epoch = leader_epoch(brokers, topic)
    with connect(brokers, leader_of(brokers, topic)) as connection:
        for version in (2, 3, 4):
            for timestamp, offset in ((-1, 10), (-2, 0)):
                answer = request(
                    connection, ApiKey.LIST_OFFSETS, version, list_offsets_body(topic, timestamp)
                )
                (partition,) = answer["responses"][0]["partition_responses"]
                assert (partition["error_code"], partition["offset"]) == (0, offset)
                if version == 4:
                    assert partition["leader_epoch"] == epoch


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (ApiKey.FETCH, 9),
        (ApiKey.FETCH, 10),
        (ApiKey.LIST_OFFSETS, 4),
        (ApiKey.OFFSETS_FOR_LEADER_EPOCH, 2),
    ],
)
def test_a_current_leader_epoch_other_than_the_leaders_is_fenced(brokers, moved, api_key, version):
    topic = moved
    epoch = leader_epoch(brokers, topic)

    def body(current: int) -> dict:
        if api_key == ApiKey.FETCH:
            return fetch_body(version, topic, current_leader_epoch=current)
        if api_key == ApiKey.LIST_OFFSETS:
            return list_offsets_body(topic, -1, current)
        partition = {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}
        return {"topics": [{"topic": topic, "partitions": [partition]}]}

    def code(answer: dict) -> int:
        if api_key == ApiKey.OFFSETS_FOR_LEADER_EPOCH:
            return answer["topics"][0]["partitions"][0]["error_code"]
        return answer["responses"][0]["partition_responses"][0]["error_code"]

    with connect(brokers, leader_of(brokers, topic)) as connection:
        codes = [
            code(request(connection, api_key, version, body(e)))
            for e in (epoch - 1, epoch + 1, epoch, -1)
        ]
    assert codes == [74, 75, 0, 0]  # FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, served, unchecked


def test_offsets_for_leader_epoch_v1_v2_name_the_epoch_of_the_end_offset(brokers, topic):
    epoch = leader_epoch(brokers, topic)
    with connect(brokers, leader_of(brokers, topic)) as connection:
        for version in (1, 2):
            for asked, end in ((epoch, 10), (epoch + 5, 10)):
                partition = {"partition": 0, "current_leader_epoch": -1, "leader_epoch": asked}
                body = {"topics": [{"topic": topic, "partitions": [partition]}]}
                answer = request(connection, ApiKey.OFFSETS_FOR_LEADER_EPOCH, version, body)
                (found,) = answer["topics"][0]["partitions"]
                assert (found["error_code"], found["leader_epoch"], found["end_offset"]) == (
                    0,
                    epoch,
                    end,
                )


def test_followers_at_protocol_2_1_fetch_in_kafka_fetch_sessions_and_truncate_by_epoch(
    brokers, topic
):
    """Followers at inter.broker.protocol.version 2.1 fetch with Kafka's Fetch v10 in KIP-227
    sessions the leader keeps (no REPLICA_FETCH); after the leader is bounced, the new leader's
    followers truncate with OffsetsForLeaderEpoch v2 and replicate what comes next."""
    leader = leader_of(brokers, topic)
    sessions = admin(brokers, leader, "/fetch-sessions")
    assert sessions is not None
    replicas = {s["replica_id"] for s in sessions["leader"]["sessions"]}
    assert replicas == {1, 2, 3} - {leader}
    for broker_id in (1, 2, 3):
        assert not requests_of(brokers, broker_id, "REPLICA_FETCH")
    brokers.restart_broker(leader, progress=lambda _: None)
    wait_for_leaders(brokers, topic, 1)
    records = build_message_set([Record(b"k", b"after", 0)], magic=1)
    with connect(brokers, leader_of(brokers, topic)) as connection:
        answer = request(connection, ApiKey.PRODUCE, 2, produce_body(topic, records, acks=-1))
    (partition,) = answer["responses"][0]["partition_responses"]
    assert (partition["error_code"], partition["base_offset"]) == (0, 10)


def requests_of(cluster: LocalCluster, broker_id: int, api: str) -> int:
    """tidelog_requests_total of ``api`` on a broker's /metrics."""
    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = f'tidelog_requests_total{{api="{api}"}} '
    return sum(int(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


# -- record batches (message format v2) through every Produce and Fetch version ---------------


@pytest.fixture
def v2_topic(brokers):
    name = f"t21-v2-{next(_count)}"
    with zookeeper.session(brokers.zookeeper) as client:
        topics.create_topic(client, name, 1, 3, {"message.format.version": "2.1"})
    wait_for_leaders(brokers, name, 1)
    return name


def batch_of(values: list[bytes], codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
    for n, value in enumerate(values):
        builder.append(n, 1_700_000_000_000 + n, b"k", value, [("h", b"x")])
    return bytes(builder.build())


def test_produce_v3_to_v7_append_record_batches_and_answer_the_log_start_offset(brokers, v2_topic):
    with connect(brokers, leader_of(brokers, v2_topic)) as connection:
        for version in range(3, 8):
            codec = 4 if version == 7 else 1  # zstd from v7, gzip before
            body = {
                "transactional_id": None,
                **produce_body(v2_topic, batch_of([b"a", b"b"], codec), acks=-1),
            }
            answer = request(connection, ApiKey.PRODUCE, version, body)
            (partition,) = answer["responses"][0]["partition_responses"]
            assert (partition["error_code"], partition["base_offset"]) == (0, 2 * (version - 3))
            if version >= 5:
                assert partition["log_start_offset"] == 0
        # an old producer's message set goes to the same log (up-converted)
        old = build_message_set([Record(b"k", b"old", 0)], magic=1)
        answer = request(connection, ApiKey.PRODUCE, 2, produce_body(v2_topic, old))
        assert answer["responses"][0]["partition_responses"][0]["base_offset"] == 10


@pytest.mark.parametrize(
    ("version", "magic", "path"),
    [(1, 0, "converted"), (3, 1, "converted"), (4, 2, "zero_copy"), (10, 2, "zero_copy")],
)
def test_each_fetch_version_reads_v2_data_in_the_newest_format_it_knows(
    brokers, v2_topic, version, magic, path
):
    leader = leader_of(brokers, v2_topic)
    with connect(brokers, leader) as connection:
        batch = batch_of([b"a", b"b"])
        body = {"transactional_id": None, **produce_body(v2_topic, batch, acks=-1)}
        answer = request(connection, ApiKey.PRODUCE, 3, body)
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        before = fetch_bytes(brokers, leader)
        answer = request(connection, ApiKey.FETCH, version, fetch_body(version, v2_topic))
    records = bytes(answer["responses"][0]["partition_responses"][0]["record_set"])
    assert records[16] == magic  # the first entry's magic byte
    after = fetch_bytes(brokers, leader)
    assert after.get((str(version), path), 0) > before.get((str(version), path), 0)


def fetch_bytes(cluster: LocalCluster, broker_id: int) -> dict[tuple[str, str], int]:
    """tidelog_fetch_bytes_total by (version, path) on a broker's /metrics."""
    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("tidelog_fetch_bytes_total{"):
            labels, value = line[len("tidelog_fetch_bytes_total{") :].split("} ")
            parts = dict(part.split("=") for part in labels.split(","))
            found[parts["version"].strip('"'), parts["path"].strip('"')] = int(value)
    return found


def test_zstd_batches_go_as_stored_from_fetch_v4_and_are_refused_below_it(brokers, v2_topic):
    """Fetch v0-v3 would need the batch converted to a format without zstd: Kafka's
    UNSUPPORTED_COMPRESSION_TYPE; Fetch v4-v10 get it as stored (Kafka 2.1 refuses v4-v9 only
    for a topic whose compression.type is zstd, a setting tidelog does not have)."""
    with connect(brokers, leader_of(brokers, v2_topic)) as connection:
        body = {
            "transactional_id": None,
            **produce_body(v2_topic, batch_of([b"z" * 100], codec=4), acks=-1),
        }
        answer = request(connection, ApiKey.PRODUCE, 7, body)
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        codes = {}
        for version in (1, 3, 4, 9, 10):
            answer = request(connection, ApiKey.FETCH, version, fetch_body(version, v2_topic))
            (partition,) = answer["responses"][0]["partition_responses"]
            codes[version] = (partition["error_code"], len(bytes(partition["record_set"])) > 0)
    assert codes == {1: (76, False), 3: (76, False), 4: (0, True), 9: (0, True), 10: (0, True)}
