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
from types import ModuleType
from typing import cast

from tidelog.errors import ErrorCode, KafkaError
from tidelog.records.batch_validation import down_converted, has_batches, validate_batches
from tidelog.records.compression import compress, decompress
from tidelog.records.conversion import convert_message, rebuild_inner_set
from tidelog.records.format import (
    ATTRIBUTES_POSITION,
    CODEC_MASK,
    CRC,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MAGIC_POSITION,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_POSITION,
    TIMESTAMP_TYPE_BIT,
    V0_ENTRY_HEADER,
    V1_ENTRY_HEADER,
    Codec,
    TimestampType,
    check_lengths,
    corrupt,
    encode_entry,
    encode_message,
    key_position,
    read_entry,
    value_slice,
)
from tidelog.records.recompression import recompressed

LARGEST_OFFSET = 2**63 - 1  # an offset is a signed 64-bit integer

native: ModuleType | None
try:  # the walk over v0/v1 messages, built by make install (setup.py)
    import tidelog.records._record_walk as native
except ImportError:  # a source tree nobody built: plain_run_python does the same
    native = None


@dataclass(frozen=True)
class RecordsPolicy:
    """The topic settings that decide what a partition accepts and how it stamps it."""

    magic: int = 1
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    timestamp_difference_max_ms: int = 2**63 - 1
    max_message_bytes: int = 1000012
    compacted: bool = False
    compression: Codec | None = None  # compression.type: None keeps the producer's codec


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class ValidatedMessageSet:
    """A message set ready to append: offsets assigned, timestamps checked or stamped.

    ``max_timestamp`` is -1 for format v0; ``offset_of_max_timestamp`` is the offset of a message
    that carries it (for a compressed wrapper, the wrapper's own offset). ``log_append_time`` is
    the stamped time for a LogAppendTime topic, else -1 (the produce response carries it).
    """

    buffer: bytes | bytearray
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    recompressed: bool

    @property
    def message_count(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(slots=True)
class _Checks:
    """What every message of one format must pass, fixed for one validation call (made for
    each append, so a plain slotted class: a frozen dataclass costs a setattr per field)."""

    magic: int
    max_size: int  # the largest message size, without its 12-byte offset/size header
    compacted: bool
    now: int
    max_difference: int | None  # None: CreateTime is not checked
    append_time: int  # -1: timestamps are kept as they are


# Where an entry's attributes byte is: offset, size, crc, magic come first.
_ATTRIBUTES_AT = LOG_OVERHEAD + ATTRIBUTES_POSITION


def _checks(
    magic: int, policy: RecordsPolicy, now: int, max_difference: int | None, append_time: int
) -> _Checks:
    """The checks of messages of ``magic`` under ``policy``; ``max_difference`` is None when
    CreateTime is not checked (it only is in format v1)."""
    return _Checks(
        magic,
        policy.max_message_bytes - LOG_OVERHEAD,
        policy.compacted,
        now,
        max_difference if magic == 1 else None,
        append_time,
    )


def _plain_run(
    buffer: bytearray | bytes,
    position: int,
    limit: int,
    checks: _Checks,
    assign_from: int | None,
) -> tuple[int, int, int, int, bool]:
    """plain_run_python's walk, in C where make install built it (_record_walk.c)."""
    if native is None:
        return plain_run_python(buffer, position, limit, checks, assign_from)
    _check_offsets_fit(position, limit, checks.magic, assign_from)
    max_difference = checks.max_difference
    position, count, max_timestamp, index_of_max, in_order, bad_timestamp = native.plain_run(
        buffer,
        position,
        limit,
        checks.magic,
        checks.max_size,
        checks.compacted,
        checks.now,
        -1 if max_difference is None else max_difference,
        checks.append_time,
        -1 if assign_from is None else assign_from,
    )
    if bad_timestamp is not None:
        assert max_difference is not None
        raise _invalid_timestamp(bad_timestamp, checks.now, max_difference)
    return position, count, max_timestamp, index_of_max, in_order


def _check_offsets_fit(position: int, limit: int, magic: int, assign_from: int | None) -> None:
    """Refuses a run whose offsets, assigned from ``assign_from``, could pass the largest
    offset, before a walk writes any: counted as if every entry were as small as an entry can
    be, so a log within a few thousand offsets of the end refuses an append that might still
    have fitted, and no walk ever writes an offset that wrapped round."""
    if assign_from is None:
        return
    most = (limit - position) // (LOG_OVERHEAD + MESSAGE_OVERHEAD[magic])
    _check_last_offset(assign_from, assign_from + most - 1)


def _check_last_offset(first: int, last: int) -> None:
    """Refuses offsets ``first`` to ``last`` if the log end offset after them would pass the
    largest offset (2^63 - 1); only a damaged or crafted log gets there."""
    if last >= LARGEST_OFFSET:
        raise KafkaError(
            ErrorCode.UNKNOWN,
            f"offsets {first} to {last} would pass the largest offset, {LARGEST_OFFSET}",
        )


def plain_run_python(
    buffer: bytearray | bytes,
    position: int,
    limit: int,
    checks: _Checks,
    assign_from: int | None,
) -> tuple[int, int, int, int, bool]:
    """Checks the run of uncompressed messages of format ``checks.magic`` at ``position``.

    It stops at the first entry that is anything else or fails a check (the caller then says
    precisely what is wrong). With ``assign_from`` it rewrites their offsets from it, and stamps
    ``checks.append_time`` if that is set; without, it notes whether the offsets are 0, 1, ...
    (the relative offsets of a v1 wrapper's inner set). This is the loop every message of every
    append passes through, so it works on the buffer with struct and calls no function of its own.

    Returns (position reached, message count, largest timestamp, index of the message with it,
    offsets in order).
    """
    magic = checks.magic
    _check_offsets_fit(position, limit, magic, assign_from)
    v1 = magic == 1
    header = V1_ENTRY_HEADER if v1 else V0_ENTRY_HEADER
    header_size, unpack_header = header.size, header.unpack_from
    key_length_at = LOG_OVERHEAD + key_position(magic)
    min_size, max_size, compacted = MESSAGE_OVERHEAD[magic], checks.max_size, checks.compacted
    now, max_difference, append_time = checks.now, checks.max_difference, checks.append_time
    unpack_int32, pack_offset, crc32 = INT32.unpack_from, OFFSET_AND_SIZE.pack_into, zlib.crc32
    view = memoryview(buffer)
    count, max_timestamp, index_of_max, in_order = 0, NO_TIMESTAMP, -1, True
    timestamp = NO_TIMESTAMP
    while limit - position >= header_size:
        if v1:
            offset, size, crc, found_magic, attributes, timestamp, key_length = unpack_header(
                buffer, position
            )
        else:
            offset, size, crc, found_magic, attributes, key_length = unpack_header(buffer, position)
        end = position + LOG_OVERHEAD + size
        if (
            found_magic != magic
            or attributes & CODEC_MASK
            or not min_size <= size <= max_size
            or end > limit
            or key_length < -1
            or (key_length < 0 and compacted)
        ):
            break
        value_length_at = position + key_length_at + 4 + (key_length if key_length > 0 else 0)
        if value_length_at + 4 > end:
            break
        (value_length,) = unpack_int32(buffer, value_length_at)
        value_end = value_length_at + 4 + (value_length if value_length > 0 else 0)
        if value_length < -1 or value_end != end or crc32(view[position + 16 : end]) != crc:
            break
        if assign_from is None:
            in_order = in_order and offset == count
        else:
            pack_offset(buffer, position, assign_from + count, size)
        if v1:
            if append_time >= 0 and assign_from is not None:
                # offsets are assigned in place, so the buffer is a bytearray
                _stamp(cast(bytearray, buffer), position + LOG_OVERHEAD, end, append_time)
                timestamp = append_time
            elif max_difference is not None and abs(timestamp - now) > max_difference:
                raise _invalid_timestamp(timestamp, now, max_difference)
            if timestamp > max_timestamp:
                max_timestamp, index_of_max = timestamp, count
        count += 1
        position = end
    view.release()
    return position, count, max_timestamp, index_of_max, in_order


def _explain_invalid(buffer: bytes | bytearray, position: int, limit: int, checks: _Checks) -> None:
    """Raises the precise error for the entry at ``position``, which ``_plain_run`` stopped at
    although it is an uncompressed message of the expected format."""
    _, size, magic, attributes = read_entry(buffer, position, limit)
    if magic != checks.magic:
        raise corrupt(f"inner message of magic {magic} inside a v{checks.magic} wrapper")
    if attributes & CODEC_MASK:
        raise corrupt("nested compression inside a compressed wrapper")
    if size > checks.max_size:
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes "
            f"{checks.max_size + LOG_OVERHEAD}",
        )
    key_length = check_lengths(buffer, position + LOG_OVERHEAD, size, magic)
    if checks.compacted and key_length < 0:
        raise corrupt("a compacted topic accepts only messages with a key")
    raise corrupt(f"invalid message at position {position}")


