"""Which messages of a segment a clean keeps, as bytes in and bytes out.

A message survives a clean when it has a key, no later offset for that key is in the offset
map, and it is not a tombstone (null value) past the delete horizon. Uncompressed entries are
copied as they are. A compressed wrapper all of whose messages survive is copied as it is; one
none of whose messages survive is dropped; otherwise it is rewritten with only the survivors,
compressed with the same codec: v0 inner offsets stay absolute, v1 inner offsets become
relative to the first survivor (keeping the gaps between survivors, as Kafka's cleaner writes
them) and the wrapper takes the last survivor's offset, so every message keeps its offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidelog.log.offset_map import OffsetMap
from tidelog.records.compression import compress, decompress
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    Codec,
    encode_message,
    key_position,
    read_entry,
)

ENTRY_PREFIX = struct.Struct(">qiIbB")  # offset, size, crc, magic, attributes


@dataclass
class FilterStats:
    """What a filter read and kept: logical messages and bytes of entries."""

    messages_read: int = 0
    messages_kept: int = 0
    bytes_read: int = 0
    bytes_kept: int = 0

    def add(self, other: FilterStats) -> None:
        self.messages_read += other.messages_read
        self.messages_kept += other.messages_kept
        self.bytes_read += other.bytes_read
        self.bytes_kept += other.bytes_kept


def _key_and_value(
    buffer: bytes | memoryview, message_start: int, magic: int
) -> tuple[slice | None, bool]:
    """(the key's slice or None for a null key, whether the value is null)."""
    position = message_start + key_position(magic)
    (key_length,) = INT32.unpack_from(buffer, position)
    position += 4
    key = None if key_length < 0 else slice(position, position + key_length)
    position += max(key_length, 0)
    (value_length,) = INT32.unpack_from(buffer, position)
    return key, value_length < 0


def _survives(
    buffer: bytes | memoryview,
    message_start: int,
    magic: int,
    offset: int,
    offset_map: OffsetMap,
    retain_deletes: bool,
) -> bool:
    key, null_value = _key_and_value(buffer, message_start, magic)
    if key is None:
        return False  # a compacted log keeps only keyed messages
    if null_value and not retain_deletes:
        return False
    return offset_map.get(buffer[key]) <= offset


def filter_entries(
    data: bytes | memoryview, offset_map: OffsetMap, retain_deletes: bool
) -> tuple[bytearray, FilterStats]:
    """The surviving entries of ``data`` (whole entries of one segment, already validated when
    they were appended), and what was read and kept."""
    buffer = memoryview(data)
    out = bytearray()
    stats = FilterStats()
    position, limit = 0, len(buffer)
    unpack, unpack_int, latest = ENTRY_PREFIX.unpack_from, INT32.unpack_from, offset_map.get
    while position + LOG_OVERHEAD <= limit:
        # No CRC check here: the entries were checked when appended, and the cleaned segment
        # is checked whole before it is swapped in.
        offset, size, _, magic, attributes = unpack(buffer, position)
        end = position + LOG_OVERHEAD + size
        if end > limit or magic not in MESSAGE_OVERHEAD:
            read_entry(buffer, position, limit)  # raises the precise error
        stats.bytes_read += end - position
        if not attributes & CODEC_MASK:
            stats.messages_read += 1
            key_at = position + (18 if magic == 0 else 26)  # the key length's position
            (key_length,) = unpack_int(buffer, key_at)
            if key_length < 0:
                position = end
                continue  # a compacted log keeps only keyed messages
            value_at = key_at + 4 + key_length
            if (retain_deletes or unpack_int(buffer, value_at)[0] >= 0) and latest(
                buffer[key_at + 4 : value_at]
            ) <= offset:
                out += buffer[position:end]
                stats.messages_kept += 1
                stats.bytes_kept += end - position
        else:
            kept = _filter_wrapper(
                buffer, position, offset, magic, attributes, offset_map, retain_deletes, stats
            )
            out += kept
            stats.bytes_kept += len(kept)
        position = end
    return out, stats


def _filter_wrapper(
    buffer: memoryview,
    position: int,
    wrapper_offset: int,
    magic: int,
    attributes: int,
    offset_map: OffsetMap,
    retain_deletes: bool,
    stats: FilterStats,
) -> bytes | memoryview:
    """A compressed wrapper entry as it survives: whole, rewritten, or gone (b"")."""
    message_start = position + LOG_OVERHEAD
    (size,) = INT32.unpack_from(buffer, position + 8)
    end = message_start + size
    key, null_value = _key_and_value(buffer, message_start, magic)
    value_at = (
        message_start + key_position(magic) + 4 + (0 if key is None else key.stop - key.start)
    )
    value = buffer[value_at + 4 : end] if not null_value else b""
    codec = Codec(attributes & CODEC_MASK)
    inner = memoryview(decompress(codec, value, magic))
    entries = []  # (stored offset, position, end, inner magic) of each inner message
    inner_position = 0
    while inner_position + LOG_OVERHEAD <= len(inner):
        inner_offset, inner_size, inner_magic, _ = read_entry(inner, inner_position, len(inner))
        inner_end = inner_position + LOG_OVERHEAD + inner_size
        entries.append((inner_offset, inner_position, inner_end, inner_magic))
        inner_position = inner_end
    if not entries:
        return b""
    last_relative = entries[-1][0]
    survivors = []  # (absolute offset, position, end, magic)
    for stored, start, stop, inner_magic in entries:
        absolute = stored if magic == 0 else wrapper_offset - last_relative + stored
        stats.messages_read += 1
        if _survives(
            inner, start + LOG_OVERHEAD, inner_magic, absolute, offset_map, retain_deletes
        ):
            survivors.append((absolute, start, stop, inner_magic))
    stats.messages_kept += len(survivors)
    if len(survivors) == len(entries):
        return buffer[position:end]
    if not survivors:
        return b""
    first_absolute = survivors[0][0]
    rebuilt = bytearray()
    max_timestamp = NO_TIMESTAMP
    for absolute, start, stop, inner_magic in survivors:
        stored = absolute if magic == 0 else absolute - first_absolute
        rebuilt += OFFSET_AND_SIZE.pack(stored, stop - start - LOG_OVERHEAD)
        rebuilt += inner[start + LOG_OVERHEAD : stop]
        if inner_magic == 1:
            max_timestamp = max(max_timestamp, INT64.unpack_from(inner, start + 18)[0])
    if magic == 1 and attributes & TIMESTAMP_TYPE_BIT:
        timestamp = INT64.unpack_from(buffer, message_start + 6)[0]  # the LogAppendTime stays
    else:
        timestamp = max_timestamp
    wrapper = encode_message(
        magic, None, compress(codec, bytes(rebuilt), magic), timestamp, attributes
    )
    return OFFSET_AND_SIZE.pack(survivors[-1][0], len(wrapper)) + wrapper
