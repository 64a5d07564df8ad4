"""A leader validating what producers send to a format v2 topic (Kafka 2.1's LogValidator for
batches), and v2 batches sent to a topic still on format v0/v1."""

from __future__ import annotations

import struct

import pytest

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.format import (
    Codec,
    Record,
    TimestampType,
    build_message_set,
    iter_deep,
    iter_shallow,
    read_entry,
)
from tidelog.records.record_batch import (
    BatchRecordInput,
    encode_batch,
    read_header,
    set_crc,
)
from tidelog.records.validation import RecordsPolicy, validate_and_assign_offsets

NOW = 1_700_000_000_000
V2 = RecordsPolicy(magic=2)


def produce(buffer: bytes, policy: RecordsPolicy = V2, next_offset: int = 100, epoch: int = 4):
    return validate_and_assign_offsets(
        buffer, next_offset=next_offset, policy=policy, now=NOW, partition_leader_epoch=epoch
    )


def batch(count: int = 3, codec: Codec = Codec.NONE, **options) -> bytes:
    return encode_batch(
        [BatchRecordInput(b"k%d" % i, b"value %d" % i, NOW - 10 + i) for i in range(count)],
        codec=codec,
        **options,
    )


@pytest.mark.parametrize("codec", list(Codec))
def test_a_batch_is_appended_in_place_with_its_offsets_and_the_leaders_epoch(codec):
    sent = batch(codec=codec, producer_id=9, producer_epoch=1, base_sequence=5)

    validated = produce(sent)

    header = read_header(validated.buffer)
    assert (validated.first_offset, validated.last_offset) == (100, 102)
    assert (header.base_offset, header.partition_leader_epoch) == (100, 4)
    # nothing under the CRC changed: same CRC, same bytes from the attributes on
    assert header.crc == read_header(sent).crc
    assert validated.buffer[21:] == sent[21:]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 5)
    assert not validated.recompressed
    assert validated.max_timestamp == NOW - 8
    assert [m.offset for m in iter_deep(validated.buffer)] == [100, 101, 102]


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.LZ4])
def test_log_append_time_rewrites_the_header_only(codec):
    sent = batch(codec=codec)
    policy = RecordsPolicy(magic=2, timestamp_type=TimestampType.LOG_APPEND_TIME)

    validated = produce(sent, policy)

    header = read_header(validated.buffer)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == validated.log_append_time == NOW
    assert validated.buffer[61:] == sent[61:]  # the records as they came
    read_entry(validated.buffer, 0, len(validated.buffer))  # and the new CRC-32C holds
    assert {m.timestamp for m in iter_deep(validated.buffer)} == {NOW}


def test_several_batches_in_one_set_get_consecutive_offsets():
    validated = produce(batch(2) + batch(3, Codec.SNAPPY) + batch(1))

    assert [m.offset for m in iter_deep(validated.buffer)] == list(range(100, 106))
    assert [m.offset for m in iter_shallow(validated.buffer)] == [101, 104, 105]


def test_v1_messages_sent_to_a_v2_topic_are_up_converted_to_one_batch():
    sent = build_message_set(
        [Record(b"a", b"1", NOW), Record(b"b", b"2", NOW + 1)], magic=1, codec=Codec.GZIP
    )

    validated = produce(sent)

    header = read_header(validated.buffer)
    assert (header.magic, header.codec, header.record_count) == (2, Codec.GZIP, 2)
    assert [(m.offset, m.value, m.timestamp) for m in iter_deep(validated.buffer)] == [
        (100, b"1", NOW),
        (101, b"2", NOW + 1),
    ]
    assert validated.recompressed


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_a_v2_batch_sent_to_a_v1_topic_is_down_converted(codec):
    validated = produce(batch(codec=codec), RecordsPolicy(magic=1))

    assert {m.magic for m in iter_deep(validated.buffer)} == {1}
    assert [(m.offset, m.key) for m in iter_deep(validated.buffer)] == [
        (100, b"k0"),
        (101, b"k1"),
        (102, b"k2"),
    ]


def test_headers_have_no_place_in_a_v1_topic():
    sent = encode_batch([BatchRecordInput(b"k", b"v", NOW, (("trace", b"1"),))])
    with pytest.raises(KafkaError) as raised:
        produce(sent, RecordsPolicy(magic=1))
    assert raised.value.code == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_zstd_has_no_place_in_a_v1_topic():
    with pytest.raises(KafkaError) as raised:
        produce(batch(codec=Codec.ZSTD), RecordsPolicy(magic=1))
    assert raised.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_a_compacted_topic_needs_a_key_on_every_record_compressed_or_not():
    for codec in (Codec.NONE, Codec.SNAPPY):
        sent = encode_batch([BatchRecordInput(None, b"v", NOW)], codec=codec)
        with pytest.raises(KafkaError, match="key") as raised:
            produce(sent, RecordsPolicy(magic=2, compacted=True))
        assert raised.value.code == ErrorCode.CORRUPT_MESSAGE


def test_create_time_too_far_from_the_brokers_clock_is_invalid():
    policy = RecordsPolicy(magic=2, timestamp_difference_max_ms=1000)
    sent = encode_batch([BatchRecordInput(b"k", b"v", NOW - 5000)], codec=Codec.GZIP)
    with pytest.raises(KafkaError) as raised:
        produce(sent, policy)
    assert raised.value.code == ErrorCode.INVALID_TIMESTAMP


def test_a_batch_larger_than_max_message_bytes_is_too_large():
    sent = batch(50)
    with pytest.raises(KafkaError) as raised:
        produce(sent, RecordsPolicy(magic=2, max_message_bytes=len(sent) - 1))
    assert raised.value.code == ErrorCode.MESSAGE_TOO_LARGE


def _damaged(change, recrc: bool = True) -> bytes:
    data = bytearray(batch())
    change(data)
    if recrc:
        set_crc(data, 0, len(data))
    return bytes(data)


@pytest.mark.parametrize(
    ("name", "sent", "code"),
    [
        ("crc", _damaged(lambda d: d.__setitem__(70, d[70] ^ 1), recrc=False), 2),
        ("cut short", batch()[:-3], 2),
        ("header only", batch()[:40], 2),
        ("length below the header", _damaged(lambda d: struct.pack_into(">i", d, 8, 20)), 2),
        ("more records claimed", _damaged(lambda d: struct.pack_into(">i", d, 57, 4)), 2),
        ("offsets claimed", _damaged(lambda d: struct.pack_into(">i", d, 23, 9)), 2),
        ("no records", _damaged(lambda d: struct.pack_into(">ii", d, 57, 0, -1)), 2),
        ("codec 6", _damaged(lambda d: struct.pack_into(">h", d, 21, 6)), 2),
        ("control batch", _damaged(lambda d: struct.pack_into(">h", d, 21, 0x20)), 2),
        ("transactional", _damaged(lambda d: struct.pack_into(">h", d, 21, 0x10)), 53),
        ("a record's length", _damaged(lambda d: d.__setitem__(61, 0x7E)), 2),
        (
            "a varint that never ends",
            _damaged(lambda d: d.__setitem__(slice(63, 75), b"\xff" * 12)),
            2,
        ),
    ],
)
def test_a_damaged_batch_gets_kafkas_error_code_and_nothing_else(name, sent, code):
    with pytest.raises(KafkaError) as raised:
        produce(sent)
    assert raised.value.code == code, name