def validate_and_assign_offsets(
    buffer: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int = NO_TIMESTAMP,
    partition_leader_epoch: int = -1,
) -> ValidatedMessageSet:
    """Checks a producer's message set and returns it with offsets assigned, recompressed to
    the topic's compression.type where that is not the producer's (recompression.py).

    Raises KafkaError (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, and for v2
    batches the codes batch_validation.py names) and then nothing of the set may be appended.
    A topic of format v2 takes batch_validation's path; v2 batches sent to an older format are
    down-converted first. ``partition_leader_epoch`` is stamped into v2 batches.
    """
    validated = _validate_and_assign_offsets(
        buffer,
        next_offset=next_offset,
        policy=policy,
        now=now,
        last_appended_timestamp=last_appended_timestamp,
        partition_leader_epoch=partition_leader_epoch,
    )
    if policy.compression is None:
        return validated
    return recompressed(validated, policy.compression, policy.magic)


def _validate_and_assign_offsets(
    buffer: bytes | bytearray | memoryview,
    *,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int = NO_TIMESTAMP,
    partition_leader_epoch: int = -1,
) -> ValidatedMessageSet:
    out = bytearray(buffer)
    limit = len(out)
    if limit == 0:
        raise corrupt("empty message set")
    target = policy.magic
    if target == 2:
        return _validated_batches(
            out, next_offset, policy, now, last_appended_timestamp, partition_leader_epoch
        )
    if target == 1:
        single = _single_v1_wrapper(out, next_offset, policy, now, last_appended_timestamp)
        if single is not None:
            return single
    return _validated_in_general(out, next_offset, policy, now, last_appended_timestamp)


