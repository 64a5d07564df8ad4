"""A leader's validation and offset assignment: every rule of DESIGN.md's "Message format"."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import message_set
from tests.records.test_format import read_with_kafka_python
from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.compression import compress
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    encode_entry,
    encode_message,
    iter_deep,
    iter_shallow,
)
from tidelog.records.validation import RecordsPolicy, validate_and_assign_offsets

NOW = 1_700_000_000_000
V0 = RecordsPolicy(magic=0)
V1 = RecordsPolicy(magic=1)
V1_APPEND_TIME = RecordsPolicy(magic=1, timestamp_type=TimestampType.LOG_APPEND_TIME)


def validate(buffer, policy=V1, next_offset=0, now=NOW, last_appended=-1):
    return validate_and_assign_offsets(
        buffer,
        next_offset=next_offset,
        policy=policy,
        now=now,
        last_appended_timestamp=last_appended,
    )


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_offsets_are_assigned_from_the_log_end(codec, magic):
    producer_set = message_set(5, magic=magic, codec=codec, timestamp=lambda i: NOW - i)

    result = validate(producer_set, RecordsPolicy(magic=magic), next_offset=42)

    assert [m.offset for m in iter_deep(result.buffer)] == [42, 43, 44, 45, 46]
    assert (result.first_offset, result.last_offset) == (42, 46)
    assert all(m.crc_valid for m in iter_shallow(result.buffer))
    assert len(read_with_kafka_python(result.buffer)) == 5


def test_a_v1_compressed_set_is_not_recompressed_only_its_wrapper_changes():
    producer_set = message_set(10, codec=Codec.SNAPPY, timestamp=lambda i: NOW + i)
    (before,) = iter_shallow(producer_set)

    result = validate(producer_set, next_offset=100)

    (after,) = iter_shallow(result.buffer)
    assert not result.recompressed
    assert after.value == before.value  # the compressed bytes are untouched
    assert after.offset == 109
    assert after.timestamp == NOW + 9
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (NOW + 9, 109)


def test_a_v1_compressed_set_with_inner_offsets_out_of_order_is_rebuilt():
    inner_absolute = build_message_set(
        [Record(b"k", b"v", NOW)] * 3, magic=0, codec=Codec.GZIP, base_offset=7
    )
    # A v1 wrapper around inner offsets 7, 8, 9 instead of 0, 1, 2: made by up-converting v0.
    producer_set = validate(inner_absolute, V1, next_offset=7).buffer
    assert [m.offset for m in iter_deep(producer_set)] == [7, 8, 9]
    shifted = validate(producer_set, V1, next_offset=20)

    assert [m.offset for m in iter_deep(shifted.buffer)] == [20, 21, 22]


def test_a_v0_compressed_set_is_recompressed_with_absolute_inner_offsets():
    producer_set = message_set(4, magic=0, codec=Codec.LZ4)

    result = validate(producer_set, V0, next_offset=1000)

    assert result.recompressed
    assert [m.offset for m in iter_deep(result.buffer)] == [1000, 1001, 1002, 1003]
    assert [o for o, *_ in read_with_kafka_python(result.buffer)] == [1000, 1001, 1002, 1003]


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_log_append_time_stamps_the_broker_time(codec):
    producer_set = message_set(3, codec=codec, timestamp=5)

    result = validate(producer_set, V1_APPEND_TIME, now=NOW)

    assert {(m.timestamp, m.timestamp_type) for m in iter_deep(result.buffer)} == {
        (NOW, TimestampType.LOG_APPEND_TIME)
    }
    assert result.log_append_time == NOW
    assert result.max_timestamp == NOW
    assert {t for _, t, _, _ in read_with_kafka_python(result.buffer)} == {NOW}


def test_log_append_time_never_goes_back_behind_the_last_appended_timestamp():
    """A new leader whose clock is slower than the old one's keeps time moving forward."""
    result = validate(message_set(2), V1_APPEND_TIME, now=NOW, last_appended=NOW + 5000)

    assert {m.timestamp for m in iter_deep(result.buffer)} == {NOW + 5000}


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_create_time_too_far_from_the_broker_clock_is_invalid_timestamp(codec):
    policy = RecordsPolicy(magic=1, timestamp_difference_max_ms=1000)
    in_range = message_set(2, codec=codec, timestamp=NOW - 1000)
    too_old = message_set(2, codec=codec, timestamp=lambda i: NOW - 1000 - i)

    validate(in_range, policy)
    with pytest.raises(KafkaError) as raised:
        validate(too_old, policy)

    assert raised.value.code == ErrorCode.INVALID_TIMESTAMP


