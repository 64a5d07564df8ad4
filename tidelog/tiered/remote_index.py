"""A partition's remote indexes: remoteLogIndex, remoteOffsetIndex, remoteTimeIndex.

``{base:020d}.remoteLogIndex`` holds entries, each describing one range of a remote segment's
data (about remote.log.index.interval.bytes of it), in this binary format (big-endian):

    magic int16 (0) | length int16 (bytes after this field) | crc int32 (CRC-32 over
    firstOffset..end) | firstOffset int64 | lastOffset int64 | firstTimestamp int64 |
    lastTimestamp int64 | dataLength int32 | rdiLength int16 | rdi bytes

``rdi`` (remote data identifier) is the byte position of the range in the remote object (int64)
followed by the object's URI in UTF-8. ``firstTimestamp`` is the first entry's timestamp,
``lastTimestamp`` the largest one in the range (-1 for format v0 data).

``{base:020d}.remoteOffsetIndex`` has one 8-byte entry per remoteLogIndex entry, as ``.index``:
firstOffset - base (int32), position of the entry in the remoteLogIndex file (int32).
``{base:020d}.remoteTimeIndex`` has one 12-byte entry per remoteLogIndex entry, as
``.timeindex``: the largest lastTimestamp of that entry and all before it in the file (int64),
firstOffset - base (int32); so every message newer than T comes at or after the entry's range.
``base`` is the firstOffset of a file's first entry. A new set of files starts when the current
remoteLogIndex file reaches the size limit or is older than the time limit.
"""

from __future__ import annotations

import logging
import struct
import threading
import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tidelog.log.files import base_offset_of, segment_file, segment_files
from tidelog.log.offset_index import OffsetIndex
from tidelog.log.segment import HEADER_PREFIX, LogSegment
from tidelog.log.time_index import TimeIndex
from tidelog.records.format import LOG_OVERHEAD, NO_TIMESTAMP

log = logging.getLogger(__name__)

LOG_INDEX_SUFFIX = ".remoteLogIndex"
OFFSET_INDEX_SUFFIX = ".remoteOffsetIndex"
TIME_INDEX_SUFFIX = ".remoteTimeIndex"
SUFFIXES = (LOG_INDEX_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX)

MAGIC = 0
ENTRY_HEADER = struct.Struct(">hhI")  # magic, length, crc (the int32's bytes, unsigned here)
ENTRY_BODY = struct.Struct(">qqqqih")  # first, last, first ts, last ts, data length, rdi length
RDI_POSITION = struct.Struct(">q")
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class CorruptRemoteIndexError(ValueError):
    pass


@dataclass(frozen=True)
class RemoteLogIndexEntry:
    """The messages [first_offset, last_offset] are in ``data_length`` bytes of the object at
    ``uri`` from byte ``position``."""

    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    data_length: int
    uri: str
    position: int

    def encode(self) -> bytes:
        rdi = RDI_POSITION.pack(self.position) + self.uri.encode()
        body = (
            ENTRY_BODY.pack(
                self.first_offset,
                self.last_offset,
                self.first_timestamp,
                self.last_timestamp,
                self.data_length,
                len(rdi),
            )
            + rdi
        )
        return ENTRY_HEADER.pack(MAGIC, 4 + len(body), zlib.crc32(body)) + body


def decode_entry(
    data: bytes | bytearray | memoryview, position: int
) -> tuple[RemoteLogIndexEntry, int]:
    """The entry at ``position`` and the position after it; CorruptRemoteIndexError if it is
    partial, of another magic, or fails its CRC."""
    if len(data) - position < ENTRY_HEADER.size:
        raise CorruptRemoteIndexError(f"partial entry header at position {position}")
    magic, length, crc = ENTRY_HEADER.unpack_from(data, position)
    if magic != MAGIC:
        raise CorruptRemoteIndexError(f"unknown magic {magic} at position {position}")
    body_start = position + ENTRY_HEADER.size
    end = position + 4 + length
    if length < 4 + ENTRY_BODY.size or end > len(data):
        raise CorruptRemoteIndexError(f"partial or short entry at position {position}")
    if zlib.crc32(data[body_start:end]) != crc:
        raise CorruptRemoteIndexError(f"CRC mismatch in the entry at position {position}")
    first, last, first_ts, last_ts, data_length, rdi_length = ENTRY_BODY.unpack_from(
        data, body_start
    )
    rdi_start = body_start + ENTRY_BODY.size
    if rdi_start + rdi_length != end or rdi_length < RDI_POSITION.size:
        raise CorruptRemoteIndexError(
            f"rdi length {rdi_length} does not fit the entry at {position}"
        )
    (object_position,) = RDI_POSITION.unpack_from(data, rdi_start)
    uri = bytes(data[rdi_start + RDI_POSITION.size : end]).decode()
    entry = RemoteLogIndexEntry(first, last, first_ts, last_ts, data_length, uri, object_position)
    return entry, end


