"""A partition's log: an ordered run of segments in one directory."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tidelog.clock import Clock, SystemClock
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    base_offset_of,
    segment_file,
    segment_files,
)
from tidelog.log.index_file import CorruptIndexError
from tidelog.log.leader_epoch import LeaderEpochCache
from tidelog.log.producer_state import (
    CorruptSnapshotError,
    DuplicateBatch,
    ProducerStateManager,
    file_batches,
    producer_batches,
)
from tidelog.log.segment import FileSlice, LogSegment
from tidelog.log.segments import LogSegments
from tidelog.records.format import (
    CODEC_MASK,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    OFFSET_AND_SIZE,
    entry_last_offset_and_timestamp,
    iter_inner,
    scan_entries,
    view_at,
)
from tidelog.records.record_batch import epoch_starts
from tidelog.records.validation import validate_and_assign_offsets

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # Kafka's sentinel for the local log start (KIP-405)
LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
# transactional.id.expiration.ms's default: how long a producer id's state outlives its last batch
PRODUCER_ID_EXPIRATION_MS = 604800000


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class LogAppendInfo:
    """What an append wrote: its offsets, its largest timestamp, and the LogAppendTime stamped
    (-1 unless the topic uses LogAppendTime)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    size: int


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class FetchData:
    """A read: ``slice`` holds whole entries from the one holding ``offset`` on (the last one
    may be cut at max_bytes, as in Kafka)."""

    offset: int
    slice: FileSlice


@dataclass(slots=True)  # not frozen: that costs a setattr per field, per append
class ReadResult:
    """What a fetch of one partition found: ``data`` (a file slice sent with zero copy, or bytes
    read from the remote tier), in message format ``magic``, with the high watermark and log
    start offset at the time of the read. The network layer sends either kind as it is, or
    converts it for a fetch version older than ``magic``."""

    data: FileSlice | bytes
    high_watermark: int
    log_start_offset: int
    magic: int

    @property
    def size(self) -> int:
        return self.data.length if isinstance(self.data, FileSlice) else len(self.data)

    def read_bytes(self) -> bytes:
        return self.data.read() if isinstance(self.data, FileSlice) else self.data


@dataclass(frozen=True)
class TimestampOffset:
    timestamp: int
    offset: int


