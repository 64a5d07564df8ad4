"""Bad input gets an error code or a closed connection, and the broker serves everyone else."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from tests.integration.conftest import wait_for_leaders
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper
from tidelog.protocol.frames import decode_response, encode_request
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set


def connect(cluster, broker_id=1) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", cluster.broker(broker_id).port), timeout=10)
    return connection


def request(connection: socket.socket, api_key: ApiKey, version: int, body: dict) -> dict:
    connection.sendall(encode_request(api_key, version, 99, "bad-input-test", body))
    (size,) = struct.unpack(">i", receive(connection, 4))
    correlation_id, response = decode_response(api_key, version, receive(connection, size))
    assert correlation_id == 99
    return response


def receive(connection: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def produce_body(topic: str, records: bytes, acks: int = 1, timeout: int = 1000) -> dict:
    """A Produce request body for partition 0 of ``topic``."""
    return {
        "acks": acks,
        "timeout": timeout,
        "topic_data": [{"topic": topic, "data": [{"partition": 0, "record_set": records}]}],
    }


def closed_by_broker(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def still_serves(cluster) -> bool:
    with connect(cluster) as other:
        return len(request(other, ApiKey.METADATA, 0, {"topics": []})["brokers"]) == 3


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


CUT_METADATA = encode_request(ApiKey.METADATA, 1, 5, "c", {"topics": ["a"]})[4:-1]


@pytest.mark.parametrize(
    ("frame", "then_stop_sending"),
    [
        pytest.param(framed(random.Random(5).randbytes(24)), False, id="random-bytes"),
        pytest.param(struct.pack(">i", 100) + b"\x00\x03\x00\x00", True, id="truncated-frame"),
        pytest.param(struct.pack(">i", 104857601), False, id="oversized-frame"),
        pytest.param(struct.pack(">i", -5), False, id="negative-size"),
        pytest.param(framed(struct.pack(">hhih", 77, 0, 1, -1)), False, id="unknown-api"),
        pytest.param(framed(struct.pack(">hhih", 0, 9, 1, -1)), False, id="unknown-version"),
        pytest.param(framed(CUT_METADATA), False, id="body-cut-short"),
    ],
)
def test_a_bad_frame_closes_only_its_own_connection(cluster, frame, then_stop_sending):
    with connect(cluster) as bad:
        bad.sendall(frame)
        if then_stop_sending:
            bad.shutdown(socket.SHUT_WR)
        assert closed_by_broker(bad)

    assert still_serves(cluster)


def test_api_versions_above_v0_is_answered_unsupported_version_in_a_v0_body(cluster):
    with connect(cluster) as connection:
        header = struct.pack(">hhi", ApiKey.API_VERSIONS, 3, 42) + struct.pack(">h", 1) + b"c"
        connection.sendall(struct.pack(">i", len(header)) + header)
        (size,) = struct.unpack(">i", receive(connection, 4))
        correlation_id, body = decode_response(ApiKey.API_VERSIONS, 0, receive(connection, size))
        assert (correlation_id, body["error_code"]) == (42, 35)
        # The same connection goes on, as librdkafka expects when it retries with v0.
        served = request(connection, ApiKey.API_VERSIONS, 0, {})
        assert {v["api_key"] for v in served["api_versions"]} >= {0, 1, 2, 3, 18}


def test_a_crc_corrupt_message_set_is_refused_with_corrupt_message(cluster, new_topic):
    topic = new_topic()
    message_set = bytearray(build_message_set([Record(b"k", b"some value", 0)] * 3, magic=1))
    message_set[-4] ^= 0xFF
    leader = leader_of(cluster, topic)

    with connect(cluster, leader) as connection:
        response = request(connection, ApiKey.PRODUCE, 2, produce_body(topic, bytes(message_set)))
        (partition,) = response["responses"][0]["partition_responses"]
        assert partition["error_code"] == 2  # CORRUPT_MESSAGE
        # Nothing was appended, and the connection still works for a good set.
        good = build_message_set([Record(b"k", b"fine", 0)], magic=1)
        response = request(connection, ApiKey.PRODUCE, 2, produce_body(topic, good))
        (partition,) = response["responses"][0]["partition_responses"]
        assert (partition["error_code"], partition["base_offset"]) == (0, 0)
    assert still_serves(cluster)


def test_produce_to_a_broker_that_does_not_lead_is_not_leader_for_partition(cluster, new_topic):
    topic = new_topic()
    other = next(b for b in (1, 2, 3) if b != leader_of(cluster, topic))
    good = build_message_set([Record(b"k", b"v", 0)], magic=1)

    with connect(cluster, other) as connection:
        response = request(connection, ApiKey.PRODUCE, 2, produce_body(topic, good))

    assert response["responses"][0]["partition_responses"][0]["error_code"] == 6


def leader_of(cluster, topic: str) -> int:
    with connect(cluster) as connection:
        metadata = request(connection, ApiKey.METADATA, 0, {"topics": [topic]})
    return metadata["topic_metadata"][0]["partition_metadata"][0]["leader"]


def test_clients_that_go_away_mid_request_or_mid_response_are_normal_traffic(cluster, new_topic):
    topic = new_topic()
    leader = leader_of(cluster, topic)
    with connect(cluster, leader) as connection:
        records = build_message_set([Record(None, b"x" * 1000, 0)] * 500, magic=1)
        request(connection, ApiKey.PRODUCE, 2, produce_body(topic, records))
    log_path = cluster.broker(leader).log_path
    before = log_path.read_text()
    fetch = {
        "replica_id": -1,
        "max_wait_time": 100,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "max_bytes": 1 << 20}],
            }
        ],
    }
    for version in (3, 1):  # zero copy, and down-converted
        for pause in (0.0, 0.001, 0.01):
            for reset in (True, False):
                connection = connect(cluster, leader)
                connection.sendall(encode_request(ApiKey.FETCH, version, 1, "gone", fetch))
                time.sleep(pause)
                if reset:  # RST instead of FIN
                    connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                connection.close()
    assert still_serves(cluster)
    added = log_path.read_text()[len(before) :]
    assert "Traceback" not in added and " ERROR " not in added, added


# -- the versions of Kafka 0.11 to 2.1, against a broker of release 2.1 -----------------------


@pytest.fixture(scope="module")
def broker_2_1(tmp_path_factory):
    """One broker of release 2.1 (Produce v7, Fetch v10, ListOffsets v4, OffsetsForLeaderEpoch
    v2, ApiVersions v2) with a topic "t"."""
    local = LocalCluster(tmp_path_factory.mktemp("bad-input-2-1"))
    local.up(1, overrides={"broker.protocol.max.version": "2.1"}, progress=lambda _: None)
    try:
        with zookeeper.session(local.zookeeper) as client:
            topics.create_topic(client, "t", 1, 1, {})
        wait_for_leaders(local, "t", 1)
        yield local
    finally:
        local.down(progress=lambda _: None)


def _v2_batch() -> bytes:
    """A record batch with a header, built by kafka-python (independent of tidelog's codec)."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, b"k", b"v", [("h", b"1")])
    return bytes(builder.build())


def _partition(**fields) -> dict:
    return {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "log_start_offset": -1,
        "max_bytes": 1024,
        "timestamp": -1,
        "leader_epoch": 0,
        **fields,
    }


# a well-formed request of each version Kafka 0.11 to 2.1 added
NEW_VERSIONS = [
    *[
        (
            ApiKey.PRODUCE,
            v,
            {"transactional_id": None, **produce_body("t", _v2_batch())},
        )
        for v in range(3, 8)
    ],
    *[
        (
            ApiKey.FETCH,
            v,
            {
                "replica_id": -1,
                "max_wait_time": 0,
                "min_bytes": 0,
                "max_bytes": 1024,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [{"topic": "t", "partitions": [_partition()]}],
                "forgotten_topics_data": [{"topic": "t", "partitions": [1, 2]}],
            },
        )
        for v in range(4, 11)
    ],
    *[
        (
            ApiKey.LIST_OFFSETS,
            v,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"topic": "t", "partitions": [_partition()]}],
            },
        )
        for v in range(2, 5)
    ],
    *[
        (
            ApiKey.OFFSETS_FOR_LEADER_EPOCH,
            v,
            {"topics": [{"topic": "t", "partitions": [_partition()]}]},
        )
        for v in range(1, 3)
    ],
    *[(ApiKey.API_VERSIONS, v, {}) for v in (1, 2)],
    *[
        (ApiKey.INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout_ms": 60000})
        for v in (0, 1)
    ],
]
NEW_IDS = [f"{api_key.name}-v{version}" for api_key, version, _ in NEW_VERSIONS]


