"""What each broker.protocol.max.version release serves, and the checks Kafka makes while it
parses a Produce v3+, Fetch v4+ or ListOffsets v2+ request (before any handler sees it)."""

from __future__ import annotations

import itertools
import struct

import pytest

from tidelog.config import BROKER_RELEASES, INTER_BROKER_PROTOCOL_VERSIONS
from tidelog.protocol.frames import decode_request, encode_request
from tidelog.protocol.schemas import APIS, RELEASE_API_VERSIONS, ApiKey, fetch_magic
from tidelog.protocol.types import ProtocolError
from tidelog.replication.fetcher import REPLICA_REQUEST_VERSIONS

# Kafka's own answers to ApiVersions for the APIs that carry records and offsets, as each
# release's request classes list them (Produce, Fetch, ListOffsets, Metadata,
# OffsetsForLeaderEpoch, ApiVersions)
KAFKA = {
    "0.11.0": (3, 5, 2, 4, 0, 1),
    "1.0": (5, 6, 2, 5, 0, 1),
    "1.1": (5, 7, 2, 5, 0, 1),
    "2.0": (6, 8, 3, 6, 1, 2),
    "2.1": (7, 10, 4, 7, 2, 2),
}
KEYS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH,
    ApiKey.API_VERSIONS,
)


@pytest.mark.parametrize("release", list(KAFKA))
def test_each_release_lists_kafkas_versions(release):
    assert tuple(RELEASE_API_VERSIONS[release][key] for key in KEYS) == KAFKA[release]


# The same for the group APIs, topic admin and the admin APIs clients call (0.11.0's
# Protocol.java, each request class's schemaVersions() from 1.0.0); None: not served
OTHER_KEYS = (
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.GROUP_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.DELETE_RECORDS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_LOG_DIRS,
)
KAFKA_OTHER = {
    "0.11.0": (3, 3, 1, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 0, None, None),
    "1.0": (3, 3, 1, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 0, 0, 0),
    "1.1": (3, 3, 1, 2, 1, 1, 1, 1, 1, 2, 1, 0, 1, 0, 0, 0),
    "2.0": (4, 4, 2, 3, 2, 2, 2, 2, 2, 3, 2, 1, 2, 1, 1, 1),
    "2.1": (6, 5, 2, 3, 2, 2, 2, 2, 2, 3, 3, 1, 2, 1, 1, 1),
}


@pytest.mark.parametrize("release", list(KAFKA_OTHER))
def test_each_release_lists_kafkas_group_and_admin_versions(release):
    served = RELEASE_API_VERSIONS[release]
    assert tuple(served.get(key) for key in OTHER_KEYS) == KAFKA_OTHER[release]


def test_every_api_has_a_schema_for_each_version_kafka_2_1_served():
    for key, top in RELEASE_API_VERSIONS["2.1"].items():
        assert APIS[key].max_version == top, key
        assert len(APIS[key].responses) == len(APIS[key].requests), key


def test_every_version_of_the_record_and_offset_apis_up_to_2_1_has_a_schema():
    for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSETS_FOR_LEADER_EPOCH):
        assert APIS[key].max_version == RELEASE_API_VERSIONS["2.1"][key]
    assert APIS[ApiKey.API_VERSIONS].max_version == 2


def test_0_10_1_serves_what_tidelog_served_before_0_11():
    assert RELEASE_API_VERSIONS["0.10.1"] == {
        ApiKey.PRODUCE: 2, ApiKey.FETCH: 3, ApiKey.LIST_OFFSETS: 1, ApiKey.METADATA: 2,
        ApiKey.OFFSET_COMMIT: 2, ApiKey.OFFSET_FETCH: 1, ApiKey.GROUP_COORDINATOR: 0,
        ApiKey.JOIN_GROUP: 1, ApiKey.HEARTBEAT: 0, ApiKey.LEAVE_GROUP: 0, ApiKey.SYNC_GROUP: 0,
        ApiKey.DESCRIBE_GROUPS: 0, ApiKey.LIST_GROUPS: 0, ApiKey.API_VERSIONS: 0,
        ApiKey.CREATE_TOPICS: 1, ApiKey.DELETE_TOPICS: 0, ApiKey.OFFSETS_FOR_LEADER_EPOCH: 0,
    }  # fmt: skip


