"""Conversion between message formats: v0 and v1 at the level of bytes (KIP-32), and v2
batches to and from v0/v1 message sets through their records (KIP-98's formats).

Converting a message keeps its key and value bytes as they are and only rewrites the header:
v0 -> v1 inserts a timestamp (the broker's time, as KIP-32 says), v1 -> v0 drops it and clears
the timestamp-type bit. A compressed wrapper is converted by converting its inner set and
recompressing it with the same codec: v0 inner offsets are absolute, v1 inner offsets relative.

A v2 batch converted down becomes one message per record (a compressed batch one wrapper of
the same codec); offsets stay, headers are dropped (v0/v1 have nowhere to keep them), zstd has
no older form (UNSUPPORTED_COMPRESSION_TYPE). v0/v1 messages converted up become one batch.
"""

from __future__ import annotations

import zlib

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.compression import compress, decompress
from tidelog.records.format import (
    CODEC_MASK,
    CRC,
    INT64,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    Codec,
    TimestampType,
    corrupt,
    encode_entry,
    encode_message,
    iter_inner,
    iter_shallow,
    read_entry,
    read_timestamp,
    value_slice,
)
from tidelog.records.record_batch import BatchRecordInput


def convert_message(message: memoryview, to_magic: int, timestamp: int) -> bytes:
    """``message`` (CRC to end, no offset header) in format ``to_magic``.

    ``timestamp`` is used only when converting up from v0.
    """
    magic, attributes = message[4], message[5]
    if magic == to_magic:
        return bytes(message)
    if to_magic == 1:
        body = bytes((1, attributes)) + INT64.pack(timestamp) + message[6:]
    else:
        body = bytes((0, attributes & ~TIMESTAMP_TYPE_BIT)) + message[14:]
    return CRC.pack(zlib.crc32(body)) + body


def rebuild_inner_set(
    inner: bytes | bytearray,
    *,
    to_magic: int,
    first_offset: int,
    up_conversion_timestamp: int,
) -> tuple[bytes, int, int]:
    """The uncompressed inner set of a wrapper, renumbered and converted for ``to_magic``.

    Returns (inner set, message count, largest timestamp). Inner offsets become
    first_offset.. for v0 and 0.. for v1. Every inner message must have passed ``read_entry``.
    """
    view = memoryview(inner)
    parts, count, position, limit = [], 0, 0, len(inner)
    max_timestamp = -1
    base = 0 if to_magic == 1 else first_offset
    while position < limit:
        _, size, _magic, _ = read_entry(view, position, limit)
        start = position + LOG_OVERHEAD
        message = convert_message(view[start : start + size], to_magic, up_conversion_timestamp)
        if to_magic == 1:
            max_timestamp = max(max_timestamp, read_timestamp(message, 0, 1))
        parts.append(encode_entry(base + count, message))
        count += 1
        position = start + size
    return b"".join(parts), count, max_timestamp


def convert_message_set(buffer: bytes | memoryview, to_magic: int, now: int) -> bytes:
    """A message set read from a log, in the format a fetcher of ``to_magic`` understands.

    Offsets stay as they are; a partial entry at the end (a fetch cut at max_bytes) is dropped.
    """
    view = memoryview(buffer)
    parts, position, limit = [], 0, len(buffer)
    while limit - position >= LOG_OVERHEAD:
        _, size = OFFSET_AND_SIZE.unpack_from(view, position)
        if position + LOG_OVERHEAD + size > limit:
            break
        offset, size, magic, attributes = read_entry(view, position, limit)
        start = position + LOG_OVERHEAD
        message = view[start : start + size]
        position = start + size
        codec = attributes & CODEC_MASK
        if magic == to_magic:
            parts.append(bytes(view[start - LOG_OVERHEAD : position]))
        elif magic == 2:
            parts.append(batch_to_message_set(view[start - LOG_OVERHEAD : position], to_magic))
        elif codec == 0:
            parts.append(encode_entry(offset, convert_message(message, to_magic, now)))
        else:
            parts.append(_convert_wrapper(offset, message, magic, attributes, to_magic, now))
    return b"".join(parts)


