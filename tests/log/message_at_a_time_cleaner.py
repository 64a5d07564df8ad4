"""The log cleaner's map and filter as they were before they worked in bulk: one message at a
time, a Python object per compressed inner message, one offset map probe per message. Kept
as the reference that the bulk cleaner must match byte for byte
(tests/log/test_cleaner_equivalence.py); the wrapper rewrite and the segment swap are shared."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

from tidelog.log.cleaner import READ_CHUNK, CleanAborted, Cleaner, CleanStats
from tidelog.log.compaction import FilterStats, _filter_wrapper
from tidelog.log.log import Log
from tidelog.log.offset_map import SLOT, OffsetMap
from tidelog.log.segment import LogSegment
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    OFFSET_AND_SIZE,
    iter_inner,
    key_position,
    read_entry,
    view_at,
)

ENTRY_PREFIX = struct.Struct(">qiIbB")  # offset, size, crc, magic, attributes


def latest(offset_map: OffsetMap, key: bytes | memoryview) -> int:
    """The map's offset for ``key`` from its buffer (not from what ``get`` remembers)."""
    position, found = offset_map._find(offset_map.hash_of(key))
    return SLOT.unpack_from(offset_map.buffer, position)[1] if found else -1


def entries(segment: LogSegment, chunk_size: int) -> Iterator[bytes]:
    """A segment's entries in chunks of whole entries."""
    end, position, pending = segment.size, 0, b""
    while position < end:
        read = os.pread(segment.file.fileno(), min(chunk_size, end - position), position)
        if not read:
            return
        chunk = pending + read
        position += len(read)
        whole = whole_entries_length(chunk)
        if whole == 0 and len(chunk) >= chunk_size:  # an entry larger than a chunk
            (size,) = INT32.unpack_from(chunk, 8)
            rest = os.pread(segment.file.fileno(), LOG_OVERHEAD + size - len(chunk), position)
            position += len(rest)
            chunk += rest
            whole = len(chunk)
        yield chunk[:whole]
        pending = chunk[whole:]


def whole_entries_length(chunk: bytes) -> int:
    position = 0
    while position + LOG_OVERHEAD <= len(chunk):
        _, size = OFFSET_AND_SIZE.unpack_from(chunk, position)
        if position + LOG_OVERHEAD + size > len(chunk):
            break
        position += LOG_OVERHEAD + size
    return position


def filter_entries(
    data: bytes, offset_map: OffsetMap, retain_deletes: bool
) -> tuple[bytearray, FilterStats]:
    buffer = memoryview(data)
    out = bytearray()
    stats = FilterStats()
    position, limit = 0, len(buffer)
    while position + LOG_OVERHEAD <= limit:
        offset, size, _, magic, attributes = ENTRY_PREFIX.unpack_from(buffer, position)
        end = position + LOG_OVERHEAD + size
        if end > limit or magic not in MESSAGE_OVERHEAD:
            read_entry(buffer, position, limit)
        stats.bytes_read += end - position
        if not attributes & CODEC_MASK:
            stats.messages_read += 1
            key_at = position + LOG_OVERHEAD + key_position(magic)
            (key_length,) = INT32.unpack_from(buffer, key_at)
            if key_length >= 0:
                value_at = key_at + 4 + key_length
                null_value = INT32.unpack_from(buffer, value_at)[0] < 0
                if (retain_deletes or not null_value) and latest(
                    offset_map, buffer[key_at + 4 : value_at]
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


class MessageAtATimeCleaner(Cleaner):
    """Cleaner with the map and filter above (and a chunk size of its own)."""

    chunk_size = READ_CHUNK

    def _map_segment(self, segment: LogSegment, stats: CleanStats) -> None:
        for chunk in entries(segment, self.chunk_size):
            stats.map_bytes_read += len(chunk)
            buffer = memoryview(chunk)
            position = 0
            while position + LOG_OVERHEAD <= len(buffer):
                offset, size, _, magic, attributes = ENTRY_PREFIX.unpack_from(buffer, position)
                if attributes & CODEC_MASK:
                    for inner in iter_inner(view_at(buffer, position)):
                        stats.map_messages_read += 1
                        if inner.key is not None:
                            self.offset_map.put(inner.key, inner.offset)
                else:
                    stats.map_messages_read += 1
                    key_at = position + LOG_OVERHEAD + key_position(magic)
                    (key_length,) = INT32.unpack_from(buffer, key_at)
                    if key_length >= 0:
                        self.offset_map.put(buffer[key_at + 4 : key_at + 4 + key_length], offset)
                position += LOG_OVERHEAD + size

    def _kept_chunks(
        self, partition_log: Log, segment: LogSegment, retain_deletes: bool, stats: CleanStats
    ) -> Iterator[bytearray]:
        for chunk in entries(segment, self.chunk_size):
            if self.aborted is not None and self.aborted.is_set():
                raise CleanAborted(f"{partition_log.directory}: cleaning aborted")
            kept, filtered = filter_entries(chunk, self.offset_map, retain_deletes)
            stats.add(filtered)
            yield kept