def decode_entries(data: bytes | bytearray | memoryview) -> list[RemoteLogIndexEntry]:
    """Every entry of a remoteLogIndex file or object; raises on the first bad one."""
    entries, position = [], 0
    while position < len(data):
        entry, position = decode_entry(data, position)
        entries.append(entry)
    return entries


def build_entries(
    segment: LogSegment, from_offset: int, interval_bytes: int, uri: str
) -> list[RemoteLogIndexEntry]:
    """Entries for a rolled segment's data from ``from_offset`` on (what an earlier copy holds
    is left out): one per ``interval_bytes`` of whole message entries, each a byte range of the
    segment file, which the remote object at ``uri`` is a copy of."""
    entries: list[RemoteLogIndexEntry] = []
    group_start = group_first = group_last = -1
    first_ts = max_ts = -1
    previous_last = segment.base_offset - 1
    end_position = 0

    def close_group() -> None:
        entries.append(
            RemoteLogIndexEntry(
                group_first,
                group_last,
                first_ts,
                max_ts,
                end_position - group_start,
                uri,
                group_start,
            )
        )

    for offset, position, size, _, timestamp in segment.iter_headers(0):
        if offset < from_offset:
            previous_last = offset
            continue
        if group_start < 0:
            group_start = position
            group_first = max(from_offset, previous_last + 1)
            first_ts, max_ts = timestamp, timestamp
        group_last = offset
        max_ts = max(max_ts, timestamp)
        end_position = position + 12 + size
        previous_last = offset
        if end_position - group_start >= interval_bytes:
            close_group()
            group_start = -1
    if group_start >= 0:
        close_group()
    return entries


class _Column:
    """One field of a segment's offset or time index as a read-only sequence, for bisect: no
    list of a large index's entries is built to search it."""

    def __init__(self, index: OffsetIndex | TimeIndex, field: int) -> None:
        self.index = index
        self.field = field

    def __len__(self) -> int:
        return self.index.entries

    def __getitem__(self, slot: int) -> int:
        return self.index.entry_at(slot)[self.field]


def derive_entries(
    segment: LogSegment, from_offset: int, interval_bytes: int, uri: str
) -> list[RemoteLogIndexEntry]:
    """The entries ``build_entries`` makes, from the segment's own indexes and the headers of a
    few entries per range instead of every entry's.

    The ranges are the same (each closes at the first entry whose end reaches
    ``interval_bytes`` past its start), and so are their offsets and first timestamps: the end
    of a range is found by reading headers from the last offset-index position before the byte
    that closes it. Its largest timestamp comes from the time index: an entry (T, O) there was
    written for the entry whose offset is O and which carries T, the largest timestamp of the
    segment up to O (validation and recovery both index the entry carrying the maximum). So for
    the last such O inside the range, the range's largest timestamp is the larger of T and the
    timestamps read from O's entry to the range's end; the header at O is read, and if it does
    not carry T the whole range is read, as it is where no time-index entry falls inside it (a
    range of format v0 data, timestamps that did not grow). A rolled segment only: its indexes
    and data no longer change.
    """
    found = segment.translate_offset(from_offset)
    if found is None:
        return []
    index, time_index = segment.index, segment.time_index
    positions, index_offsets = _Column(index, 1), _Column(index, 0)
    time_offsets = _Column(time_index, 1)
    entries: list[RemoteLogIndexEntry] = []
    start, first_offset = found[1], from_offset
    while start < segment.size:
        target = start + interval_bytes
        # The last time-index entry for an entry of the range before the last indexed entry at
        # or before the byte that closes it: the range is read from there to its end.
        slot = bisect_right(positions, target - 1) - 1
        walk_from, largest, largest_offset = start, None, -1
        if slot >= 0 and positions[slot] > start:
            time_slot = bisect_left(time_offsets, index_offsets[slot]) - 1
            if time_slot >= 0:
                timestamp, offset = time_index.entry_at(time_slot)
                if offset >= first_offset:
                    largest, largest_offset = timestamp, offset
                    walk_from = max(start, index.lookup(offset)[1])
        entry = _read_range(segment, start, walk_from, target, largest, largest_offset)
        if entry is None:  # the time index's entry is not what its header says: read it all
            entry = _read_range(segment, start, start, target, None, -1)
            if entry is None:
                raise CorruptRemoteIndexError(f"{segment.log_path}: no entry at position {start}")
        end, last_offset, first_timestamp, largest = entry
        entries.append(
            RemoteLogIndexEntry(
                first_offset, last_offset, first_timestamp, largest, end - start, uri, start
            )
        )
        start, first_offset = end, last_offset + 1
    return entries


