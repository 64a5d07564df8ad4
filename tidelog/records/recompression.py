"""A topic's compression.type other than ``producer``: the leader stores its codec, as Kafka's
LogValidator does, recompressing what a producer sent in another one.

It works on a set already validated, offsets assigned and timestamps checked or stamped, so the
records keep the offsets and times they were given: v0/v1 messages become one wrapper (or, for
``uncompressed``, one message each), a v2 batch becomes one batch of the new codec with the
same offsets, producer fields and leader epoch. An entry already in the codec stays as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tidelog.records.format import (
    CODEC_MASK,
    TIMESTAMP_TYPE_BIT,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    encode_entry,
    encode_message,
    iter_deep,
    iter_inner,
    iter_shallow,
    view_at,
)
from tidelog.records.record_batch import BatchRecordInput, encode_batch, read_header

if TYPE_CHECKING:
    from tidelog.records.validation import ValidatedMessageSet


def recompressed(validated: ValidatedMessageSet, codec: Codec, magic: int) -> ValidatedMessageSet:
    """``validated`` with every entry in ``codec`` (itself if they all are already)."""
    entries = list(iter_shallow(validated.buffer))
    if all(entry.attributes & CODEC_MASK == codec for entry in entries):
        return validated
    if magic == 2:
        buffer = b"".join(_batch_in(entry.batch or b"", codec) for entry in entries)
    else:
        buffer = _message_set_in(validated, codec, magic)
    offset_of_max = validated.offset_of_max_timestamp
    if codec != Codec.NONE and magic == 1:
        offset_of_max = validated.last_offset  # one wrapper holds the largest time
    return replace(
        validated, buffer=buffer, offset_of_max_timestamp=offset_of_max, recompressed=True
    )


def _batch_in(batch: bytes, codec: Codec) -> bytes:
    header = read_header(batch)
    if header.codec == codec:
        return batch
    records = [
        BatchRecordInput(m.key, m.value, m.timestamp, m.headers)
        for m in iter_inner(view_at(batch, 0))
    ]
    return encode_batch(
        records,
        base_offset=header.base_offset,
        codec=codec,
        timestamp_type=header.timestamp_type,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        transactional=header.is_transactional,
    )


def _message_set_in(validated: ValidatedMessageSet, codec: Codec, magic: int) -> bytes:
    messages = list(iter_deep(validated.buffer))
    append_time = validated.log_append_time >= 0
    timestamp_type = TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME
    if codec == Codec.NONE:
        attributes = TIMESTAMP_TYPE_BIT if append_time and magic == 1 else 0
        return b"".join(
            encode_entry(m.offset, encode_message(magic, m.key, m.value, m.timestamp, attributes))
            for m in messages
        )
    return build_message_set(
        [Record(m.key, m.value, m.timestamp) for m in messages],
        magic=magic,
        codec=codec,
        base_offset=validated.first_offset,
        timestamp_type=timestamp_type,
        wrapper_timestamp=validated.log_append_time if append_time else None,
    )
