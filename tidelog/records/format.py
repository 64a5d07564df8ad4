"""Kafka message formats v0 and v1, and the entry framing v2 shares: layout, encoding, and
reading one entry at a time.

A message set is a run of entries, each ``offset:int64 size:int32 message``:

    v0 message: crc:uint32 magic:int8(0) attributes:int8 key:bytes value:bytes
    v1 message: crc:uint32 magic:int8(1) attributes:int8 timestamp:int64 key:bytes value:bytes

``bytes`` is an int32 length (-1 for null) and the data. The CRC is CRC-32 over magic..end.
Attribute bits 0-2 name the codec; bit 3 (v1 only) the timestamp type.

A v2 record batch (record_batch.py) is framed the same way (base offset, length) with its magic
at the same byte, so the walkers here read segments that mix the three formats. What they
report as an entry's offset is its last offset: a v0/v1 entry's own (a v1 wrapper's is its
last inner message's), a v2 batch's base offset plus its last offset delta.

The functions here come in two kinds: ``read_entry`` works on buffers with ``struct`` and returns
plain tuples (for the append, recovery and fetch paths), while ``MessageView`` and the
``iter_*`` functions build an object per message for the people who look at messages: dump-log,
tests and conversions.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from enum import IntEnum

from crc32c import crc32c

from tidelog.errors import ErrorCode, KafkaError

# What the readers here take: any bytes-like object that slices and unpacks.
Buffer = bytes | bytearray | memoryview

LOG_OVERHEAD = 12  # offset int64 + size int32
OFFSET_AND_SIZE = struct.Struct(">qi")
# An entry up to its key length: offset, size, crc, magic, attributes, [timestamp,] key length.
V0_ENTRY_HEADER = struct.Struct(">qiIbBi")
V1_ENTRY_HEADER = struct.Struct(">qiIbBqi")
CRC = struct.Struct(">I")
MAGIC_AND_ATTRIBUTES = struct.Struct(">bB")
# An entry up to where a v1 message's timestamp ends (26 bytes: no entry of either magic is
# shorter): offset, size, crc, magic, attributes, timestamp (meaningless for v0).
SHALLOW_HEADER = struct.Struct(">qiIbBq")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
# The fixed part of a message after its CRC, per magic.
V0_HEADER = struct.Struct(">bbi")  # magic, attributes, key length
V1_HEADER = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length

# Positions inside a message (counted from its CRC).
MAGIC_POSITION = 4
ATTRIBUTES_POSITION = 5
TIMESTAMP_POSITION = 6
# crc + magic + attributes [+ timestamp] + two length fields; for v2 the batch header after its
# length field
MESSAGE_OVERHEAD = {0: 14, 1: 22, 2: 49}
# A v2 batch, counted from its base offset: the CRC, what it covers from, the last offset delta
# and the max timestamp (record_batch.py has the whole layout).
V2_CRC_AT = 17
V2_CRC_FROM = 21
V2_LAST_OFFSET_DELTA_AT = 23
V2_MAX_TIMESTAMP_AT = 35
V2_ATTRIBUTES = struct.Struct(">h")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
NO_TIMESTAMP = -1
MAGIC_VALUES = (0, 1, 2)


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4  # format v2 only (Kafka 2.1)


# the codecs a v0/v1 message set can carry (zstd came with format v2)
MESSAGE_SET_CODECS = (Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4)


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


def corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, message)


def read_entry(buffer: Buffer, position: int, limit: int) -> tuple[int, int, int, int]:
    """Checks the entry at ``position`` and returns (last offset, size, magic, attributes).

    ``size`` is the message size, so the next entry starts at position + 12 + size. Raises
    CORRUPT_MESSAGE when the entry is partial (runs past ``limit``), too small for its magic, of
    an unknown magic, or fails its CRC. Key and value lengths are checked by ``check_lengths``,
    which the append path calls and the recovery path can skip, since the CRC covers them.
    """
    if limit - position < LOG_OVERHEAD:
        raise corrupt(f"partial entry header at position {position}")
    offset, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
    start = position + LOG_OVERHEAD
    if size < MESSAGE_OVERHEAD[0]:
        raise corrupt(f"message size {size} at position {position} is below the minimum")
    if start + size > limit:
        raise corrupt(f"partial message at position {position}: size {size}, {limit - start} left")
    magic, attributes = MAGIC_AND_ATTRIBUTES.unpack_from(buffer, start + MAGIC_POSITION)
    if magic not in MAGIC_VALUES:
        raise corrupt(f"unknown magic {magic} at offset {offset}")
    if size < MESSAGE_OVERHEAD[magic]:
        raise corrupt(f"message size {size} at offset {offset} is below the minimum for v{magic}")
    if magic == 2:
        (crc,) = CRC.unpack_from(buffer, position + V2_CRC_AT)
        if crc32c(memoryview(buffer)[position + V2_CRC_FROM : start + size]) != crc:
            raise corrupt(f"CRC-32C mismatch in the batch at offset {offset}")
        (attributes,) = V2_ATTRIBUTES.unpack_from(buffer, position + V2_CRC_FROM)
        (delta,) = INT32.unpack_from(buffer, position + V2_LAST_OFFSET_DELTA_AT)
        if delta < 0:
            raise corrupt(f"negative last offset delta {delta} in the batch at offset {offset}")
        return offset + delta, size, magic, attributes
    (crc,) = CRC.unpack_from(buffer, start)
    if zlib.crc32(buffer[start + MAGIC_POSITION : start + size]) != crc:
        raise corrupt(f"CRC mismatch at offset {offset}")
    return offset, size, magic, attributes


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class ShallowScan:
    """What ``scan_entries`` found: ``end`` is the position after the last whole entry (the
    start of a partial one a fetch cut at its max_bytes, if any); offsets are -1 when no entry
    was whole; ``max_timestamp`` is -1 for format v0; ``batches``: a whole entry is a v2 batch
    (only those carry leader epochs and producer ids)."""

    end: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    batches: bool = False


def scan_entries(buffer: Buffer, min_offset: int) -> ShallowScan:
    """Checks a replicated message set entry by entry, without opening compressed wrappers.

    Every whole entry must pass its CRC, have a known magic and an offset above the previous
    one's and at least ``min_offset``; anything else raises CORRUPT_MESSAGE, naming the fault.
    A partial last entry ends the scan. This is the follower's append path, so the loop
    unpacks one struct per entry and calls no function of its own. ``first_offset`` is the first
    entry's offset field (a v2 batch's base offset; a v1 wrapper's last inner offset).
    """
    view = memoryview(buffer)
    limit, position = len(view), 0
    unpack, crc32, minimum = SHALLOW_HEADER.unpack_from, zlib.crc32, MESSAGE_OVERHEAD
    first_offset = last_offset = offset_of_max = NO_TIMESTAMP
    max_timestamp, next_offset = NO_TIMESTAMP, min_offset
    batches = False
    while limit - position >= SHALLOW_HEADER.size:
        offset, size, crc, magic, _, timestamp = unpack(view, position)
        end = position + LOG_OVERHEAD + size
        if end > limit and size >= 0:
            break  # partial: the next fetch brings it whole
        if magic == 2:
            if (
                offset < next_offset
                or size < minimum[2]
                or crc32c(view[position + V2_CRC_FROM : end])
                != CRC.unpack_from(view, position + V2_CRC_AT)[0]
            ):
                if offset < next_offset:
                    raise corrupt(f"offset {offset} at position {position} is below {next_offset}")
                read_entry(view, position, limit)  # raises the precise error
            if first_offset < 0:
                first_offset = offset
            last = offset + INT32.unpack_from(view, position + V2_LAST_OFFSET_DELTA_AT)[0]
            (timestamp,) = INT64.unpack_from(view, position + V2_MAX_TIMESTAMP_AT)
            if last < offset:
                read_entry(view, position, limit)
            if timestamp > max_timestamp:
                max_timestamp, offset_of_max = timestamp, last
            last_offset, next_offset, position = last, last + 1, end
            batches = True
            continue
        if (
            offset < next_offset
            or magic not in minimum
            or size < minimum[magic]
            or crc32(view[position + 16 : end]) != crc
        ):
            if offset < next_offset:
                raise corrupt(f"offset {offset} at position {position} is below {next_offset}")
            read_entry(view, position, limit)  # raises the precise error
        if first_offset < 0:
            first_offset = offset
        if magic and timestamp > max_timestamp:
            max_timestamp, offset_of_max = timestamp, offset
        last_offset, next_offset, position = offset, offset + 1, end
    if limit - position >= LOG_OVERHEAD:  # too short for the loop: whole (and bad) or partial?
        (size,) = INT32.unpack_from(view, position + 8)
        if position + LOG_OVERHEAD + size <= limit:
            read_entry(view, position, limit)
    view.release()
    return ShallowScan(position, first_offset, last_offset, max_timestamp, offset_of_max, batches)


def entry_last_offset_and_timestamp(buffer: Buffer, position: int) -> tuple[int, int]:
    """(last offset, largest timestamp or -1) of the entry at ``position``, unchecked."""
    (offset,) = INT64.unpack_from(buffer, position)
    magic = buffer[position + LOG_OVERHEAD + MAGIC_POSITION]
    if magic == 2:
        (delta,) = INT32.unpack_from(buffer, position + V2_LAST_OFFSET_DELTA_AT)
        return offset + delta, INT64.unpack_from(buffer, position + V2_MAX_TIMESTAMP_AT)[0]
    if magic == 1:
        return offset, INT64.unpack_from(buffer, position + LOG_OVERHEAD + TIMESTAMP_POSITION)[0]
    return offset, NO_TIMESTAMP


def read_timestamp(buffer: Buffer, message_start: int, magic: int) -> int:
    if magic == 0:
        return NO_TIMESTAMP
    if magic == 2:  # message_start is where a v0/v1 CRC would be: 12 bytes into the batch
        return INT64.unpack_from(buffer, message_start - LOG_OVERHEAD + V2_MAX_TIMESTAMP_AT)[0]
    return INT64.unpack_from(buffer, message_start + TIMESTAMP_POSITION)[0]


def key_position(magic: int) -> int:
    """Where the key length field sits, counted from the message's CRC."""
    return 6 if magic == 0 else 14


