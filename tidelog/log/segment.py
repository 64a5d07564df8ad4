"""One segment of a partition's log: a ``.log`` file with its ``.index`` and ``.timeindex``."""

from __future__ import annotations

import contextlib
import io
import logging
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tidelog.errors import KafkaError
from tidelog.log.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    segment_file,
)
from tidelog.log.index_file import CorruptIndexError
from tidelog.log.offset_index import OffsetIndex
from tidelog.log.time_index import TimeIndex
from tidelog.records.format import (
    INT64,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    entry_last_offset_and_timestamp,
    read_entry,
    scan_entries,
)

log = logging.getLogger(__name__)

SCAN_CHUNK = 64 * 1024
RECENT_APPENDS = 256  # positions of the latest appends a segment keeps (position_of)
# what iter_headers reads of an entry: a v1 message through its timestamp, a v2 batch through
# its max timestamp
HEADER_PREFIX = 43
MAX_RELATIVE_OFFSET = 2**31 - 1


class SegmentLogFile(io.FileIO):
    """A segment's open ``.log`` file. Deleting a segment unlinks its files but does not close
    this: a FileSlice read before the deletion may still be on its way to a client, and
    sendfile reads through the descriptor (a closed descriptor's number may already belong to
    another file). The descriptor closes when the last reference to the file, the segment's or
    a slice's, is gone (CPython frees an object when its last reference goes), or when the
    segment is closed (a clean shutdown, a deleted partition)."""

    def __del__(self) -> None:
        self.close()  # on purpose, so not the "unclosed file" ResourceWarning


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class FileSlice:
    """``length`` bytes of a segment's log file from ``position``: what a fetch sends, with
    ``os.sendfile`` when no conversion is needed. The file stays readable after the segment is
    deleted (the descriptor keeps the data, see SegmentLogFile), so a slice taken may still be
    sent."""

    file: BinaryIO
    position: int
    length: int

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.length, self.position)


