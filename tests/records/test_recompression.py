"""compression.type other than ``producer``: the leader stores the topic's codec, whatever the
producer sent, with the offsets and times validation gave the records."""

from __future__ import annotations

import pytest

from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    iter_deep,
    iter_shallow,
)
from tidelog.records.record_batch import BatchRecordInput, encode_batch, read_header
from tidelog.records.validation import RecordsPolicy, validate_and_assign_offsets

NOW = 1_700_000_000_000


def produce(buffer: bytes, **policy):
    return validate_and_assign_offsets(
        buffer, next_offset=10, policy=RecordsPolicy(**policy), now=NOW, partition_leader_epoch=3
    )


@pytest.mark.parametrize("sent", list(MESSAGE_SET_CODECS))
@pytest.mark.parametrize("stored", list(MESSAGE_SET_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_a_v0_v1_set_is_stored_in_the_topics_codec(sent, stored, magic):
    records = [Record(b"k%d" % i, b"v%d" % i, NOW - i) for i in range(4)]
    validated = produce(build_message_set(records, magic=magic, codec=sent), magic=magic,
                        compression=stored)  # fmt: skip

    assert {e.codec for e in iter_shallow(validated.buffer)} == {stored}
    messages = list(iter_deep(validated.buffer))
    assert [(m.offset, m.key, m.value) for m in messages] == [
        (10 + i, r.key, r.value) for i, r in enumerate(records)
    ]
    if magic == 1:
        assert [m.timestamp for m in messages] == [r.timestamp for r in records]
    assert (validated.first_offset, validated.last_offset) == (10, 13)


def test_log_append_time_survives_recompression():
    validated = produce(
        build_message_set([Record(b"k", b"v", 5)] * 3, magic=1),
        magic=1,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        compression=Codec.GZIP,
    )
    (wrapper,) = iter_shallow(validated.buffer)
    assert wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert {m.timestamp for m in iter_deep(validated.buffer)} == {NOW}


@pytest.mark.parametrize("stored", list(Codec))
def test_a_v2_batch_keeps_its_offsets_producer_and_epoch_in_the_new_codec(stored):
    sent = encode_batch(
        [BatchRecordInput(b"k", b"v%d" % i, NOW + i, (("h", b"1"),)) for i in range(5)],
        codec=Codec.SNAPPY,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
    )

    validated = produce(sent, magic=2, compression=stored)

    header = read_header(validated.buffer)
    assert header.codec == stored
    assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (10, 14, 3)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert [(m.offset, m.value, m.timestamp, m.headers) for m in iter_deep(validated.buffer)] == [
        (10 + i, b"v%d" % i, NOW + i, (("h", b"1"),)) for i in range(5)
    ]
    assert validated.recompressed == (stored != Codec.SNAPPY)


def test_an_entry_already_in_the_topics_codec_is_stored_as_it_came():
    sent = encode_batch([BatchRecordInput(b"k", b"v", NOW)], codec=Codec.LZ4)
    assert produce(sent, magic=2, compression=Codec.LZ4).buffer[21:] == sent[21:]
