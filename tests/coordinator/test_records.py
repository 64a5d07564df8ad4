"""The offsets topic's keys and values in Kafka's schemas, and Kafka's group-to-partition rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.coordinator import records
from tidelog.coordinator.records import CommittedOffset, java_string_hash, partition_for
from tidelog.protocol.types import ProtocolError, encode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),  # Java's own example of a hash of Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # hashed as its two UTF-16 code units
    ],
)
def test_java_string_hash_matches_javas(text, expected):
    assert java_string_hash(text) == expected


def test_a_group_hashing_to_min_value_goes_to_partition_zero_as_with_kafkas_utils_abs():
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("Hello World", 50) == 862545276 % 50


@given(group=st.text(max_size=30), topic=st.text(max_size=30), partition=st.integers(0, 2**31 - 1))
def test_offset_keys_and_values_round_trip(group, topic, partition):
    committed = CommittedOffset(12, "meta", 1000, 2000)

    assert records.read_key(records.offset_key(group, topic, partition)) == (
        "offset",
        {"group": group, "topic": topic, "partition": partition},
    )
    assert records.read_key(records.group_key(group)) == ("group", {"group": group})
    assert records.read_offset_value(records.offset_value(committed)) == committed


def test_a_v0_offset_value_and_a_v0_group_value_are_read_as_kafka_wrote_them():
    v0 = b"\x00\x00" + encode(
        records.OFFSET_COMMIT_VALUE_V0, {"offset": 5, "metadata": "", "timestamp": 77}
    )
    assert records.read_offset_value(v0) == CommittedOffset(5, "", 77, -1)
    member = {
        "member_id": "m",
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "session_timeout": 10000,
        "subscription": b"s",
        "assignment": b"a",
    }
    group = {
        "protocol_type": "consumer",
        "generation": 3,
        "protocol": "range",
        "leader": "m",
        "members": [member],
    }
    value = records.read_group_value(b"\x00\x00" + encode(records.GROUP_METADATA_VALUES[0], group))
    assert value["members"][0]["rebalance_timeout"] == 10000  # v0: the session timeout
    assert value["generation"] == 3 and value["members"][0]["assignment"] == b"a"


@pytest.mark.parametrize("key", [b"", b"\x00", b"\x00\x07abc", b"\x00\x02\x00\x05ab"])
def test_keys_that_do_not_parse_are_protocol_errors(key):
    with pytest.raises(ProtocolError):
        records.read_key(key)


def test_values_v2_and_v3_keep_no_expiry_and_v3_keeps_the_committed_leader_epoch():
    committed = CommittedOffset(12, "meta", 1000, 2000, leader_epoch=4)
    v3 = records.offset_value(committed, 3)
    assert v3[:2] == b"\x00\x03"
    # the expire timestamp is the commit's plus offsets.retention.minutes, as read
    assert records.read_offset_value(v3, 500) == CommittedOffset(12, "meta", 1000, 1500, 4)
    assert records.read_offset_value(v3) == CommittedOffset(12, "meta", 1000, -1, 4)
    v2 = records.offset_value(committed, 2)
    assert records.read_offset_value(v2, 500) == CommittedOffset(12, "meta", 1000, 1500, -1)
    # v1 keeps its expire timestamp and no epoch, as before
    assert records.read_offset_value(records.offset_value(committed, 1), 500) == CommittedOffset(
        12, "meta", 1000, 2000, -1
    )


def test_a_v3_value_is_laid_out_as_kafka_2_1_writes_it():
    v3 = records.offset_value(CommittedOffset(7, "m", 99, -1, leader_epoch=2), 3)
    # version, offset, leader epoch, metadata, commit timestamp (GroupMetadataManager's v3)
    assert v3 == b"\x00\x03" + (7).to_bytes(8, "big") + (2).to_bytes(4, "big") + b"\x00\x01m" + (
        99
    ).to_bytes(8, "big")


def test_an_offset_value_version_tidelog_does_not_write_is_refused_by_name():
    with pytest.raises(ValueError, match="offset commit value version 0"):
        records.offset_value(CommittedOffset(1, "", 0, -1), 0)
