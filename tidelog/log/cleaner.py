"""The log cleaner: compaction of the logs whose cleanup.policy includes compact, as Kafka
0.10's LogCleaner does it.

A compacted log has a clean tail (below its first dirty offset, kept per log dir in
``cleaner-offset-checkpoint``) and a dirty head. Cleaner threads take the log with the largest
dirty ratio (dirty bytes / all bytes) above its min.cleanable.dirty.ratio, map the head's keys to
their latest offsets (an OffsetMap; when it fills, the pass ends at the segment before and the
rest waits for the next one), then recopy tail and head keeping each key's last message
(``compaction.filter_entries``). The active segment, and any segment younger than
min.compaction.lag.ms, is never cleaned. Tombstones survive while their segment is newer than the
delete horizon: the clean tail's last modification less delete.retention.ms.

Segments are recopied in groups (as many consecutive segments as fit in segment.bytes and a
segment's index), each group into one segment written as ``.cleaned`` files and swapped in by
``Log.replace_segments`` (``.swap``, the old files ``.deleted``); ``Log`` finishes or rolls back a
swap a crash interrupted when it next opens. Offsets never change.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.clock import Clock
from tidelog.log.checkpoint import TopicPartition, read_checkpoint, write_checkpoint
from tidelog.log.compaction import FilterStats, MappedWrappers, filter_entries, latest_offsets
from tidelog.log.files import CLEANED_SUFFIX
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap, OffsetMapFull
from tidelog.log.segment import LogSegment
from tidelog.records.format import INT32, LOG_OVERHEAD, corrupt, read_entry
from tidelog.records.record_batch import HEADER as BATCH_HEADER
from tidelog.records.record_batch import NO_PRODUCER_ID

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
FULL_CLEAN_EVERY = 4  # with log.cleaner.generational.enable: one full clean in four
READ_CHUNK = 1024 * 1024
MAP_BATCH = 1 << 16  # keys gathered before they go into the offset map
# A clean notes at most one compressed wrapper per this many slots of its offset map (32 bytes
# a wrapper: a sixth of a byte per byte of the map); past that, wrappers are read twice.
SLOTS_PER_WRAPPER = 8
MB = 1024 * 1024


class CleanAborted(Exception):
    """The log being cleaned is going away (deleted); what was swapped in so far stays."""


@dataclass(frozen=True)
class CleanerSettings:
    """The broker's log.cleaner.* settings (Kafka 0.10's names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * MB
    io_buffer_load_factor: float = 0.9
    backoff_ms: int = 15000
    # tidelog's own: young-generation cleans between full ones (Cleaner.clean says what)
    generational: bool = False

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CleanerSettings:
        return cls(
            enable=config["log.cleaner.enable"],
            threads=config["log.cleaner.threads"],
            dedupe_buffer_size=config["log.cleaner.dedupe.buffer.size"],
            io_buffer_load_factor=config["log.cleaner.io.buffer.load.factor"],
            backoff_ms=config["log.cleaner.backoff.ms"],
            generational=config["log.cleaner.generational.enable"],
        )