def test_out_of_order_create_time_is_kept_and_the_maximum_is_reported():
    producer_set = message_set(3, timestamp=lambda i: [NOW + 5, NOW + 9, NOW + 1][i])

    result = validate(producer_set, next_offset=10)

    assert [m.timestamp for m in iter_deep(result.buffer)] == [NOW + 5, NOW + 9, NOW + 1]
    assert (result.max_timestamp, result.offset_of_max_timestamp) == (NOW + 9, 11)


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.SNAPPY])
def test_a_message_above_max_message_bytes_is_message_too_large(codec):
    """The limit applies to each top-level entry: a compressed wrapper counts as one."""
    policy = RecordsPolicy(magic=1, max_message_bytes=500)
    validate(build_message_set([Record(b"k", os.urandom(300), NOW)], magic=1, codec=codec), policy)

    with pytest.raises(KafkaError) as raised:
        validate(
            build_message_set([Record(b"k", os.urandom(600), NOW)], magic=1, codec=codec), policy
        )

    assert raised.value.code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_a_compacted_topic_refuses_a_message_without_key(codec):
    policy = RecordsPolicy(magic=1, compacted=True)
    validate(message_set(2, codec=codec, key=b"k"), policy)

    with pytest.raises(KafkaError) as raised:
        validate(message_set(2, codec=codec, key=None), policy)

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE
    assert "key" in raised.value.message


def test_a_crc_error_anywhere_refuses_the_whole_set():
    producer_set = bytearray(message_set(5))
    producer_set[-3] ^= 0x01

    with pytest.raises(KafkaError) as raised:
        validate(bytes(producer_set))

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


def test_an_unknown_magic_is_refused():
    producer_set = bytearray(message_set(1))
    producer_set[16] = 3  # magics 0-2 are Kafka's formats; 3 is no format at all

    with pytest.raises(KafkaError, match="unknown magic") as raised:
        validate(bytes(producer_set))

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


def test_a_v1_wrapper_around_v0_messages_is_refused():
    inner = message_set(2, magic=0)
    wrapper = encode_entry(1, encode_message(1, None, compress(Codec.GZIP, inner, 1), NOW, 1))

    with pytest.raises(KafkaError, match="inner message of magic 0"):
        validate(wrapper)


def test_an_empty_or_truncated_set_is_corrupt_message():
    whole = message_set(3)
    for damaged in (b"", whole[:-5], whole[:7]):
        with pytest.raises(KafkaError) as raised:
            validate(damaged)
        assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_v0_messages_on_a_v1_topic_are_up_converted_with_the_broker_time(codec):
    result = validate(message_set(3, magic=0, codec=codec), V1, next_offset=5, now=NOW)

    messages = list(iter_deep(result.buffer))
    assert {(m.magic, m.timestamp) for m in messages} == {(1, NOW)}
    assert [m.offset for m in messages] == [5, 6, 7]
    assert result.max_timestamp == NOW


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_v1_messages_on_a_v0_topic_are_down_converted(codec):
    result = validate(message_set(3, magic=1, codec=codec, timestamp=NOW), V0, next_offset=5)

    messages = list(iter_deep(result.buffer))
    assert {(m.magic, m.timestamp) for m in messages} == {(0, -1)}
    assert [m.offset for m in messages] == [5, 6, 7]
    assert result.max_timestamp == -1
    assert [o for o, *_ in read_with_kafka_python(result.buffer)] == [5, 6, 7]


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.integers(1, 8), st.sampled_from(list(MESSAGE_SET_CODECS)), st.sampled_from([0, 1])
        ),
        min_size=1,
        max_size=5,
    ),
    target=st.sampled_from([0, 1]),
)
def test_any_mix_of_wrappers_gets_consecutive_offsets_and_keeps_every_value(batches, target):
    producer_set = b"".join(
        message_set(count, magic=magic, codec=codec, timestamp=NOW, value_size=10 + number)
        for number, (count, codec, magic) in enumerate(batches)
    )
    total = sum(count for count, _, _ in batches)

    result = validate(producer_set, RecordsPolicy(magic=target), next_offset=300)

    messages = list(iter_deep(result.buffer))
    assert [m.offset for m in messages] == list(range(300, 300 + total))
    assert {m.magic for m in messages} == {target}
    assert [len(m.value) for m in messages] == [
        10 + number for number, (count, _, _) in enumerate(batches) for _ in range(count)
    ]
    assert [o for o, *_ in read_with_kafka_python(result.buffer)] == list(range(300, 300 + total))


