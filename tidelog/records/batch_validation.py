"""Validation and offset assignment of what a producer sends to a topic of message format v2,
as a partition leader does it (Kafka 2.1's LogValidator, for batches).

- Every batch passes its CRC-32C, has magic 2, a length that fits, a codec Kafka knows, and as
  many records as its offsets span (record count = last offset delta + 1, at least one); a
  batch larger than max.message.bytes is MESSAGE_TOO_LARGE; a producer may not send control
  batches, and transactions are not served.
- The in-place path: a batch is appended as it came, with only its base offset, partition
  leader epoch (both outside the CRC) and, for LogAppendTime or a wrong max timestamp, its
  attributes, max timestamp and CRC rewritten. Nothing is recompressed.
- Its records are read (decompressed if need be) only when something needs them: an
  uncompressed batch always (its framing is checked record by record: lengths, varints, offset
  deltas 0..n-1), a compressed one when the topic is compacted (keys required) or CreateTime
  is checked against message.timestamp.difference.max.ms; otherwise its CRC is what vouches for it.
- v0/v1 messages sent to a v2 topic are up-converted into one batch (KIP-32's time for v0).
"""

from __future__ import annotations

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.conversion import convert_message_set, records_of
from tidelog.records.format import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    Codec,
    TimestampType,
    corrupt,
    read_entry,
)
from tidelog.records.record_batch import (
    ATTRIBUTES_AT,
    CONTROL_BIT,
    HEADER_SIZE,
    INT16,
    INT32,
    INT64,
    INT64_MAX,
    INT64_MIN,
    MAGIC,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    PARTITION_LEADER_EPOCH_AT,
    PRODUCER_ID_AT,
    TRANSACTIONAL_BIT,
    check_batch,
    check_records,
    encode_batch,
    iter_records,
    records_section,
    set_crc,
)

NO_DIFFERENCE_CHECK = INT64_MAX


def has_batches(buffer: bytes | bytearray | memoryview) -> bool:
    """Whether any entry of ``buffer`` is a v2 batch (walks entry headers only)."""
    position, limit = 0, len(buffer)
    while limit - position > MAGIC_AT:
        if buffer[position + MAGIC_AT] == MAGIC:
            return True
        (size,) = OFFSET_AND_SIZE.unpack_from(buffer, position)[1:]
        if size < 0:
            return False
        position += LOG_OVERHEAD + size
    return False


