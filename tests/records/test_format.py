"""Message format v0/v1: what is encoded reads back the same, through tidelog and kafka-python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    encode_message,
    iter_deep,
    iter_shallow,
    read_entry,
    scan_entries,
)

optional_bytes = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(
    st.builds(Record, optional_bytes, optional_bytes, st.integers(0, 2**62)),
    min_size=1,
    max_size=20,
)


def read_with_kafka_python(buffer: bytes) -> list[tuple]:
    """Every logical message as kafka-python's MemoryRecords reads it."""
    reader, out = MemoryRecords(buffer), []
    while (batch := reader.next_batch()) is not None:
        for record in batch:
            timestamp = -1 if record.timestamp is None else record.timestamp
            out.append((record.offset, timestamp, record.key, record.value))
    return out


@settings(max_examples=40, deadline=None)
@given(
    records=records, magic=st.sampled_from([0, 1]), codec=st.sampled_from(list(MESSAGE_SET_CODECS))
)
def test_a_message_set_reads_back_as_written(records, magic, codec):
    buffer = build_message_set(records, magic=magic, codec=codec, base_offset=1000)

    messages = list(iter_deep(buffer))

    assert [m.offset for m in messages] == list(range(1000, 1000 + len(records)))
    assert [(m.key, m.value) for m in messages] == [(r.key, r.value) for r in records]
    expected_times = [r.timestamp if magic == 1 else -1 for r in records]
    assert [m.timestamp for m in messages] == expected_times
    assert all(m.crc_valid for m in messages)
    assert read_with_kafka_python(buffer) == [
        (m.offset, m.timestamp, m.key, m.value) for m in messages
    ]


def test_a_v1_wrapper_carries_the_last_offset_and_the_largest_timestamp():
    batch = [Record(b"a", b"1", 50), Record(b"b", b"2", 70), Record(b"c", b"3", 60)]
    buffer = build_message_set(batch, magic=1, codec=Codec.GZIP, base_offset=10)

    (wrapper,) = iter_shallow(buffer)

    assert wrapper.offset == 12
    assert wrapper.timestamp == 70
    assert wrapper.codec == Codec.GZIP
    assert wrapper.timestamp_type == TimestampType.CREATE_TIME


def test_log_append_time_on_the_wrapper_stands_for_every_inner_message():
    batch = [Record(b"a", b"1", 50), Record(b"b", b"2", 70)]
    buffer = build_message_set(
        batch,
        magic=1,
        codec=Codec.SNAPPY,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        wrapper_timestamp=999,
    )

    assert [(m.timestamp, m.timestamp_type) for m in iter_deep(buffer)] == [
        (999, TimestampType.LOG_APPEND_TIME),
        (999, TimestampType.LOG_APPEND_TIME),
    ]
    assert [t for _, t, _, _ in read_with_kafka_python(buffer)] == [999, 999]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:-1], "partial message"),
        (lambda b: b[:10], "partial entry header"),
        (lambda b: b[:20] + bytes([b[20] ^ 0xFF]) + b[21:], "CRC mismatch"),
        (lambda b: b[:16] + b"\x07" + b[17:], "unknown magic"),
    ],
)
def test_a_damaged_entry_is_refused_with_corrupt_message(damage, reason):
    buffer = damage(build_message_set([Record(b"k", b"value")], magic=1))

    with pytest.raises(KafkaError, match=reason) as raised:
        read_entry(buffer, 0, len(buffer))

    assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


def test_null_key_and_null_value_are_distinct_from_empty_ones():
    for magic in (0, 1):
        null = encode_message(magic, None, None)
        empty = encode_message(magic, b"", b"")
        assert null != empty
        assert len(null) == len(empty)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(records, min_size=1, max_size=4),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(list(MESSAGE_SET_CODECS)),
    cut=st.integers(1, 40),
)
def test_a_replicated_set_scans_whole_entries_and_stops_at_a_partial_one(
    batches, magic, codec, cut
):
    buffer, offset = b"", 100
    for batch in batches:
        buffer += build_message_set(batch, magic=magic, codec=codec, base_offset=offset)
        offset += len(batch)
    entries = list(iter_shallow(buffer))
    cut = 1 + cut % (12 + entries[-1].size)  # somewhere inside the last entry

    whole = scan_entries(buffer, 100)
    partial = scan_entries(buffer[:-cut], 100)

    assert (whole.end, whole.first_offset, whole.last_offset) == (
        len(buffer),
        entries[0].offset,
        entries[-1].offset,
    )
    largest = max(e.timestamp for e in entries)
    assert whole.max_timestamp == (largest if magic == 1 else -1)
    assert partial.end == entries[-1].position
    assert partial.last_offset == (entries[-2].offset if len(entries) > 1 else -1)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:], "CRC mismatch at offset 7"),
        (lambda b: b[:16] + b"\x07" + b[17:], "unknown magic 7 at offset 7"),
        (lambda b: b + bytes(12), "message size 0 at position"),
    ],
)
def test_a_damaged_replicated_set_is_refused_not_cut(damage, reason):
    buffer = damage(build_message_set([Record(b"k", b"value" * 10)] * 3, magic=1, base_offset=7))

    with pytest.raises(KafkaError, match=reason):
        scan_entries(buffer, 7)


def test_a_replicated_set_must_move_offsets_forward():
    buffer = build_message_set([Record(b"k", b"v")] * 2, magic=1, base_offset=5)

    with pytest.raises(KafkaError, match="offset 5 at position 0 is below 6"):
        scan_entries(buffer, 6)
