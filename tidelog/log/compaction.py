"""Which messages of a segment a clean keeps, as bytes in and bytes out.

A message survives a clean when it has a key, no later offset for that key is in the offset
map, and it is not a tombstone (null value) past the delete horizon. Uncompressed entries are
copied as they are. A compressed wrapper all of whose messages survive is copied as it is; one
none of whose messages survive is dropped; otherwise it is rewritten with only the survivors,
compressed with the same codec: v0 inner offsets stay absolute, v1 inner offsets become
relative to the first survivor (keeping the gaps between survivors, as Kafka's cleaner writes
them) and the wrapper takes the last survivor's offset, so every message keeps its offset.

A format v2 batch is filtered record by record, as Kafka 2.1's cleaner does it
(MemoryRecords.filterTo): a batch all of whose records survive is copied as it is; one none of
whose records survive is dropped, unless it is the last batch of a producer id (not -1), which
stays as an empty batch (its header only: no records, no codec, first timestamp -1) so that the
producer's last sequence is not lost; otherwise it is rewritten with the survivors: the same
base offset, last offset delta, partition leader epoch, attributes, producer id, epoch and base
sequence, the survivors' offset deltas and headers as they were, their timestamp deltas counted
from the first survivor's time (LogAppendTime: every delta 0 and both timestamps the batch's),
compressed again with the batch's codec. Control batches (transaction markers, which no
producer can write to tidelog yet) are copied as they are and map no key.

Once a clean has mapped its dirty section, the offset map marks which of its offsets are a
key's latest (OffsetMap.mark_latest): a dirty v2 batch none of whose offsets is marked keeps
no record, which its header tells, so its records are not decompressed and walked again; nor
are a compressed wrapper's messages when none of the offsets the map pass found in it
(MappedWrappers) is marked.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tidelog.log.offset_map import OffsetMap, native
from tidelog.records.compression import compress, decompress
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    INT64,
    LOG_OVERHEAD,
    MAGIC_AND_ATTRIBUTES,
    MAGIC_POSITION,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    V2_ATTRIBUTES,
    V2_CRC_FROM,
    V2_LAST_OFFSET_DELTA_AT,
    Buffer,
    Codec,
    corrupt,
    encode_message,
    key_position,
    read_entry,
)
from tidelog.records.record_batch import (
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    NO_PRODUCER_ID,
    int64,
    read_varint,
    set_crc,
    write_varint,
)

# Whether a v2 batch emptied by a clean stays (as a header) for its producer's sake: called
# with the batch's producer id and last sequence (Kafka's activeProducersWithLastSequence test).
KeepsEmpty = Callable[[int, int], bool]

# An entry up to a v1 message's key length: offset, size, (crc,) magic, attributes, timestamp,
# key length. A v0 message's key length sits 8 bytes earlier. Data is read with PADDING after
# it, so that this unpacks wherever an entry's 12-byte offset and size are (a short v0 entry,
# the first bytes of an entry cut at a chunk's end).
ENTRY_HEADER = struct.Struct(">qi4xbBqi")
V0_KEY_AT = LOG_OVERHEAD + 10  # where the key starts (after its length) in a v0 entry
V1_KEY_AT = LOG_OVERHEAD + 18
PADDING = bytes(ENTRY_HEADER.size - LOG_OVERHEAD)


class MappedWrappers:
    """The compressed wrappers (v0/v1) a clean's map pass met, in offset order: each one's
    offset (that of its last message), how many messages it holds and the least and greatest of
    their absolute offsets; at most ``limit`` of them. A wrapper none of whose offsets from its
    least to its greatest is a key's latest (OffsetMap.holds_latest) keeps no message: the
    filter pass drops it without decompressing it again, counting its messages from here.

    A wrapper whose offsets do not all come after the previous one's forgets every wrapper
    noted and ends the noting (all of them go the usual way): the offset map keeps the offset
    read last for a key, which is the largest only while offsets go up."""

    def __init__(self, limit: int) -> None:
        self.offsets = array("q")
        self.least = array("q")
        self.greatest = array("q")
        self.counts = array("q")
        self.limit = limit
        self.in_order = True

    def note(self, offset: int, messages: int, least: int, greatest: int) -> None:
        if self.greatest and (offset <= self.offsets[-1] or least <= self.greatest[-1]):
            self.in_order = False
            for noted in (self.offsets, self.least, self.greatest, self.counts):
                del noted[:]
        if self.in_order and len(self.offsets) < self.limit:
            self.offsets.append(offset)
            self.least.append(least)
            self.greatest.append(greatest)
            self.counts.append(messages)

    def superseded(self, offset: int, offset_map: OffsetMap) -> int | None:
        """How many messages the wrapper at ``offset`` holds if none of them can be a key's
        latest, else None (so too for a wrapper not noted)."""
        offsets = self.offsets
        at = bisect_left(offsets, offset)
        if at == len(offsets) or offsets[at] != offset:
            return None
        if offset_map.holds_latest(self.least[at], self.greatest[at]):
            return None
        return self.counts[at]


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


def _entry_at(
    padded: bytes, position: int, limit: int, partial_tail: bool
) -> tuple[int, int, int, int, int, int] | None:
    """(offset, end, magic, attributes, where the key starts, key length) of the entry at
    ``position`` in data read with PADDING after ``limit`` (key fields meaningless for a
    compressed wrapper and a v2 batch, whose offset is its last and attributes its int16);
    None for an entry cut at ``limit`` when ``partial_tail``. Raises
    CORRUPT_MESSAGE for an entry too short or of an unknown magic, or cut otherwise."""
    offset, size, magic, attributes, _, key_length = ENTRY_HEADER.unpack_from(padded, position)
    end = position + LOG_OVERHEAD + size
    if end > limit or size < MESSAGE_OVERHEAD[0] or magic not in MESSAGE_OVERHEAD:
        if partial_tail and end > limit and size >= MESSAGE_OVERHEAD[0]:
            return None
        read_entry(padded, position, limit)  # raises the precise error
    if magic == MAGIC:
        if size < MESSAGE_OVERHEAD[MAGIC]:
            read_entry(padded, position, limit)
        (attributes,) = V2_ATTRIBUTES.unpack_from(padded, position + V2_CRC_FROM)
        (delta,) = INT32.unpack_from(padded, position + V2_LAST_OFFSET_DELTA_AT)
        return offset + delta, end, magic, attributes, 0, 0
    if magic:
        return offset, end, magic, attributes, position + V1_KEY_AT, key_length
    (key_length,) = INT32.unpack_from(padded, position + V0_KEY_AT - 4)
    return offset, end, magic, attributes, position + V0_KEY_AT, key_length


def filter_entries(
    data: bytes | bytearray | memoryview,
    offset_map: OffsetMap,
    retain_deletes: bool,
    *,
    partial_tail: bool = False,
    keeps_empty: KeepsEmpty | None = None,
    wrappers: MappedWrappers | None = None,
) -> tuple[bytearray, FilterStats]:
    """The surviving entries of ``data`` (whole entries of one segment, already validated when
    they were appended), and what was read and kept. With ``partial_tail`` the data may end in
    part of an entry, which is left for the caller to read whole: stats.bytes_read says where
    the whole entries ended. ``keeps_empty`` says which emptied v2 batches stay (None: none);
    ``wrappers``, which compressed wrappers keep nothing without being read.

    The loop unpacks one struct per entry and copies each run of consecutive survivors as one
    slice; a key's latest offset is the offset map's (which remembers the keys it was asked
    for, so a key seen again costs a dictionary look-up, not an MD5)."""
    padded = bytes(data) + PADDING  # every header unpacks whole, even a short last entry's
    view = memoryview(padded)
    out = bytearray()
    stats = FilterStats()
    position, limit = 0, len(padded) - len(PADDING)
    run_start = run_end = 0  # survivors not yet copied: padded[run_start:run_end]
    read = kept = 0
    unpack_int = INT32.unpack_from
    remembered, latest = offset_map.remembered.get, offset_map.get
    walk = None
    if native is not None:
        walk = native.filter_plain
        keys: dict[bytes, int] = {}  # the plain entries' keys up to the first wrapper...
        native.map_plain(padded, 0, limit, keys)
        offset_map.remember(keys)  # ...looked up at once
    while limit - position >= LOG_OVERHEAD:
        if walk is not None:  # the plain entries from here, as the loop below takes them
            if run_end > run_start:
                out += view[run_start:run_end]
            position, walked, walked_kept = walk(
                padded, position, limit, out, offset_map.remembered, latest, retain_deletes
            )
            run_start = run_end = position
            read += walked
            kept += walked_kept
            if limit - position < LOG_OVERHEAD:
                break
        # No CRC check here: the entries were checked when appended, and the cleaned segment
        # is checked whole before it is swapped in.
        entry = _entry_at(padded, position, limit, partial_tail)
        if entry is None:
            break
        offset, end, magic, attributes, key_at, key_length = entry
        if magic == MAGIC:
            kept_batch = filter_batch(
                view, position, end, offset_map, retain_deletes, stats, keeps_empty
            )
            if len(kept_batch) == end - position:  # whole: one more entry of the run
                if run_end != position:
                    if run_end > run_start:
                        out += view[run_start:run_end]
                    run_start = position
                run_end = end
            else:
                if run_end > run_start:
                    out += view[run_start:run_end]
                run_start = run_end = end
                out += kept_batch
            position = end
            continue
        if attributes & CODEC_MASK:
            if run_end > run_start:
                out += view[run_start:run_end]
            run_start = run_end = end
            superseded = None if wrappers is None else wrappers.superseded(offset, offset_map)
            if superseded is not None:
                stats.messages_read += superseded  # and none kept
            else:
                out += _filter_wrapper(
                    view, position, offset, magic, attributes, offset_map, retain_deletes, stats
                )
            position = end
            continue
        read += 1
        if key_length >= 0:  # a compacted log keeps only keyed messages
            key_end = key_at + key_length
            key = padded[key_at:key_end]
            key_latest = remembered(key)
            if key_latest is None:
                key_latest = latest(key)
            if key_latest <= offset and (retain_deletes or unpack_int(padded, key_end)[0] >= 0):
                kept += 1
                if run_end != position:
                    if run_end > run_start:
                        out += view[run_start:run_end]
                    run_start = position
                run_end = end
        position = end
    if run_end > run_start:
        out += view[run_start:run_end]
    stats.messages_read += read
    stats.messages_kept += kept
    stats.bytes_read = position
    stats.bytes_kept = len(out)
    return out, stats


def latest_offsets(
    data: bytes, latest: dict[bytes, int], wrappers: MappedWrappers | None = None
) -> tuple[int, int]:
    """Puts the key of every message in ``data`` (whole entries, perhaps then part of one) into
    ``latest`` with its offset, inner messages of compressed wrappers with their absolute
    offsets; a later offset of a key replaces an earlier one. Returns (where the whole entries
    ended, how many messages they held). Each compressed wrapper is noted in ``wrappers``."""
    padded = data + PADDING
    position, limit, count = 0, len(data), 0
    walk = native.map_plain if native is not None else None
    while limit - position >= LOG_OVERHEAD:
        if walk is not None:  # the plain entries from here, as the loop below takes them
            position, walked = walk(padded, position, limit, latest)
            count += walked
            if limit - position < LOG_OVERHEAD:
                break
        entry = _entry_at(padded, position, limit, partial_tail=True)
        if entry is None:
            break
        offset, end, magic, attributes, key_at, key_length = entry
        if magic == MAGIC:
            count += batch_keys(padded, position, end, latest)
        elif attributes & CODEC_MASK:
            messages, least, greatest = _map_wrapper(
                padded, position, offset, magic, attributes, latest
            )
            count += messages
            if wrappers is not None:
                wrappers.note(offset, messages, least, greatest)
        else:
            count += 1
            if key_length >= 0:
                latest[padded[key_at : key_at + key_length]] = offset
        position = end
    return position, count


def _map_wrapper(
    buffer: bytes,
    position: int,
    wrapper_offset: int,
    magic: int,
    attributes: int,
    latest: dict[bytes, int],
) -> tuple[int, int, int]:
    """Puts the key of each message inside the compressed wrapper at ``position`` into
    ``latest`` with its absolute offset; returns how many messages it holds and the least and
    greatest of their offsets (the wrapper's offset twice when it holds none)."""
    _, inner = _decompressed(buffer, position, wrapper_offset, magic, attributes)
    if native is not None:  # the C walk, or None for messages it leaves to the loop below
        mapped = native.map_inner(inner, magic, wrapper_offset, latest)
        if mapped is not None:
            return mapped
    found = inner_keys(inner, wrapper_offset, magic)
    for inner_offset, key in found:
        if key is not None:
            latest[key] = inner_offset
    if not found:
        return 0, wrapper_offset, wrapper_offset
    offsets = [inner_offset for inner_offset, _ in found]
    return len(found), min(offsets), max(offsets)


def inner_keys(inner: bytes, wrapper_offset: int, magic: int) -> list[tuple[int, bytes | None]]:
    """(absolute offset, key or None) of each message of a wrapper's decompressed ``inner``
    message set, as ``iter_inner`` reads them (a partial last inner entry ends them quietly),
    without an object per message."""
    found: list[tuple[int, bytes | None]] = []
    inner_position, limit = 0, len(inner)
    while limit - inner_position >= LOG_OVERHEAD:
        offset, size = OFFSET_AND_SIZE.unpack_from(inner, inner_position)
        start = inner_position + LOG_OVERHEAD
        if size < MESSAGE_OVERHEAD[0] or start + size > limit:
            break
        inner_magic = MAGIC_AND_ATTRIBUTES.unpack_from(inner, start + MAGIC_POSITION)[0]
        if inner_magic not in MESSAGE_OVERHEAD:
            raise corrupt(f"unknown magic {inner_magic} at offset {offset}")
        key_at = start + key_position(inner_magic)
        (key_length,) = INT32.unpack_from(inner, key_at)
        found.append(
            (offset, None if key_length < 0 else inner[key_at + 4 : key_at + 4 + key_length])
        )
        inner_position = start + size
    if magic == 1 and found:
        base = wrapper_offset - found[-1][0]
        return [(base + offset, key) for offset, key in found]
    return found


def _decompressed(
    buffer: bytes | memoryview, position: int, wrapper_offset: int, magic: int, attributes: int
) -> tuple[Codec, bytes]:
    """The codec and the inner message set of the compressed wrapper entry at ``position``."""
    message_start = position + LOG_OVERHEAD
    key, null_value = _key_and_value(buffer, message_start, magic)
    if null_value:
        raise corrupt(f"compressed wrapper at offset {wrapper_offset} has a null value")
    value_at = (
        message_start + key_position(magic) + 4 + (0 if key is None else key.stop - key.start)
    )
    (value_length,) = INT32.unpack_from(buffer, value_at)
    codec = Codec(attributes & CODEC_MASK)
    return codec, decompress(codec, buffer[value_at + 4 : value_at + 4 + value_length], magic)


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
    codec, inner = _decompressed(buffer, position, wrapper_offset, magic, attributes)
    walked = None
    if native is not None:  # the C walk, or None for messages it leaves to the Python one
        walked = native.filter_inner(
            inner,
            magic,
            wrapper_offset,
            offset_map.remembered,
            offset_map.get,
            offset_map.remember,
            retain_deletes,
        )
    if walked is None:
        walked = _filter_inner(inner, magic, wrapper_offset, offset_map, retain_deletes)
    read, kept, rebuilt, max_timestamp, last_kept = walked
    stats.messages_read += read
    stats.messages_kept += kept
    if not kept:
        return b""
    if rebuilt is None:  # every message survives
        return buffer[position:end]
    if magic == 1 and attributes & TIMESTAMP_TYPE_BIT:
        timestamp = INT64.unpack_from(buffer, message_start + 6)[0]  # the LogAppendTime stays
    else:
        timestamp = max_timestamp
    wrapper = encode_message(magic, None, compress(codec, rebuilt, magic), timestamp, attributes)
    return OFFSET_AND_SIZE.pack(last_kept, len(wrapper)) + wrapper


def _filter_inner(
    inner: bytes, magic: int, wrapper_offset: int, offset_map: OffsetMap, retain_deletes: bool
) -> tuple[int, int, bytes | None, int, int]:
    """(messages read, kept, the survivors as the rewritten wrapper holds them or None when none
    or all survive, the survivors' largest v1 timestamp, the last survivor's offset) of a
    wrapper's decompressed ``inner`` message set; ``native.filter_inner`` in Python. The
    survivors keep their messages as they are; a v0 wrapper's inner offsets stay absolute, a v1
    wrapper's become relative to the first survivor."""
    entries = []  # (stored offset, position, end, inner magic) of each inner message
    inner_position = 0
    while inner_position + LOG_OVERHEAD <= len(inner):
        inner_offset, inner_size, inner_magic, _ = read_entry(inner, inner_position, len(inner))
        inner_end = inner_position + LOG_OVERHEAD + inner_size
        entries.append((inner_offset, inner_position, inner_end, inner_magic))
        inner_position = inner_end
    if not entries:
        return 0, 0, None, NO_TIMESTAMP, 0
    last_relative = entries[-1][0]
    survivors = []  # (absolute offset, position, end, magic)
    for stored, start, stop, inner_magic in entries:
        absolute = stored if magic == 0 else wrapper_offset - last_relative + stored
        if _survives(
            inner, start + LOG_OVERHEAD, inner_magic, absolute, offset_map, retain_deletes
        ):
            survivors.append((absolute, start, stop, inner_magic))
    read, kept = len(entries), len(survivors)
    last_kept = survivors[-1][0] if survivors else 0
    if kept in (0, read):
        return read, kept, None, NO_TIMESTAMP, last_kept
    first_absolute = survivors[0][0]
    rebuilt = bytearray()
    max_timestamp = NO_TIMESTAMP
    for absolute, start, stop, inner_magic in survivors:
        stored = absolute if magic == 0 else absolute - first_absolute
        rebuilt += OFFSET_AND_SIZE.pack(stored, stop - start - LOG_OVERHEAD)
        rebuilt += inner[start + LOG_OVERHEAD : stop]
        if inner_magic == 1:
            max_timestamp = max(max_timestamp, INT64.unpack_from(inner, start + 18)[0])
    return read, kept, bytes(rebuilt), max_timestamp, last_kept


# -- format v2 ---------------------------------------------------------------------------------


def _records_of(buffer: bytes | memoryview, position: int, end: int, attributes: int) -> Buffer:
    """The records section of the v2 batch at ``position``, decompressed."""
    section = buffer[position + HEADER_SIZE : end]
    codec = attributes & CODEC_MASK
    return decompress(codec, section, MAGIC) if codec else section


def _walk_records(section: Buffer, count: int) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(start, end, where the key's length starts, timestamp delta, offset delta, key length) of
    each of the ``count`` records of an uncompressed records section (validated on append, so
    only what would read outside the section is checked)."""
    position, limit = 0, len(section)
    for _ in range(count):
        start = position
        length, position = read_varint(section, position, limit)
        end = position + length
        if length < 1 or end > limit:
            raise corrupt(f"record length {length} does not fit its batch")
        timestamp_delta, position = read_varint(section, position + 1, end)
        offset_delta, key_at = read_varint(section, position, end)
        key_length, _ = read_varint(section, key_at, end)
        yield start, end, key_at, timestamp_delta, offset_delta, key_length
        position = end


def batch_keys(
    buffer: bytes | memoryview, position: int, end: int, latest: dict[bytes, int]
) -> int:
    """Puts each keyed record of the v2 batch at ``position`` into ``latest`` with its offset
    (a control batch's none); returns how many records the batch holds."""
    base_offset, _, _, _, _, attributes, _, _, _, _, _, _, count = HEADER.unpack_from(
        buffer, position
    )
    if attributes & CONTROL_BIT:
        return count
    section = _records_of(buffer, position, end, attributes)
    if native is not None and native.map_records(section, count, base_offset, latest) is not None:
        return count
    for _, _, key_at, _, offset_delta, key_length in _walk_records(section, count):
        if key_length >= 0:
            key_start = key_at + _varint_size(section, key_at)
            latest[bytes(section[key_start : key_start + key_length])] = base_offset + offset_delta
    return count


def _varint_size(data: Buffer, position: int) -> int:
    size = 1
    while data[position] & 0x80:
        position += 1
        size += 1
    return size


def filter_batch(
    buffer: memoryview,
    position: int,
    end: int,
    offset_map: OffsetMap,
    retain_deletes: bool,
    stats: FilterStats,
    keeps_empty: KeepsEmpty | None,
) -> bytes | memoryview:
    """The v2 batch at ``position`` as it survives: whole, rewritten, emptied or gone (b"")."""
    (
        base_offset,
        _,
        _,
        _,
        _,
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        _,
        base_sequence,
        count,
    ) = HEADER.unpack_from(buffer, position)
    if attributes & CONTROL_BIT:
        stats.messages_read += count
        stats.messages_kept += count
        return buffer[position:end]
    log_append_time = bool(attributes & TIMESTAMP_TYPE_BIT)
    walked: tuple[int, bytes | None, int, int] | None = None
    if not offset_map.holds_latest(base_offset, base_offset + last_offset_delta):
        walked = 0, None, 0, 0  # each keyed record has a later one of its key: none is read
    else:
        section = _records_of(buffer, position, end, attributes)
        if native is not None:  # the C walk, or None for records it leaves to the Python one
            walked = native.filter_records(
                section,
                count,
                base_offset,
                first_timestamp,
                log_append_time,
                offset_map.remembered,
                offset_map.get,
                offset_map.remember,
                retain_deletes,
            )
        if walked is None:
            walked = _filter_records(
                section,
                count,
                base_offset,
                first_timestamp,
                log_append_time,
                offset_map,
                retain_deletes,
            )
    kept, records, shift, latest_time = walked
    stats.messages_read += count
    stats.messages_kept += kept
    if kept == count:
        return buffer[position:end]
    if not kept:
        if producer_id == NO_PRODUCER_ID or keeps_empty is None:
            return b""
        last_sequence = -1 if base_sequence < 0 else (base_sequence + last_offset_delta) % 2**31
        if not keeps_empty(producer_id, last_sequence):
            return b""
        return _rebuilt(buffer, position, b"", 0, NO_TIMESTAMP, max_timestamp, Codec.NONE)
    assert records is not None  # some records survive, not all
    if log_append_time:
        new_first = new_max = max_timestamp
    else:
        new_first, new_max = int64(first_timestamp + shift), latest_time
    codec = Codec(attributes & CODEC_MASK)
    body_bytes = compress(codec, records, MAGIC) if codec else records
    return _rebuilt(buffer, position, body_bytes, kept, new_first, new_max, codec)


def _filter_records(
    section: Buffer,
    count: int,
    base_offset: int,
    first_timestamp: int,
    log_append_time: bool,
    offset_map: OffsetMap,
    retain_deletes: bool,
) -> tuple[int, bytes | None, int, int]:
    """(records kept, the survivors written again or None when none or all survive, the
    timestamp delta their times now count from, the latest of their times, at least
    NO_TIMESTAMP) of the ``count`` records of a decompressed records ``section`` of a batch
    whose times count from ``first_timestamp``; ``native.filter_records`` in Python. Each
    survivor is written as Kafka's builder writes it again: attributes 0, its time from the
    first survivor's (LogAppendTime: the batch's own, delta 0), offset delta and the rest as
    they were. Times and deltas are Kafka's long sums and differences (``int64``)."""
    remembered, latest = offset_map.remembered.get, offset_map.get
    survivors = []  # (start, end, timestamp delta)
    for start, stop, key_at, timestamp_delta, offset_delta, key_length in _walk_records(
        section, count
    ):
        if key_length < 0:
            continue  # a compacted log keeps only keyed messages
        key_start = key_at + _varint_size(section, key_at)
        value_at = key_start + key_length
        if not retain_deletes and read_varint(section, value_at, stop)[0] < 0:
            continue
        key = bytes(section[key_start:value_at])
        key_latest = remembered(key)
        if key_latest is None:
            key_latest = latest(key)
        if key_latest <= base_offset + offset_delta:
            survivors.append((start, stop, timestamp_delta))
    kept = len(survivors)
    if kept in (0, count):
        return kept, None, 0, NO_TIMESTAMP
    shift = 0 if log_append_time else survivors[0][2]
    records = bytearray()
    for start, stop, timestamp_delta in survivors:
        new_delta = 0 if log_append_time else int64(timestamp_delta - shift)
        attributes_at = start + _varint_size(section, start)
        if new_delta == timestamp_delta and section[attributes_at] == 0:
            records += section[start:stop]
            continue
        body = bytearray(b"\x00")
        write_varint(body, new_delta)
        _, offset_delta_at = read_varint(section, attributes_at + 1, stop)
        body += section[offset_delta_at:stop]
        write_varint(records, len(body))
        records += body
    latest_time = max(int64(first_timestamp + delta) for _, _, delta in survivors)
    return kept, bytes(records), shift, max(latest_time, NO_TIMESTAMP)


def _rebuilt(
    buffer: memoryview,
    position: int,
    records: bytes,
    count: int,
    first_timestamp: int,
    max_timestamp: int,
    codec: Codec,
) -> bytes:
    """The header of the batch at ``position`` around ``records``: its base offset, partition
    leader epoch, last offset delta, producer fields and attributes but for the codec kept."""
    (
        base_offset,
        _,
        epoch,
        magic,
        _,
        attributes,
        last_offset_delta,
        _,
        _,
        producer_id,
        producer_epoch,
        base_sequence,
        _,
    ) = HEADER.unpack_from(buffer, position)
    batch = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(records),
            epoch,
            magic,
            0,
            (attributes & ~CODEC_MASK) | codec,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    batch += records
    set_crc(batch, 0, len(batch))
    return bytes(batch)