def validate_batches(
    out: bytearray,
    *,
    next_offset: int,
    timestamp_type: TimestampType,
    timestamp_difference_max_ms: int,
    max_message_bytes: int,
    compacted: bool,
    now: int,
    append_time: int,
    partition_leader_epoch: int,
) -> tuple[bytearray, int, int, int, bool]:
    """Checks ``out`` for a v2 topic and assigns it offsets from ``next_offset`` in place.

    Returns (buffer, last offset, max timestamp, offset of max timestamp, converted)."""
    converted = False
    if any_older_entry(out):
        require_whole_entries(out)
        inputs, codec = records_of(out, now)
        if not inputs:
            raise corrupt("empty message set")
        out = bytearray(encode_batch(inputs, codec=Codec(codec)))
        converted = True
    log_append_time = timestamp_type == TimestampType.LOG_APPEND_TIME
    check_difference = not log_append_time and timestamp_difference_max_ms < NO_DIFFERENCE_CHECK
    offset = next_offset
    max_timestamp, offset_of_max = NO_TIMESTAMP, -1
    position, limit = 0, len(out)
    while position < limit:
        header = check_batch(out, position, limit)
        end = position + header.size
        if header.size > max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}",
            )
        if header.attributes & CONTROL_BIT:
            raise corrupt("a producer may not send control batches")
        if header.attributes & TRANSACTIONAL_BIT:
            raise KafkaError(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactions are not served by tidelog (no transaction coordinator)",
            )
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise corrupt(
                f"invalid sequence number {header.base_sequence} in a batch of producer id "
                f"{header.producer_id}"
            )
        count = header.record_count
        if count < 1 or count != header.last_offset_delta + 1:
            raise corrupt(
                f"a batch of {count} records cannot span {header.last_offset_delta + 1} offsets"
            )
        batch_max = header.max_timestamp
        batch_offset_of_max = offset + header.last_offset_delta
        if header.codec == Codec.NONE or compacted or check_difference:
            section = records_section(out, header)
            low, high, index_of_high = check_records(section, count, keys_required=compacted)
            first = header.first_timestamp
            earliest, latest = first + low, first + high
            if not INT64_MIN <= earliest <= latest <= INT64_MAX:
                # a record's time wraps past the end of the range, as Kafka's long sum does:
                # its times are no longer in the order of its deltas
                times = [record.timestamp for record in iter_records(section, count, 0, first)]
                earliest, latest = min(times), max(times)
                index_of_high = times.index(latest)
            if check_difference:
                for timestamp in (earliest, latest):
                    if abs(timestamp - now) > timestamp_difference_max_ms:
                        raise KafkaError(
                            ErrorCode.INVALID_TIMESTAMP,
                            f"timestamp {timestamp} is {abs(timestamp - now)} ms from the "
                            f"broker's time {now}; message.timestamp.difference.max.ms is "
                            f"{timestamp_difference_max_ms}",
                        )
            batch_max = latest
            batch_offset_of_max = offset + index_of_high
        attributes = header.attributes & ~TIMESTAMP_TYPE_BIT
        if log_append_time:
            batch_max, batch_offset_of_max = append_time, offset + header.last_offset_delta
            attributes |= TIMESTAMP_TYPE_BIT
        if attributes != header.attributes or batch_max != header.max_timestamp:
            INT16.pack_into(out, position + ATTRIBUTES_AT, attributes)
            INT64.pack_into(out, position + MAX_TIMESTAMP_AT, batch_max)
            set_crc(out, position, end)
        INT64.pack_into(out, position, offset)
        INT32.pack_into(out, position + PARTITION_LEADER_EPOCH_AT, partition_leader_epoch)
        if batch_max > max_timestamp:
            max_timestamp, offset_of_max = batch_max, batch_offset_of_max
        offset += count
        position = end
    return out, offset - 1, max_timestamp, offset_of_max, converted


def idempotent(buffer: bytes | bytearray | memoryview) -> bool:
    """Whether any v2 batch of ``buffer`` carries a producer id (walks entry headers only)."""
    position, limit = 0, len(buffer)
    while limit - position >= HEADER_SIZE:
        (size,) = OFFSET_AND_SIZE.unpack_from(buffer, position)[1:]
        if size < 0:
            return False
        if (
            buffer[position + MAGIC_AT] == MAGIC
            and INT64.unpack_from(buffer, position + PRODUCER_ID_AT)[0] >= 0
        ):
            return True
        position += LOG_OVERHEAD + size
    return False


def any_older_entry(buffer: bytes | bytearray) -> bool:
    """Whether any entry of ``buffer`` is a v0/v1 message (walks entry headers only)."""
    position, limit = 0, len(buffer)
    while limit - position > MAGIC_AT:
        if buffer[position + MAGIC_AT] != MAGIC:
            return True
        (size,) = OFFSET_AND_SIZE.unpack_from(buffer, position)[1:]
        if size < 0:
            return False
        position += LOG_OVERHEAD + size
    return False


def require_whole_entries(buffer: bytes | bytearray) -> None:
    """Raises CORRUPT_MESSAGE unless ``buffer`` is whole entries of known formats that pass
    their CRCs: what is converted as a whole must not lose a partial tail on the way."""
    position, limit = 0, len(buffer)
    while position < limit:
        _, size, _, _ = read_entry(buffer, position, limit)
        position += LOG_OVERHEAD + size


def down_converted(buffer: bytes | bytearray, to_magic: int, now: int) -> bytearray:
    """A producer's set holding v2 batches, in format ``to_magic`` (a topic on 0.10's format
    fed by a client of 0.11 or later). Record headers have no older form: such a batch is
    UNSUPPORTED_FOR_MESSAGE_FORMAT rather than losing them."""
    require_whole_entries(buffer)
    from tidelog.records.format import iter_deep

    if idempotent(buffer):
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            "idempotent records need message format 0.11.0 or later (message.format.version)",
        )

    if any(message.headers for message in iter_deep(buffer)):
        raise KafkaError(
            ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
            "record headers need message format 0.11.0 or later (message.format.version)",
        )
    return bytearray(convert_message_set(bytes(buffer), to_magic, now))