class LogSegment:
    """The messages with offsets [base_offset, next_offset) of a partition, in one file.

    Invariants: entries in the ``.log`` file have strictly increasing offsets, all >= base_offset
    and below base_offset + 2**31; ``size`` is the file's length. Before an append, when more
    than index_interval_bytes were written since the last offset-index entry, an entry for the
    appended batch's first offset and position is added, and a time-index entry
    (max_timestamp, offset_of_max_timestamp) with it when the segment's largest timestamp grew
    (Kafka's rule) or, with a time_index_granularity_ms, reached a later bucket of that width
    than the last time index entry's (at most one entry per minute, say, plus the one at roll).
    The segment never decides to roll; the Log does, and calls ``on_roll`` with the next base.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        time_index_granularity_ms: int = 0,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.time_index_granularity_ms = time_index_granularity_ms
        self.max_index_size = max_index_size
        self.suffix = suffix  # after each file's own suffix: the cleaner's .cleaned and .swap
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX + suffix)
        self.file: BinaryIO = SegmentLogFile(self.log_path, "a+b")
        self._fd = self.file.fileno()
        self.size = os.fstat(self._fd).st_size
        self.index = self._open_index(OffsetIndex, INDEX_SUFFIX + suffix)
        self.time_index = self._open_index(TimeIndex, TIME_INDEX_SUFFIX + suffix)
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        # where each recent append began, by its first offset: a follower fetches from where
        # the leader's previous append ended, and a consumer's bound (the high watermark) is
        # where one ended, so most reads find their position here without a scan
        self._recent_appends: dict[int, int] = {}

    def _open_index(self, kind, suffix):
        path = segment_file(self.directory, self.base_offset, suffix)
        try:
            return kind(path, self.base_offset, self.max_index_size)
        except CorruptIndexError as error:
            log.warning("%s; rebuilding it", error)
            path.unlink()
            self.needs_index_rebuild = True
            return kind(path, self.base_offset, self.max_index_size)

    needs_index_rebuild = False

    # -- reading -------------------------------------------------------------------------------

    def iter_headers(
        self, position: int = 0, end: int | None = None, first_chunk: int = SCAN_CHUNK
    ) -> Iterator[tuple[int, ...]]:
        """(last offset, position, size, magic, timestamp) of each entry from ``position`` on, read
        in chunks (the first of ``first_chunk`` bytes) without CRC checks, for data already
        validated."""
        end = self.size if end is None else end
        chunk, chunk_start, chunk_size = b"", position, first_chunk
        while position + LOG_OVERHEAD <= end:
            if position + HEADER_PREFIX > chunk_start + len(chunk):
                chunk_start = position
                chunk = os.pread(self._fd, min(chunk_size, end - position), position)
                chunk_size = SCAN_CHUNK
            at = position - chunk_start
            offset, size = OFFSET_AND_SIZE.unpack_from(chunk, at)
            if size < MESSAGE_OVERHEAD[0] or position + LOG_OVERHEAD + size > end:
                return
            magic = chunk[at + 16]
            if magic == 2:
                offset, timestamp = entry_last_offset_and_timestamp(chunk, at)
            else:
                timestamp = INT64.unpack_from(chunk, at + 18)[0] if magic == 1 else NO_TIMESTAMP
            yield offset, position, size, magic, timestamp
            position += LOG_OVERHEAD + size

    def translate_offset(self, offset: int) -> tuple[int, int] | None:
        """(offset, position) of the first entry whose offset is >= ``offset`` (for a compressed
        wrapper, its last inner offset), or None if there is none."""
        _, position = self.index.lookup(offset)
        # Mostly the indexed entry is the one sought (fetches start where a batch did): its
        # header is all there is to read then.
        first_chunk = min(SCAN_CHUNK, self.index_interval_bytes + HEADER_PREFIX)
        for entry_offset, entry_position, *_ in self.iter_headers(
            position, first_chunk=first_chunk
        ):
            if entry_offset >= offset:
                return entry_offset, entry_position
        return None

    def position_of(self, offset: int) -> int | None:
        """The position of the first entry whose offset is >= ``offset``, or None if there is
        none: at once if an append began at ``offset`` (every entry before it is below it, and
        the one there holds it or a later one), else by ``translate_offset``."""
        position = self._recent_appends.get(offset)
        if position is not None:
            return position
        found = self.translate_offset(offset)
        return None if found is None else found[1]

    def read(self, offset: int, max_bytes: int, max_position: int | None = None) -> FileSlice:
        """Up to ``max_bytes`` from the entry holding ``offset``, not past ``max_position``.
        The last entry may be partial, as in Kafka; an empty slice if nothing is there."""
        end = self.size if max_position is None else min(max_position, self.size)
        position = self.position_of(offset)
        if position is None or position >= end:
            return FileSlice(self.file, end, 0)
        return FileSlice(self.file, position, min(max_bytes, end - position))

    def entry_size_at(self, position: int) -> int:
        _, size = OFFSET_AND_SIZE.unpack_from(os.pread(self._fd, LOG_OVERHEAD, position))
        return LOG_OVERHEAD + size

    @property
    def last_modified_ms(self) -> int:
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """The largest message timestamp, or the file's modification time if none has one."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    @property
    def retention_timestamp(self) -> int:
        """What time-based retention measures: the last time index entry's timestamp."""
        if self.time_index.entries:
            return self.time_index.last_entry[0]
        return self.largest_timestamp

    # -- writing -------------------------------------------------------------------------------

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(
        self,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        data: bytes | bytearray | memoryview,
    ) -> None:
        """Appends a batch whose offsets are [first_offset, last_offset]."""
        if first_offset < self.next_offset:
            raise ValueError(
                f"append of offset {first_offset} to {self.log_path}, whose next offset is "
                f"{self.next_offset}"
            )
        if not self.can_hold(last_offset):
            raise ValueError(f"offset {last_offset} overflows segment {self.base_offset}")
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = (
                max_timestamp,
                offset_of_max_timestamp,
            )
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.index.append(first_offset, self.size)
            if self.max_timestamp >= 0:
                self._index_time(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        written = os.pwrite(self._fd, data, self.size)
        if written != len(data):
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        recent = self._recent_appends
        recent[first_offset] = self.size
        if len(recent) > RECENT_APPENDS:
            self._recent_appends = dict(list(recent.items())[RECENT_APPENDS // 2 :])
        self.size += written
        self.bytes_since_last_index_entry += written
        self.next_offset = last_offset + 1

    def _index_time(self, timestamp: int, offset: int) -> None:
        """The time index entry due with an offset index entry: Kafka's when ``timestamp`` grew,
        else only when it falls into a later bucket than the last entry's. Entries keep their
        meaning either way (the largest timestamp up to an offset), so a search by timestamp
        that scans forward from the entry it finds returns the same offset, after a longer scan.
        """
        width = self.time_index_granularity_ms
        if (
            width
            and self.time_index.entries
            and timestamp // width <= self.time_index.last_entry[0] // width
        ):
            return
        self.time_index.maybe_append(timestamp, offset)

    @property
    def indexes_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    def on_roll(self, next_base_offset: int) -> None:
        """Called when this segment stops being active: writes the final time index entry
        (largest timestamp, or the modification time if no message has one, -> the next
        segment's base offset) and trims both indexes. The Log flushes it."""
        timestamp = self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms
        if not self.can_hold(next_base_offset):
            # A follower's batch far ahead: the offset after our last one says the same thing.
            next_base_offset = self.next_offset
        self.time_index.maybe_append(timestamp, next_base_offset, final=True)
        self.index.trim()
        self.time_index.trim()

    def make_active(self) -> None:
        """Gives the indexes room again (after truncation made an older segment the newest)."""
        self.index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)

    def truncate_to(self, offset: int) -> int:
        """Removes every entry whose offset is >= ``offset`` (a compressed wrapper holding it
        goes whole) and makes the segment ready to be the active one; returns the bytes removed.

        With no entry at or above ``offset`` (a rolled segment whose successor started past an
        offset gap, truncated into the gap or at its start) no byte goes, but the final time
        index entry written at roll (-> the successor's base or our next offset) does, and the
        trimmed indexes get their room back: the Log makes this segment the active one."""
        found = self.translate_offset(offset)
        cut = self.size if found is None else found[1]
        removed = self.size - cut
        self._recent_appends = {}
        self.index.truncate_to(offset)
        while self.index.entries and self.index.last_entry[1] >= cut:
            self.index.truncate_to_entries(self.index.entries - 1)
        # found None: every entry is below offset; the roll entry (>= next_offset) goes
        self.time_index.truncate_to(min(offset, self.next_offset))
        if removed:
            os.ftruncate(self._fd, cut)
            self.size = cut
        self.make_active()
        self.load_tail()
        self.bytes_since_last_index_entry = 0
        return removed

    def load_tail(self) -> None:
        """Sets next_offset and the largest timestamp from the last time index entry plus a scan
        of the log from that entry's indexed position to the end."""
        timestamp, time_offset = self.time_index.last_entry
        self.max_timestamp = timestamp
        self.offset_of_max_timestamp = time_offset if self.time_index.entries else -1
        self.next_offset = self.base_offset
        for offset, _, _, _, entry_timestamp in self.iter_headers(
            self.index.lookup(time_offset)[1]
        ):
            self.next_offset = offset + 1
            if entry_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = entry_timestamp, offset
        # The final entry written at roll points at the next segment's base offset.
        self.offset_of_max_timestamp = min(self.offset_of_max_timestamp, self.next_offset - 1)

    # -- recovery ------------------------------------------------------------------------------

    def recover(self) -> int:
        """Rebuilds both indexes from the log, checking every entry's framing, CRC and offset
        order; cuts the file at the first entry that fails. Returns the bytes cut."""
        self.index.reset()
        self.time_index.reset()
        self._recent_appends = {}
        self.make_active()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self.bytes_since_last_index_entry = 0
        valid, last_offset, reason = 0, self.base_offset - 1, ""
        if self.size:
            with mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ) as mapped:
                valid, last_offset, reason = self._scan_and_index(mapped)
        cut = self.size - valid
        if cut:
            log.warning(
                "%s: %s; cutting %d bytes at position %d, after offset %d",
                self.log_path,
                reason,
                cut,
                valid,
                last_offset,
            )
            os.ftruncate(self._fd, valid)
            self.size = valid
        self.next_offset = last_offset + 1
        return cut

    def _scan_and_index(self, mapped: mmap.mmap) -> tuple[int, int, str]:
        view = memoryview(mapped)
        try:
            position, limit = 0, self.size
            last_offset = self.base_offset - 1
            interval = self.index_interval_bytes
            since_index = 0
            max_timestamp, offset_of_max = NO_TIMESTAMP, -1
            reason = ""
            while position < limit:
                try:
                    offset, size, magic, _ = read_entry(view, position, limit)
                except KafkaError as error:
                    reason = error.message
                    break
                if offset <= last_offset or offset - self.base_offset > MAX_RELATIVE_OFFSET:
                    reason = f"offset {offset} does not follow offset {last_offset}"
                    break
                if magic:
                    _, timestamp = entry_last_offset_and_timestamp(view, position)
                    if timestamp > max_timestamp:
                        max_timestamp, offset_of_max = timestamp, offset
                if since_index > interval:
                    self.index.append(offset, position)
                    if max_timestamp >= 0:
                        self._index_time(max_timestamp, offset_of_max)
                    since_index = 0
                entry_size = LOG_OVERHEAD + size
                since_index += entry_size
                position += entry_size
                last_offset = offset
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
            self.bytes_since_last_index_entry = since_index
            return position, last_offset, reason
        finally:
            view.release()

    def rebuild_indexes(self) -> None:
        """Rebuilds the indexes of a segment whose log is trusted (a missing or corrupt index)."""
        cut = self.recover()
        if cut:
            log.warning("%s: index rebuild also cut %d invalid bytes", self.log_path, cut)

    # -- life cycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        os.fsync(self._fd)
        self.index.flush()
        self.time_index.flush()

    def make_index_files(self) -> None:
        """Makes the files of the indexes that have none yet (see IndexFile.make_file)."""
        self.index.make_file()
        self.time_index.make_file()

    def release_idle_indexes(self) -> int:
        """Closes the descriptors of indexes not written since the last call; how many it closed."""
        return int(self.index.release_if_idle()) + int(self.time_index.release_if_idle())

    def close(self) -> None:
        self.index.close()
        self.time_index.close()
        self.file.close()

    def delete(self, directory_fd: int | None = None) -> None:
        """Removes the segment's files. Its log file stays open while a slice of it is
        referenced (see SegmentLogFile); the indexes are closed at once. With
        ``directory_fd`` (its directory, opened when the deletion was decided), the files go
        from that directory even if it was renamed since."""
        self.index.close()
        self.time_index.close()
        for path in (self.log_path, self.index.path, self.time_index.path):
            if directory_fd is None:
                path.unlink(missing_ok=True)
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=directory_fd)

    # -- compaction ----------------------------------------------------------------------------

    def change_suffix(self, new: str) -> None:
        """Renames the three files to carry ``new`` after their own suffix ("" for none); the
        open files stay valid."""
        log_path = segment_file(self.directory, self.base_offset, LOG_SUFFIX + new)
        os.rename(self.log_path, log_path)
        self.log_path = log_path
        self.index.rename(segment_file(self.directory, self.base_offset, INDEX_SUFFIX + new))
        self.time_index.rename(
            segment_file(self.directory, self.base_offset, TIME_INDEX_SUFFIX + new)
        )
        self.suffix = new

    def append_entries(self, data: bytes | bytearray | memoryview) -> None:
        """Appends whole entries as they are, offsets and all (the log cleaner's survivors)."""
        scan = scan_entries(data, self.next_offset)
        if scan.end != len(data):
            raise ValueError(f"{self.log_path}: a partial entry at position {scan.end}")
        self.append(
            scan.first_offset,
            scan.last_offset,
            scan.max_timestamp,
            scan.offset_of_max_timestamp,
            data,
        )

    def finish_cleaned(self, last_modified_ms: int, next_base_offset: int) -> None:
        """Makes a segment the cleaner wrote ready to replace others: its indexes rebuilt from
        the data (every entry checked again), the modification time of the newest segment it
        replaces (retention and the delete horizon go by it), the final time index entry, and
        everything on disk."""
        cut = self.recover()
        if cut:
            raise ValueError(f"{self.log_path}: the cleaned segment failed its check ({cut} bytes)")
        nanoseconds = last_modified_ms * 1_000_000
        os.utime(self.log_path, ns=(nanoseconds, nanoseconds))
        self.on_roll(next_base_offset)
        self.flush()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, size={self.size}, "
            f"max_timestamp={self.max_timestamp})"
        )