@dataclass
class CleanStats:
    """One clean of one log: its dirty range and what was read, written and dropped."""

    log: str
    first_dirty: int
    end_offset: int = -1
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    map_seconds: float = 0.0
    seconds: float = 0.0
    buffer_utilization: float = 0.0
    segments_cleaned: int = 0
    full: bool = True  # False: a young-generation clean left the older tail as it was

    def add(self, filtered: FilterStats) -> None:
        self.bytes_read += filtered.bytes_read
        self.bytes_written += filtered.bytes_kept
        self.messages_read += filtered.messages_read
        self.messages_written += filtered.messages_kept

    @property
    def size_reduction(self) -> float:
        return 1 - self.bytes_written / self.bytes_read if self.bytes_read else 0.0

    def report(self, thread: int) -> str:
        """Kafka's LogCleaner summary of a clean."""
        seconds = max(self.seconds, 1e-9)
        clean_seconds = max(self.seconds - self.map_seconds, 1e-9)
        fewer = 1 - self.messages_written / self.messages_read if self.messages_read else 0.0
        return (
            f"\n\tLog cleaner thread {thread} cleaned log {self.log} (dirty section = "
            f"[{self.first_dirty}, {self.end_offset}])"
            f"{'' if self.full else ', young generation only'}\n"
            f"\t{self.bytes_read / MB:,.1f} MB of log processed in {seconds:,.1f} seconds "
            f"({self.bytes_read / MB / seconds:,.1f} MB/sec).\n"
            f"\tIndexed {self.map_bytes_read / MB:,.1f} MB in {self.map_seconds:.1f} seconds "
            f"({self.map_bytes_read / MB / max(self.map_seconds, 1e-9):,.1f} Mb/sec, "
            f"{100 * self.map_seconds / seconds:.1f}% of total time)\n"
            f"\tBuffer utilization: {100 * self.buffer_utilization:.1f}%\n"
            f"\tCleaned {self.bytes_read / MB:,.1f} MB in {clean_seconds:.1f} seconds "
            f"({self.bytes_read / MB / clean_seconds:,.1f} Mb/sec, "
            f"{100 * clean_seconds / seconds:.1f}% of total time)\n"
            f"\tStart size: {self.bytes_read / MB:,.1f} MB ({self.messages_read:,} messages)\n"
            f"\tEnd size: {self.bytes_written / MB:,.1f} MB ({self.messages_written:,} messages)\n"
            f"\t{100 * self.size_reduction:.1f}% size reduction ({100 * fewer:.1f}% fewer "
            f"messages)\n"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_dirty_offset": self.first_dirty,
            "end_offset": self.end_offset,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "messages_read": self.messages_read,
            "messages_written": self.messages_written,
            "seconds": round(self.seconds, 3),
            "size_reduction": round(self.size_reduction, 4),
        }


@dataclass(frozen=True)
class LogToClean:
    """A compacted log's sections: clean [log start, first_dirty), cleanable [first_dirty,
    first_uncleanable), and the bytes of each."""

    key: TopicPartition
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def log_to_clean(
    key: TopicPartition, partition_log: Log, checkpointed: int, now: int
) -> LogToClean:
    """Where ``partition_log``'s dirty section starts and ends. A checkpoint below the log's
    first segment or past its active segment (the log was truncated or emptied) is reset to the
    first segment."""
    segments = list(partition_log.segments)
    active = segments[-1]
    first_dirty = checkpointed
    if first_dirty < segments[0].base_offset or first_dirty > active.base_offset:
        first_dirty = segments[0].base_offset
    first_uncleanable = active.base_offset
    lag = partition_log.config.min_compaction_lag_ms
    if lag > 0:
        for segment in segments[:-1]:
            if segment.base_offset >= first_dirty and segment.largest_timestamp > now - lag:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    clean = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable = sum(s.size for s in segments if first_dirty <= s.base_offset < first_uncleanable)
    return LogToClean(key, partition_log, first_dirty, first_uncleanable, clean, cleanable)