def test_releases_only_grow():
    for older, newer in itertools.pairwise(BROKER_RELEASES):
        for key, top in RELEASE_API_VERSIONS[older].items():
            assert RELEASE_API_VERSIONS[newer][key] >= top, (older, newer, key)


def test_followers_send_kafkas_fetch_and_leader_epoch_versions_for_every_protocol():
    assert set(REPLICA_REQUEST_VERSIONS) == set(INTER_BROKER_PROTOCOL_VERSIONS)
    expected = {
        "0.10.0": (2, 0),
        "0.11.0-IV0": (4, 0),
        "0.11.0": (5, 0),
        "1.1": (7, 0),
        "2.0-IV0": (7, 1),
        "2.0": (8, 1),
        "2.1-IV1": (8, 2),
        "2.1": (10, 2),
    }
    assert {v: REPLICA_REQUEST_VERSIONS[v] for v in expected} == expected


@pytest.mark.parametrize(("version", "magic"), [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (10, 2)])
def test_each_fetch_version_reads_formats_up_to(version, magic):
    assert fetch_magic(version) == magic


def batch(codec: int = 0, transactional: bool = False, magic: int = 2, length: int = 49) -> bytes:
    """The first 23 bytes of a record batch and filler up to its length; the checks read only
    the header's length, magic and attributes."""
    attributes = codec | (0x10 if transactional else 0)
    head = struct.pack(">qiibIh", 0, length, 0, magic, 0, attributes)
    return head + bytes(max(12 + length - len(head), 0))


def produce(version: int, records: bytes | None, transactional_id: str | None = None) -> bytes:
    body = {
        "transactional_id": transactional_id,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"topic": "t", "data": [{"partition": 0, "record_set": records}]}],
    }
    return encode_request(ApiKey.PRODUCE, version, 1, "c", body)[4:]


@pytest.mark.parametrize(
    ("version", "records", "why"),
    [
        (3, None, "must carry one record batch"),
        (3, b"", "must carry one record batch"),
        (3, batch()[:-1], "must carry one record batch"),  # cut short
        (3, batch(magic=1), "carries magic 1; only 2 is allowed"),
        (3, batch() + batch(), "exactly one record batch"),
        (6, batch(codec=4), "may not use zstd"),
        (3, batch(length=3), "a record batch of length 3"),
    ],
    ids=["null", "empty", "cut-short", "magic-1", "two-batches", "zstd-before-v7", "tiny-length"],
)
def test_a_produce_v3_plus_that_kafka_cannot_parse_is_a_protocol_error(version, records, why):
    with pytest.raises(ProtocolError, match=why):
        decode_request(produce(version, records))


def test_a_produce_v3_plus_of_one_batch_parses_and_older_versions_are_not_checked():
    assert decode_request(produce(7, batch(codec=4))).api_version == 7
    assert decode_request(produce(3, batch() + b"\x00\x01")).api_version == 3  # a partial tail
    old = {
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"topic": "t", "data": [{"partition": 0, "record_set": batch()}]}],
    }
    assert decode_request(encode_request(ApiKey.PRODUCE, 2, 1, "c", old)[4:]).api_version == 2


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (
            ApiKey.FETCH,
            4,
            {
                "replica_id": -1,
                "max_wait_time": 0,
                "min_bytes": 0,
                "max_bytes": 1,
                "isolation_level": 2,
                "topics": [],
            },
        ),
        (ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": -1, "topics": []}),
    ],
)
def test_an_unknown_isolation_level_is_a_protocol_error(api_key, version, body):
    with pytest.raises(ProtocolError, match="isolation level"):
        decode_request(encode_request(api_key, version, 1, "c", body)[4:])
