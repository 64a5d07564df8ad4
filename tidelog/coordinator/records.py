"""What the group coordinator writes to ``__consumer_offsets``, in Kafka's own schemas.

A key starts with an int16 version: 0 and 1 are an offset commit (group, topic, partition),
2 is a group's metadata (group). The value starts with its own int16 version: offset commit
value v0 (offset, metadata, timestamp), v1 (offset, metadata, commit and expire timestamps),
v2 (offset, metadata, commit timestamp: Kafka 2.1-IV0's, expiry by offsets.retention.minutes)
or v3 (v2 with the committed leader epoch, Kafka 2.1-IV1's); group metadata value v0 or v1 (v1
adds each member's rebalance timeout). A null value is a
tombstone: the commit or the group is gone. Kafka's GroupMetadataManager reads and writes the
same bytes, so Kafka's tools could read this topic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tidelog.protocol.types import (
    BYTES,
    INT32,
    INT64,
    NULLABLE_STRING,
    STRING,
    Array,
    ProtocolError,
    decode,
    encode,
    schema,
)

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY = schema(("group", STRING), ("topic", STRING), ("partition", INT32))
GROUP_METADATA_KEY = schema(("group", STRING))
OFFSET_COMMIT_VALUE_V0 = schema(("offset", INT64), ("metadata", STRING), ("timestamp", INT64))
OFFSET_COMMIT_VALUE_V1 = schema(
    ("offset", INT64),
    ("metadata", STRING),
    ("commit_timestamp", INT64),
    ("expire_timestamp", INT64),
)
OFFSET_COMMIT_VALUE_V2 = schema(
    ("offset", INT64), ("metadata", STRING), ("commit_timestamp", INT64)
)
OFFSET_COMMIT_VALUE_V3 = schema(
    ("offset", INT64),
    ("leader_epoch", INT32),
    ("metadata", STRING),
    ("commit_timestamp", INT64),
)
_MEMBER_V0 = schema(
    ("member_id", STRING),
    ("client_id", STRING),
    ("client_host", STRING),
    ("session_timeout", INT32),
    ("subscription", BYTES),
    ("assignment", BYTES),
)
_MEMBER_V1 = schema(
    ("member_id", STRING),
    ("client_id", STRING),
    ("client_host", STRING),
    ("session_timeout", INT32),
    ("rebalance_timeout", INT32),
    ("subscription", BYTES),
    ("assignment", BYTES),
)

# The fields of a stored member, as the latest group metadata value has them.
MEMBER_FIELDS = tuple(name for name, _ in _MEMBER_V1)


def _group_value(member: Any) -> Any:
    return schema(
        ("protocol_type", STRING),
        ("generation", INT32),
        ("protocol", NULLABLE_STRING),
        ("leader", NULLABLE_STRING),
        ("members", Array(member)),
    )


GROUP_METADATA_VALUES = {0: _group_value(_MEMBER_V0), 1: _group_value(_MEMBER_V1)}
OFFSET_COMMIT_VALUES = {
    0: OFFSET_COMMIT_VALUE_V0,
    1: OFFSET_COMMIT_VALUE_V1,
    2: OFFSET_COMMIT_VALUE_V2,
    3: OFFSET_COMMIT_VALUE_V3,
}
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
# the offset commit value written with an expire timestamp (below Kafka 2.1, or a commit that
# names its own retention), and without one from inter.broker.protocol.version 2.1-IV0 / -IV1
OFFSET_VALUE_VERSION = 1
GROUP_VALUE_VERSION = 1
VERSION = struct.Struct(">h")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as int32."""
    units = text.encode("utf-16-be")
    value = 0
    for (unit,) in struct.iter_unpack(">H", units):
        value = (31 * value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group: str, partitions: int) -> int:
    """The offsets partition of ``group``: Kafka's Utils.abs(hashCode) % partitions (where
    Utils.abs maps Integer.MIN_VALUE to 0)."""
    hashed = java_string_hash(group)
    return (0 if hashed == -(2**31) else abs(hashed)) % partitions


