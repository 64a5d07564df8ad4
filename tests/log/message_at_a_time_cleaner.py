"""The log cleaner's map and filter as they were before they worked in bulk: one message at a
time, a Python object per compressed inner message, one offset map probe per message. Kept
as the reference that the bulk cleaner must match byte for byte
(tests/log/test_cleaner_equivalence.py); the segment swap is shared.
A format v2 batch is read into record objects and, when some of its records go, written again
from them (reference_batch), as Kafka 2.1's MemoryRecords.filterTo and MemoryRecordsBuilder do:
same base offset, last offset delta, epoch, producer fields and attributes, each survivor's
time counted from the first survivor's (LogAppendTime: the batch's), its codec again."""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterator

from tidelog.log.cleaner import READ_CHUNK, ActiveProducers, CleanAborted, Cleaner, CleanStats
from tidelog.log.compaction import FilterStats, KeepsEmpty, _decompressed, _survives
from tidelog.log.log import Log
from tidelog.log.offset_map import SLOT, OffsetMap
from tidelog.log.segment import LogSegment
from tidelog.records.compression import compress
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    encode_message,
    iter_inner,
    iter_shallow,
    key_position,
    read_entry,
    view_at,
)
from tidelog.records.record_batch import (
    HEADER,
    BatchHeader,
    encode_record,
    int64,
    read_header,
    read_records,
    set_crc,
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


def reference_batch(
    header: BatchHeader, records: list, first_timestamp: int, max_timestamp: int
) -> bytes:
    """A batch like ``header``'s around ``records`` (BatchRecord objects, their own offsets
    and timestamps), the way Kafka's builder writes it."""
    body = b"".join(
        encode_record(
            record.offset - header.base_offset,
            int64(record.timestamp - first_timestamp),  # a long difference, as in Kafka
            record.key,
            record.value,
            record.headers,
        )
        for record in records
    )
    if header.codec and records:
        body = compress(header.codec, body, 2)
    batch = bytearray(
        HEADER.pack(
            header.base_offset,
            49 + len(body),
            header.partition_leader_epoch,
            2,
            0,
            header.attributes if records else header.attributes & ~CODEC_MASK,
            header.last_offset_delta,
            first_timestamp,
            max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            len(records),
        )
    )
    batch += body
    set_crc(batch, 0, len(batch))
    return bytes(batch)


def filter_batch(
    buffer: memoryview,
    position: int,
    end: int,
    offset_map: OffsetMap,
    retain_deletes: bool,
    stats: FilterStats,
    keeps_empty: KeepsEmpty | None,
) -> bytes:
    header = read_header(buffer, position)
    batch = bytes(buffer[position:end])
    records = read_records(batch, read_header(batch, 0))
    if header.timestamp_type == 1:  # LogAppendTime: the batch's time is every record's
        records = [dataclasses.replace(r, timestamp=header.max_timestamp) for r in records]
    stats.messages_read += len(records)
    if header.is_control:
        stats.messages_kept += len(records)
        return batch
    kept = []
    for record in records:
        if record.key is None or (record.value is None and not retain_deletes):
            continue
        if latest(offset_map, record.key) <= record.offset:
            kept.append(record)
    stats.messages_kept += len(kept)
    if len(kept) == len(records):
        return batch
    if not kept:
        if (
            header.producer_id >= 0
            and keeps_empty
            and keeps_empty(header.producer_id, header.last_sequence)
        ):
            return reference_batch(header, [], -1, header.max_timestamp)
        return b""
    return reference_batch(
        header, kept, kept[0].timestamp, max([-1] + [record.timestamp for record in kept])
    )


def filter_entries(
    data: bytes, offset_map: OffsetMap, retain_deletes: bool, keeps_empty: KeepsEmpty | None
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
        if magic == 2:
            kept_batch = filter_batch(
                buffer, position, end, offset_map, retain_deletes, stats, keeps_empty
            )
            out += kept_batch
            stats.bytes_kept += len(kept_batch)
        elif not attributes & CODEC_MASK:
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
            kept = reference_wrapper(
                buffer, position, offset, magic, attributes, offset_map, retain_deletes, stats
            )
            out += kept
            stats.bytes_kept += len(kept)
        position = end
    return out, stats


def reference_wrapper(
    buffer: memoryview,
    position: int,
    wrapper_offset: int,
    magic: int,
    attributes: int,
    offset_map: OffsetMap,
    retain_deletes: bool,
    stats: FilterStats,
) -> bytes | memoryview:
    """A compressed wrapper entry as it survives: whole, rewritten, or gone (b""), as the
    cleaner wrote it before its walk over inner messages went to C (compaction._filter_inner
    and native.filter_inner)."""
    message_start = position + LOG_OVERHEAD
    (size,) = INT32.unpack_from(buffer, position + 8)
    end = message_start + size
    codec, inner = _decompressed(buffer, position, wrapper_offset, magic, attributes)
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


class WholeLogProducers(ActiveProducers):
    """Each producer id's last sequence, from every batch of the log read as objects."""

    def __call__(self, producer_id: int, last_sequence: int) -> bool:
        if self.last_sequences is None:
            self.last_sequences = {}
            for segment in self.partition_log.segments:
                data = segment.log_path.read_bytes()[: segment.size]
                for entry in iter_shallow(data):
                    if entry.magic == 2:
                        batch = read_header(data, entry.position)
                        if batch.producer_id != -1:
                            self.last_sequences[batch.producer_id] = batch.last_sequence
        return self.last_sequences.get(producer_id) == last_sequence


class MessageAtATimeCleaner(Cleaner):
    """Cleaner with the map and filter above (and a chunk size of its own)."""

    chunk_size = READ_CHUNK

    def _active_producers(self, partition_log: Log) -> ActiveProducers:
        return WholeLogProducers(partition_log)

    def _map_segment(self, segment: LogSegment, stats: CleanStats) -> None:
        for chunk in entries(segment, self.chunk_size):
            stats.map_bytes_read += len(chunk)
            buffer = memoryview(chunk)
            position = 0
            while position + LOG_OVERHEAD <= len(buffer):
                offset, size, _, magic, attributes = ENTRY_PREFIX.unpack_from(buffer, position)
                if magic == 2:
                    batch = read_header(buffer, position)
                    for inner in iter_inner(view_at(buffer, position)):
                        stats.map_messages_read += 1
                        if inner.key is not None and not batch.is_control:
                            self.offset_map.put(inner.key, inner.offset)
                elif attributes & CODEC_MASK:
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
        self,
        partition_log: Log,
        segment: LogSegment,
        retain_deletes: bool,
        stats: CleanStats,
        producers: ActiveProducers,
    ) -> Iterator[bytearray]:
        for chunk in entries(segment, self.chunk_size):
            if self.aborted is not None and self.aborted.is_set():
                raise CleanAborted(f"{partition_log.directory}: cleaning aborted")
            kept, filtered = filter_entries(chunk, self.offset_map, retain_deletes, producers)
            stats.add(filtered)
            yield kept