def _read_range(
    segment: LogSegment,
    start: int,
    walk_from: int,
    target: int,
    largest: int | None,
    largest_offset: int,
) -> tuple[int, int, int, int] | None:
    """(end, last offset, first timestamp, largest timestamp) of the range from ``start`` that
    closes at the first entry ending at or after ``target``, reading headers from ``walk_from``.
    ``largest`` is the largest timestamp of the entries before ``walk_from``, carried by the
    entry whose offset is ``largest_offset`` (None, -1: ``walk_from`` is ``start``). None if
    that entry is not met, or carries another timestamp."""
    first_timestamp = NO_TIMESTAMP
    if walk_from > start:
        first_timestamp = next(segment.iter_headers(start, first_chunk=HEADER_PREFIX))[4]
    end = last_offset = -1
    checked = largest_offset < 0
    for offset, position, size, _, timestamp in segment.iter_headers(walk_from):
        if position == start:
            first_timestamp = timestamp
        if offset == largest_offset:
            if timestamp != largest:
                return None
            checked = True
        if largest is None or timestamp > largest:
            largest = timestamp
        end, last_offset = position + LOG_OVERHEAD + size, offset
        if end >= target:
            break
    if not checked or largest is None:
        return None
    return end, last_offset, first_timestamp, largest


class _IndexFile:
    """One set of the three files, cached in memory (they are small: ~80 bytes per MiB of
    remote data)."""

    def __init__(self, directory: Path, base_offset: int, created_ms: int) -> None:
        self.base_offset = base_offset
        self.paths = [segment_file(directory, base_offset, suffix) for suffix in SUFFIXES]
        self.log_bytes = bytearray()
        self.offsets = bytearray()
        self.times = bytearray()
        self.entries: list[RemoteLogIndexEntry] = []
        self.created_ms = created_ms

    @property
    def last_offset(self) -> int:
        return self.entries[-1].last_offset if self.entries else self.base_offset - 1

    def add(self, entry: RemoteLogIndexEntry) -> tuple[bytes, bytes, bytes]:
        encoded = entry.encode()
        largest = max(
            entry.last_timestamp,
            TIME_ENTRY.unpack_from(self.times, len(self.times) - TIME_ENTRY.size)[0]
            if self.times
            else -1,
        )
        offset_entry = OFFSET_ENTRY.pack(entry.first_offset - self.base_offset, len(self.log_bytes))
        time_entry = TIME_ENTRY.pack(largest, entry.first_offset - self.base_offset)
        self.log_bytes += encoded
        self.offsets += offset_entry
        self.times += time_entry
        self.entries.append(entry)
        return encoded, offset_entry, time_entry

    def write_all(self) -> None:
        for path, data in zip(self.paths, (self.log_bytes, self.offsets, self.times), strict=True):
            path.write_bytes(data)


