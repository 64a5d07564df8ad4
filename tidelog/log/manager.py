"""All partition logs of a broker, under its log.dirs."""

from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from tidelog.clock import Clock, SystemClock
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.checkpoint import TopicPartition, read_checkpoint, write_checkpoint
from tidelog.log.cleaner import CleanerSettings, LogCleaner
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.scheduler import Scheduler
from tidelog.log.workers import WorkerPool

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_DIRECTORY = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# A deleted partition's directory is renamed to end in this (as Kafka names it) before its
# files are removed in the background: a partition of the same name can be created at once,
# and a start after a crash in between removes what is left.
DELETED_DIRECTORY_SUFFIX = "-delete"
ROLL_CHECK_INTERVAL_MS = 1000
# An index not written for between one and two of these intervals closes its file: a broker's
# open files follow the partitions being written.
INDEX_IDLE_CHECK_INTERVAL_MS = 10_000
# The background thread (flushes, deletions, new segments' index files, checkpoints) runs this
# much below the event loop's priority: when a 600-partition topic took its first record in each
# partition, a broker's 1,200 index files made beside the loop's appends at nice 0 took the last
# acknowledgement from 0.8-0.9 s to 1.5-2.5 s; at nice 10, 0.15-1.24 s against 0.42-0.82 s.
BACKGROUND_NICE = 10


