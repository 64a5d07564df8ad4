"""The remote log manager: copies rolled segments to the tier, keeps the remote indexes,
applies total retention to remote data, and serves reads and timestamp searches from it."""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from tidelog.clock import Clock
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.checkpoint import TopicPartition
from tidelog.log.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file
from tidelog.log.log import Log, TimestampOffset
from tidelog.log.manager import LogManager
from tidelog.log.segment import LogSegment
from tidelog.log.workers import WorkerPool
from tidelog.records.format import (
    INT32,
    LOG_OVERHEAD,
    OFFSET_AND_SIZE,
    V2_LAST_OFFSET_DELTA_AT,
    iter_deep,
)
from tidelog.tiered.metadata import RemoteLogMetadataStore, RemoteSegmentMetadata, SegmentState
from tidelog.tiered.remote_index import (
    RemoteLogIndex,
    RemoteLogIndexEntry,
    decode_entries,
    derive_entries,
)
from tidelog.tiered.storage import (
    IndexType,
    LogSegmentData,
    RemoteSegmentId,
    RemoteStorageError,
    RemoteStorageManager,
)

log = logging.getLogger(__name__)

COPY_THREADS = 2
T = TypeVar("T")
Gauge = tuple[dict[str, str], float]
# Steps of a copy, in order; ``RemoteLogManager.crash_at`` can stop a copy right after one (a
# test's stand-in for the process dying there).
COPY_STEPS = ("started", "copied", "finished", "indexed")
DELETE_STEPS = ("delete_started", "data_deleted", "metadata_removed")


# Listing a partition's metadata in the tier costs a call per partition (and, on file://, a
# stat per remote segment); where tasks run often (a test, a benchmark at 1 s), a task lists
# afresh only every LISTING_EVERY_TASKS tasks and at least every LISTING_MAX_INTERVAL_MS, and
# uses in between what it listed last plus its own writes. A broker newly leading a partition
# lists it at its first task (orphans are cleaned from a fresh listing).
LISTING_EVERY_TASKS = 10
LISTING_MAX_INTERVAL_MS = 30_000
# Each task interval is cut into TASK_PHASES ticks, and a partition's task starts on its own
# tick (task_phase): every partition still gets one task an interval, but the copy pool is
# handed about a tenth of them at a time. Handed all at once, the tasks' Python held the GIL in
# one stretch and kept the broker's event loop from it for 10-20 ms (60 partitions, a 1 s
# interval: the tiered cluster's produce p99 was about twice the untiered one's; the README's
# tiered-storage section gives it with the tasks spread).
TASK_PHASES = 10


class CopyInterrupted(Exception):
    """Raised by a test's crash_at hook to stop a copy between two steps."""


@dataclass
class RemoteStats:
    """What /metrics shows of the tier on this broker."""

    bytes_copied: int = 0
    segments_copied: int = 0
    copy_errors: int = 0
    fetch_bytes: int = 0
    fetch_count: int = 0
    fetch_seconds: float = 0.0
    fetch_errors: int = 0
    deleted_segments: int = 0
    copy_lag_segments: dict[TopicPartition, int] = field(default_factory=dict)
    copy_lag_bytes: dict[TopicPartition, int] = field(default_factory=dict)