@pytest.mark.parametrize(("api_key", "version", "body"), NEW_VERSIONS, ids=NEW_IDS)
def test_each_new_version_is_served_and_a_bad_copy_closes_only_its_connection(
    broker_2_1, api_key, version, body
):
    frame = bytes(encode_request(api_key, version, 7, "bad", body))
    with connect(broker_2_1) as connection:  # the good one is answered
        connection.sendall(frame)
        (size,) = struct.unpack(">i", receive(connection, 4))
        assert decode_response(api_key, version, receive(connection, size))[0] == 7
    body_start = 4 + 10 + 3  # size, header with client id "bad"
    bad_frames = {
        # the size says what the frame holds, but the body stops early: a field cut
        "cut-field": framed(frame[4:-3]),
        # the first array's length claims more items than there are
        "long-array": framed(frame[4:body_start] + _grown_first_array(api_key, version, frame)),
        # a version beyond the release
        "next-version": frame[:6] + struct.pack(">h", APIS_MAX[api_key] + 1) + frame[8:],
        # the frame size says more than is sent, and the client stops sending
        "short-frame": struct.pack(">i", len(frame)) + frame[4:],
    }
    for name, bad in bad_frames.items():
        with connect(broker_2_1) as connection:
            connection.sendall(bad)
            if name == "short-frame":
                connection.shutdown(socket.SHUT_WR)
            if api_key == ApiKey.API_VERSIONS and name == "next-version":
                (size,) = struct.unpack(">i", receive(connection, 4))
                body_answer = decode_response(ApiKey.API_VERSIONS, 0, receive(connection, size))[1]
                assert body_answer["error_code"] == 35  # UNSUPPORTED_VERSION, and served on
                continue
            assert closed_by_broker(connection), name
    with connect(broker_2_1) as other:
        assert request(other, ApiKey.METADATA, 0, {"topics": []})["brokers"]