@dataclass(frozen=True)
class CommittedOffset:
    """An offset commit as stored: expire_timestamp is when offset expiry may drop it;
    leader_epoch is the epoch of the committed offset's leader that the consumer named
    (OffsetCommit v6), -1 when none is known."""

    offset: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    leader_epoch: int = -1


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return VERSION.pack(OFFSET_KEY_VERSION) + encode(
        OFFSET_COMMIT_KEY, {"group": group, "topic": topic, "partition": partition}
    )


def group_key(group: str) -> bytes:
    return VERSION.pack(GROUP_KEY_VERSION) + encode(GROUP_METADATA_KEY, {"group": group})


def offset_value(committed: CommittedOffset, version: int = OFFSET_VALUE_VERSION) -> bytes:
    """The value of ``committed`` in offset commit value ``version`` (1, 2 or 3; v2 and v3
    keep no expire timestamp: it is the commit timestamp plus offsets.retention.minutes)."""
    if version not in (1, 2, 3):
        raise ValueError(f"offset commit value version {version}: tidelog writes 1, 2 or 3")
    value = {
        "offset": committed.offset,
        "metadata": committed.metadata,
        "commit_timestamp": committed.commit_timestamp,
        "expire_timestamp": committed.expire_timestamp,
        "leader_epoch": committed.leader_epoch,
    }
    return VERSION.pack(version) + encode(OFFSET_COMMIT_VALUES[version], value)


def group_value(metadata: dict[str, Any]) -> bytes:
    """``metadata`` as GROUP_METADATA_VALUES[1] names its fields."""
    return VERSION.pack(GROUP_VALUE_VERSION) + encode(GROUP_METADATA_VALUES[1], metadata)


def read_key(data: bytes) -> tuple[str, dict[str, Any]]:
    """("offset", {group, topic, partition}) or ("group", {group}); ProtocolError otherwise."""
    if len(data) < VERSION.size:
        raise ProtocolError("an offsets-topic key shorter than its version")
    (version,) = VERSION.unpack_from(data)
    if version in (0, 1):
        return "offset", _whole(OFFSET_COMMIT_KEY, data)
    if version == GROUP_KEY_VERSION:
        return "group", _whole(GROUP_METADATA_KEY, data)
    raise ProtocolError(f"unknown offsets-topic key version {version}")


def read_offset_value(data: bytes, retention_ms: int = -1) -> CommittedOffset:
    """A stored commit; one of a version without an expire timestamp (v2, v3) expires
    ``retention_ms`` (offsets.retention.minutes) after its commit, never when it is -1."""
    (version,) = VERSION.unpack_from(data)
    if version not in OFFSET_COMMIT_VALUES:
        raise ProtocolError(f"unknown offset commit value version {version}")
    value = _whole(OFFSET_COMMIT_VALUES[version], data)
    if version == 0:
        return CommittedOffset(value["offset"], value["metadata"], value["timestamp"], -1)
    committed_at = value["commit_timestamp"]
    if version == 1:
        return CommittedOffset(
            value["offset"], value["metadata"], committed_at, value["expire_timestamp"]
        )
    return CommittedOffset(
        value["offset"],
        value["metadata"],
        committed_at,
        committed_at + retention_ms if retention_ms >= 0 else -1,
        max(value.get("leader_epoch", -1), -1),
    )


def read_group_value(data: bytes) -> dict[str, Any]:
    """The group metadata value, members' rebalance_timeout filled in from session_timeout for
    v0 (as Kafka does) and their byte fields as bytes."""
    (version,) = VERSION.unpack_from(data)
    if version not in GROUP_METADATA_VALUES:
        raise ProtocolError(f"unknown group metadata value version {version}")
    value = _whole(GROUP_METADATA_VALUES[version], data)
    for member in value["members"]:
        member.setdefault("rebalance_timeout", member["session_timeout"])
        for name in ("subscription", "assignment"):
            member[name] = bytes(member[name] or b"")
    return value


def _whole(field_type: Any, data: bytes) -> dict[str, Any]:
    value, end = decode(field_type, data, VERSION.size)
    if end != len(data):
        raise ProtocolError(f"{len(data) - end} bytes left after an offsets-topic record")
    return value