def check_lengths(buffer: Buffer, message_start: int, size: int, magic: int) -> int:
    """Checks that key and value exactly fill the message; returns the key length (-1 for null)."""
    position = message_start + key_position(magic)
    (key_length,) = INT32.unpack_from(buffer, position)
    if key_length < -1:
        raise corrupt(f"negative key length {key_length}")
    value_length_at = position + 4 + max(key_length, 0)
    if value_length_at + 4 > message_start + size:
        raise corrupt("key runs past the end of the message")
    (value_length,) = INT32.unpack_from(buffer, value_length_at)
    if value_length < -1 or value_length_at + 4 + max(value_length, 0) != message_start + size:
        raise corrupt("value length does not match the message size")
    return key_length


def value_slice(buffer: Buffer, message_start: int, magic: int) -> slice | None:
    """The value's byte range inside ``buffer``, or None for a null value."""
    position = message_start + key_position(magic)
    (key_length,) = INT32.unpack_from(buffer, position)
    position += 4 + max(key_length, 0)
    (value_length,) = INT32.unpack_from(buffer, position)
    if value_length < 0:
        return None
    return slice(position + 4, position + 4 + value_length)


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return b"\xff\xff\xff\xff"
    return INT32.pack(len(data)) + data


def encode_message(
    magic: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """One message (no offset/size header), CRC included."""
    if magic == 0:
        body = V0_HEADER.pack(0, attributes, -1)[:2]
    elif magic == 1:
        body = V1_HEADER.pack(1, attributes, timestamp, -1)[:10]
    else:
        raise ValueError(f"magic must be 0 or 1, not {magic}")
    body += _encode_bytes(key) + _encode_bytes(value)
    return CRC.pack(zlib.crc32(body)) + body


def encode_entry(offset: int, message: bytes) -> bytes:
    return OFFSET_AND_SIZE.pack(offset, len(message)) + message


@dataclass(frozen=True)
class Record:
    """What a producer hands over: a key, a value and (for v1) a create time."""

    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP


def build_message_set(
    records: Iterable[Record],
    *,
    magic: int,
    codec: Codec = Codec.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    wrapper_timestamp: int | None = None,
) -> bytes:
    """A message set as a producer (or the broker, rebuilding one) writes it.

    Uncompressed: one entry per record at base_offset, base_offset + 1, ... Compressed: one
    wrapper whose value is the compressed inner set; v0 inner offsets are absolute, v1 inner
    offsets relative (0..n-1); the wrapper carries the offset of the last inner message. The v1
    wrapper's timestamp is ``wrapper_timestamp`` if given, else the largest inner timestamp.
    """
    from tidelog.records.compression import compress

    records = list(records)
    type_bit = TIMESTAMP_TYPE_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    attributes = type_bit if magic == 1 else 0
    if codec == Codec.NONE:
        return b"".join(
            encode_entry(
                base_offset + i, encode_message(magic, r.key, r.value, r.timestamp, attributes)
            )
            for i, r in enumerate(records)
        )
    if not records:
        raise ValueError("a compressed message set needs at least one record")
    inner_base = 0 if magic == 1 else base_offset
    inner = b"".join(
        encode_entry(inner_base + i, encode_message(magic, r.key, r.value, r.timestamp, 0))
        for i, r in enumerate(records)
    )
    if wrapper_timestamp is None:
        wrapper_timestamp = max(r.timestamp for r in records) if magic == 1 else NO_TIMESTAMP
    wrapper = encode_message(
        magic, None, compress(codec, inner, magic), wrapper_timestamp, attributes | codec
    )
    return encode_entry(base_offset + len(records) - 1, wrapper)


@dataclass(frozen=True)
class MessageView:
    """One message as read from a buffer, for display and tests (never on a hot path).

    A v2 batch read shallow is a view too: its offset is the batch's last offset, its timestamp
    the batch's max timestamp, key and value None, and ``batch`` holds its bytes."""

    offset: int
    position: int
    size: int  # message size, without the 12-byte offset/size header
    crc: int
    crc_valid: bool
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    # format v2: a record's headers; for a batch's own view (iter_shallow) the whole batch,
    # which iter_inner opens
    headers: tuple[tuple[str, bytes | None], ...] = ()
    batch: bytes | None = None

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


def view_at(buffer: Buffer, position: int) -> MessageView:
    """Reads the entry at ``position`` without checking its CRC (crc_valid tells)."""
    offset, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
    start = position + LOG_OVERHEAD
    (crc,) = CRC.unpack_from(buffer, start)
    magic, attributes = MAGIC_AND_ATTRIBUTES.unpack_from(buffer, start + MAGIC_POSITION)
    if magic not in MAGIC_VALUES:
        raise corrupt(f"unknown magic {magic} at offset {offset}")
    if magic == 2:
        end = start + size
        (crc,) = CRC.unpack_from(buffer, position + V2_CRC_AT)
        (attributes,) = V2_ATTRIBUTES.unpack_from(buffer, position + V2_CRC_FROM)
        last_offset, timestamp = entry_last_offset_and_timestamp(buffer, position)
        crc_valid = crc32c(memoryview(buffer)[position + V2_CRC_FROM : end]) == crc
        batch = bytes(buffer[position:end])
        return MessageView(
            last_offset,
            position,
            size,
            crc,
            crc_valid,
            2,
            attributes,
            timestamp,
            None,
            None,
            batch=batch,
        )
    timestamp = read_timestamp(buffer, start, magic)
    cursor = start + key_position(magic)
    fields: list[bytes | None] = []
    for _ in range(2):
        (length,) = INT32.unpack_from(buffer, cursor)
        cursor += 4
        if length < 0:
            fields.append(None)
        else:
            fields.append(bytes(buffer[cursor : cursor + length]))
            cursor += length
    crc_valid = zlib.crc32(buffer[start + MAGIC_POSITION : start + size]) == crc
    return MessageView(
        offset, position, size, crc, crc_valid, magic, attributes, timestamp, fields[0], fields[1]
    )


def iter_shallow(buffer: Buffer) -> Iterator[MessageView]:
    """The top-level entries of a message set; stops quietly at a partial last entry."""
    position, limit = 0, len(buffer)
    while limit - position >= LOG_OVERHEAD:
        _, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
        if size < MESSAGE_OVERHEAD[0] or position + LOG_OVERHEAD + size > limit:
            return
        yield view_at(buffer, position)
        position += LOG_OVERHEAD + size


def iter_inner(wrapper: MessageView) -> Iterator[MessageView]:
    """The messages inside a compressed wrapper, with absolute offsets.

    v1 inner offsets are relative: the wrapper holds the absolute offset of the last one.
    """
    from tidelog.records.compression import decompress

    if wrapper.magic == 2:
        yield from _batch_records(wrapper)
        return
    if wrapper.codec == Codec.NONE:
        yield wrapper
        return
    if wrapper.value is None:
        raise corrupt(f"compressed wrapper at offset {wrapper.offset} has a null value")
    inner = list(iter_shallow(decompress(wrapper.codec, wrapper.value, wrapper.magic)))
    if wrapper.magic == 0 or not inner:
        yield from inner
        return
    last_relative = inner[-1].offset
    log_append_time = wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    for message in inner:
        absolute = wrapper.offset - last_relative + message.offset
        if log_append_time:
            # LogAppendTime: the wrapper's time stands for every inner message.
            yield replace(
                message,
                offset=absolute,
                timestamp=wrapper.timestamp,
                attributes=message.attributes | TIMESTAMP_TYPE_BIT,
            )
        else:
            yield replace(message, offset=absolute)


def _batch_records(batch: MessageView) -> Iterator[MessageView]:
    """The records of a v2 batch's view as messages: absolute offsets, each record's time (the
    batch's for LogAppendTime), the batch's attributes and CRC, the record's headers."""
    from tidelog.records.record_batch import check_batch, read_records

    assert batch.batch is not None
    header = check_batch(batch.batch, 0, len(batch.batch)) if batch.crc_valid else None
    if header is None:
        raise corrupt(f"CRC-32C mismatch in the batch ending at offset {batch.offset}")
    log_append_time = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    for record in read_records(batch.batch, header):
        yield MessageView(
            record.offset,
            batch.position,
            record.size,
            batch.crc,
            batch.crc_valid,
            2,
            batch.attributes,
            header.max_timestamp if log_append_time else record.timestamp,
            record.key,
            record.value,
            record.headers,
        )


def iter_deep(buffer: Buffer) -> Iterator[MessageView]:
    """Every logical message of a message set: inner messages in place of their wrappers."""
    for entry in iter_shallow(buffer):
        yield from iter_inner(entry)