class SegmentChunks:
    """A segment's entries read READ_CHUNK bytes at a time, for a loop that takes the whole
    entries of each chunk and says with ``used`` how many bytes those were: the rest (the
    start of an entry cut at the chunk's end) comes again at the start of the next chunk. An
    entry larger than a chunk comes whole in one. A file found shorter than the segment was
    (truncated meanwhile) ends the chunks; an entry cut at the segment's end is corrupt."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.fd = segment.file.fileno()
        self.end = segment.size
        self.taken = 0

    def used(self, count: int) -> None:
        self.taken = count

    def __iter__(self) -> Iterator[bytes]:
        position, pending = 0, b""
        while position < self.end:
            wanted = READ_CHUNK
            if len(pending) >= LOG_OVERHEAD:  # a whole entry at least
                (size,) = INT32.unpack_from(pending, 8)
                wanted = max(wanted, LOG_OVERHEAD + size - len(pending))
            read = os.pread(self.fd, min(wanted, self.end - position), position)
            if not read:
                return
            position += len(read)
            chunk = pending + read if pending else read
            self.taken = 0
            yield chunk
            pending = chunk[self.taken :]
        if pending:
            read_entry(pending, 0, len(pending))  # raises: what was cut, and where
            raise corrupt(f"{self.segment.log_path}: {len(pending)} bytes after the last entry")


class ActiveProducers:
    """Whether a v2 batch a clean emptied stays as an empty batch: when its last sequence is
    the last sequence of its producer id in the whole log (Kafka 2.1 asks the producer state
    for activeProducersWithLastSequence; tidelog keeps no producer state before idempotent
    producers, so the log's batch headers are read for it, once per clean and only when an
    emptied batch with a producer id is met). Producer ids do not expire here (Kafka drops a
    producer transactional.id.expiration.ms after its last write)."""

    def __init__(self, partition_log: Log) -> None:
        self.partition_log = partition_log
        self.last_sequences: dict[int, int] | None = None

    def __call__(self, producer_id: int, last_sequence: int) -> bool:
        if self.last_sequences is None:
            self.last_sequences = producer_last_sequences(self.partition_log)
        return self.last_sequences.get(producer_id) == last_sequence


def producer_last_sequences(partition_log: Log) -> dict[int, int]:
    """Each producer id's last sequence: that of its last v2 batch in the log."""
    found: dict[int, int] = {}
    for segment in list(partition_log.segments):
        chunks = SegmentChunks(segment)
        for chunk in chunks:
            position = 0
            while position + LOG_OVERHEAD <= len(chunk):
                (size,) = INT32.unpack_from(chunk, position + 8)
                if position + LOG_OVERHEAD + size > len(chunk):
                    break
                if chunk[position + 16] == 2:
                    fields = BATCH_HEADER.unpack_from(chunk, position)
                    producer_id, base_sequence = fields[9], fields[11]
                    if producer_id != NO_PRODUCER_ID:
                        found[producer_id] = (
                            -1 if base_sequence < 0 else (base_sequence + fields[6]) % 2**31
                        )
                position += LOG_OVERHEAD + size
            chunks.used(position)
    return found