def _validated_in_general(
    out: bytearray,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int,
) -> ValidatedMessageSet:
    """Any message set for a topic of format v0 or v1 (the reference for the fast path)."""
    limit = len(out)
    target = policy.magic
    converted_down = has_batches(out)
    if converted_down:
        out = down_converted(out, target, now)
        limit = len(out)
    log_append_time = target == 1 and policy.timestamp_type == TimestampType.LOG_APPEND_TIME
    append_time = max(last_appended_timestamp, now) if log_append_time else NO_TIMESTAMP
    max_difference = policy.timestamp_difference_max_ms
    checked_difference = (
        max_difference if not log_append_time and max_difference < 2**63 - 1 else None
    )
    target_checks = _checks(target, policy, now, checked_difference, append_time)
    replacements: list[tuple[int, int, bytes]] = []
    offset = next_offset
    max_timestamp, offset_of_max_timestamp = NO_TIMESTAMP, -1
    position = 0
    while position < limit:
        # Uncompressed messages already in the topic's format: rewritten in place (a
        # compressed wrapper, librdkafka's every batch, skips the run's set-up).
        if limit - position <= _ATTRIBUTES_AT or not out[position + _ATTRIBUTES_AT] & CODEC_MASK:
            position, count, run_max, index_of_max, _ = _plain_run(
                out, position, limit, target_checks, offset
            )
            if run_max > max_timestamp:
                max_timestamp, offset_of_max_timestamp = run_max, offset + index_of_max
            offset += count
            if position >= limit:
                break
        # Anything else: a compressed wrapper, a message to convert, or an invalid entry.
        _, size, magic, attributes = read_entry(out, position, limit)
        start, end = position + LOG_OVERHEAD, position + LOG_OVERHEAD + size
        codec = attributes & CODEC_MASK
        if codec == 0 and magic == target:
            _explain_invalid(out, position, limit, target_checks)
        if size + LOG_OVERHEAD > policy.max_message_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"message of {size + LOG_OVERHEAD} bytes exceeds max.message.bytes "
                f"{policy.max_message_bytes}",
            )
        if codec == 0:
            checks_for = {
                magic: _checks(magic, policy, now, checked_difference, append_time),
                target: target_checks,
            }
            converted, timestamp = _converted_message(
                out, position, limit, magic, target, checks_for
            )
            _check_last_offset(offset, offset)
            replacements.append((position, end, encode_entry(offset, converted)))
            last = offset
        else:
            checks = (
                target_checks
                if magic == target
                else _checks(magic, policy, now, checked_difference, append_time)
            )
            inner, count, inner_max, in_order = _checked_inner_set(out, start, magic, codec, checks)
            last = offset + count - 1
            _check_last_offset(offset, last)  # before the wrapper or its inner set is written
            if magic == target == 1 and in_order:
                timestamp = append_time if log_append_time else inner_max
                _rewrite_wrapper(out, position, end, last, timestamp, log_append_time)
            else:
                entry, timestamp = _rebuilt_wrapper(
                    inner, magic, codec, offset, target, now, append_time
                )
                replacements.append((position, end, entry))
        if target == 1 and timestamp > max_timestamp:
            max_timestamp, offset_of_max_timestamp = timestamp, last
        offset = last + 1
        position = end
    if replacements:
        out = _splice(out, replacements)
    return ValidatedMessageSet(
        buffer=out,
        first_offset=next_offset,
        last_offset=offset - 1,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        log_append_time=append_time,
        recompressed=bool(replacements) or converted_down,
    )