def _general_and_fast(buffer: bytes, policy: RecordsPolicy, last_appended: int = -1):
    """The general path's outcome (a ValidatedMessageSet or the KafkaError's code and text)
    and the single-wrapper fast path's (None where it declines), each on its own copy."""
    from tidelog.records.validation import _single_v1_wrapper, _validated_in_general

    try:
        general = _validated_in_general(bytearray(buffer), 7, policy, NOW, last_appended)
    except KafkaError as error:
        general = (error.code, str(error))
    fast = _single_v1_wrapper(bytearray(buffer), 7, policy, NOW, last_appended)
    return general, fast


def _wrapper_around(inner: bytes, codec: Codec = Codec.SNAPPY) -> bytes:
    return encode_entry(0, encode_message(1, None, compress(codec, inner, 1), NOW, int(codec)))


def _inner(*messages: tuple[int, bytes | None, int]) -> bytes:
    """(offset, key, timestamp) per uncompressed v1 message."""
    return b"".join(
        encode_entry(offset, encode_message(1, key, b"value", timestamp, 0))
        for offset, key, timestamp in messages
    )


GOOD_WRAPPER = _wrapper_around(_inner((0, b"k", NOW - 1), (1, b"k", NOW + 5), (2, b"k", NOW)))
FLIPPED_BYTE = bytearray(GOOD_WRAPPER)
FLIPPED_BYTE[-3] ^= 0xFF


@pytest.mark.parametrize(
    "producer_set, policy",
    [
        pytest.param(GOOD_WRAPPER, V1, id="librdkafka's shape"),
        pytest.param(GOOD_WRAPPER, V1_APPEND_TIME, id="LogAppendTime"),
        pytest.param(message_set(4, codec=Codec.GZIP, timestamp=lambda i: NOW - i), V1, id="gzip"),
        pytest.param(message_set(4, codec=Codec.LZ4, timestamp=NOW), V1, id="lz4"),
        pytest.param(GOOD_WRAPPER, RecordsPolicy(magic=1, max_message_bytes=40), id="too large"),
        pytest.param(
            GOOD_WRAPPER,
            RecordsPolicy(magic=1, timestamp_difference_max_ms=2),
            id="CreateTime too far",
        ),
        pytest.param(bytes(FLIPPED_BYTE), V1, id="CRC mismatch"),
        pytest.param(
            _wrapper_around(_inner((0, None, NOW), (1, b"k", NOW))),
            RecordsPolicy(magic=1, compacted=True),
            id="compacted without key",
        ),
        pytest.param(
            _wrapper_around(_inner((0, b"k", NOW), (5, b"k", NOW))), V1, id="inner out of order"
        ),
        pytest.param(
            _wrapper_around(_inner((0, b"k", -1), (1, b"k", -1))), V1, id="no inner timestamps"
        ),
        pytest.param(GOOD_WRAPPER + message_set(1), V1, id="a wrapper and a message"),
        pytest.param(message_set(3), V1, id="uncompressed"),
        pytest.param(message_set(3, magic=0, codec=Codec.SNAPPY), V1, id="v0 wrapper"),
        pytest.param(
            encode_entry(0, encode_message(1, None, None, NOW, int(Codec.SNAPPY))),
            V1,
            id="null wrapper value",
        ),
        pytest.param(
            encode_entry(0, encode_message(1, None, b"not snappy", NOW, int(Codec.SNAPPY))),
            V1,
            id="value does not decompress",
        ),
        pytest.param(GOOD_WRAPPER[:-1], V1, id="cut short"),
    ],
)
def test_the_single_wrapper_fast_path_answers_as_the_general_path_or_declines(producer_set, policy):
    general, fast = _general_and_fast(producer_set, policy, last_appended=NOW + 100)

    if fast is not None:
        assert fast == general
    else:
        # declined: only a set the fast path is not for, or one the general path refuses
        refused = isinstance(general, tuple)
        assert refused or general.recompressed or len(list(iter_shallow(producer_set))) > 1


def test_the_fast_path_takes_librdkafkas_shape():
    _, fast = _general_and_fast(GOOD_WRAPPER, V1)

    assert fast is not None and (fast.first_offset, fast.last_offset) == (7, 9)
    assert (fast.max_timestamp, fast.offset_of_max_timestamp) == (NOW + 5, 9)


def _run_outcome(walk, buffer: bytes, checks, assign_from):
    """What a walk over v0/v1 messages answers (or the error it raises), and the buffer after."""
    out = bytearray(buffer)
    try:
        answer = walk(out, 0, len(out), checks, assign_from)
    except KafkaError as error:
        answer = (error.code, str(error))
    return answer, bytes(out)