class RemoteLogManager:
    """The tier of one broker's remote-enabled partitions.

    Every remote.log.manager.task.interval.ms, each such partition gets one task on the copy
    pool (never two at once), at its own phase of the interval (``task_phase``). A task first
    reads the partition's metadata from the tier and brings the local remote indexes and the
    log's highest remote offset in step with the finished segments (this is all a follower
    does, plus following the log start). The leader then cleans orphans (copies or deletions a
    crash left unfinished), copies each rolled segment whose last offset is below the high
    watermark and above the highest remote offset (STARTED, data and indexes, FINISHED, then
    local index entries; a lost leadership leaves the copy unfinished), and applies
    retention.ms / retention.bytes to remote segments, moving the log start offset past what it
    deletes. A tier that fails leaves local data where it is; the next task tries again.

    Reads run on the reader pool (remote.log.reader.threads): an offset between the log start
    and the local log start is looked up in the remote indexes and one range of the remote
    object is fetched.
    """

    def __init__(
        self,
        logs: LogManager,
        storage: RemoteStorageManager,
        clock: Clock,
        *,
        leader_epoch_of: Callable[[str, int], int | None],
        task_interval_ms: int = 30000,
        reader_threads: int = 10,
    ) -> None:
        self.logs = logs
        self.storage = storage
        self.metadata = RemoteLogMetadataStore(storage)
        self.clock = clock
        self.leader_epoch_of = leader_epoch_of
        self.task_interval_ms = task_interval_ms
        self.copier = WorkerPool("remote-copy", COPY_THREADS)
        self.readers = WorkerPool("remote-reader", reader_threads)
        self.stats = RemoteStats()
        self.remote_segments: dict[TopicPartition, list[RemoteSegmentMetadata]] = {}
        self.crash_at: Callable[[str, RemoteSegmentId], None] | None = None
        self._indexes: dict[TopicPartition, RemoteLogIndex] = {}
        self._indexes_lock = threading.Lock()
        self._sync_locks: dict[TopicPartition, threading.Lock] = defaultdict(threading.Lock)
        self._running: set[TopicPartition] = set()
        # when, and in which leader epoch (None: as a follower), each partition was last listed
        self._listed: dict[TopicPartition, tuple[int, int | None]] = {}
        self.listing_interval_ms = max(
            task_interval_ms, min(LISTING_EVERY_TASKS * task_interval_ms, LISTING_MAX_INTERVAL_MS)
        )
        self._deleted: set[TopicPartition] = set()
        self._phases_started_ms: int | None = None  # when the ticks began: the first call
        self._ticks_done = 0  # ticks (interval/TASK_PHASES each) whose phases were started

    def startup(self) -> None:
        self._phases_started_ms = None
        self._ticks_done = 0
        tick_ms = max(1, self.task_interval_ms // TASK_PHASES)
        self.logs.scheduler.schedule("remote log manager", tick_ms, self._run_due_phases)

    def shutdown(self) -> None:
        self.copier.shutdown()
        self.readers.shutdown()

    # -- tasks ---------------------------------------------------------------------------------

    def _remote_logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        for key, partition_log in self.logs:
            if partition_log.config.remote_storage_enable:
                yield key, partition_log

    def _run_due_phases(self) -> None:
        """Starts the tasks of each phase whose tick has come since the last call, by the clock
        (so a late call catches up, and lateness does not add up over ticks); a call an
        interval late or more starts every phase but the next tick's. The ticks begin at the
        first call, not at startup: a broker's scheduler starts once it has registered, which
        may be more than an interval later, and every task would start at once."""
        now = self.clock.milliseconds()
        if self._phases_started_ms is None:
            self._phases_started_ms = now
            return
        due = (now - self._phases_started_ms) * TASK_PHASES // self.task_interval_ms
        ticks = range(max(self._ticks_done, due - TASK_PHASES + 1), due)
        self._ticks_done = max(self._ticks_done, due)
        if ticks:
            self.run_tasks(phases={tick % TASK_PHASES for tick in ticks})

    def run_tasks(self, phases: Collection[int] | None = None) -> int:
        """Hands one task per remote-enabled partition not already in one to the copy pool:
        every such partition, or those whose task starts on one of ``phases`` of the
        interval."""
        started = 0
        for key, partition_log in self._remote_logs():
            if key in self._running or key in self._deleted:
                continue
            if phases is not None and task_phase(key) not in phases:
                continue
            self._running.add(key)
            epoch = self.leader_epoch_of(*key)
            self.copier.submit(
                functools.partial(self._task, key, partition_log, epoch),
                f"remote log task of {key[0]}-{key[1]}",
            )
            started += 1
        return started

    def run_task_now(self, key: TopicPartition) -> None:
        """Runs a partition's task on the calling thread (tests, and a follower just reset)."""
        partition_log = self.logs.get(*key)
        if partition_log is not None:
            self._running.add(key)
            self._task(key, partition_log, self.leader_epoch_of(*key), afresh=True)

    def index_for(self, key: TopicPartition, partition_log: Log) -> RemoteLogIndex:
        """The partition's remote indexes, opened once (tasks and readers share them)."""
        with self._indexes_lock:
            return self._open_index(key, partition_log)

    def _open_index(self, key: TopicPartition, partition_log: Log) -> RemoteLogIndex:
        index = self._indexes.get(key)
        if index is None or index.directory != partition_log.directory:
            index = RemoteLogIndex(
                partition_log.directory,
                max_file_bytes=partition_log.config.segment_index_bytes,
                roll_ms=partition_log.config.segment_ms,
                now_ms=self.clock.milliseconds(),
            )
            self._indexes[key] = index
        return index

    def _listing_due(self, key: TopicPartition, leader_epoch: int | None, now: int) -> bool:
        last = self._listed.get(key)
        return last is None or last[1] != leader_epoch or now - last[0] >= self.listing_interval_ms

    def _task(
        self,
        key: TopicPartition,
        partition_log: Log,
        leader_epoch: int | None,
        afresh: bool = False,
    ) -> None:
        try:
            now = self.clock.milliseconds()
            afresh = afresh or self._listing_due(key, leader_epoch, now)
            listing = self.metadata.list_segments(*key, afresh=afresh)
            if afresh:
                self._listed[key] = (now, leader_epoch)
            if leader_epoch is not None:
                listing = self._clean_orphans(listing, leader_epoch)
            finished = [m for m in listing if m.state is SegmentState.COPY_SEGMENT_FINISHED]
            self._sync_index(key, partition_log, finished)
            self._follow_log_start(key, partition_log, finished)  # before retention looks at it
            if leader_epoch is not None:
                finished += self._copy_segments(key, partition_log, leader_epoch, finished)
                finished = self._apply_retention(key, partition_log, finished)
            self._follow_log_start(key, partition_log, finished)
            self.remote_segments[key] = finished
            self._record_lag(key, partition_log)
        except CopyInterrupted:
            raise
        except (RemoteStorageError, OSError) as error:
            self.stats.copy_errors += 1
            self._record_lag(key, partition_log)
            log.warning(
                "%s-%d: remote tier unavailable (%s); local data is kept, %d segments (%d bytes) "
                "wait to be copied; trying again in %d ms",
                *key,
                error,
                self.stats.copy_lag_segments.get(key, 0),
                self.stats.copy_lag_bytes.get(key, 0),
                self.task_interval_ms,
            )
        finally:
            self._running.discard(key)

    def _clean_orphans(
        self, listing: list[RemoteSegmentMetadata], leader_epoch: int
    ) -> list[RemoteSegmentMetadata]:
        """Deletes copies and deletions that never finished (a crash, a lost leadership)."""
        kept = []
        for metadata in listing:
            unfinished = metadata.state is not SegmentState.COPY_SEGMENT_FINISHED
            if unfinished and metadata.leader_epoch <= leader_epoch:
                log.info(
                    "%s-%d: removing the orphan remote segment %s (%s in epoch %d)",
                    metadata.segment_id.topic,
                    metadata.segment_id.partition,
                    metadata.segment_id.name,
                    metadata.state.value,
                    metadata.leader_epoch,
                )
                self.storage.delete_log_segment_data(metadata.segment_id)
                self.metadata.remove(metadata.segment_id)
            else:
                kept.append(metadata)
        return kept

    def _sync_index(
        self, key: TopicPartition, partition_log: Log, finished: list[RemoteSegmentMetadata]
    ) -> None:
        """Appends the remote index entries of finished segments not yet indexed here, fetched
        from the tier (a follower, a rebuilt broker, a leader that crashed after FINISHED), in
        one append per task."""
        with self._sync_locks[key]:  # a task and a read that found the indexes behind
            self._sync_index_locked(key, partition_log, finished)

    def _sync_index_locked(
        self, key: TopicPartition, partition_log: Log, finished: list[RemoteSegmentMetadata]
    ) -> None:
        index = self.index_for(key, partition_log)
        started = time.perf_counter()
        highest = before = index.highest_offset
        entries: list[RemoteLogIndexEntry] = []
        fetched = 0
        for metadata in finished:
            if metadata.end_offset <= highest:
                continue
            data = self.storage.fetch_index(metadata.segment_id, IndexType.REMOTE_LOG_INDEX)
            fetched += 1
            new = [entry for entry in decode_entries(data) if entry.first_offset > highest]
            if new:
                entries += new
                highest = new[-1].last_offset
        index.append(entries, self.clock.milliseconds())
        if fetched:
            log.log(
                logging.INFO if before < 0 else logging.DEBUG,
                "%s-%d: indexed %d remote segments from the tier (offsets %d-%d, %d entries) in "
                "%.3f s",
                *key,
                fetched,
                entries[0].first_offset if entries else -1,
                highest,
                len(entries),
                time.perf_counter() - started,
            )
        if finished:
            highest = max(m.end_offset for m in finished)
            partition_log.highest_offset_in_remote_storage = max(
                partition_log.highest_offset_in_remote_storage, highest
            )

    def _copy_candidates(self, partition_log: Log, highest: int) -> list[LogSegment]:
        with partition_log.lock:
            active = partition_log.active_segment
            return [
                segment
                for segment in partition_log.segments
                if segment is not active
                and segment.size
                and segment.next_offset <= partition_log.high_watermark
                and segment.next_offset - 1 > highest
            ]

    def _copy_segments(
        self,
        key: TopicPartition,
        partition_log: Log,
        leader_epoch: int,
        finished: list[RemoteSegmentMetadata],
    ) -> list[RemoteSegmentMetadata]:
        highest = max((m.end_offset for m in finished), default=-1)
        copied = []
        for segment in self._copy_candidates(partition_log, highest):
            if self.leader_epoch_of(*key) != leader_epoch or key in self._deleted:
                break
            metadata = self._copy_segment(key, partition_log, leader_epoch, segment, highest)
            if metadata is None:
                break
            copied.append(metadata)
            highest = metadata.end_offset
        return copied

    def _copy_segment(
        self,
        key: TopicPartition,
        partition_log: Log,
        leader_epoch: int,
        segment: LogSegment,
        highest: int,
    ) -> RemoteSegmentMetadata | None:
        start = max(segment.base_offset, highest + 1)
        end = segment.next_offset - 1
        segment_id = RemoteSegmentId(key[0], key[1], start, uuid.uuid4().hex)
        snapshot = partition_log.producer_snapshot_at(end + 1)
        metadata = RemoteSegmentMetadata(
            segment_id,
            end,
            segment.retention_timestamp,
            segment.size,
            leader_epoch,
            SegmentState.COPY_SEGMENT_STARTED,
            producer_snapshot=snapshot is not None,
        )
        self.metadata.put(metadata)
        self._step("started", segment_id)
        entries = derive_entries(
            segment,
            start,
            partition_log.config.remote_log_index_interval_bytes,
            self.storage.object_uri(segment_id, LOG_SUFFIX),
        )
        directory = partition_log.directory
        self.storage.copy_log_segment_data(
            segment_id,
            LogSegmentData(
                log_segment=segment.log_path,
                offset_index=segment_file(directory, segment.base_offset, INDEX_SUFFIX),
                time_index=segment_file(directory, segment.base_offset, TIME_INDEX_SUFFIX),
                leader_epochs=_epochs_of_range(partition_log, start, end),
                remote_log_index=b"".join(entry.encode() for entry in entries),
                producer_snapshot=snapshot,
            ),
        )
        self._step("copied", segment_id)
        if self.leader_epoch_of(*key) != leader_epoch:
            log.info(
                "%s-%d: no longer leader in epoch %d; the copy of %s is left unfinished",
                *key,
                leader_epoch,
                segment_id.name,
            )
            return None
        finished = metadata.with_state(SegmentState.COPY_SEGMENT_FINISHED)
        self.metadata.put(finished)
        self._step("finished", segment_id)
        self.index_for(key, partition_log).append(entries, self.clock.milliseconds())
        partition_log.highest_offset_in_remote_storage = end
        self._step("indexed", segment_id)
        self.stats.bytes_copied += segment.size
        self.stats.segments_copied += 1
        log.info(
            "%s-%d: copied segment %d (offsets %d-%d, %d bytes, %d index entries) to %s",
            *key,
            segment.base_offset,
            start,
            end,
            segment.size,
            len(entries),
            self.storage.uri,
        )
        return finished

    def _step(self, step: str, segment_id: RemoteSegmentId) -> None:
        if self.crash_at is not None:
            self.crash_at(step, segment_id)

    def _apply_retention(
        self, key: TopicPartition, partition_log: Log, finished: list[RemoteSegmentMetadata]
    ) -> list[RemoteSegmentMetadata]:
        """retention.ms and retention.bytes over the whole log, remote part first."""
        config = partition_log.config
        if "delete" not in config.cleanup_policy:
            return finished
        now = self.clock.milliseconds()
        local_start = partition_log.local_log_start_offset
        excess = -1
        if config.retention_bytes >= 0:
            remote_only = sum(m.size for m in finished if m.end_offset < local_start)
            excess = remote_only + partition_log.size_in_bytes - config.retention_bytes
        doomed = []
        for metadata in finished:
            by_time = (
                config.retention_ms >= 0 and now - metadata.max_timestamp > config.retention_ms
            )
            by_size = excess >= 0 and excess - metadata.size >= 0
            below_start = metadata.end_offset < partition_log.log_start_offset
            if not (by_time or by_size or below_start):
                break
            if metadata.end_offset >= partition_log.high_watermark:
                break
            doomed.append(metadata)
            if by_size:
                excess -= metadata.size
        for metadata in doomed:
            self.metadata.put(metadata.with_state(SegmentState.DELETE_SEGMENT_STARTED))
            self._step("delete_started", metadata.segment_id)
            self.storage.delete_log_segment_data(metadata.segment_id)
            self._step("data_deleted", metadata.segment_id)
            self.metadata.remove(metadata.segment_id)
            self._step("metadata_removed", metadata.segment_id)
            self.stats.deleted_segments += 1
            log.info(
                "%s-%d: deleted remote segment %s (offsets %d-%d) by retention",
                *key,
                metadata.segment_id.name,
                metadata.start_offset,
                metadata.end_offset,
            )
        if doomed:
            partition_log.maybe_increment_log_start_offset(
                doomed[-1].end_offset + 1, "remote segments deleted by retention"
            )
            self.index_for(key, partition_log).delete_below(partition_log.log_start_offset)
        return finished[len(doomed) :]

    def _follow_log_start(
        self, key: TopicPartition, partition_log: Log, finished: list[RemoteSegmentMetadata]
    ) -> None:
        """The log start follows the first remote segment left (or the local log start), and
        remote index files wholly below it go."""
        local_start = partition_log.local_log_start_offset
        index = self.index_for(key, partition_log)
        if not finished and index.highest_offset >= 0:
            # Remote data is indexed here but the tier lists none: do not let the log start
            # jump over it on that word alone (retention deletes the index entries it deletes).
            log.warning(
                "%s-%d: the tier lists no segments but offsets up to %d are indexed here; the "
                "log start stays at %d",
                *key,
                index.highest_offset,
                partition_log.log_start_offset,
            )
            return
        contiguous = all(
            after.start_offset == before.end_offset + 1
            for before, after in itertools.pairwise(finished)
        )
        reaches_local = bool(finished) and finished[-1].end_offset + 1 >= local_start
        if contiguous and reaches_local and finished[0].start_offset < local_start:
            partition_log.restore_log_start_offset_from_remote(finished[0].start_offset)
        target = min(local_start, finished[0].start_offset) if finished else local_start
        partition_log.maybe_increment_log_start_offset(target, "the remote tier starts there")
        index.delete_below(partition_log.log_start_offset)

    def _record_lag(self, key: TopicPartition, partition_log: Log) -> None:
        highest = partition_log.highest_offset_in_remote_storage
        waiting = self._copy_candidates(partition_log, highest)
        self.stats.copy_lag_segments[key] = len(waiting)
        self.stats.copy_lag_bytes[key] = sum(segment.size for segment in waiting)

    # -- a follower's start at the leader's local log start ------------------------------------

    async def build_aux_state(self, key: TopicPartition, partition_log: Log) -> None:
        """KIP-405's buildRemoteLogAuxState for a log just emptied to start at the leader's
        local log start: the producer state there is the snapshot copied with the remote
        segment that ends just below it, so the follower (a leader later) knows the producers
        of the data it never replicated. Without one (a tier that is away, a segment copied
        before producer snapshots went to the tier) the state starts empty, as before."""
        offset = partition_log.local_log_start_offset

        def fetch_and_install() -> str:
            below = self.metadata.finished_ending_at(*key, offset - 1)
            if below is None or not below.producer_snapshot:
                return "no remote segment ending below it has a producer snapshot"
            data = self.storage.fetch_index(below.segment_id, IndexType.PRODUCER_SNAPSHOT)
            if not partition_log.install_producer_snapshot(offset, data):
                return "the log moved on, or the snapshot is unreadable"
            return ""

        try:
            missing = await self.readers.run(fetch_and_install)
        except (RemoteStorageError, OSError) as error:
            missing = f"the tier is unavailable ({error})"
        if missing:
            log.warning(
                "%s-%d: no producer state taken from the tier at offset %d: %s",
                *key,
                offset,
                missing,
            )

    # -- deletion ------------------------------------------------------------------------------

    def delete_partition(self, topic: str, partition: int) -> None:
        """Topic deletion: every remote object and metadata of the partition goes (on the copy
        pool; idempotent, so every replica may ask)."""
        key = (topic, partition)
        self._deleted.add(key)  # a task under way stops before its next copy
        self._indexes.pop(key, None)
        self._listed.pop(key, None)
        self.remote_segments.pop(key, None)

        def delete() -> None:
            deadline = time.monotonic() + 60
            while key in self._running and time.monotonic() < deadline:
                time.sleep(0.05)  # a copy under way finishes first, or it would write after us
            self.storage.delete_partition(topic, partition)
            self._deleted.discard(key)

        self.copier.submit(delete, f"deleting the remote data of {topic}-{partition}")

    # -- what the admin API and /metrics show ---------------------------------------------------

    def partition_summary(self, key: TopicPartition, partition_log: Log) -> dict[str, int]:
        """The remote part of a partition, as this broker last saw the tier."""
        segments = self.remote_segments.get(key, [])
        return {
            "remote_log_start_offset": segments[0].start_offset if segments else -1,
            "remote_end_offset": segments[-1].end_offset if segments else -1,
            "remote_segments": len(segments),
            "remote_size_bytes": sum(m.size for m in segments),
            "highest_offset_in_remote_storage": partition_log.highest_offset_in_remote_storage,
        }

    def register_metrics(self, gauges: dict[str, Callable[[], Iterable[Gauge]]]) -> None:
        stats = self.stats

        def per_partition(values: dict[TopicPartition, int]) -> list[Gauge]:
            return [({"topic": t, "partition": str(p)}, n) for (t, p), n in values.items()]

        gauges["tidelog_remote_copy_bytes_total"] = lambda: [({}, stats.bytes_copied)]
        gauges["tidelog_remote_copy_segments_total"] = lambda: [({}, stats.segments_copied)]
        gauges["tidelog_remote_copy_lag_segments"] = lambda: per_partition(stats.copy_lag_segments)
        gauges["tidelog_remote_copy_lag_bytes"] = lambda: per_partition(stats.copy_lag_bytes)
        gauges["tidelog_remote_fetch_bytes_total"] = lambda: [({}, stats.fetch_bytes)]
        gauges["tidelog_remote_fetch_requests_total"] = lambda: [({}, stats.fetch_count)]
        gauges["tidelog_remote_fetch_seconds_total"] = lambda: [({}, stats.fetch_seconds)]
        gauges["tidelog_remote_errors_total"] = lambda: [
            ({"kind": "copy"}, stats.copy_errors),
            ({"kind": "fetch"}, stats.fetch_errors),
        ]
        gauges["tidelog_remote_deleted_segments_total"] = lambda: [({}, stats.deleted_segments)]

    # -- reads ---------------------------------------------------------------------------------

    async def _current_index(self, key: TopicPartition, partition_log: Log) -> RemoteLogIndex:
        """The partition's remote indexes, first brought in step with the tier if they end
        below the local log start: a rebuilt broker indexes the tier at its first task, up to
        a task interval after it took its place, and may lead (or be read) before then."""
        index = self.index_for(key, partition_log)
        if index.highest_offset + 1 < partition_log.local_log_start_offset:

            def sync() -> None:
                listing = self.metadata.list_segments(*key)
                finished = [m for m in listing if m.state is SegmentState.COPY_SEGMENT_FINISHED]
                self._sync_index(key, partition_log, finished)

            try:
                await self.readers.run(sync)
            except (RemoteStorageError, OSError) as error:
                self.stats.fetch_errors += 1
                raise KafkaError(
                    ErrorCode.UNKNOWN, f"remote indexes unavailable: {error}"
                ) from None
        return index

    async def _entry_for(
        self, key: TopicPartition, partition_log: Log, offset: int
    ) -> RemoteLogIndexEntry:
        entry = (await self._current_index(key, partition_log)).lookup(offset)
        if entry is None or entry.first_offset > offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} of {key[0]}-{key[1]} is in no remote segment indexed here",
            )
        return entry

    async def read(
        self,
        key: TopicPartition,
        partition_log: Log,
        offset: int,
        max_bytes: int,
        min_one_message: bool,
    ) -> bytes:
        """Whole entries from the one holding ``offset``, from the remote range that holds it,
        up to ``max_bytes`` (the last may be cut, as a local read does; with
        ``min_one_message`` the first entry is whole)."""
        entry = await self._entry_for(key, partition_log, offset)
        return await self._fetch(
            entry,
            functools.partial(
                trim_entries, offset=offset, max_bytes=max_bytes, min_one_message=min_one_message
            ),
        )

    async def _fetch(self, entry: RemoteLogIndexEntry, then: Callable[[bytes], T]) -> T:
        """``then`` of the bytes of ``entry``'s range, fetched and worked on by a reader
        thread: trimming to the offset sought or decoding the range to search it walks its
        entries, and the event loop serves other requests meanwhile."""
        started = time.perf_counter()

        def fetch_then() -> tuple[int, T]:
            data = self.storage.fetch_range(
                entry.uri, entry.position, entry.position + entry.data_length
            )
            return len(data), then(data)

        try:
            size, result = await self.readers.run(fetch_then)
        except RemoteStorageError as error:
            self.stats.fetch_errors += 1
            raise KafkaError(ErrorCode.UNKNOWN, f"remote read failed: {error}") from None
        self.stats.fetch_count += 1
        self.stats.fetch_bytes += size
        self.stats.fetch_seconds += time.perf_counter() - started
        return result

    async def offset_for_timestamp(
        self, key: TopicPartition, partition_log: Log, timestamp: int
    ) -> TimestampOffset | None:
        """The first message at or after the log start, below the local log start, whose
        timestamp is >= ``timestamp`` (v0 messages match, as locally); None if there is none
        in the remote part."""
        index = await self._current_index(key, partition_log)
        entry = index.search(timestamp)
        local_start = partition_log.local_log_start_offset
        while entry is not None and entry.first_offset < local_start:
            start = max(entry.first_offset, partition_log.log_start_offset)
            found = await self._fetch(
                entry, functools.partial(first_at_or_after, start=start, timestamp=timestamp)
            )
            if found is not None:
                return found
            entry = index.lookup(entry.last_offset + 1)
        return None