def _convert_wrapper(
    offset: int, message: memoryview, magic: int, attributes: int, to_magic: int, now: int
) -> bytes:
    codec = attributes & CODEC_MASK
    value = value_slice(message, 0, magic)
    if value is None:
        raise corrupt(f"compressed wrapper at offset {offset} has a null value")
    inner = decompress(codec, message[value], magic)
    count = _count_entries(inner)
    # The wrapper's offset is that of its last inner message in both formats.
    first_offset = offset - count + 1
    timestamp = read_timestamp(message, 0, magic) if magic == 1 else now
    inner_set, _, _ = rebuild_inner_set(
        inner, to_magic=to_magic, first_offset=first_offset, up_conversion_timestamp=timestamp
    )
    wrapper_attributes = attributes & ~TIMESTAMP_TYPE_BIT if to_magic == 0 else attributes
    wrapper = encode_message(
        to_magic, None, compress(codec, inner_set, to_magic), timestamp, wrapper_attributes
    )
    return encode_entry(offset, wrapper)


def _count_entries(buffer: bytes) -> int:
    count, position, limit = 0, 0, len(buffer)
    while position < limit:
        if limit - position < LOG_OVERHEAD:
            raise corrupt("partial entry in a compressed set")
        _, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
        if size < MESSAGE_OVERHEAD[0]:
            raise corrupt(f"message size {size} in a compressed set is below the minimum")
        position += LOG_OVERHEAD + size
        count += 1
    return count


def batch_to_message_set(batch: bytes | bytearray | memoryview, to_magic: int) -> bytes:
    """One v2 batch as a v0/v1 message set: offsets kept, timestamps kept for v1 (a
    LogAppendTime batch becomes a LogAppendTime wrapper or messages of its time)."""
    from tidelog.records.format import view_at

    shallow = view_at(batch, 0)
    codec = shallow.attributes & CODEC_MASK
    if codec == Codec.ZSTD:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"the zstd batch ending at offset {shallow.offset} has no v{to_magic} form",
        )
    records = list(iter_inner(shallow))
    append_time = shallow.timestamp_type == TimestampType.LOG_APPEND_TIME and to_magic == 1
    attributes = TIMESTAMP_TYPE_BIT if append_time else 0
    if codec == 0:
        return b"".join(
            encode_entry(
                r.offset,
                encode_message(
                    to_magic, r.key, r.value, r.timestamp if to_magic else -1, attributes
                ),
            )
            for r in records
        )
    base = records[0].offset if to_magic == 1 else 0
    inner = b"".join(
        encode_entry(
            r.offset - base,
            encode_message(to_magic, r.key, r.value, r.timestamp if to_magic else -1, 0),
        )
        for r in records
    )
    timestamp = shallow.timestamp if to_magic == 1 else -1
    wrapper = encode_message(
        to_magic, None, compress(codec, inner, to_magic), timestamp, attributes | codec
    )
    return encode_entry(records[-1].offset, wrapper)


def records_of(
    buffer: bytes | bytearray | memoryview, now: int
) -> tuple[list[BatchRecordInput], int]:
    """Every message of a set of any formats as records for a v2 batch, and the codec to write
    it with (the first compressed entry's, as Kafka's validator picks its source codec).
    v0 messages get ``now`` (KIP-32's up-conversion time); headers are kept from v2 records."""
    records: list[BatchRecordInput] = []
    codec = 0
    for entry in iter_shallow(buffer):
        codec = codec or entry.attributes & CODEC_MASK
        for message in iter_inner(entry):
            timestamp = now if message.magic == 0 else message.timestamp
            records.append(BatchRecordInput(message.key, message.value, timestamp, message.headers))
    return records, codec
