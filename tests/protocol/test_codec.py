"""Every schema round-trips through the one codec; bad bytes are ProtocolError, not a crash."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.protocol.frames import (
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tidelog.protocol.schemas import APIS, ApiKey
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
    decode,
    encode,
    schema,
)

PRIMITIVES = {
    INT8: st.integers(-(2**7), 2**7 - 1),
    INT16: st.integers(-(2**15), 2**15 - 1),
    INT32: st.integers(-(2**31), 2**31 - 1),
    INT64: st.integers(-(2**63), 2**63 - 1),
    BOOLEAN: st.booleans(),
    STRING: st.text(max_size=20),
    NULLABLE_STRING: st.none() | st.text(max_size=20),
    BYTES: st.none() | st.binary(max_size=40),
    RECORDS: st.none() | st.binary(max_size=40),
}


def values_of(field_type):
    if isinstance(field_type, tuple):
        return st.fixed_dictionaries({name: values_of(member) for name, member in field_type})
    if isinstance(field_type, Array):
        items = st.lists(values_of(field_type.item), max_size=3)
        return st.none() | items if field_type.nullable else items
    return PRIMITIVES[field_type]


def normalized(value):
    """Decoded values hold memoryviews for bytes; compare them as bytes."""
    if isinstance(value, dict):
        return {key: normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalized(item) for item in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


EVERY_SCHEMA = [
    (f"{ApiKey(key).name} v{version} {kind}", schema)
    for key, api in APIS.items()
    for kind, schemas in (("request", api.requests), ("response", api.responses))
    for version, schema in enumerate(schemas)
]


@pytest.mark.parametrize(("name", "schema"), EVERY_SCHEMA, ids=[n for n, _ in EVERY_SCHEMA])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_schema_round_trips(name, schema, data):
    value = data.draw(values_of(schema))

    encoded = encode(schema, value)
    decoded, end = decode(schema, encoded)

    assert end == len(encoded)
    assert normalized(decoded) == value


def test_a_request_frame_round_trips_with_its_header():
    body = {"replica_id": -1, "max_wait_time": 100, "min_bytes": 1, "max_bytes": 1000, "topics": []}

    frame = encode_request(ApiKey.FETCH, 3, 42, "tidelog-test", body)
    request = decode_request(frame[4:])

    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert (request.api_key, request.api_version, request.correlation_id) == (ApiKey.FETCH, 3, 42)
    assert request.client_id == "tidelog-test" and request.body == body


def test_a_response_frame_is_sized_over_all_its_parts():
    parts = encode_response(ApiKey.API_VERSIONS, 0, 7, {"error_code": 35, "api_versions": []})
    frame = b"".join(parts)

    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert decode_response(ApiKey.API_VERSIONS, 0, frame[4:]) == (
        7,
        {"error_code": 35, "api_versions": []},
    )


def test_an_unknown_api_or_version_is_unsupported_and_keeps_its_correlation_id():
    frame = encode_request(ApiKey.METADATA, 0, 9, None, {"topics": []})[4:]
    unknown_version = frame[:2] + (99).to_bytes(2, "big") + frame[4:]
    unknown_api = (77).to_bytes(2, "big") + frame[2:]

    for bad in (unknown_version, unknown_api):
        with pytest.raises(UnsupportedRequest) as raised:
            decode_request(bad)
        assert raised.value.correlation_id == 9


@settings(max_examples=200, deadline=None)
@given(garbage=st.binary(max_size=64))
def test_random_bytes_never_raise_anything_but_protocol_errors(garbage):
    frame = encode_request(ApiKey.PRODUCE, 2, 1, "c", {"acks": 1, "timeout": 10, "topic_data": []})
    for candidate in (garbage, frame[4:12] + garbage):
        with contextlib.suppress(ProtocolError):
            decode_request(candidate)


def test_a_truncated_request_is_a_protocol_error():
    frame = encode_request(ApiKey.METADATA, 1, 3, "c", {"topics": ["a", "b"]})[4:]

    with pytest.raises(ProtocolError):
        decode_request(frame[:-1])
    with pytest.raises(ProtocolError, match="left after"):
        decode_request(frame + b"\x00")


EVERY_REQUEST = [
    (ApiKey(key), version) for key, api in APIS.items() for version in range(len(api.requests))
]


@pytest.mark.parametrize(
    ("api_key", "version"), EVERY_REQUEST, ids=[f"{k.name}-v{v}" for k, v in EVERY_REQUEST]
)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_request_version_cut_short_or_padded_is_a_protocol_error(api_key, version, data):
    """Any request of any version, cut at any byte or with a byte left over, is refused with
    ProtocolError (its connection is closed), never another exception."""
    body = data.draw(values_of(APIS[api_key].requests[version]))
    frame = bytes(encode_request(api_key, version, 1, "c", body))[4:]
    with contextlib.suppress(ProtocolError):  # a value Kafka's own checks refuse
        decode_request(frame)
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:end])
    with pytest.raises(ProtocolError):
        decode_request(frame + b"\x00")


def test_arrays_of_empty_schemas_and_of_nullable_strings_round_trip():
    """Shapes no API of today's has, which the compiled codec writes out inline all the same."""
    shape = schema(
        ("empty_items", Array(schema())),
        ("names", Array(schema(("name", NULLABLE_STRING)), nullable=True)),
        ("last", INT32),
    )
    for value in (
        {"empty_items": [{}, {}, {}], "names": [{"name": None}, {"name": "é"}], "last": 7},
        {"empty_items": [], "names": None, "last": -1},
    ):
        assert decode(shape, encode(shape, value)) == (value, len(encode(shape, value)))
