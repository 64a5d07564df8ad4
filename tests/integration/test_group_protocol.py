"""The group APIs as raw requests: what ApiVersions advertises, OffsetCommit/OffsetFetch v0 in
ZooKeeper, and bad input on every new API getting an error code (or, for bytes that do not
parse, a closed connection) while the broker goes on serving."""

from __future__ import annotations

import itertools
import socket
import struct

import pytest

from tests.integration.test_bad_input import (
    closed_by_broker,
    connect,
    framed,
    request,
    still_serves,
)
from tidelog.cluster.local import wait_until
from tidelog.controller import zookeeper
from tidelog.errors import ErrorCode
from tidelog.protocol.frames import encode_request
from tidelog.protocol.schemas import APIS, ApiKey

_groups = itertools.count()
NEW_APIS = {
    ApiKey.OFFSET_COMMIT: 2,
    ApiKey.OFFSET_FETCH: 1,
    ApiKey.GROUP_COORDINATOR: 0,
    ApiKey.JOIN_GROUP: 1,
    ApiKey.HEARTBEAT: 0,
    ApiKey.LEAVE_GROUP: 0,
    ApiKey.SYNC_GROUP: 0,
    ApiKey.DESCRIBE_GROUPS: 0,
    ApiKey.LIST_GROUPS: 0,
    ApiKey.CREATE_TOPICS: 1,
    ApiKey.DELETE_TOPICS: 0,
}


def test_api_versions_advertises_the_group_and_admin_apis_at_kafka_0_10_versions(cluster):
    with connect(cluster) as connection:
        served = request(connection, ApiKey.API_VERSIONS, 0, {})["api_versions"]

    advertised = {v["api_key"]: (v["min_version"], v["max_version"]) for v in served}
    for api_key, max_version in NEW_APIS.items():
        assert advertised[api_key] == (0, max_version), api_key.name


def coordinator_connection(cluster, group: str) -> socket.socket:
    """A connection to ``group``'s coordinator, once one is available."""
    found: dict = {}

    def available() -> bool:
        with connect(cluster) as connection:
            found.update(request(connection, ApiKey.GROUP_COORDINATOR, 0, {"group_id": group}))
        return found["error_code"] == ErrorCode.NONE

    wait_until(available, 60, f"a coordinator for {group}")
    return connect(cluster, found["coordinator_id"])


def join_body(group: str, member_id: str = "", metadata: bytes = b"subscription") -> dict:
    return {
        "group_id": group,
        "session_timeout": 10000,
        "rebalance_timeout": 10000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "group_protocols": [{"protocol_name": "range", "protocol_metadata": metadata}],
    }


def commit_body(group: str, generation: int, member: str, topic: str, metadata: str = "") -> dict:
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "retention_time": -1,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "offset": 5, "metadata": metadata}]}
        ],
    }


def partition_code(response: dict) -> int:
    return response["responses"][0]["partition_responses"][0]["error_code"]


RETRIABLE = {
    ErrorCode.GROUP_LOAD_IN_PROGRESS,
    ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR_FOR_GROUP,
    ErrorCode.REBALANCE_IN_PROGRESS,
}