# A v1 wrapper's header up to its key length: offset, size, crc, magic, attributes, timestamp,
# key length.
_V1_WRAPPER = V1_ENTRY_HEADER
_V1_WRAPPER_KEY_AT = LOG_OVERHEAD + key_position(1)


def _single_v1_wrapper(
    out: bytearray,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int,
) -> ValidatedMessageSet | None:
    """The set librdkafka and Kafka's own producers send a v1 topic: one compressed v1
    wrapper whose inner offsets are 0..n-1, validated and assigned in place as
    ``_validate_and_assign_offsets`` would, with less set-up for this one shape. None, with
    ``out`` unchanged, for any other set or any check that fails: the general path then
    validates it and says precisely what is wrong."""
    limit = len(out)
    if limit < LOG_OVERHEAD + MESSAGE_OVERHEAD[1]:
        return None
    _, size, crc, magic, attributes, _, key_length = _V1_WRAPPER.unpack_from(out, 0)
    codec = attributes & CODEC_MASK
    if (
        magic != 1
        or not codec
        or LOG_OVERHEAD + size != limit
        or limit > policy.max_message_bytes
        or zlib.crc32(memoryview(out)[LOG_OVERHEAD + MAGIC_POSITION :]) != crc
        or key_length < -1
    ):
        return None
    value_length_at = _V1_WRAPPER_KEY_AT + 4 + max(key_length, 0)
    if value_length_at + 4 > limit:
        return None
    (value_length,) = INT32.unpack_from(out, value_length_at)
    if value_length < 0 or value_length_at + 4 + value_length != limit:
        return None
    try:
        inner = decompress(codec, memoryview(out)[value_length_at + 4 :], 1)
    except KafkaError:
        return None
    log_append_time = policy.timestamp_type == TimestampType.LOG_APPEND_TIME
    append_time = max(last_appended_timestamp, now) if log_append_time else NO_TIMESTAMP
    max_difference = policy.timestamp_difference_max_ms
    checked_difference = (
        max_difference if not log_append_time and max_difference < 2**63 - 1 else None
    )
    inner_checks = _Checks(1, 2**31 - 1, policy.compacted, now, checked_difference, NO_TIMESTAMP)
    try:
        position, count, inner_max, _, in_order = _plain_run(
            inner, 0, len(inner), inner_checks, None
        )
    except KafkaError:
        return None  # INVALID_TIMESTAMP: raised again by the general path, in its order
    if position != len(inner) or not count or not in_order:
        return None
    last = next_offset + count - 1
    _check_last_offset(next_offset, last)
    timestamp = append_time if log_append_time else inner_max
    _rewrite_wrapper(out, 0, limit, last, timestamp, log_append_time)
    return ValidatedMessageSet(
        buffer=out,
        first_offset=next_offset,
        last_offset=last,
        max_timestamp=max(timestamp, NO_TIMESTAMP),
        offset_of_max_timestamp=last if timestamp > NO_TIMESTAMP else -1,
        log_append_time=append_time,
        recompressed=False,
    )