def task_phase(key: TopicPartition) -> int:
    """The tick of each task interval on which the partition's task starts: a topic's
    partitions take the ticks in turn, from one its name picks."""
    topic, partition = key
    return (zlib.crc32(topic.encode()) + partition) % TASK_PHASES


def first_at_or_after(data: bytes, start: int, timestamp: int) -> TimestampOffset | None:
    """The first message of ``data`` at or after offset ``start`` whose timestamp is >=
    ``timestamp`` (a v0 message, which has none, matches), or None."""
    for message in iter_deep(data):
        if message.offset >= start and (message.magic == 0 or message.timestamp >= timestamp):
            return TimestampOffset(message.timestamp, message.offset)
    return None


def trim_entries(data: bytes, offset: int, max_bytes: int, min_one_message: bool) -> bytes:
    """The entries of ``data`` from the first whose (last) offset is >= ``offset``, cut at
    ``max_bytes`` unless ``min_one_message`` needs the first one whole. A v2 batch's offset
    field is its base offset: its last is read from its header, so the batch that holds
    ``offset`` is the first one kept."""
    position = 0
    while position + LOG_OVERHEAD <= len(data):
        entry_offset, size = OFFSET_AND_SIZE.unpack_from(data, position)
        if position + V2_LAST_OFFSET_DELTA_AT + 4 <= len(data) and data[position + 16] == 2:
            entry_offset += INT32.unpack_from(data, position + V2_LAST_OFFSET_DELTA_AT)[0]
        if entry_offset >= offset:
            break
        position += LOG_OVERHEAD + size
    first_size = 0
    if position + LOG_OVERHEAD <= len(data):
        first_size = LOG_OVERHEAD + OFFSET_AND_SIZE.unpack_from(data, position)[1]
    length = max(max_bytes, first_size) if min_one_message else max_bytes
    return data[position : position + max(length, 0)]


def _epochs_of_range(partition_log: Log, start: int, end: int) -> bytes:
    """The leader-epoch entries that cover offsets [start, end], as a checkpoint file."""
    entries = partition_log.leader_epochs.entries
    covering = [
        (epoch, offset)
        for number, (epoch, offset) in enumerate(entries)
        if offset <= end and (number + 1 == len(entries) or entries[number + 1][1] > start)
    ]
    lines = ["0", str(len(covering))] + [f"{epoch} {offset}" for epoch, offset in covering]
    return ("\n".join(lines) + "\n").encode()