@pytest.fixture
def stable_member(cluster, new_topic):
    """(connection to the coordinator, group, member id, generation, topic) of a one-member
    group that has synced. Errors a client retries (a new offsets topic whose replicas are
    still starting, a coordinator still loading) are retried, as clients do."""
    group, topic = f"raw-group-{next(_groups)}", new_topic()
    found: dict = {"member": ""}

    def synced() -> bool:
        previous = found.pop("connection", None)
        if previous is not None:
            previous.close()
        connection = found["connection"] = coordinator_connection(cluster, group)
        joined = request(connection, ApiKey.JOIN_GROUP, 1, join_body(group, found["member"]))
        if joined["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID:
            found["member"] = ""  # the group was dropped (a new coordinator): join afresh
            return False
        if joined["error_code"] in RETRIABLE:
            return False
        assert joined["error_code"] == ErrorCode.NONE, joined
        member, generation = joined["member_id"], joined["generation_id"]
        found["member"] = member
        answer = request(
            connection,
            ApiKey.SYNC_GROUP,
            0,
            {
                "group_id": group,
                "generation_id": generation,
                "member_id": member,
                "group_assignment": [{"member_id": member, "member_assignment": b"p0"}],
            },
        )
        if answer["error_code"] in RETRIABLE:
            return False
        assert answer == {"error_code": 0, "member_assignment": b"p0"}
        found["generation"] = generation
        return True

    wait_until(synced, 60, f"a member of {group} to join and sync")
    yield found["connection"], group, found["member"], found["generation"], topic
    found["connection"].close()


def test_wrong_generation_and_unknown_members_get_error_codes_on_every_group_api(
    cluster, stable_member
):
    connection, group, member, generation, topic = stable_member
    wrong, stranger = generation + 1, "no-such-member"

    def code(api: ApiKey, version: int, body: dict) -> int:
        return request(connection, api, version, body)["error_code"]

    heartbeat = {"group_id": group, "generation_id": wrong, "member_id": member}
    assert code(ApiKey.HEARTBEAT, 0, heartbeat) == ErrorCode.ILLEGAL_GENERATION
    assert code(ApiKey.HEARTBEAT, 0, {**heartbeat, "member_id": stranger}) == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    sync = {**heartbeat, "group_assignment": []}
    assert code(ApiKey.SYNC_GROUP, 0, sync) == ErrorCode.ILLEGAL_GENERATION
    assert code(ApiKey.JOIN_GROUP, 1, join_body(group, stranger)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert code(ApiKey.LEAVE_GROUP, 0, {"group_id": group, "member_id": stranger}) == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert code(ApiKey.HEARTBEAT, 0, {**heartbeat, "group_id": ""}) == ErrorCode.INVALID_GROUP_ID
    ours = generation, member
    commits = [
        (commit_body(group, wrong, member, topic), ErrorCode.ILLEGAL_GENERATION),
        (commit_body(group, generation, stranger, topic), ErrorCode.UNKNOWN_MEMBER_ID),
        (commit_body(group, *ours, "no-such-topic"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (commit_body(group, *ours, topic, "m" * 4097), ErrorCode.OFFSET_METADATA_TOO_LARGE),
        (commit_body(group, *ours, topic, "m" * 4096), ErrorCode.NONE),
    ]
    for body, expected in commits:
        assert partition_code(request(connection, ApiKey.OFFSET_COMMIT, 2, body)) == expected
    fetched = request(
        connection,
        ApiKey.OFFSET_FETCH,
        1,
        {"group_id": group, "topics": [{"topic": topic, "partitions": [{"partition": 0}]}]},
    )
    assert fetched["responses"][0]["partition_responses"][0] == {
        "partition": 0,
        "offset": 5,
        "metadata": "m" * 4096,
        "error_code": 0,
    }
    assert code(ApiKey.HEARTBEAT, 0, {**heartbeat, "generation_id": generation}) == ErrorCode.NONE


def test_a_broker_that_does_not_coordinate_the_group_says_so(cluster, stable_member):
    connection, group, member, generation, _ = stable_member
    coordinator = connection.getpeername()[1]
    other = next(b for b in cluster.state.brokers if cluster.broker(b).port != coordinator)
    with connect(cluster, other) as elsewhere:
        answer = request(
            elsewhere,
            ApiKey.HEARTBEAT,
            0,
            {"group_id": group, "generation_id": generation, "member_id": member},
        )
        described = request(elsewhere, ApiKey.DESCRIBE_GROUPS, 0, {"group_ids": [group]})
    assert answer["error_code"] == ErrorCode.NOT_COORDINATOR_FOR_GROUP
    assert described["groups"][0]["error_code"] == ErrorCode.NOT_COORDINATOR_FOR_GROUP


def test_group_metadata_too_large_for_the_offsets_topic_is_an_error_not_a_dead_broker(
    cluster, stable_member
):
    connection, group, member, *_ = stable_member
    huge = b"x" * 1_100_000  # above the offsets topic's max.message.bytes
    rejoined = request(connection, ApiKey.JOIN_GROUP, 1, join_body(group, member, huge))
    assert rejoined["error_code"] == ErrorCode.NONE
    synced = request(
        connection,
        ApiKey.SYNC_GROUP,
        0,
        {
            "group_id": group,
            "generation_id": rejoined["generation_id"],
            "member_id": member,
            "group_assignment": [{"member_id": member, "member_assignment": huge}],
        },
    )

    assert synced["error_code"] == ErrorCode.UNKNOWN
    described = request(connection, ApiKey.DESCRIBE_GROUPS, 0, {"group_ids": [group]})
    assert described["groups"][0]["state"] == "PreparingRebalance"
    assert still_serves(cluster)


@pytest.mark.parametrize("api_key", list(NEW_APIS), ids=lambda key: key.name)
def test_a_truncated_request_of_every_new_api_closes_only_its_connection(cluster, api_key):
    version = NEW_APIS[api_key]
    frame = encode_request(api_key, version, 1, "c", _sample_body(api_key, version))[4:]
    with connect(cluster) as bad:
        bad.sendall(framed(frame[: len(frame) - 3] if len(frame) > 13 else frame + b"\x07"))
        assert closed_by_broker(bad)
    assert still_serves(cluster)


def _sample_body(api_key: ApiKey, version: int) -> dict:
    """A well-formed body with one item in every array, so that cutting it cuts a field."""

    def fill(field_type):  # type: ignore[no-untyped-def]
        from tidelog.protocol.types import Array, Bytes, Primitive, String

        if isinstance(field_type, tuple):
            return {name: fill(member) for name, member in field_type}
        if isinstance(field_type, Array):
            return [fill(field_type.item)]
        if isinstance(field_type, String):
            return "abc"
        if isinstance(field_type, Bytes):
            return b"abc"
        assert isinstance(field_type, Primitive)
        return False if field_type.name == "boolean" else 1

    return fill(APIS[api_key].requests[version])


def test_offset_commit_and_fetch_v0_keep_offsets_in_zookeeper(cluster, new_topic):
    group, topic = f"zk-group-{next(_groups)}", new_topic(partitions=2)
    body = {
        "group_id": group,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "offset": 17, "metadata": ""},
                    {"partition": 1, "offset": 4, "metadata": ""},
                ],
            }
        ],
    }
    with connect(cluster, 2) as connection:  # any broker answers v0, coordinator or not
        committed = request(connection, ApiKey.OFFSET_COMMIT, 0, body)
        fetched = request(
            connection,
            ApiKey.OFFSET_FETCH,
            0,
            {
                "group_id": group,
                "topics": [
                    {"topic": topic, "partitions": [{"partition": 0}, {"partition": 1}]},
                    {"topic": "no-such-topic", "partitions": [{"partition": 0}]},
                ],
            },
        )

    assert [r["error_code"] for r in committed["responses"][0]["partition_responses"]] == [0, 0]
    assert [
        (r["offset"], r["error_code"])
        for t in fetched["responses"]
        for r in t["partition_responses"]
    ] == [(17, 0), (4, 0), (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    with zookeeper.session(cluster.zookeeper) as client:
        data, _ = client.get(f"/consumers/{group}/offsets/{topic}/0")
    assert data == b"17"


def test_offset_commit_v0_with_an_empty_group_id_writes_nothing_to_zookeeper(cluster, new_topic):
    topic = new_topic()
    body = {
        "group_id": "",
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "offset": 3, "metadata": ""}]}],
    }
    with connect(cluster, 2) as connection:
        committed = request(connection, ApiKey.OFFSET_COMMIT, 0, body)

    assert partition_code(committed) == ErrorCode.INVALID_GROUP_ID
    with zookeeper.session(cluster.zookeeper) as client:
        assert client.exists(f"/consumers/offsets/{topic}/0") is None  # "//" made one "/"


def test_list_groups_shows_a_group_on_its_coordinator(cluster, stable_member):
    connection, group, *_ = stable_member
    listed = request(connection, ApiKey.LIST_GROUPS, 0, {})
    assert listed["error_code"] == 0
    assert {"group_id": group, "protocol_type": "consumer"} in listed["groups"]


def test_a_frame_claiming_a_new_api_with_garbage_after_the_header_closes_the_connection(cluster):
    with connect(cluster) as bad:
        bad.sendall(framed(struct.pack(">hhih", ApiKey.JOIN_GROUP, 1, 3, -1) + b"\xff" * 9))
        assert closed_by_broker(bad)
    assert still_serves(cluster)