def _validated_batches(
    out: bytearray,
    next_offset: int,
    policy: RecordsPolicy,
    now: int,
    last_appended_timestamp: int,
    partition_leader_epoch: int,
) -> ValidatedMessageSet:
    log_append_time = policy.timestamp_type == TimestampType.LOG_APPEND_TIME
    append_time = max(last_appended_timestamp, now) if log_append_time else NO_TIMESTAMP
    out, last_offset, max_timestamp, offset_of_max, converted = validate_batches(
        out,
        next_offset=next_offset,
        timestamp_type=policy.timestamp_type,
        timestamp_difference_max_ms=policy.timestamp_difference_max_ms,
        max_message_bytes=policy.max_message_bytes,
        compacted=policy.compacted,
        now=now,
        append_time=append_time,
        partition_leader_epoch=partition_leader_epoch,
    )
    return ValidatedMessageSet(
        buffer=out,
        first_offset=next_offset,
        last_offset=last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max,
        log_append_time=append_time,
        recompressed=converted,
    )


def _converted_message(
    buffer: bytearray, position: int, limit: int, magic: int, target: int, checks_for: dict
) -> tuple[bytes, int]:
    """An uncompressed message of the other format, checked and converted (KIP-32): up-converted
    messages get the broker's time (the log append time on a LogAppendTime topic)."""
    checks = checks_for[magic]
    size = OFFSET_AND_SIZE.unpack_from(buffer, position)[1]
    start = position + LOG_OVERHEAD
    if _plain_run(buffer, position, start + size, checks, None)[1] != 1:
        _explain_invalid(buffer, position, limit, checks)
    target_checks = checks_for[target]
    append_time = target_checks.append_time
    up_time = append_time if append_time >= 0 else target_checks.now
    message = convert_message(memoryview(buffer)[start : start + size], target, up_time)
    if append_time >= 0:
        stamped = bytearray(message)
        _stamp(stamped, 0, len(stamped), append_time)
        message = bytes(stamped)
    return message, up_time if target == 1 else NO_TIMESTAMP


def _checked_inner_set(
    buffer: bytearray, start: int, magic: int, codec: int, checks: _Checks
) -> tuple[bytes, int, int, bool]:
    """Decompresses a wrapper and checks every inner message.

    Returns (inner set, count, largest inner timestamp, inner offsets are 0..n-1).
    """
    value = value_slice(buffer, start, magic)
    if value is None:
        raise corrupt("compressed wrapper with a null value")
    inner = decompress(codec, memoryview(buffer)[value], magic)
    inner_checks = _Checks(
        checks.magic, 2**31 - 1, checks.compacted, checks.now, checks.max_difference, NO_TIMESTAMP
    )
    position, count, max_timestamp, _, in_order = _plain_run(
        inner, 0, len(inner), inner_checks, None
    )
    if position < len(inner):
        _explain_invalid(inner, position, len(inner), inner_checks)
    if count == 0:
        raise corrupt("compressed wrapper holds no messages")
    return inner, count, max_timestamp, in_order


def _rewrite_wrapper(
    buffer: bytearray, position: int, end: int, last_offset: int, timestamp: int, append: bool
) -> None:
    """Assigns a v1 wrapper in place: its offset (the last inner one), timestamp, type, CRC."""
    start = position + LOG_OVERHEAD
    OFFSET_AND_SIZE.pack_into(buffer, position, last_offset, end - start)
    INT64.pack_into(buffer, start + TIMESTAMP_POSITION, timestamp)
    attributes = buffer[start + 5] & ~TIMESTAMP_TYPE_BIT
    buffer[start + 5] = attributes | (TIMESTAMP_TYPE_BIT if append else 0)
    CRC.pack_into(buffer, start, zlib.crc32(memoryview(buffer)[start + MAGIC_POSITION : end]))


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
    parts: list[bytes | bytearray] = []
    cursor = 0
    for start, end, data in replacements:
        parts.append(buffer[cursor:start])
        parts.append(data)
        cursor = end
    parts.append(buffer[cursor:])
    return bytearray(b"".join(parts))