APIS_MAX = {
    ApiKey.PRODUCE: 7,
    ApiKey.FETCH: 10,
    ApiKey.LIST_OFFSETS: 4,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.INIT_PRODUCER_ID: 1,
}


def _grown_first_array(api_key: ApiKey, version: int, frame: bytes) -> bytes:
    """The request body with its first array's item count raised by 1000 (where the body has an
    array: the topics of all but ApiVersions, whose body is empty and gets stray bytes)."""
    body = frame[4 + 10 + 3 :]
    if api_key in (ApiKey.API_VERSIONS, ApiKey.INIT_PRODUCER_ID):  # no array: stray bytes
        return body + b"\x00\x00\x00\x01"
    # the topics array follows the fixed fields before it
    offset = {
        ApiKey.PRODUCE: 2 + 2 + 4,  # null transactional id, acks, timeout
        ApiKey.FETCH: 4 + 4 + 4 + 4 + 1 + (8 if version >= 7 else 0),
        ApiKey.LIST_OFFSETS: 4 + 1,
        ApiKey.OFFSETS_FOR_LEADER_EPOCH: 0,
    }[api_key]
    (count,) = struct.unpack_from(">i", body, offset)
    return body[:offset] + struct.pack(">i", count + 1000) + body[offset + 4 :]


@pytest.mark.parametrize(
    ("why", "mangle"),
    [
        ("length past the batch", lambda b: b[:8] + struct.pack(">i", len(b)) + b[12:]),
        ("length below a record", lambda b: b[:8] + struct.pack(">i", 3) + b[12:]),
        ("magic 1 in a Produce v3", lambda b: b[:16] + b"\x01" + b[17:]),
        ("zstd in a Produce v6", lambda b: b[:22] + bytes([b[22] | 4]) + b[23:]),
    ],
)
def test_a_produce_v3_plus_record_set_kafka_cannot_parse_closes_the_connection(
    broker_2_1, why, mangle
):
    body = {"transactional_id": None, **produce_body("t", mangle(_v2_batch()))}
    with connect(broker_2_1) as connection:
        connection.sendall(encode_request(ApiKey.PRODUCE, 6, 1, "bad", body))
        assert closed_by_broker(connection), why
    with connect(broker_2_1) as other:
        assert request(other, ApiKey.METADATA, 0, {"topics": []})["brokers"]
