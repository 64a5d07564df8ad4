"""A partition's log: an ordered run of segments in one directory."""

from __future__ import annotations

import logging
import os
import shutil
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidelog.clock import Clock, SystemClock
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.leader_epoch import LeaderEpochCache
from tidelog.log.mapped_index import CorruptIndexError
from tidelog.log.segment import FileSlice, LogSegment, segment_file
from tidelog.records.format import (
    CODEC_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    iter_inner,
    scan_entries,
    view_at,
)
from tidelog.records.validation import validate_and_assign_offsets

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")


@dataclass(frozen=True)
class LogAppendInfo:
    """What an append wrote: its offsets, its largest timestamp, and the LogAppendTime stamped
    (-1 unless the topic uses LogAppendTime)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    size: int


@dataclass(frozen=True)
class FetchData:
    """A read: ``slice`` holds whole entries from the one holding ``offset`` on (the last one
    may be cut at max_bytes, as in Kafka)."""

    offset: int
    slice: FileSlice


@dataclass(frozen=True)
class TimestampOffset:
    timestamp: int
    offset: int


class Log:
    """The messages of one partition, in segments of increasing base offset.

    Invariants: segments are contiguous (each one's base offset is the previous one's
    next_offset, or above it after compaction) and only the last, the active segment, is
    appended to. log_start_offset <= high_watermark <= log_end_offset, and everything below
    recovery_point has been flushed to disk.

    The active segment rolls before an append when the append would take it past segment.bytes,
    when either index is full, when the batch's last offset would overflow a relative offset, or
    when segment.ms has passed since the segment's largest timestamp (``roll_if_idle`` checks
    the last rule for a segment no append comes to). Retention deletes whole segments from the
    oldest on and stops at the first one it must keep; it never deletes above the high
    watermark, and the active segment only by rolling it first.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock | None = None,
        recovery_point: int = 0,
        needs_recovery: bool = True,
        background: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.directory = Path(directory)
        # Runs a rolled segment's flush off the append path (LogManager gives a thread); without
        # it the flush happens in roll().
        self.background = background
        self.clock = clock or SystemClock()
        self.config = config
        self.policy = config.records_policy
        self.segments: list[LogSegment] = []
        self.recovery_point = recovery_point
        self.directory.mkdir(parents=True, exist_ok=True)
        self._load(recovery_point, needs_recovery)
        self.recovery_point = min(max(recovery_point, self.log_start_offset), self.log_end_offset)
        self.high_watermark = self.log_start_offset
        self.last_appended_timestamp = max(s.max_timestamp for s in self.segments)
        self.leader_epochs = LeaderEpochCache(self.directory)
        self.leader_epochs.truncate_from_end(self.log_end_offset)  # a recovery may have cut

    # -- loading -------------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
        )

    def _load(self, recovery_point: int, needs_recovery: bool) -> None:
        for path in self.directory.iterdir():
            if path.suffix in LEFTOVER_SUFFIXES:
                log.info("%s: removing a leftover of an interrupted operation", path)
                path.unlink()
            elif path.suffix in (".index", ".timeindex") and not path.with_suffix(".log").exists():
                log.info("%s: removing an index without a log segment", path)
                path.unlink()
        bases = sorted(int(path.stem) for path in self.directory.glob("*.log"))
        first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        for number, base in enumerate(bases):
            missing_time_index = not segment_file(self.directory, base, ".timeindex").exists()
            missing_index = not segment_file(self.directory, base, ".index").exists()
            segment = self._new_segment(base)
            self.segments.append(segment)
            is_last = number == len(bases) - 1
            if needs_recovery and number >= first_unflushed:
                if segment.recover():
                    self._drop_segments_after(segment)
                    break
            elif missing_index or missing_time_index or segment.needs_index_rebuild:
                log.warning("%s: an index is missing or corrupt; rebuilding", segment.log_path)
                segment.rebuild_indexes()
            else:
                self._load_checked(segment)
            if not is_last:
                next_base = bases[number + 1]
                if missing_time_index and segment.max_timestamp < 0:
                    # Format v0 data: one entry saying nothing is newer than the file.
                    segment.time_index.maybe_append(segment.last_modified_ms, base, final=True)
                    segment.index.trim()
                    segment.time_index.trim()
                elif segment.index.max_entries > segment.index.entries:
                    segment.on_roll(next_base)
        if not self.segments:
            self.segments.append(self._new_segment(0))
        self.active_segment.make_active()

    def _load_checked(self, segment: LogSegment) -> None:
        try:
            segment.index.sanity_check(segment.size)
            segment.time_index.sanity_check()
            segment.load_tail()
        except (CorruptIndexError, ValueError) as error:
            log.warning("%s: %s; rebuilding its indexes", segment.log_path, error)
            segment.rebuild_indexes()

    def _drop_segments_after(self, segment: LogSegment) -> None:
        for path in sorted(self.directory.glob("*.log")):
            if int(path.stem) > segment.base_offset:
                log.warning("%s: deleted, it followed a corrupt segment", path)
                for suffix in (".log", ".index", ".timeindex"):
                    path.with_suffix(suffix).unlink(missing_ok=True)

    # -- positions -----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def _segment_for(self, offset: int) -> int:
        """The number of the segment that holds ``offset`` (the last whose base is <= it)."""
        bases = [segment.base_offset for segment in self.segments]
        return max(0, bisect_right(bases, offset) - 1)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.policy = config.records_policy
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes
            segment.max_index_size = config.segment_index_bytes

    # -- appends -------------------------------------------------------------------------------

    def append_as_leader(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> LogAppendInfo:
        """Validates a producer's message set, assigns offsets and timestamps, appends it; the
        first append of a new ``leader_epoch`` records where that epoch starts."""
        validated = validate_and_assign_offsets(
            buffer,
            next_offset=self.log_end_offset,
            policy=self.policy,
            now=self.clock.milliseconds(),
            last_appended_timestamp=self.last_appended_timestamp,
        )
        info = LogAppendInfo(
            validated.first_offset,
            validated.last_offset,
            validated.max_timestamp,
            validated.offset_of_max_timestamp,
            validated.log_append_time,
            len(validated.buffer),
        )
        if leader_epoch is not None:
            self.leader_epochs.assign(leader_epoch, info.first_offset)
        self._append(info, validated.buffer)
        return info

    def append_as_follower(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> LogAppendInfo | None:
        """Appends what the leader of ``leader_epoch`` wrote, offsets and timestamps as they
        are. A partial last entry (a fetch cut at max_bytes) is left for the next fetch. None if
        nothing whole."""
        scan = scan_entries(buffer, self.log_end_offset)
        if scan.first_offset < 0:
            return None
        info = LogAppendInfo(
            scan.first_offset,
            scan.last_offset,
            scan.max_timestamp,
            scan.offset_of_max_timestamp,
            -1,
            scan.end,
        )
        if leader_epoch is not None:
            self.leader_epochs.assign(leader_epoch, self.log_end_offset)
        self._append(info, memoryview(buffer)[: scan.end])
        return info

    def _append(self, info: LogAppendInfo, data: bytes | memoryview) -> None:
        self._maybe_roll(info.size, info.first_offset, info.last_offset)
        self.active_segment.append(
            info.first_offset,
            info.last_offset,
            info.max_timestamp,
            info.offset_of_max_timestamp,
            data,
        )
        self.last_appended_timestamp = max(self.last_appended_timestamp, info.max_timestamp)
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()  # flush.messages (log.flush.interval.messages): as Kafka, on append

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int) -> None:
        segment = self.active_segment
        if segment.size == 0:
            return
        now = self.clock.milliseconds()
        reason = None
        if segment.size + size > self.config.segment_bytes:
            reason = f"segment.bytes {self.config.segment_bytes} would be exceeded"
        elif segment.indexes_full:
            reason = "an index is full"
        elif not segment.can_hold(last_offset):
            reason = f"offset {last_offset} would overflow a relative offset"
        elif now - segment.largest_timestamp > self.config.segment_ms:
            reason = f"segment.ms {self.config.segment_ms} has passed since its largest timestamp"
        if reason:
            self.roll(reason, base_offset=first_offset)

    def roll_if_idle(self) -> bool:
        """Rolls a non-empty active segment whose largest timestamp is older than segment.ms."""
        segment = self.active_segment
        now = self.clock.milliseconds()
        if segment.size and now - segment.largest_timestamp > self.config.segment_ms:
            self.roll(f"idle: segment.ms {self.config.segment_ms} has passed")
            return True
        return False

    def roll(self, reason: str = "asked to", base_offset: int | None = None) -> LogSegment:
        """Starts a new active segment at ``base_offset`` (default: the log end offset; a
        follower's batch may start above it) unless the active one is empty. The old segment gets
        its final time index entry and trimmed indexes, and is flushed (in the background when
        the log has one), after which the recovery point moves past it."""
        old = self.active_segment
        next_base = max(self.log_end_offset, base_offset or 0)
        if old.size == 0:
            return old
        new = self._new_segment(next_base)
        old.on_roll(next_base)
        self.segments.append(new)

        def flush_rolled() -> None:
            old.flush()
            if old in self.segments:  # not deleted or truncated away meanwhile
                self.recovery_point = max(self.recovery_point, next_base)

        if self.background is None:
            flush_rolled()
        else:
            self.background(flush_rolled)
        log.info(
            "%s: rolled segment %d at offset %d: %s",
            self.directory,
            old.base_offset,
            next_base,
            reason,
        )
        return new

    # -- reads ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = False,
    ) -> FetchData:
        """Entries from the one holding ``offset``, up to ``max_bytes`` and below
        ``max_offset`` (a consumer's bound, the high watermark). ``min_one_message`` returns the
        whole first entry even if it is larger than max_bytes (Fetch v3)."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self.log_start_offset}, {end}] of {self.directory}",
            )
        if offset == end or (max_offset is not None and offset >= max_offset):
            return self._nothing_at(offset)  # caught up: no index to search
        number = self._segment_for(offset)
        while number < len(self.segments):
            segment = self.segments[number]
            if max_offset is not None and offset >= max_offset:
                break
            max_position = None
            if max_offset is not None and max_offset < segment.next_offset:
                bound = segment.translate_offset(max_offset)
                max_position = bound[1] if bound else None
            data = segment.read(offset, max_bytes, max_position)
            if data.length:
                if min_one_message:
                    first_entry = segment.entry_size_at(data.position)
                    if first_entry > data.length:
                        data = FileSlice(data.file, data.position, first_entry)
                return FetchData(offset, data)
            if max_position is not None:
                break
            number += 1
            if number < len(self.segments):
                offset = max(offset, self.segments[number].base_offset)
        return self._nothing_at(offset)

    def _nothing_at(self, offset: int) -> FetchData:
        """An empty read at ``offset``: a slice of no bytes at the end of the active segment."""
        active = self.active_segment
        return FetchData(offset, FileSlice(active.file, active.size, 0))

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first message whose timestamp is >= ``timestamp`` (messages without a timestamp
        count as matching, so nothing newer is ever skipped); -1 is the log end, -2 the log
        start. None if every message is older."""
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, self.log_end_offset)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(NO_TIMESTAMP, self.log_start_offset)
        for segment in self.segments:
            if segment.size and segment.largest_timestamp >= timestamp:
                found = self._search_segment(segment, timestamp)
                if found is not None:
                    return found
        return None

    def _search_segment(self, segment: LogSegment, timestamp: int) -> TimestampOffset | None:
        _, start_offset = segment.time_index.lookup(timestamp)
        _, position = segment.index.lookup(start_offset)
        for offset, entry_position, size, magic, entry_timestamp in segment.iter_headers(position):
            if offset < start_offset or (magic == 1 and entry_timestamp < timestamp):
                continue
            data = os.pread(segment.file.fileno(), LOG_OVERHEAD + size, entry_position)
            entry = view_at(data, 0)
            if entry.attributes & CODEC_MASK == 0:
                return TimestampOffset(entry.timestamp, offset)
            for message in iter_inner(entry):
                if message.magic == 0 or message.timestamp >= timestamp:
                    return TimestampOffset(message.timestamp, message.offset)
        return None

    # -- truncation ----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Removes every message at or above ``offset`` (a follower's truncation)."""
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset > offset:
            self.segments.pop().delete()
        removed = self.active_segment.truncate_to(offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        log.info(
            "%s: truncated to offset %d (log end now %d, %d bytes removed from the last segment)",
            self.directory,
            offset,
            self.log_end_offset,
            removed,
        )
        self._clamp_positions()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Deletes every segment and starts an empty log at ``offset``."""
        for segment in self.segments:
            segment.delete()
        self.segments = [self._new_segment(offset)]
        self.leader_epochs.clear()
        self.recovery_point = offset
        self.high_watermark = offset
        log.info("%s: emptied, the log now starts at offset %d", self.directory, offset)

    def _clamp_positions(self) -> None:
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    # -- retention -----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Applies retention.ms and retention.bytes; returns the number of segments deleted."""
        if "delete" not in self.config.cleanup_policy:
            return 0
        now = self.clock.milliseconds()
        deleted = 0
        if self.config.retention_ms >= 0:
            retention_ms = self.config.retention_ms
            deleted += self._delete_while(
                lambda segment: now - segment.retention_timestamp > retention_ms,
                f"retention.ms {retention_ms}",
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_in_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_while(
                over_size, f"retention.bytes {self.config.retention_bytes}"
            )
        return deleted

    def _delete_while(self, expired, rule: str) -> int:  # type: ignore[no-untyped-def]
        deleted = 0
        while self.segments:
            segment = self.segments[0]
            is_active = len(self.segments) == 1
            upper_bound = self.log_end_offset if is_active else self.segments[1].base_offset
            if segment.size == 0 or upper_bound > self.high_watermark or not expired(segment):
                break
            if is_active:
                self.roll(f"retention ({rule}) takes the whole log")
            self.segments.pop(0).delete()
            deleted += 1
            log.info(
                "%s: deleted segment %d by %s; log start offset now %d",
                self.directory,
                segment.base_offset,
                rule,
                self.log_start_offset,
            )
        return deleted

    # -- durability ----------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """Flushes every segment with offsets below ``up_to`` (default: the log end)."""
        up_to = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if up_to <= self.recovery_point:
            return
        for segment in self.segments[self._segment_for(self.recovery_point) :]:
            if segment.base_offset >= up_to:
                break
            segment.flush()
        self.recovery_point = up_to

    def close(self) -> None:
        """A clean close: indexes trimmed to their entries, everything flushed."""
        self.flush()
        active = self.active_segment
        active.index.trim()
        active.time_index.trim()
        for segment in self.segments:
            segment.close()

    def delete(self) -> None:
        for segment in self.segments:
            segment.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, hw={self.high_watermark}, segments={len(self.segments)})"
        )