class Log:
    """The messages of one partition, in segments of increasing base offset.

    Invariants: segments are contiguous (each one's base offset is the previous one's
    next_offset, or above it after compaction) and only the last, the active segment, is
    appended to. log_start_offset <= log_end_offset, local_log_start_offset <= log_end_offset,
    log_start_offset <= high_watermark <= log_end_offset, and everything below recovery_point
    has been flushed to disk. The log start offset is what consumers may read (remote data
    included; checkpointed by the LogManager in ``log-start-offset-checkpoint``), the local log
    start offset is the base offset of the first segment on this disk. With a remote tier the
    log start is at or below the local log start; without one the two are equal except after a
    DeleteRecords, which moves the log start into a segment (reads below it are out of range)
    until retention deletes the segments wholly below it. Each moves through one method:
    ``maybe_increment_log_start_offset`` and the segment collection.

    Locking rule: ``lock`` guards the segment collection and the positions (log start, recovery
    point, high watermark). Everything that changes them (append, roll, truncation, retention,
    a background deletion or remote copy that changes what is local) holds it, and holds it only
    for the change itself, never for file I/O on other segments: background work removes a
    segment from the collection under the lock and deletes its files afterwards, outside it.
    Rolled segments are immutable, so a copy to a remote tier reads them without the lock.
    Reads take no lock: they work on the segment they found and a file slice of its open file,
    which stays readable after the segment is dropped.

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
        log_start_offset: int | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = Path(directory)
        # Runs a rolled segment's flush, a deleted segment's unlinks and those of producer
        # snapshots no longer needed off the append path (LogManager gives a thread), and makes
        # a new segment's index files ahead of its first index entry; without it the first
        # three happen at once and the index files are made by the first entry.
        self.background = background
        self.clock = clock or SystemClock()
        self.config = config
        self.policy = config.records_policy
        self.lock = threading.RLock()
        # How many truncations this log has seen: a clean that began before one does not swap
        # its result in (the segments it read have changed under it).
        self.truncations = 0
        # Set by the remote log manager: the last offset copied to the remote tier (-1: none).
        # Local retention of a remote-enabled log deletes nothing above it.
        self.highest_offset_in_remote_storage = -1
        self._kept_for_remote = -1
        self.segments = LogSegments()
        self.recovery_point = recovery_point
        try:
            self.directory.mkdir(parents=True)
        except FileExistsError:
            self._load(recovery_point, needs_recovery)
        else:  # a directory just made holds nothing to load (a new topic makes thousands)
            self.segments.add(self._new_segment(0))
        self.log_start_offset = self._initial_log_start_offset(log_start_offset)
        self.recovery_point = min(
            max(recovery_point, self.local_log_start_offset), self.log_end_offset
        )
        self.high_watermark = self.log_start_offset
        self.last_appended_timestamp = max(s.max_timestamp for s in self.segments)
        self.leader_epochs = LeaderEpochCache(self.directory)
        self.leader_epochs.truncate_from_end(self.log_end_offset)  # a recovery may have cut
        self.producer_state = ProducerStateManager(
            self.directory, producer_id_expiration_ms, background
        )
        self._load_producer_state(clean_shutdown=not needs_recovery)

    # -- loading -------------------------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            time_index_granularity_ms=self.config.time_index_granularity_ms,
        )

    def _initial_log_start_offset(self, checkpointed: int | None) -> int:
        """The checkpointed log start offset where it can hold: within the log, and not below
        the local log start unless the older data may be in a remote tier."""
        local_start = self.local_log_start_offset
        if checkpointed is None:
            return local_start
        if not self.config.remote_storage_enable:
            checkpointed = max(checkpointed, local_start)
        return min(checkpointed, self.log_end_offset)

    def _load_producer_state(self, *, clean_shutdown: bool = False) -> None:
        """Brings the producer state to the log end: from the latest snapshot at or below it,
        replaying the batches above. Kafka 2.1's two shortcuts read nothing: a log in format
        v0/v1 holds no producer batches, and one with no snapshot after a clean shutdown was
        written before producer ids. Its state starts empty, with (empty) snapshots at the last
        two segments' bases and the log end, so a later truncation does not read the log
        either. The format is the topic's own: the LogManager opens each log with its topic's
        settings from ZooKeeper, never the broker's default in their place."""
        state = self.producer_state
        end = self.log_end_offset
        now = self.clock.milliseconds()
        state.truncate_and_reload(self.log_start_offset, end, now)
        if self.config.magic < 2 or (clean_shutdown and state.latest_snapshot_offset() is None):
            state.producers.clear()
            bases = self.segments.base_offsets[-2:]
            for offset in sorted({*bases, end}):
                if offset > self.log_start_offset:
                    state.map_end_offset = offset
                    state.take_snapshot()
            state.map_end_offset = end
        elif state.map_end_offset < end:
            replayed = 0
            for segment in self.segments.from_offset(state.map_end_offset):
                start = segment.translate_offset(state.map_end_offset)
                if start is None:
                    continue
                batches = list(file_batches(segment.file.fileno(), start[1], segment.size))
                state.apply(batches, state.map_end_offset)
                replayed += len(batches)
            state.map_end_offset = end
            if replayed:
                log.info(
                    "%s: producer state rebuilt: %d producer ids from %d batches",
                    self.directory,
                    len(state.producers),
                    replayed,
                )
        state.take_snapshot()

    def _load(self, recovery_point: int, needs_recovery: bool) -> None:
        self._recover_swaps()
        for path in self.directory.iterdir():
            if path.suffix in LEFTOVER_SUFFIXES:
                log.info("%s: removing a leftover of an interrupted operation", path)
                path.unlink(missing_ok=True)
            elif (
                path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                and not path.with_suffix(LOG_SUFFIX).exists()
            ):
                log.info("%s: removing an index without a log segment", path)
                path.unlink()
        bases = [base_offset_of(path) for path in segment_files(self.directory)]
        first_unflushed = max(0, bisect_right(bases, recovery_point) - 1)
        for number, base in enumerate(bases):
            missing_time_index = not segment_file(self.directory, base, TIME_INDEX_SUFFIX).exists()
            missing_index = not segment_file(self.directory, base, INDEX_SUFFIX).exists()
            segment = self._new_segment(base)
            self.segments.add(segment)
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
            self.segments.add(self._new_segment(0))
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
        for path in segment_files(self.directory):
            if base_offset_of(path) > segment.base_offset:
                log.warning("%s: deleted, it followed a corrupt segment", path)
                for suffix in SEGMENT_SUFFIXES:
                    path.with_suffix(suffix).unlink(missing_ok=True)

    # -- positions -----------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.last

    @property
    def local_log_start_offset(self) -> int:
        """The base offset of the first segment on this disk."""
        return self.segments.first.base_offset

    def maybe_increment_log_start_offset(self, offset: int, reason: str) -> bool:
        """Moves the log start offset up to ``offset`` (never down, never past the high
        watermark); True if it moved."""
        with self.lock:
            offset = min(offset, self.high_watermark)
            if offset <= self.log_start_offset:
                return False
            self.log_start_offset = offset
            self.producer_state.truncate_head(offset)
            self.leader_epochs.truncate_from_start(offset)
        log.info("%s: log start offset now %d: %s", self.directory, offset, reason)
        return True

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.policy = config.records_policy
        for segment in self.segments:
            segment.index_interval_bytes = config.index_interval_bytes
            segment.time_index_granularity_ms = config.time_index_granularity_ms
            segment.max_index_size = config.segment_index_bytes

    def restore_log_start_offset_from_remote(self, offset: int) -> bool:
        """Lowers the log start offset to ``offset``, the start of the remote data that reaches
        the local log start without a gap (a restart that lost the checkpoint). Only for a
        remote-enabled log; True if it moved."""
        with self.lock:
            if not self.config.remote_storage_enable or offset >= self.log_start_offset:
                return False
            self.log_start_offset = offset
            self.high_watermark = max(self.high_watermark, offset)
        log.info(
            "%s: log start offset back to %d: the remote tier holds it", self.directory, offset
        )
        return True

    # -- appends -------------------------------------------------------------------------------

    def append_as_leader(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> LogAppendInfo:
        """Validates a producer's message set, assigns offsets and timestamps, appends it; the
        first append of a new ``leader_epoch`` records where that epoch starts."""
        with self.lock:
            return self._append_as_leader(buffer, leader_epoch)

    def _append_as_leader(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None
    ) -> LogAppendInfo:
        validated = validate_and_assign_offsets(
            buffer,
            next_offset=self.log_end_offset,
            policy=self.policy,
            now=self.clock.milliseconds(),
            last_appended_timestamp=self.last_appended_timestamp,
            partition_leader_epoch=-1 if leader_epoch is None else leader_epoch,
        )
        # a topic below format v2 holds no batches (validation converted any it was sent)
        batches = (
            producer_batches(validated.buffer, len(validated.buffer))
            if self.policy.magic == 2
            else []
        )
        if batches:
            duplicate = self.producer_state.check(batches)
            if duplicate is not None:
                return self._duplicate(duplicate)
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
        self.producer_state.apply(batches, self.log_end_offset)
        return info

    def _duplicate(self, duplicate: DuplicateBatch) -> LogAppendInfo:
        """What a duplicate batch is answered with, as Kafka 2.1's Log.append answers it: the
        original batch's offsets, its timestamp as the log append time; nothing is written."""
        return LogAppendInfo(
            duplicate.first_offset,
            duplicate.last_offset,
            duplicate.timestamp,
            duplicate.last_offset,
            duplicate.timestamp,
            0,
        )

    def append_as_follower(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None = None
    ) -> LogAppendInfo | None:
        """Appends what the leader of ``leader_epoch`` wrote, offsets and timestamps as they
        are. A partial last entry (a fetch cut at max_bytes) is left for the next fetch. None if
        nothing whole."""
        with self.lock:
            return self._append_as_follower(buffer, leader_epoch)

    def _append_as_follower(
        self, buffer: bytes | bytearray | memoryview, leader_epoch: int | None
    ) -> LogAppendInfo | None:
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
        # v2 batches carry the epoch of the leader that wrote them; older formats take the
        # current leader's from where this append starts
        starts = (
            epoch_starts(buffer, scan.end, self.leader_epochs.latest_epoch) if scan.batches else ()
        )
        if starts:
            for epoch, start in starts:
                self.leader_epochs.assign(epoch, start)
        elif leader_epoch is not None:
            self.leader_epochs.assign(leader_epoch, self.log_end_offset)
        self._append(info, memoryview(buffer)[: scan.end])
        batches = producer_batches(buffer, scan.end) if scan.batches else []
        self.producer_state.apply(batches, self.log_end_offset)
        return info

    def _append(self, info: LogAppendInfo, data: bytes | bytearray | memoryview) -> None:
        self._maybe_roll(info.size, info.first_offset, info.last_offset, data)
        segment = self.active_segment
        if segment.size == 0 and self.background is not None:
            # its index files, made ahead of its first index entry, so that the append path
            # opens them rather than making them (no lock: see IndexFile.make_file)
            self.background(segment.make_index_files)
        segment.append(
            info.first_offset,
            info.last_offset,
            info.max_timestamp,
            info.offset_of_max_timestamp,
            data,
        )
        self.last_appended_timestamp = max(self.last_appended_timestamp, info.max_timestamp)
        if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()  # flush.messages (log.flush.interval.messages): as Kafka, on append

    def _maybe_roll(
        self,
        size: int,
        first_offset: int,
        last_offset: int,
        data: bytes | bytearray | memoryview,
    ) -> None:
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
            self.roll(reason, base_offset=first_message_offset(data, first_offset))

    def release_idle_indexes(self) -> int:
        """Closes the index descriptors not written since the last call (under the lock: an
        append may be writing one); how many it closed."""
        with self.lock:
            return sum(segment.release_idle_indexes() for segment in self.segments)

    def remove_expired_producers(self) -> int:
        """Forgets the producer ids idle longer than transactional.id.expiration.ms."""
        with self.lock:
            expired = self.producer_state.remove_expired(self.clock.milliseconds())
        if expired:
            log.info(
                "%s: %d producer ids expired (transactional.id.expiration.ms %d)",
                self.directory,
                expired,
                self.producer_state.expiration_ms,
            )
        return expired

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
        with self.lock:
            return self._roll(reason, base_offset)

    def _roll(self, reason: str, base_offset: int | None) -> LogSegment:
        old = self.active_segment
        next_base = max(self.log_end_offset, base_offset or 0)
        if old.size == 0:
            return old
        new = self._new_segment(next_base)
        old.on_roll(next_base)
        self.segments.add(new)
        # Kafka 2.1 snapshots the producer state at every roll: a restart replays at most the
        # active segment
        self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, next_base)
        self.producer_state.take_snapshot()
        # and keeps only those a recovery may start from (Kafka's minSnapshotsOffsetToRetain):
        # from the segment before the active one, or the one holding the recovery point
        recovering = self.segments.floor(self.recovery_point)
        keep_from = min(old.base_offset, recovering.base_offset if recovering else 0)
        if self.config.remote_storage_enable:
            # and those at the ends of segments not yet in the tier: each goes with its segment
            keep_from = min(keep_from, self.highest_offset_in_remote_storage + 1)
        self.producer_state.delete_snapshots_below(keep_from)

        def flush_rolled() -> None:
            old.flush()
            with self.lock:
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
        # below the log start is out of range even while its segment is still here (a
        # DeleteRecords moved it); below the local log start is the remote tier's
        start = max(self.local_log_start_offset, self.log_start_offset)
        if offset < start or offset > end:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{start}, {end}] of {self.directory}",
            )
        if offset == end or (max_offset is not None and offset >= max_offset):
            return self._nothing_at(offset)  # caught up: no index to search
        segment: LogSegment | None = self.segments.floor(offset)
        while segment is not None:
            if max_offset is not None and offset >= max_offset:
                break
            max_position = None
            if max_offset is not None and max_offset < segment.next_offset:
                max_position = segment.position_of(max_offset)
            data = segment.read(offset, max_bytes, max_position)
            if data.length:
                if min_one_message:
                    first_entry = segment.entry_size_at(data.position)
                    if first_entry > data.length:
                        data = FileSlice(data.file, data.position, first_entry)
                return FetchData(offset, data)
            if max_position is not None:
                break
            segment = self.segments.higher(segment.base_offset)
            if segment is not None:
                offset = max(offset, segment.base_offset)
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
            if offset < start_offset or (magic >= 1 and entry_timestamp < timestamp):
                continue
            data = os.pread(segment.file.fileno(), LOG_OVERHEAD + size, entry_position)
            entry = view_at(data, 0)
            if entry.magic < 2 and entry.attributes & CODEC_MASK == 0:
                return TimestampOffset(entry.timestamp, offset)
            for message in iter_inner(entry):
                if message.magic == 0 or message.timestamp >= timestamp:
                    return TimestampOffset(message.timestamp, message.offset)
        return None

    # -- truncation ----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Removes every message at or above ``offset`` (a follower's truncation)."""
        with self.lock:
            self.truncations += 1
            self._truncate_to(offset)

    def _truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        if offset < self.local_log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.active_segment.base_offset > offset:
            dropped = self.active_segment
            self.segments.remove(dropped)
            dropped.delete()
        removed = self.active_segment.truncate_to(offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._load_producer_state()  # the state above the new log end goes
        log.info(
            "%s: truncated to offset %d (log end now %d, %d bytes removed from the last segment)",
            self.directory,
            offset,
            self.log_end_offset,
            removed,
        )
        self._clamp_positions()

    def truncate_fully_and_start_at(self, offset: int, log_start_offset: int | None = None) -> None:
        """Deletes every segment and starts an empty log at ``offset``; the log start offset
        goes there too, or to ``log_start_offset`` when the data below is in a remote tier."""
        with self.lock:
            self.truncations += 1
            for segment in self.segments:  # first: a new segment may take one's name
                segment.delete()
            self.segments.reset(self._new_segment(offset))  # never empty to another thread
            self.leader_epochs.clear()
            self.producer_state.clear(offset)
            self.log_start_offset = offset if log_start_offset is None else log_start_offset
            self.recovery_point = offset
            self.high_watermark = offset
        log.info("%s: emptied, the log now starts at offset %d", self.directory, offset)

    def _clamp_positions(self) -> None:
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        # a follower cut below a log start its leader had moved (Kafka's truncateTo)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)

    # -- retention -----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Applies retention.ms and retention.bytes; returns the number of segments deleted."""
        with self.lock:
            return self._delete_old_segments()

    def _delete_old_segments(self) -> int:
        if "delete" not in self.config.cleanup_policy:
            return 0
        now = self.clock.milliseconds()
        deleted = 0
        if self.config.remote_storage_enable:  # the remote log manager applies retention.*
            retention_ms = self.config.effective_local_retention_ms
            retention_bytes = self.config.effective_local_retention_bytes
            names = ("local.retention.ms", "local.retention.bytes")
        else:
            retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
            names = ("retention.ms", "retention.bytes")
        # below a log start that remote retention or a DeleteRecords moved up (Kafka's
        # deleteLogStartOffsetBreachedSegments)
        if self.log_start_offset > self.local_log_start_offset:
            deleted += self._delete_while(
                lambda segment: segment.next_offset <= self.log_start_offset,
                f"the log start offset {self.log_start_offset}",
            )
        if retention_ms >= 0:
            deleted += self._delete_while(
                lambda segment: now - segment.retention_timestamp > retention_ms,
                f"{names[0]} {retention_ms}",
            )
        if retention_bytes >= 0:
            excess = self.size_in_bytes - retention_bytes

            def over_size(segment: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size < 0:
                    return False
                excess -= segment.size
                return True

            deleted += self._delete_while(over_size, f"{names[1]} {retention_bytes}")
        return deleted

    def _delete_while(self, expired, rule: str) -> int:
        doomed: list[LogSegment] = []
        while self.segments:
            segment = self.segments[0]
            is_active = len(self.segments) == 1
            upper_bound = self.log_end_offset if is_active else self.segments[1].base_offset
            if segment.size == 0 or upper_bound > self.high_watermark or not expired(segment):
                break
            if self.config.remote_storage_enable and (
                is_active or upper_bound - 1 > self.highest_offset_in_remote_storage
            ):
                if self._kept_for_remote != segment.base_offset:
                    self._kept_for_remote = segment.base_offset
                    log.warning(
                        "%s: segment %d is due for deletion by %s but is kept: it is not yet in "
                        "remote storage (highest remote offset %d)",
                        self.directory,
                        segment.base_offset,
                        rule,
                        self.highest_offset_in_remote_storage,
                    )
                break
            if is_active:
                self.roll(f"retention ({rule}) takes the whole log")
            self.segments.remove(segment)
            if not self.config.remote_storage_enable:
                self.log_start_offset = max(self.log_start_offset, self.local_log_start_offset)
                self.producer_state.truncate_head(self.log_start_offset)
                self.leader_epochs.truncate_from_start(self.log_start_offset)
            doomed.append(segment)
            log.info(
                "%s: deleted segment %d by %s; log start offset now %d",
                self.directory,
                segment.base_offset,
                rule,
                self.log_start_offset,
            )
        self._delete_files(doomed)
        return len(doomed)

    # -- compaction ----------------------------------------------------------------------------

    def new_segment_file(self, base_offset: int, suffix: str) -> LogSegment:
        """A segment outside the collection whose files carry ``suffix`` after their own (the
        cleaner's ``.cleaned``); leftover files of those names are replaced."""
        for name in SEGMENT_SUFFIXES:
            segment_file(self.directory, base_offset, name + suffix).unlink(missing_ok=True)
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            time_index_granularity_ms=self.config.time_index_granularity_ms,
            suffix=suffix,
        )

    def replace_segments(
        self, cleaned: LogSegment, old: list[LogSegment], truncations: int | None = None
    ) -> bool:
        """Swaps a cleaned segment (files ``.cleaned``) in for the ``old`` segments it was made
        from, in steps after each of which a crash leaves a log that ``_recover_swaps`` turns
        into either the old segments or the cleaned one:

        1. the cleaned files become ``.swap`` (from here on, opening the log finishes the swap);
        2. the collection takes the cleaned segment in place of the old ones, and the old
           segments' files become ``.deleted``;
        3. the ``.swap`` files lose their suffix: the cleaned segment is the live one;
        4. the old segments' files are deleted (in the background).

        Steps 1-3 hold the lock, so that no truncation comes between the check that the old
        segments are still there and the swap file that would bring them back.

        False, and the cleaned files deleted, if an old segment left the collection meanwhile
        (truncation, retention, the log deleted), if the log was truncated since the clean
        began (``truncations``: a truncated segment stays in the collection, cut and perhaps
        appended to again), or if an old segment is now the active one: nothing is swapped.
        """
        with self.lock:  # a truncation must not come between the check and the swap file
            changed = truncations is not None and truncations != self.truncations
            if (
                changed
                or self.active_segment in old
                or not all(segment in self.segments for segment in old)
            ):
                cleaned.delete()
                return False
            cleaned.change_suffix(SWAP_SUFFIX)
            for segment in old:
                self.segments.remove(segment)
            self.segments.add(cleaned)
            for segment in old:
                segment.change_suffix(DELETED_SUFFIX)
            cleaned.change_suffix("")
        self._delete_files(old)
        return True

    def _recover_swaps(self) -> None:
        """Finishes the swaps a crash interrupted. A ``{base}.log.swap`` holds what a clean
        kept of the segments from ``base`` to its last offset, all of it on disk (it was
        flushed before it was renamed), so those segments' files go and the swap file takes
        their place; its indexes are rebuilt when the segment is loaded."""
        for swap in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            base = base_offset_of(swap)
            last = _last_offset_in(swap)
            for path in segment_files(self.directory):
                if base <= base_offset_of(path) <= max(base, last):
                    for name in SEGMENT_SUFFIXES:
                        path.with_suffix(name).unlink(missing_ok=True)
            for name in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                segment_file(self.directory, base, name + SWAP_SUFFIX).unlink(missing_ok=True)
            os.replace(swap, segment_file(self.directory, base, LOG_SUFFIX))
            log.warning(
                "%s: finished swapping in cleaned segment %d (offsets up to %d), which a crash "
                "had interrupted",
                self.directory,
                base,
                last,
            )

    def _delete_files(self, segments: list[LogSegment]) -> None:
        """Deletes the files of segments already out of the collection, in the background when
        the log has one (outside the lock: see the class docstring). The background removes
        them from the log's directory as opened now, one descriptor for them all: a deleted
        topic's directory is renamed at once, and a partition of the same name made before
        the background gets to the files has files of the same names, which a deletion by
        path would remove."""
        if not segments:
            return
        if self.background is None:
            _delete_segments(segments)
            return
        try:
            directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # the directory's own error: the unlinks meet it again, logged there
            self.background(partial(_delete_segments, segments))
            return
        self.background(partial(_delete_segments, segments, directory))

    # -- durability ----------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """Flushes every segment with offsets below ``up_to`` (default: the log end)."""
        up_to = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if up_to <= self.recovery_point:
            return
        for segment in self.segments.from_offset(self.recovery_point):
            if segment.base_offset >= up_to:
                break
            segment.flush()
        self.leader_epochs.flush()
        self.recovery_point = up_to

    def producer_snapshot_at(self, offset: int) -> bytes | None:
        """The bytes of the producer snapshot taken at ``offset`` (a segment's end, which a copy
        to the remote tier takes along), or None if there is none."""
        return self.producer_state.snapshot_bytes(offset)

    def install_producer_snapshot(self, offset: int, data: bytes) -> bool:
        """Takes the producer state at ``offset`` from a snapshot of another replica's (the
        remote segment that ends below it) into a log just emptied to start there, as Kafka's
        follower does when it starts at the leader's local log start; False if the log has
        moved on meanwhile or the snapshot cannot be read."""
        with self.lock:
            if not self.local_log_start_offset == self.log_end_offset == offset:
                return False
            try:
                self.producer_state.install_snapshot(offset, data)
            except CorruptSnapshotError as error:
                log.warning("%s: the producer snapshot at %d: %s", self.directory, offset, error)
                return False
            self.producer_state.load(self.log_start_offset, self.clock.milliseconds())
            loaded = len(self.producer_state.producers)
        log.info("%s: %d producer ids at offset %d from the tier", self.directory, loaded, offset)
        return True

    def close(self) -> None:
        """A clean close: indexes trimmed to their entries, everything flushed."""
        self.flush()
        with self.lock:
            self.producer_state.map_end_offset = self.log_end_offset
            self.producer_state.take_snapshot()
        active = self.active_segment
        active.index.trim()
        active.time_index.trim()
        for segment in self.segments:
            segment.close()

    def delete(self, directory: Path | None = None) -> None:
        """Closes every segment and removes the log's files (from ``directory`` where the
        log manager renamed the log's directory for deletion)."""
        for segment in self.segments:
            segment.close()
        shutil.rmtree(directory or self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, hw={self.high_watermark}, segments={len(self.segments)})"
        )


