"""Every request of every API and version tidelog serves parses back to what was written, and
every shorter or longer copy of it is refused (a ProtocolError: the broker closes that
connection), as are wrong types where a parser could mistake them: a negative array or string
length, a string that is not UTF-8. The requests are built from the schemas themselves, one
example value per field, so a version added later is covered without a new test.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tidelog.protocol.frames import decode_request, encode_request
from tidelog.protocol.schemas import (
    APIS,
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    RELEASE_API_VERSIONS,
    ApiKey,
)
from tidelog.protocol.types import (
    BOOLEAN,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NULLABLE_STRING,
    RECORDS,
    STRING,
    Array,
    ProtocolError,
)

# the APIs issue 24 brings to Kafka 2.1's versions, each version of which is checked here
NEW = (
    ApiKey.METADATA,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.GROUP_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.LIST_GROUPS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.DELETE_RECORDS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_LOG_DIRS,
)
CASES = [
    pytest.param(key, version, id=f"{key.name}-v{version}")
    for key in NEW
    for version in range(RELEASE_API_VERSIONS["2.1"][key] + 1)
]


def example(field_type: Any) -> Any:
    """A value of ``field_type`` with something in every field (one item in each array)."""
    if isinstance(field_type, tuple):
        return {name: example(member) for name, member in field_type}
    if isinstance(field_type, Array):
        return [example(field_type.item)]
    if field_type is BOOLEAN:
        return True
    if field_type is INT8:
        return 1  # a valid isolation level and coordinator type
    if field_type in (INT16, INT32, INT64):
        return 7
    if field_type in (STRING, NULLABLE_STRING):
        return "é-name"
    if field_type in (BYTES, RECORDS):
        return b"\x00\x01"
    raise AssertionError(f"no example for {field_type!r}")


def frame(key: ApiKey, version: int, body: dict) -> bytes:
    return bytes(encode_request(key, version, 1, "c", body)[4:])  # without the size


@pytest.mark.parametrize(("key", "version"), CASES)
def test_a_request_parses_back_and_any_cut_or_extra_byte_is_refused(key, version):
    body = example(APIS[key].requests[version])
    whole = frame(key, version, body)
    request = decode_request(whole)
    assert (request.api_key, request.api_version) == (key, version)
    header = len(frame(ApiKey.LIST_GROUPS, 0, {}))  # a header and an empty body
    for end in range(header, len(whole)):
        with pytest.raises(ProtocolError):
            decode_request(whole[:end])
    with pytest.raises(ProtocolError, match="left after"):
        decode_request(whole + b"\x00")


def _length_first(key: ApiKey, version: int) -> str | None:
    """ ">h" or ">i": the length that opens the request body when its first field is a string
    or an array; None for a body that opens with a number (any value of which parses)."""
    schema = APIS[key].requests[version]
    if not schema:
        return None
    first = schema[0][1]
    if first in (STRING, NULLABLE_STRING):
        return ">h"
    return ">i" if isinstance(first, Array) else None


@pytest.mark.parametrize(
    ("key", "version"), [case for case in CASES if _length_first(*case.values) is not None]
)
def test_a_length_of_minus_two_where_a_string_or_array_begins_is_refused(key, version):
    """No string or array is null at -2: the body does not parse."""
    whole = frame(key, version, example(APIS[key].requests[version]))
    header = len(frame(ApiKey.LIST_GROUPS, 0, {}))
    length = _length_first(key, version)
    assert length is not None
    bad = whole[:header] + struct.pack(length, -2) + whole[header + struct.calcsize(length) :]
    with pytest.raises(ProtocolError):
        decode_request(bad)


def test_a_string_that_is_not_utf8_is_refused():
    body = {"coordinator_key": "group", "coordinator_type": COORDINATOR_GROUP}
    whole = bytearray(frame(ApiKey.GROUP_COORDINATOR, 2, body))
    whole[-2] = 0xFF  # inside "group"
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_request(bytes(whole))


@pytest.mark.parametrize("coordinator_type", [2, -1, 127])
def test_find_coordinator_of_an_unknown_type_does_not_parse(coordinator_type):
    body = {"coordinator_key": "g", "coordinator_type": coordinator_type}
    with pytest.raises(ProtocolError, match="coordinator type"):
        decode_request(frame(ApiKey.GROUP_COORDINATOR, 1, body))
    for known in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
        body["coordinator_type"] = known
        assert decode_request(frame(ApiKey.GROUP_COORDINATOR, 2, body)).body == body