class Cleaner:
    """Cleans one log at a time with its own offset map (Kafka's Cleaner)."""

    def __init__(
        self, offset_map: OffsetMap, clock: Clock, aborted: threading.Event | None = None
    ) -> None:
        self.offset_map = offset_map
        self.clock = clock
        self.aborted = aborted  # set: stop at the next chunk, swapping nothing more in
        # the compressed wrappers the clean under way mapped, which its filter pass asks about
        self.wrappers = MappedWrappers(0)

    def clean(self, to_clean: LogToClean, full: bool = True) -> CleanStats:
        """Cleans ``to_clean.log`` from its start to the end of what the offset map could hold
        of its dirty section; the stats' end_offset is where the next clean starts.

        ``full=False`` is a young-generation clean (log.cleaner.generational.enable): the
        oldest cleaned segments holding half the clean tail's bytes are left as they are, since
        the newer ones yield most of the garbage, and every tombstone stays (one may go only
        when every older segment is recopied too, or an older value would come back)."""
        started = time.perf_counter()
        partition_log = to_clean.log
        truncations = partition_log.truncations
        stats = CleanStats(str(partition_log.directory.name), to_clean.first_dirty)
        segments = list(partition_log.segments)
        tail = [s for s in segments if s.base_offset < to_clean.first_dirty]
        retention = partition_log.config.delete_retention_ms
        delete_horizon = tail[-1].last_modified_ms - retention if tail else 0
        self.offset_map.clear()
        self.wrappers = MappedWrappers(self.offset_map.slots // SLOTS_PER_WRAPPER)
        mapped_from, end_offset = self._build_offset_map(
            partition_log, segments, to_clean.first_dirty, to_clean.first_uncleanable, stats
        )
        # a mapped batch or wrapper none of whose offsets is a key's latest is dropped (or
        # emptied) unread, from its header or what the map pass noted; the offsets from
        # first_dirty to the end of a segment it falls inside (a checkpoint left there by a
        # stopped clean or a truncation) were not mapped, and are not marked
        self.offset_map.mark_latest(mapped_from, end_offset)
        stats.map_seconds = time.perf_counter() - started
        stats.end_offset = end_offset
        stats.buffer_utilization = self.offset_map.utilization
        to_rewrite = [s for s in segments if s.base_offset < end_offset]
        if not full:
            to_rewrite = to_rewrite[len(older_half(tail)) :]
            delete_horizon = -(2**63)
        stats.full = full
        for group in group_by_size(
            to_rewrite, partition_log.config.segment_bytes, partition_log.config.segment_index_bytes
        ):
            self._clean_group(partition_log, group, delete_horizon, segments, stats, truncations)
        stats.seconds = time.perf_counter() - started
        return stats

    def _build_offset_map(
        self,
        partition_log: Log,
        segments: list[LogSegment],
        first_dirty: int,
        first_uncleanable: int,
        stats: CleanStats,
    ) -> tuple[int, int]:
        """Puts the keys of the dirty segments (those from first_dirty on), oldest first, while
        the map has room for a whole segment's offsets; returns the offsets mapped, from the
        first mapped segment's base to the offset after the last (first_dirty twice if none)."""
        start = end = first_dirty
        for segment in segments:
            if segment.base_offset < first_dirty:
                continue
            if segment.base_offset >= first_uncleanable:
                break
            if self.aborted is not None and self.aborted.is_set():
                raise CleanAborted(f"{partition_log.directory}: cleaning aborted")
            # a segment's offset span bounds its keys; the first one is mapped in any case (a
            # compacted follower's segments are sparse) and only a map that really fills fails
            if end != first_dirty and not self.offset_map.has_room_for(
                segment.next_offset - segment.base_offset
            ):
                break
            try:
                self._map_segment(segment, stats)
            except OffsetMapFull:
                raise OffsetMapFull(
                    f"{partition_log.directory}: segment {segment.base_offset} holds more keys "
                    f"than the offset map's {self.offset_map.capacity} "
                    "(log.cleaner.dedupe.buffer.size is too small)"
                ) from None
            if end == first_dirty:
                start = segment.base_offset
            end = segment.next_offset
        return start, end

    def _map_segment(self, segment: LogSegment, stats: CleanStats) -> None:
        """Puts the key of every message of ``segment`` into the offset map with its offset:
        each chunk's keys are gathered in a dictionary (a key repeated there is hashed once),
        which goes into the map in one pass every MAP_BATCH keys and at the segment's end."""
        latest: dict[bytes, int] = {}
        chunks = SegmentChunks(segment)
        for chunk in chunks:
            used, messages = latest_offsets(chunk, latest, self.wrappers)
            chunks.used(used)
            stats.map_bytes_read += used
            stats.map_messages_read += messages
            if len(latest) >= MAP_BATCH:
                self.offset_map.put_all(latest)
                latest.clear()
        self.offset_map.put_all(latest)

    def _active_producers(self, partition_log: Log) -> ActiveProducers:
        return ActiveProducers(partition_log)

    def _kept_chunks(
        self,
        partition_log: Log,
        segment: LogSegment,
        retain_deletes: bool,
        stats: CleanStats,
        producers: ActiveProducers,
    ) -> Iterator[bytearray]:
        """What survives of ``segment``, chunk by chunk."""
        chunks = SegmentChunks(segment)
        for chunk in chunks:
            if self.aborted is not None and self.aborted.is_set():
                raise CleanAborted(f"{partition_log.directory}: cleaning aborted")
            kept, filtered = filter_entries(
                chunk,
                self.offset_map,
                retain_deletes,
                partial_tail=True,
                keeps_empty=producers,
                wrappers=self.wrappers,
            )
            chunks.used(filtered.bytes_read)
            stats.add(filtered)
            yield kept

    def _clean_group(
        self,
        partition_log: Log,
        group: list[LogSegment],
        delete_horizon: int,
        segments: list[LogSegment],
        stats: CleanStats,
        truncations: int,
    ) -> None:
        """Recopies ``group`` into one ``.cleaned`` segment and swaps it in; CleanAborted if
        the log changed under the clean (then nothing of this group is swapped in)."""
        cleaned = partition_log.new_segment_file(group[0].base_offset, CLEANED_SUFFIX)
        producers = self._active_producers(partition_log)
        try:
            for old in group:
                retain_deletes = old.last_modified_ms > delete_horizon
                for kept in self._kept_chunks(partition_log, old, retain_deletes, stats, producers):
                    if kept:
                        cleaned.append_entries(kept)
            following = segments.index(group[-1]) + 1
            next_base = (
                segments[following].base_offset
                if following < len(segments)
                else group[-1].next_offset
            )
            cleaned.finish_cleaned(group[-1].last_modified_ms, next_base)
        except BaseException:
            cleaned.delete()
            raise
        if not partition_log.replace_segments(cleaned, group, truncations):
            raise CleanAborted(
                f"{partition_log.directory}: the log was truncated or its segments changed "
                "while it was cleaned; nothing more is swapped in"
            )
        stats.segments_cleaned += len(group)


def older_half(tail: list[LogSegment]) -> list[LogSegment]:
    """The oldest segments of a clean tail that hold (at least) half of its bytes."""
    total, held = sum(s.size for s in tail), 0
    for number, segment in enumerate(tail):
        if held >= total / 2:
            return tail[:number]
        held += segment.size
    return tail


def group_by_size(
    segments: list[LogSegment], max_size: int, max_index_size: int
) -> list[list[LogSegment]]:
    """Consecutive segments, as many per group as fit together in ``max_size`` log bytes and
    ``max_index_size`` index bytes with offsets a relative offset can hold (Kafka's
    groupSegmentsBySize)."""
    groups: list[list[LogSegment]] = []
    remaining = list(segments)
    while remaining:
        group = [remaining.pop(0)]
        log_size = group[0].size
        index_size = group[0].index.size_in_bytes
        while (
            remaining
            and log_size + remaining[0].size <= max_size
            and index_size + remaining[0].index.size_in_bytes <= max_index_size
            and remaining[0].next_offset - group[0].base_offset <= 2**31 - 1
        ):
            log_size += remaining[0].size
            index_size += remaining[0].index.size_in_bytes
            group.append(remaining.pop(0))
        groups.append(group)
    return groups


class LogCleaner:
    """Cleaner threads over a LogManager's logs, and the cleaner-offset-checkpoint of each log
    dir.

    Invariants: a log is cleaned by one thread at a time (``in_progress``); a log's checkpoint
    moves only after a clean of it finished (a crash mid-clean cleans that range again), and a
    deleted log's entry goes. ``abort`` (a log about to be deleted) returns once no thread
    cleans that log. Each thread's offset map takes log.cleaner.dedupe.buffer.size / threads
    bytes, allocated when the thread first has something to clean.
    """

    def __init__(self, settings: CleanerSettings, logs: Any, clock: Clock) -> None:
        self.settings = settings
        self.logs = logs  # a LogManager: (topic, partition) -> Log, log_dirs, dir_of
        self.clock = clock
        self.lock = threading.Condition()
        self.in_progress: dict[TopicPartition, threading.Event] = {}
        self.checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self.last_clean: dict[TopicPartition, CleanStats] = {}
        self.clean_counts: dict[TopicPartition, int] = {}
        # a log whose clean failed is left alone until then (clock milliseconds)
        self.failed_until: dict[TopicPartition, int] = {}
        self.totals = {"cleans": 0, "bytes_read": 0, "bytes_written": 0, "messages_removed": 0}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        for directory in self.logs.log_dirs:
            self.checkpoints[directory] = read_checkpoint(directory / CLEANER_CHECKPOINT)
        if not self.settings.enable:
            return
        for number in range(self.settings.threads):
            thread = threading.Thread(
                target=self._run, args=(number,), name=f"log-cleaner-{number}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            for aborted in self.in_progress.values():
                aborted.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def _run(self, number: int) -> None:
        offset_map: OffsetMap | None = None
        while not self._stop.is_set():
            to_clean = self.grab_filthiest()
            if to_clean is None:
                self._stop.wait(self.settings.backoff_ms / 1000)
                continue
            if offset_map is None:
                offset_map = OffsetMap(
                    self.settings.dedupe_buffer_size // self.settings.threads,
                    self.settings.io_buffer_load_factor,
                )
            self.clean(to_clean, offset_map, number)

    # -- choosing and cleaning -----------------------------------------------------------------

    def first_dirty_offset(self, key: TopicPartition) -> int:
        directory = self.logs.dir_of(key)
        return self.checkpoints.get(directory, {}).get(key, 0)

    def grab_filthiest(self) -> LogToClean | None:
        """The compacted log with the largest dirty ratio above its min.cleanable.dirty.ratio,
        now marked in progress; None if there is none."""
        now = self.clock.milliseconds()
        with self.lock:
            best: LogToClean | None = None
            for key, partition_log in list(self.logs):
                if key in self.in_progress or not partition_log.config.compacted:
                    continue
                if self.failed_until.get(key, 0) > now:
                    continue
                candidate = log_to_clean(key, partition_log, self.first_dirty_offset(key), now)
                if candidate.ratio <= partition_log.config.min_cleanable_dirty_ratio:
                    continue
                if best is None or candidate.ratio > best.ratio:
                    best = candidate
            if best is not None:
                self.in_progress[best.key] = threading.Event()
            return best

    def clean(
        self, to_clean: LogToClean, offset_map: OffsetMap, thread: int = 0
    ) -> CleanStats | None:
        """Cleans a log taken with ``grab_filthiest``; its checkpoint moves to where the clean
        ended. A clean that fails or is aborted is logged, and the log is left for a later
        pass."""
        key = to_clean.key
        truncations_before = to_clean.log.truncations
        try:
            cleaner = Cleaner(offset_map, self.clock, self.in_progress[key])
            count = self.clean_counts.get(key, 0)
            full = not self.settings.generational or count % FULL_CLEAN_EVERY == 0
            stats = cleaner.clean(to_clean, full=full)
            self.clean_counts[key] = count + 1
            self._checkpoint(key, stats.end_offset)
        except CleanAborted as aborted:
            log.info("log cleaner: %s", aborted)
            if to_clean.log.truncations != truncations_before:  # clean from what is left
                self._checkpoint(
                    key, min(self.first_dirty_offset(key), to_clean.log.active_segment.base_offset)
                )
            return None
        except Exception as error:
            backoff = self.settings.backoff_ms
            log.warning(
                "log cleaner: cleaning %s failed: %r; trying it again in %d ms "
                "(log.cleaner.backoff.ms)",
                to_clean.log.directory,
                error,
                backoff,
            )
            self.failed_until[key] = self.clock.milliseconds() + backoff
            return None
        finally:
            with self.lock:
                del self.in_progress[key]
                self.lock.notify_all()
        log.info("%s", stats.report(thread))
        with self.lock:
            self.last_clean[key] = stats
            self.totals["cleans"] += 1
            self.totals["bytes_read"] += stats.bytes_read
            self.totals["bytes_written"] += stats.bytes_written
            self.totals["messages_removed"] += stats.messages_read - stats.messages_written
        return stats

    def _checkpoint(self, key: TopicPartition, offset: int) -> None:
        directory = self.logs.dir_of(key)
        with self.lock:
            offsets = self.checkpoints.setdefault(directory, {})
            offsets[key] = offset
            write_checkpoint(directory / CLEANER_CHECKPOINT, offsets)

    def abort(self, key: TopicPartition) -> None:
        """Stops any clean of ``key`` and forgets its checkpoint (the log is being deleted);
        returns once no thread cleans it."""
        with self.lock:
            aborted = self.in_progress.get(key)
            if aborted is not None:
                aborted.set()
            self.lock.wait_for(lambda: key not in self.in_progress)
            self.last_clean.pop(key, None)
            for directory, offsets in self.checkpoints.items():
                if offsets.pop(key, None) is not None:
                    write_checkpoint(directory / CLEANER_CHECKPOINT, offsets)