def _delete_segments(segments: list[LogSegment], directory_fd: int | None = None) -> None:
    """Deletes each segment's files (from ``directory_fd``, which is then closed, if given);
    one that fails does not keep the others, and the first error is raised after them."""
    errors: list[OSError] = []
    try:
        for segment in segments:
            try:
                segment.delete(directory_fd)
            except OSError as error:
                errors.append(error)
    finally:
        if directory_fd is not None:
            os.close(directory_fd)
    if errors:
        raise errors[0]


def _last_offset_in(path: Path) -> int:
    """The offset of the last whole entry of a segment's log file (-1 if none)."""
    data = path.read_bytes()
    position, last = 0, -1
    while position + LOG_OVERHEAD <= len(data):
        _, size = OFFSET_AND_SIZE.unpack_from(data, position)
        if size < 0 or position + LOG_OVERHEAD + size > len(data):
            break
        last, _ = entry_last_offset_and_timestamp(data, position)
        position += LOG_OVERHEAD + size
    return last


def first_message_offset(data: bytes | bytearray | memoryview, first_offset: int) -> int:
    """The offset of the first message of an appended message set, the base a segment rolled
    for it may take. ``first_offset`` is its first entry's offset, which for a compressed
    wrapper (formats v0 and v1) is the offset of the wrapper's last message: a follower's
    segment based there would hold messages below its base offset, and a clean of it would
    fail. Only a roll asks, so a follower's appends decompress nothing more; a wrapper that
    cannot be opened gives -1 (the roll then starts at the log end offset)."""
    entry = view_at(data, 0)
    if entry.magic == 2:  # a batch's offset field is its base offset: its first record's
        return OFFSET_AND_SIZE.unpack_from(data, 0)[0]
    if entry.attributes & CODEC_MASK == 0:
        return first_offset
    try:
        return next(iter(iter_inner(entry))).offset
    except (KafkaError, StopIteration):
        return -1