def partition_directory(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class LogManager:
    """The logs of every partition this broker holds, one directory each under a log dir.

    Each log dir also holds the recovery-point, high-watermark and log-start-offset
    checkpoints, and, between a
    clean shutdown and the next start, ``.kafka_cleanshutdown``: when it is there the logs are
    opened without recovery. A new partition goes to the log dir holding the fewest partitions.
    A deleted partition's directory is renamed ``{topic}-{partition}.{id}-delete`` at once and
    removed on the background pool; such directories a crash left are removed at the next start.
    """

    def __init__(
        self,
        log_dirs: list[Path] | list[str],
        broker_config: Mapping[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
    ) -> None:
        self.log_dirs = [Path(directory) for directory in log_dirs]
        self.broker_config = dict(broker_config or parse_config({}, BROKER_KEYS))
        self.clock = clock or SystemClock()
        self.topic_configs = dict(topic_configs or {})
        self.logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # partitions whose logs a worker thread is opening (open_new): not to be opened twice
        self.opening: set[TopicPartition] = set()
        self.scheduler = Scheduler(self.clock)
        # what each checkpoint file last received: an idle broker does not rewrite (and fsync)
        # a thousand unchanged offsets every few seconds
        self._written: dict[Path, dict[TopicPartition, int]] = {}
        # the offsets of the checkpoint writes handed to the background pool, not yet written
        self._checkpoints_to_write: dict[Path, dict[TopicPartition, int]] = {}
        self._checkpoints_lock = threading.Lock()
        # Flushes of rolled segments and deletions of segment files run here, off the append
        # path and the event loop, as Kafka's do; one thread keeps them in order.
        self.background_pool = WorkerPool("log-background", threads=1, nice=BACKGROUND_NICE)
        self.cleaner = LogCleaner(CleanerSettings.from_config(self.broker_config), self, self.clock)

    # -- start and stop ------------------------------------------------------------------------

    def startup(self) -> None:
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            self._load_dir(directory)
        config = self.broker_config
        self.scheduler.schedule(
            "log retention", config["log.retention.check.interval.ms"], self.cleanup_logs
        )
        self.scheduler.schedule("segment roll", ROLL_CHECK_INTERVAL_MS, self.roll_idle_segments)
        self.scheduler.schedule(
            "producer id expiration",
            config["producer.id.expiration.check.interval.ms"],
            self.remove_expired_producers,
        )
        self.scheduler.schedule(
            "idle index release", INDEX_IDLE_CHECK_INTERVAL_MS, self.release_idle_indexes
        )
        # the scheduler runs on the event loop: the files are written on the background pool
        self.scheduler.schedule(
            "recovery point checkpoint",
            config["log.flush.offset.checkpoint.interval.ms"],
            partial(self.checkpoint_recovery_points, in_background=True),
        )
        self.scheduler.schedule(
            "log start offset checkpoint",
            config["log.flush.start.offset.checkpoint.interval.ms"],
            partial(self.checkpoint_log_start_offsets, in_background=True),
        )
        self.scheduler.schedule(
            "high watermark checkpoint",
            config["replica.high.watermark.checkpoint.interval.ms"],
            partial(self.checkpoint_high_watermarks, in_background=True),
        )
        if config["log.flush.interval.ms"] < 2**63 - 1:
            self.scheduler.schedule("log flush", config["log.flush.interval.ms"], self.flush_logs)
        self.cleaner.start()

    def topics_on_disk(self) -> set[str]:
        """The topics with a partition log under a log dir (deleted ones' leftovers aside): the
        broker reads their settings before ``startup`` opens their logs with them."""
        found = set()
        for directory in self.log_dirs:
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                match = PARTITION_DIRECTORY.match(path.name)
                if match and path.is_dir() and not path.name.endswith(DELETED_DIRECTORY_SUFFIX):
                    found.add(match["topic"])
        return found

    def _load_dir(self, directory: Path) -> None:
        clean_file = directory / CLEAN_SHUTDOWN_FILE
        clean = clean_file.exists()
        recovery_points = read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT)
        high_watermarks = read_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT)
        log_starts = read_checkpoint(directory / LOG_START_OFFSET_CHECKPOINT)
        for path in sorted(directory.iterdir()):
            if path.is_dir() and path.name.endswith(DELETED_DIRECTORY_SUFFIX):
                log.info("%s: removing the rest of a deleted partition's log", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            match = PARTITION_DIRECTORY.match(path.name)
            if not path.is_dir() or not match:
                continue
            partition = (match["topic"], int(match["partition"]))
            if partition in self.logs:
                raise RuntimeError(
                    f"{partition} is in two log dirs: {self._dir_of[partition]}, {directory}"
                )
            opened = Log(
                path,
                self.config_for(partition[0]),
                clock=self.clock,
                recovery_point=recovery_points.get(partition, 0),
                needs_recovery=not clean,
                background=self._in_background,
                log_start_offset=log_starts.get(partition),
                producer_id_expiration_ms=self.broker_config["transactional.id.expiration.ms"],
            )
            opened.high_watermark = min(
                max(high_watermarks.get(partition, 0), opened.log_start_offset),
                opened.log_end_offset,
            )
            self.logs[partition] = opened
            self._dir_of[partition] = directory
        log.info(
            "%s: loaded %d partition logs after a%s shutdown",
            directory,
            sum(1 for d in self._dir_of.values() if d == directory),
            " clean" if clean else "n unclean",
        )
        clean_file.unlink(missing_ok=True)

    def _in_background(self, work: Callable[[], None]) -> None:
        self.background_pool.submit(work, "a segment flush, a file deletion or a new index file")

    def wait_for_background_work(self) -> None:
        """Returns once every flush and deletion handed to the background so far has run."""
        self.background_pool.drain()

    def shutdown(self) -> None:
        """A clean shutdown: every log flushed and closed with trimmed indexes, checkpoints
        written, and the clean-shutdown marker left for the next start."""
        self.cleaner.stop()
        self.background_pool.shutdown()
        for partition_log in self.logs.values():
            partition_log.close()
        self.checkpoint_recovery_points()
        self.checkpoint_high_watermarks()
        self.checkpoint_log_start_offsets()
        for directory in self.log_dirs:
            (directory / CLEAN_SHUTDOWN_FILE).touch()
        log.info("log manager shut down cleanly (%d logs)", len(self.logs))
        self.logs.clear()

    # -- logs ----------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        if topic in self.topic_configs:
            return self.topic_configs[topic]
        return LogConfig.from_topic_config({}, self.broker_config)

    def get(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int) -> Log:
        key = (topic, partition)
        existing = self.logs.get(key)
        if existing is not None:
            return existing
        ((_, directory),) = self.place([key])
        return self.add_new(key, directory, self.open_new(key, directory))

    def place(self, keys: list[TopicPartition]) -> list[tuple[TopicPartition, Path]]:
        """The log dir each new partition goes to: the one holding the fewest partitions."""
        counts = {d: 0 for d in self.log_dirs}
        for owner in self._dir_of.values():
            counts[owner] = counts.get(owner, 0) + 1
        placed = []
        for key in keys:
            directory = min(self.log_dirs, key=lambda d: counts[d])
            counts[directory] += 1
            placed.append((key, directory))
        return placed

    def open_new(self, key: TopicPartition, directory: Path) -> Log:
        """Opens (creating its files) the log of a partition not held yet. It reads only the
        topic's config, so many can be opened in a worker thread; add_new then registers it."""
        return Log(
            directory / partition_directory(*key),
            self.config_for(key[0]),
            clock=self.clock,
            needs_recovery=False,
            background=self._in_background,
            producer_id_expiration_ms=self.broker_config["transactional.id.expiration.ms"],
        )

    def add_new(self, key: TopicPartition, directory: Path, opened: Log) -> Log:
        """Registers a log from open_new; if the partition got one meanwhile, that one stays."""
        existing = self.logs.get(key)
        if existing is not None:
            for segment in opened.segments:  # not Log.close: its files are the other's too
                segment.close()
            return existing
        self.logs[key] = opened
        self._dir_of[key] = directory
        log.info("created log for %s-%d in %s", key[0], key[1], directory)
        return opened

    def dir_of(self, key: TopicPartition) -> Path:
        """The log dir holding ``key``'s log."""
        return self._dir_of[key]

    def delete(self, topic: str, partition: int) -> None:
        """Forgets the partition's log and renames its directory out of the way; its files
        are removed on the background pool (a log of thousands of segments takes a while)."""
        key = (topic, partition)
        self.cleaner.abort(key)
        removed = self.logs.pop(key, None)
        self._dir_of.pop(key, None)
        if removed is None:
            return
        renamed = removed.directory.with_name(
            f"{removed.directory.name}.{uuid.uuid4().hex}{DELETED_DIRECTORY_SUFFIX}"
        )
        try:
            removed.directory.rename(renamed)
        except FileNotFoundError:  # removed by hand: nothing left to delete
            renamed = removed.directory

        def remove() -> None:
            removed.delete(renamed)
            log.info("deleted log for %s-%d", topic, partition)

        self._in_background(remove)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        self.topic_configs[topic] = config
        for (name, _), partition_log in self.logs.items():
            if name == topic:
                partition_log.update_config(config)

    def __iter__(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(list(self.logs.items()))

    # -- background work -----------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        return sum(partition_log.delete_old_segments() for _, partition_log in self)

    def remove_expired_producers(self) -> int:
        return sum(partition_log.remove_expired_producers() for _, partition_log in self)

    def roll_idle_segments(self) -> int:
        return sum(partition_log.roll_if_idle() for _, partition_log in self)

    def release_idle_indexes(self) -> int:
        """Closes the descriptors of indexes not written since the last call; how many it closed."""
        return sum(partition_log.release_idle_indexes() for _, partition_log in self)

    def flush_logs(self) -> None:
        for _, partition_log in self:
            partition_log.flush()

    def _checkpoint(self, name: str, value_of, in_background: bool) -> None:
        """Writes the ``name`` checkpoint of each log dir whose offsets changed since its last
        write. The offsets are read here, where they change. ``in_background`` the file is
        written on the background pool, after the flushes and deletions handed there before:
        a write creates a file and fsyncs it and its directory, which waits on the disk's
        journal behind other files' writes, and the event loop must not (up to 390 ms per
        high watermark checkpoint, every 5 s, on a leader while a wiped broker rebuilt)."""
        for directory in self.log_dirs:
            offsets = {
                key: value_of(self.logs[key])
                for key, owner in self._dir_of.items()
                if owner == directory and key in self.logs
            }
            path = directory / name
            if self._written.get(path) == offsets:
                continue
            if not in_background:
                self._write_checkpoint(path, offsets)
                continue
            # one write per file waits in the pool at most (flushes can hold it up for
            # seconds), and it writes the newest offsets
            with self._checkpoints_lock:
                waiting = path in self._checkpoints_to_write
                self._checkpoints_to_write[path] = offsets
            if not waiting:
                self.background_pool.submit(
                    partial(self._write_newest_checkpoint, path), f"writing {path}"
                )

    def _write_newest_checkpoint(self, path: Path) -> None:
        with self._checkpoints_lock:
            offsets = self._checkpoints_to_write.pop(path)
        self._write_checkpoint(path, offsets)

    def _write_checkpoint(self, path: Path, offsets: dict[TopicPartition, int]) -> None:
        write_checkpoint(path, offsets)
        self._written[path] = offsets

    def checkpoint_recovery_points(self, in_background: bool = False) -> None:
        self._checkpoint(
            RECOVERY_POINT_CHECKPOINT,
            lambda partition_log: partition_log.recovery_point,
            in_background,
        )

    def checkpoint_log_start_offsets(self, in_background: bool = False) -> None:
        self._checkpoint(
            LOG_START_OFFSET_CHECKPOINT,
            lambda partition_log: partition_log.log_start_offset,
            in_background,
        )

    def checkpoint_high_watermarks(self, in_background: bool = False) -> None:
        self._checkpoint(
            HIGH_WATERMARK_CHECKPOINT,
            lambda partition_log: partition_log.high_watermark,
            in_background,
        )
