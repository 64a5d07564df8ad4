"""The log manager: partitions under log.dirs, checkpoints, clean shutdown, background tasks."""

from __future__ import annotations

import os
import threading

import pytest

from tests.conftest import message_set
from tidelog.config import BROKER_KEYS, ConfigError, parse_config
from tidelog.config import broker_config as server_properties
from tidelog.log.checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from tidelog.log.config import LogConfig
from tidelog.log.manager import BACKGROUND_NICE, CLEAN_SHUTDOWN_FILE, LogManager


def broker_config(**overrides: str) -> dict:
    return parse_config(overrides, BROKER_KEYS)


@pytest.fixture
def dirs(tmp_path):
    return [tmp_path / "a", tmp_path / "b"]


def start(dirs, clock, **overrides):
    manager = LogManager(dirs, broker_config(**overrides), clock=clock)
    manager.startup()
    return manager


def test_new_partitions_are_spread_over_the_log_dirs(dirs, clock):
    manager = start(dirs, clock)

    for partition in range(4):
        manager.get_or_create("orders", partition)

    assert sorted(p.name for p in dirs[0].iterdir()) == ["orders-0", "orders-2"]
    assert sorted(p.name for p in dirs[1].iterdir()) == ["orders-1", "orders-3"]


def test_a_clean_shutdown_writes_checkpoints_and_the_next_start_skips_recovery(dirs, clock):
    manager = start(dirs, clock)
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(message_set(7, timestamp=clock.milliseconds()))
    log.high_watermark = 5
    manager.shutdown()

    assert (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(dirs[0] / "recovery-point-offset-checkpoint") == {("orders", 0): 7}
    assert read_checkpoint(dirs[0] / "replication-offset-checkpoint") == {("orders", 0): 5}
    assert (dirs[0] / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 5\n"

    again = start(dirs, clock)
    reopened = again.get("orders", 0)
    assert (reopened.log_end_offset, reopened.high_watermark, reopened.recovery_point) == (7, 5, 7)
    assert not (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()


def test_after_a_crash_logs_are_recovered_from_their_checkpointed_recovery_points(
    dirs, clock, caplog
):
    manager = start(dirs, clock)
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    manager.checkpoint_recovery_points()  # recovery point 0: nothing flushed yet
    with open(log.active_segment.log_path, "ab") as file:
        file.write(b"\x00\x00\x00")  # a torn write

    again = start(dirs, clock)

    assert again.get("orders", 0).log_end_offset == 3
    assert "cutting 3 bytes" in caplog.text


def test_the_scheduler_applies_retention_and_rolls_idle_segments(dirs, clock):
    manager = LogManager(
        dirs,
        broker_config(**{"log.retention.check.interval.ms": "1000"}),
        clock=clock,
        topic_configs={"events": LogConfig(retention_ms=60_000, segment_ms=30_000)},
    )
    manager.startup()
    log = manager.get_or_create("events", 0)
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    log.high_watermark = log.log_end_offset

    clock.advance(30_001)
    assert "segment roll" in manager.scheduler.run_due()
    assert [s.base_offset for s in log.segments] == [0, 3]
    clock.advance(30_000)
    manager.scheduler.run_due()
    assert log.log_start_offset == 3


def test_a_topic_config_change_reaches_its_open_logs(dirs, clock):
    manager = start(dirs, clock)
    log = manager.get_or_create("events", 0)

    manager.update_topic_config("events", LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(message_set(1, timestamp=5))

    assert info.log_append_time == clock.milliseconds()


def test_deleting_a_partition_removes_its_directory(dirs, clock):
    manager = start(dirs, clock)
    manager.get_or_create("gone", 0).append_as_leader(message_set(1))

    manager.delete("gone", 0)

    assert not (dirs[0] / "gone-0").exists()
    assert manager.get("gone", 0) is None
    manager.wait_for_background_work()
    assert not any(p.is_dir() for p in dirs[0].iterdir())  # renamed, then removed


def test_a_partition_deleted_and_created_again_at_once_starts_empty(dirs, clock):
    manager = start(dirs, clock)
    manager.get_or_create("again", 0).append_as_leader(message_set(3))

    manager.delete("again", 0)
    recreated = manager.get_or_create("again", 0)
    manager.wait_for_background_work()

    assert recreated.log_end_offset == 0
    assert recreated.append_as_leader(message_set(1)).first_offset == 0
    assert (dirs[0] / "again-0").is_dir()


def test_a_segment_deletion_queued_before_its_partition_was_deleted_spares_the_new_partition(
    dirs, clock
):
    manager = LogManager(
        dirs,
        broker_config(),
        clock=clock,
        topic_configs={"again": LogConfig(retention_ms=60_000)},
    )
    manager.startup()
    old = manager.get_or_create("again", 0)
    old.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    old.high_watermark = old.log_end_offset
    old.roll()
    manager.wait_for_background_work()
    gate = threading.Event()
    manager.background_pool.submit(gate.wait)  # the background is busy (a long flush, say)
    clock.advance(60_001)
    assert old.delete_old_segments() == 1  # segment 0's files: unlinked in the background

    manager.delete("again", 0)  # then the topic is deleted and made again, at once
    recreated = manager.get_or_create("again", 0)
    recreated.append_as_leader(message_set(2, timestamp=clock.milliseconds()))
    gate.set()
    manager.wait_for_background_work()

    assert recreated.active_segment.log_path.exists()  # the new segment 0 is not the old one
    manager.shutdown()
    reopened = start(dirs, clock).get("again", 0)
    assert reopened is not None and reopened.log_end_offset == 2


def test_a_crash_before_a_deleted_log_is_removed_leaves_nothing_after_the_next_start(
    dirs, clock, monkeypatch
):
    manager = start(dirs, clock)
    manager.get_or_create("gone", 0).append_as_leader(message_set(1))
    monkeypatch.setattr(manager, "_in_background", lambda work: None)  # dies before removing

    manager.delete("gone", 0)
    left = [p for p in dirs[0].iterdir() if p.name.endswith("-delete")]
    assert len(left) == 1 and left[0].name.startswith("gone-0.")

    restarted = start(dirs, clock)
    assert restarted.get("gone", 0) is None
    assert not any(p.name.startswith("gone-0") for p in dirs[0].iterdir())


def test_a_malformed_checkpoint_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    write_checkpoint(path, {("t", 0): 1, ("t", 1): 2})
    path.write_text(path.read_text().replace("2\n", "3\n", 1))

    with pytest.raises(CorruptCheckpointError, match="replication-offset-checkpoint"):
        read_checkpoint(path)


def test_a_bad_config_value_names_the_key_and_the_allowed_values():
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_topic_config({"message.timestamp.type": "WallClock"})
    assert "message.timestamp.type" in str(raised.value)
    assert "CreateTime, LogAppendTime" in str(raised.value)

    with pytest.raises(ConfigError, match="log.segment.bytes: 'big' is not valid"):
        broker_config(**{"log.segment.bytes": "big"})
    with pytest.raises(ConfigError, match="unknown configuration key 'log.segment.byte'"):
        broker_config(**{"log.segment.byte": "1"})


def test_a_follower_may_not_wait_longer_than_it_may_lag_or_its_socket_allows():
    settings = {"broker.id": "1", "replica.lag.time.max.ms": "3000"}
    assert server_properties({**settings, "replica.fetch.wait.max.ms": "3000"})

    with pytest.raises(ConfigError, match=r"replica.fetch.wait.max.ms: 3001 .* \(3000\)"):
        server_properties({**settings, "replica.fetch.wait.max.ms": "3001"})
    with pytest.raises(ConfigError, match=r"replica.socket.timeout.ms: 400 .* \(500\)"):
        server_properties({**settings, "replica.socket.timeout.ms": "400"})


def test_topic_settings_fall_back_to_the_broker_defaults():
    broker = broker_config(**{"log.segment.bytes": "4096", "log.message.format.version": "0.9.0"})

    config = LogConfig.from_topic_config({"retention.ms": "1000"}, broker)

    assert (config.segment_bytes, config.retention_ms, config.magic) == (4096, 1000, 0)


def test_a_rolled_segment_is_flushed_in_the_background_then_counts_as_recovered(dirs, clock):
    manager = start(dirs, clock)
    log = manager.get_or_create("events", 0)
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))

    log.roll()
    manager.wait_for_background_work()

    assert log.recovery_point == 3
    manager.shutdown()


def test_a_new_segments_index_files_are_made_by_the_background_thread_below_the_loops_priority(
    dirs, clock
):
    manager = start(dirs, clock)
    log = manager.get_or_create("events", 0)
    segment = log.active_segment
    make_index_files = segment.make_index_files
    priorities: list[int] = []  # of the threads that made them

    def made() -> None:
        priorities.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        make_index_files()

    segment.make_index_files = made
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    manager.wait_for_background_work()

    assert segment.index.path.stat().st_size == 0  # made; the first entry gives it its slots
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert priorities == [min(mine + BACKGROUND_NICE, 19)]
    manager.shutdown()


def test_the_log_start_offset_is_checkpointed_apart_from_the_first_segment(dirs, clock):
    manager = start(dirs, clock)
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(message_set(10, timestamp=clock.milliseconds()))
    log.high_watermark = 10
    assert log.maybe_increment_log_start_offset(4, "a test moves it")
    assert not log.maybe_increment_log_start_offset(3, "never down")
    assert (log.log_start_offset, log.local_log_start_offset) == (4, 0)
    manager.shutdown()

    assert read_checkpoint(dirs[0] / "log-start-offset-checkpoint") == {("orders", 0): 4}
    reopened = start(dirs, clock).get("orders", 0)
    assert (reopened.log_start_offset, reopened.local_log_start_offset) == (4, 0)


def test_a_checkpointed_log_start_below_the_local_one_holds_only_with_remote_storage(dirs, clock):
    configs = {"local": LogConfig(), "tiered": LogConfig(remote_storage_enable=True)}
    manager = LogManager(dirs, broker_config(), clock=clock, topic_configs=configs)
    manager.startup()
    for topic in configs:
        manager.get_or_create(topic, 0).truncate_fully_and_start_at(50)
    manager.shutdown()
    for directory in dirs:  # as a broker whose older data is in a remote tier leaves it
        write_checkpoint(
            directory / "log-start-offset-checkpoint", {("local", 0): 0, ("tiered", 0): 0}
        )

    again = LogManager(dirs, broker_config(), clock=clock, topic_configs=configs)
    again.startup()
    assert again.get("local", 0).log_start_offset == 50
    assert (
        again.get("tiered", 0).log_start_offset,
        again.get("tiered", 0).local_log_start_offset,
    ) == (0, 50)


def test_an_unchanged_checkpoint_is_not_written_again(dirs, clock):
    manager = start(dirs, clock)
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    log.high_watermark = 2
    path = dirs[0] / "replication-offset-checkpoint"
    manager.checkpoint_high_watermarks()
    written = path.stat().st_ino  # each write replaces the file: a new inode

    manager.checkpoint_high_watermarks()  # nothing moved: the file stays as it is
    assert path.stat().st_ino == written

    log.high_watermark = 3
    manager.checkpoint_high_watermarks()
    assert path.stat().st_ino != written
    assert read_checkpoint(path) == {("orders", 0): 3}


def test_the_scheduled_checkpoints_are_written_off_the_scheduler_thread(dirs, clock):
    """The scheduler runs on the event loop; a checkpoint write creates a file and fsyncs it,
    which can wait on the disk for hundreds of milliseconds. Here the high watermark
    checkpoint's new file is a FIFO, so its writer blocks until the test reads it."""
    manager = start(dirs, clock, **{"replica.high.watermark.checkpoint.interval.ms": "1000"})
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    log.high_watermark = 2
    blocking = dirs[0] / "replication-offset-checkpoint.tmp"
    os.mkfifo(blocking)
    clock.advance(1000)

    scheduler = threading.Thread(target=manager.scheduler.run_due, daemon=True)
    scheduler.start()
    scheduler.join(5)
    blocked = scheduler.is_alive()
    with open(blocking) as reader:  # lets the writer go on, wherever it runs
        written = reader.read()
    scheduler.join(5)

    assert not blocked, "the scheduler's thread waited for the checkpoint file to be written"
    assert written == "0\n1\norders 0 2\n"
    blocking.unlink()  # fsync of a FIFO failed (logged): the next run writes the file
    clock.advance(1000)
    manager.scheduler.run_due()
    manager.wait_for_background_work()
    assert read_checkpoint(dirs[0] / "replication-offset-checkpoint") == {("orders", 0): 2}


def test_logs_opened_off_the_loop_are_spread_and_a_second_opening_gives_way(dirs, clock):
    manager = start(dirs, clock)
    placed = manager.place([("t", 0), ("t", 1), ("t", 2)])
    assert [directory for _, directory in placed] == [dirs[0], dirs[1], dirs[0]]
    for key, directory in placed:
        manager.add_new(key, directory, manager.open_new(key, directory))

    kept = manager.get("t", 0)
    late = manager.open_new(("t", 0), dirs[0])  # opened twice: the registered one stays
    assert manager.add_new(("t", 0), dirs[0], late) is kept
    kept.append_as_leader(message_set(3, timestamp=clock.milliseconds()))
    assert kept.log_end_offset == 3
    assert kept.read(0, 10_000).slice.length > 0
