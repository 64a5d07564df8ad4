"""Validation of a producer's message set and offset assignment, as a partition leader does it.

The rules (DESIGN.md, "Message format"):

- Every message passes its CRC, has a known magic and key/value lengths that fill it; an entry
  larger than max.message.bytes is MESSAGE_TOO_LARGE; a compacted topic needs keys.
- Offsets are assigned from ``next_offset``. An uncompressed message of the topic's format is
  rewritten in place (offset, and for LogAppendTime the timestamp, type bit and CRC).
- A v1 wrapper whose inner offsets are already 0..n-1 is not recompressed: only the wrapper's
  offset (that of its last inner message), timestamp and CRC change. Any other compressed set
  (v0, inner offsets out of order, or a format conversion) is rebuilt and recompressed.
- CreateTime further than message.timestamp.difference.max.ms from ``now`` is INVALID_TIMESTAMP.
  LogAppendTime stamps max(last_appended_timestamp, now), so time never runs backwards on a
  partition even when a new leader's clock is behind the old one's.
- A message whose magic differs from the topic's format is converted (KIP-32): up-converted
  messages get the broker's time, down-converted ones lose theirs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.compression import compress, decompress
from tidelog.records.conversion import convert_message, rebuild_inner_set
from tidelog.records.format import (
    CODEC_MASK,
    CRC,
    INT64,
    LOG_OVERHEAD,
    MAGIC_POSITION,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_POSITION,
    TIMESTAMP_TYPE_BIT,
    TimestampType,
    check_lengths,
    corrupt,
    encode_entry,
    encode_message,
    read_entry,
    value_slice,
)


@dataclass(frozen=True)
class RecordsPolicy:
    """The topic settings that decide what a partition accepts and how it stamps it."""

    magic: int = 1
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    timestamp_difference_max_ms: int = 2**63 - 1
    max_message_bytes: int = 1000012
    compacted: bool = False


@dataclass(frozen=True)
class ValidatedMessageSet:
    """A message set ready to append: offsets assigned, timestamps checked or stamped.

    ``max_timestamp`` is -1 for format v0; ``offset_of_max_timestamp`` is the offset of a message
    that carries it (for a compressed wrapper, the wrapper's own offset). ``log_append_time`` is
    the stamped time for a LogAppendTime topic, else -1 (the produce response carries it).
    """

    buffer: bytes
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    recompressed: bool

    @property
    def message_count(self) -> int:
        return self.last_offset - self.first_offset + 1


def validate_and_assign_offsets(
    buffer: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int = NO_TIMESTAMP,
) -> ValidatedMessageSet:
    """Checks a producer's message set and returns it with offsets assigned.

    Raises KafkaError (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP) and then nothing of
    the set may be appended.
    """
    out = bytearray(buffer)
    limit = len(out)
    if limit == 0:
        raise corrupt("empty message set")
    target = policy.magic
    log_append_time = target == 1 and policy.timestamp_type == TimestampType.LOG_APPEND_TIME
    append_time = max(last_appended_timestamp, now) if log_append_time else NO_TIMESTAMP
    max_difference = policy.timestamp_difference_max_ms
    check_times = target == 1 and not log_append_time and max_difference < 2**63 - 1
    replacements: list[tuple[int, int, bytes]] = []
    offset = next_offset
    max_timestamp, offset_of_max_timestamp = NO_TIMESTAMP, -1
    position = 0
    pack_offset = OFFSET_AND_SIZE.pack_into
    unpack_int64 = INT64.unpack_from
    while position < limit:
        _, size, magic, attributes = read_entry(out, position, limit)
        start = position + LOG_OVERHEAD
        end = start + size
        if size + LOG_OVERHEAD > policy.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes "
                f"{policy.max_message_bytes}",
            )
        codec = attributes & CODEC_MASK
        if codec == 0:
            key_length = check_lengths(out, start, size, magic)
            if policy.compacted and key_length < 0:
                raise corrupt("a compacted topic accepts only messages with a key")
            if magic != target:
                up_time = append_time if log_append_time else now
                message = convert_message(memoryview(out)[start:end], target, up_time)
                if log_append_time:
                    message = bytearray(message)
                    _stamp(message, 0, len(message), append_time)
                replacements.append((position, end, encode_entry(offset, message)))
                timestamp = up_time if target == 1 else NO_TIMESTAMP
            else:
                pack_offset(out, position, offset, size)
                if target == 1:
                    if log_append_time:
                        _stamp(out, start, end, append_time)
                        timestamp = append_time
                    else:
                        (timestamp,) = unpack_int64(out, start + TIMESTAMP_POSITION)
                        if check_times and abs(timestamp - now) > max_difference:
                            raise _invalid_timestamp(timestamp, now, max_difference)
                else:
                    timestamp = NO_TIMESTAMP
            if timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = timestamp, offset
            offset += 1
        else:
            wrapper = _validate_wrapper(
                out, start, size, magic, codec, policy, now, check_times and magic == 1
            )
            count = wrapper.count
            last = offset + count - 1
            if magic == target == 1 and wrapper.relative_offsets_in_order:
                timestamp = append_time if log_append_time else wrapper.max_timestamp
                type_bit = TIMESTAMP_TYPE_BIT if log_append_time else 0
                pack_offset(out, position, last, size)
                INT64.pack_into(out, start + TIMESTAMP_POSITION, timestamp)
                out[start + 5] = (attributes & ~TIMESTAMP_TYPE_BIT) | type_bit
                CRC.pack_into(out, start, zlib.crc32(memoryview(out)[start + MAGIC_POSITION : end]))
            else:
                entry, timestamp = _rebuilt_wrapper(
                    wrapper.inner, magic, codec, offset, target, now, append_time
                )
                replacements.append((position, end, entry))
            if target == 1 and timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = timestamp, last
            offset = last + 1
        position = end
    if replacements:
        out = _splice(out, replacements)
    return ValidatedMessageSet(
        buffer=bytes(out),
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        log_append_time=append_time,
        recompressed=bool(replacements),
    )


def _stamp(buffer: bytearray, start: int, end: int, append_time: int) -> None:
    """Sets the v1 message at buffer[start:end] to LogAppendTime ``append_time``, CRC included."""
    buffer[start + 5] |= TIMESTAMP_TYPE_BIT
    INT64.pack_into(buffer, start + TIMESTAMP_POSITION, append_time)
    CRC.pack_into(buffer, start, zlib.crc32(memoryview(buffer)[start + MAGIC_POSITION : end]))


def _invalid_timestamp(timestamp: int, now: int, max_difference: int) -> KafkaError:
    return KafkaError(
        ErrorCode.INVALID_TIMESTAMP,
        f"timestamp {timestamp} is {abs(timestamp - now)} ms from the broker's time {now}; "
        f"message.timestamp.difference.max.ms is {max_difference}",
    )


@dataclass(frozen=True)
class _Wrapper:
    inner: bytes
    count: int
    max_timestamp: int
    relative_offsets_in_order: bool


def _validate_wrapper(
    buffer: bytearray,
    start: int,
    size: int,
    magic: int,
    codec: int,
    policy: RecordsPolicy,
    now: int,
    check_times: bool,
) -> _Wrapper:
    """Decompresses a wrapper and checks every inner message, without an object per message."""
    value = value_slice(buffer, start, magic)
    if value is None:
        raise corrupt("compressed wrapper with a null value")
    inner = decompress(codec, memoryview(buffer)[value], magic)
    position, limit, count = 0, len(inner), 0
    max_timestamp = NO_TIMESTAMP
    in_order = True
    max_difference = policy.timestamp_difference_max_ms
    while position < limit:
        inner_offset, inner_size, inner_magic, inner_attributes = read_entry(inner, position, limit)
        inner_start = position + LOG_OVERHEAD
        if inner_magic != magic:
            raise corrupt(f"inner message of magic {inner_magic} inside a v{magic} wrapper")
        if inner_attributes & CODEC_MASK:
            raise corrupt("nested compression inside a compressed wrapper")
        key_length = check_lengths(inner, inner_start, inner_size, magic)
        if policy.compacted and key_length < 0:
            raise corrupt("a compacted topic accepts only messages with a key")
        if magic == 1:
            (timestamp,) = INT64.unpack_from(inner, inner_start + TIMESTAMP_POSITION)
            if check_times and abs(timestamp - now) > max_difference:
                raise _invalid_timestamp(timestamp, now, max_difference)
            max_timestamp = max(max_timestamp, timestamp)
            in_order = in_order and inner_offset == count
        count += 1
        position = inner_start + inner_size
    if count == 0:
        raise corrupt("compressed wrapper holds no messages")
    return _Wrapper(inner, count, max_timestamp, in_order)


def _rebuilt_wrapper(
    inner: bytes,
    magic: int,
    codec: int,
    first_offset: int,
    target: int,
    now: int,
    append_time: int,
) -> tuple[bytes, int]:
    """A new wrapper for ``inner``: renumbered, converted to ``target`` and recompressed."""
    log_append_time = append_time != NO_TIMESTAMP
    inner_set, count, max_timestamp = rebuild_inner_set(
        inner,
        to_magic=target,
        first_offset=first_offset,
        up_conversion_timestamp=append_time if log_append_time else now,
    )
    if target == 0:
        timestamp, attributes = NO_TIMESTAMP, codec
    elif log_append_time:
        timestamp, attributes = append_time, codec | TIMESTAMP_TYPE_BIT
    else:
        timestamp, attributes = max_timestamp, codec
    wrapper = encode_message(
        target, None, compress(codec, inner_set, target), timestamp, attributes
    )
    return encode_entry(first_offset + count - 1, wrapper), timestamp


def _splice(buffer: bytearray, replacements: list[tuple[int, int, bytes]]) -> bytearray:
    parts, cursor = [], 0
    for start, end, data in replacements:
        parts.append(buffer[cursor:start])
        parts.append(data)
        cursor = end
    parts.append(buffer[cursor:])
    return bytearray(b"".join(parts))