@settings(max_examples=300, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    messages=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=12)),
            st.one_of(st.none(), st.binary(max_size=40)),
            st.integers(NOW - 5_000, NOW + 5_000),
        ),
        min_size=0,
        max_size=6,
    ),
    cut=st.integers(0, 30),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    compacted=st.booleans(),
    max_difference=st.sampled_from([None, 0, 1_000, 10_000]),
    append_time=st.sampled_from([-1, NOW + 7]),
    assign_from=st.sampled_from([None, 0, 1_000]),
    max_size=st.sampled_from([2**31 - 1, 60]),
)
def test_the_c_walk_over_v0_v1_messages_answers_as_the_python_one(
    magic, messages, cut, flips, compacted, max_difference, append_time, assign_from, max_size
):
    """Whole runs and damaged ones (cut short, bytes changed), under every check: the C loop
    and the Python reference give the same answer, raise the same error and leave the same
    bytes (offsets assigned, LogAppendTime stamped)."""
    from tidelog.records.validation import _Checks, _plain_run, native, plain_run_python

    assert native is not None, "make install builds tidelog/records/_record_walk.c"
    buffer = bytearray(
        b"".join(
            encode_entry(i, encode_message(magic, key, value, timestamp, 0))
            for i, (key, value, timestamp) in enumerate(messages)
        )
    )
    if cut and len(buffer) > cut:
        del buffer[-cut:]
    for at, value in flips:
        if buffer:
            buffer[at % len(buffer)] = value
    checks = _Checks(
        magic, max_size, compacted, NOW, max_difference if magic == 1 else None, append_time
    )

    python = _run_outcome(plain_run_python, bytes(buffer), checks, assign_from)
    c = _run_outcome(_plain_run, bytes(buffer), checks, assign_from)

    assert c == python


@pytest.mark.parametrize("magic", [0, 1])
def test_offsets_that_would_pass_the_largest_offset_are_refused_before_any_is_written(magic):
    """A log at the end of the offset range (only a damaged or crafted one gets there): both
    walks refuse the run with the same error and leave every byte as it was, where the C loop
    used to write offsets that wrapped round to negative ones."""
    from tidelog.records.validation import LARGEST_OFFSET, _Checks, _plain_run, plain_run_python

    buffer = bytes(
        b"".join(encode_entry(i, encode_message(magic, b"k", b"v", NOW, 0)) for i in range(3))
    )
    checks = _Checks(magic, 2**31 - 1, False, NOW, None, -1)

    python = _run_outcome(plain_run_python, buffer, checks, LARGEST_OFFSET - 1)
    c = _run_outcome(_plain_run, buffer, checks, LARGEST_OFFSET - 1)

    assert c == python
    assert python[0][0] == ErrorCode.UNKNOWN and "largest offset" in python[0][1]
    assert python[1] == buffer
    # far enough from the end, the same run is taken
    assert _run_outcome(_plain_run, buffer, checks, LARGEST_OFFSET - 2**20)[0][1] == 3
    # the C loop alone, called past the caller's check, stops before an offset would wrap
    from tidelog.records.validation import native

    assert native is not None
    out = bytearray(buffer)
    walked = native.plain_run(
        out, 0, len(out), magic, 2**31 - 1, False, NOW, -1, -1, LARGEST_OFFSET - 1
    )
    assert walked[1] == 2  # offsets 2^63 - 2 and 2^63 - 1, then it stops
    assert [int.from_bytes(out[at : at + 8], "big", signed=True) for at in (0, len(out) // 3)] == [
        LARGEST_OFFSET - 1,
        LARGEST_OFFSET,
    ]


@pytest.mark.parametrize(
    ("magic", "policy"),
    [(1, V1), (0, V0), (0, V1)],
    ids=["v1 wrapper, fast path", "v0 wrapper", "v0 wrapper converted to v1"],
)
def test_a_compressed_wrapper_whose_offsets_would_pass_the_largest_is_refused(magic, policy):
    """A wrapper's inner count is not bounded by its compressed bytes, so its offsets are
    checked once it is decompressed, before the wrapper or its inner set is rewritten."""
    from tidelog.records.validation import LARGEST_OFFSET

    wrapper = message_set(3, magic=magic, codec=Codec.GZIP, timestamp=NOW)

    with pytest.raises(KafkaError, match="largest offset") as refused:
        validate(wrapper, policy=policy, next_offset=LARGEST_OFFSET - 2)
    assert refused.value.code == ErrorCode.UNKNOWN
    assert validate(wrapper, policy=policy, next_offset=LARGEST_OFFSET - 3).last_offset == (
        LARGEST_OFFSET - 1
    )