class RemoteLogIndex:
    """The remote indexes of one partition, in its log directory.

    Entries are appended in offset order and never overlap (an append whose first offset is not
    above the highest offset indexed raises). ``lookup(o)`` returns the first entry whose range
    ends at or after o, found through remoteOffsetIndex, or None if no entry reaches o.
    ``search(t)`` returns the first entry whose messages may have a timestamp >= t, found
    through remoteTimeIndex. At open a torn or corrupt tail of the last remoteLogIndex file is
    cut and the offset and time indexes are rebuilt from remoteLogIndex, which is the truth.
    Opened with ``read_only`` (a reader beside a live broker, such as Spark's data source) it
    changes no file: a bad tail is left out in memory only, and ``append`` raises.
    Safe to use from several threads.
    """

    def __init__(
        self,
        directory: Path,
        *,
        max_file_bytes: int,
        roll_ms: int,
        now_ms: int,
        read_only: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.max_file_bytes = max_file_bytes
        self.roll_ms = roll_ms
        self.read_only = read_only
        self._lock = threading.Lock()
        self._files: list[_IndexFile] = []
        self._load(now_ms)

    @classmethod
    def open_read_only(cls, directory: Path) -> RemoteLogIndex:
        """The indexes as the files hold them now, for reading only."""
        return cls(directory, max_file_bytes=0, roll_ms=0, now_ms=0, read_only=True)

    def _load(self, now_ms: int) -> None:
        for path in segment_files(self.directory, LOG_INDEX_SUFFIX):
            index_file = _IndexFile(self.directory, base_offset_of(path), now_ms)
            data = path.read_bytes()
            position = 0
            while position < len(data):
                try:
                    entry, position_after = decode_entry(data, position)
                except CorruptRemoteIndexError as error:
                    log.warning("%s: %s; cutting the file there", path, error)
                    break
                index_file.add(entry)
                position = position_after
            if self.read_only:
                if index_file.entries:
                    self._files.append(index_file)
            elif index_file.entries:
                index_file.write_all()  # the offset and time indexes follow remoteLogIndex
                self._files.append(index_file)
            else:
                for stale in index_file.paths:
                    stale.unlink(missing_ok=True)

    # -- writing -------------------------------------------------------------------------------

    def append(self, entries: list[RemoteLogIndexEntry], now_ms: int) -> None:
        """Appends ``entries`` (in offset order, above everything indexed) and flushes them."""
        if self.read_only:
            raise ValueError(f"{self.directory}: the remote indexes were opened read-only")
        if not entries:
            return
        with self._lock:
            highest = self._highest_offset()
            for entry in entries:
                if entry.first_offset <= highest or entry.last_offset < entry.first_offset:
                    raise ValueError(
                        f"{self.directory}: entry {entry.first_offset}-{entry.last_offset} "
                        f"does not follow the highest indexed offset {highest}"
                    )
                highest = entry.last_offset
            current = self._files[-1] if self._files else None
            written: list[tuple[bytes, bytes, bytes]] = []
            for entry in entries:  # a batch rolls where single appends would have
                if (
                    current is None
                    or len(current.log_bytes) >= self.max_file_bytes
                    or now_ms - current.created_ms >= self.roll_ms
                ):
                    if current is not None:
                        _append_to(current, written)
                    current, written = _IndexFile(self.directory, entry.first_offset, now_ms), []
                    self._files.append(current)
                written.append(current.add(entry))
            assert current is not None
            _append_to(current, written)

    def delete_below(self, offset: int) -> int:
        """Deletes the files whose every entry is below ``offset``; returns how many sets."""
        if self.read_only:
            raise ValueError(f"{self.directory}: the remote indexes were opened read-only")
        with self._lock:
            removed = 0
            while self._files and self._files[0].last_offset < offset:
                for path in self._files.pop(0).paths:
                    path.unlink(missing_ok=True)
                removed += 1
            return removed

    def delete_all(self) -> None:
        self.delete_below(2**63 - 1)

    # -- reading -------------------------------------------------------------------------------

    def _highest_offset(self) -> int:
        return self._files[-1].last_offset if self._files else -1

    @property
    def highest_offset(self) -> int:
        """The last offset indexed, -1 if none."""
        with self._lock:
            return self._highest_offset()

    @property
    def lowest_offset(self) -> int:
        """The first offset indexed, -1 if none."""
        with self._lock:
            return self._files[0].entries[0].first_offset if self._files else -1

    def lookup(self, offset: int) -> RemoteLogIndexEntry | None:
        with self._lock:
            bases = [f.base_offset for f in self._files]
            number = max(0, bisect_right(bases, offset) - 1)
            for index_file in self._files[number:]:
                entry = _lookup_in(index_file, offset)
                if entry is not None:
                    return entry
            return None

    def search(self, timestamp: int) -> RemoteLogIndexEntry | None:
        with self._lock:
            for index_file in self._files:
                count = len(index_file.times) // TIME_ENTRY.size
                low, high = 0, count
                while low < high:  # the first entry whose running largest timestamp >= t
                    middle = (low + high) // 2
                    largest, _ = TIME_ENTRY.unpack_from(index_file.times, middle * TIME_ENTRY.size)
                    if largest >= timestamp:
                        high = middle
                    else:
                        low = middle + 1
                if low < count:
                    return index_file.entries[low]
            return None

    def entries(self) -> Iterator[RemoteLogIndexEntry]:
        with self._lock:
            snapshot = [entry for f in self._files for entry in f.entries]
        return iter(snapshot)

    @property
    def file_count(self) -> int:
        with self._lock:
            return len(self._files)


def _append_to(index_file: _IndexFile, written: list[tuple[bytes, bytes, bytes]]) -> None:
    """Writes the encoded entries ``written`` (added to ``index_file`` in memory) to its three
    files, one write per file."""
    if not written:
        return
    for number, path in enumerate(index_file.paths):
        with open(path, "ab") as file:
            file.write(b"".join(parts[number] for parts in written))


def _lookup_in(index_file: _IndexFile, offset: int) -> RemoteLogIndexEntry | None:
    """Through the offset index: the last entry starting at or before ``offset``, then on to the
    first whose range reaches it."""
    relative = offset - index_file.base_offset
    count = len(index_file.offsets) // OFFSET_ENTRY.size
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if OFFSET_ENTRY.unpack_from(index_file.offsets, middle * OFFSET_ENTRY.size)[0] <= relative:
            low = middle + 1
        else:
            high = middle
    number = max(0, low - 1)
    _, position = OFFSET_ENTRY.unpack_from(index_file.offsets, number * OFFSET_ENTRY.size)
    while position < len(index_file.log_bytes):
        entry, position = decode_entry(index_file.log_bytes, position)
        if entry.last_offset >= offset:
            return entry
    return None
