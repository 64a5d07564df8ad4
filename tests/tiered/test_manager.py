"""The remote log manager over a real file:// tier: copies, crashes between its steps,
remote reads, timestamp search, retention, followers building their indexes from the tier;
on formats v0 and v1, and v2 (record batches: an entry's offset field is its first offset, a
read from inside a batch returns the batch)."""

from __future__ import annotations

import asyncio
import itertools
import struct
import time
from pathlib import Path

import pytest

from tests.conftest import message_set
from tests.tiered.remote_format import parse_pairs, parse_remote_log_index
from tidelog.config import BROKER_KEYS, parse_config
from tidelog.log.checkpoint import TopicPartition
from tidelog.log.config import LogConfig
from tidelog.log.manager import LogManager
from tidelog.log.producer_state import decode_snapshot
from tidelog.records.format import Codec, iter_deep
from tidelog.records.record_batch import BatchRecordInput, encode_batch
from tidelog.tiered.manager import (
    COPY_STEPS,
    DELETE_STEPS,
    CopyInterrupted,
    RemoteLogManager,
    task_phase,
)
from tidelog.tiered.metadata import SegmentState
from tidelog.tiered.storage import IndexType, RemoteStorageManager

TOPIC = "t"
KEY = (TOPIC, 0)


def remote_config(**overrides) -> LogConfig:
    values = dict(
        remote_storage_enable=True,
        segment_bytes=4000,
        remote_log_index_interval_bytes=1000,
        local_retention_ms=60_000,
        retention_ms=10**9,
    )
    values.update(overrides)
    return LogConfig(**values)


class Broker:
    """A LogManager and a RemoteLogManager over one log dir and a shared tier."""

    def __init__(self, directory: Path, tier: Path, clock, config: LogConfig, epoch=0) -> None:
        self.logs = LogManager(
            [directory], parse_config({}, BROKER_KEYS), clock=clock, topic_configs={TOPIC: config}
        )
        self.logs.startup()
        self.log = self.logs.get_or_create(*KEY)
        self.epoch = epoch
        self.remote = RemoteLogManager(
            self.logs,
            RemoteStorageManager(f"file://{tier}"),
            clock,
            leader_epoch_of=lambda *_: self.epoch,
        )

    def fill(
        self, clock, batches: int, codec: Codec = Codec.NONE, magic: int | None = None
    ) -> None:
        magic = self.log.config.magic if magic is None else magic
        for _ in range(batches):
            clock.advance(10)
            now = clock.milliseconds()
            if magic == 2:  # records 1 ms apart, with a header
                data = encode_batch(
                    [
                        BatchRecordInput(b"key", b"%03d" % n * 30, now + n, (("n", b"%d" % n),))
                        for n in range(5)
                    ],
                    codec=codec,
                )
            else:
                data = message_set(5, codec=codec, magic=magic, timestamp=now)
            self.log.append_as_leader(data, leader_epoch=max(self.epoch, 0))
        self.log.high_watermark = self.log.log_end_offset

    def close(self) -> None:
        self.remote.shutdown()
        self.logs.shutdown()


@pytest.fixture
def tier(tmp_path):
    return tmp_path / "remote"


FORMATS = {0: "0.9.0", 1: "0.10.0", 2: "2.1"}


@pytest.fixture
def leader(request, tmp_path, tier, clock):
    """A leader of format v1, or of the format ``indirect`` parametrization names."""
    magic = getattr(request, "param", 1)
    config = remote_config(message_format_version=FORMATS[magic])
    broker = Broker(tmp_path / "leader", tier, clock, config)
    yield broker
    broker.close()


def remote_files(tier: Path, suffix: str) -> list[Path]:
    return sorted((tier / "t-0").glob(f"*{suffix}"))


@pytest.mark.parametrize("leader", [1, 2], indirect=True)
def test_rolled_segments_below_the_high_watermark_are_copied_with_indexes(leader, tier, clock):
    leader.fill(clock, 40)
    active = leader.log.active_segment
    leader.log.high_watermark = leader.log.segments[-2].base_offset  # the last rolled one is above
    leader.remote.run_task_now(KEY)

    listed = leader.remote.metadata.list_segments(*KEY)
    assert listed and all(m.state is SegmentState.COPY_SEGMENT_FINISHED for m in listed)
    rolled = [s for s in leader.log.segments if s is not active]
    assert [m.start_offset for m in listed] == [s.base_offset for s in rolled[:-1]]
    assert len(remote_files(tier, ".log")) == len(listed)
    for suffix in (".index", ".timeindex", ".leader-epoch-checkpoint", ".remoteLogIndex"):
        assert len(remote_files(tier, suffix)) == len(listed)
    assert leader.log.highest_offset_in_remote_storage == listed[-1].end_offset


@pytest.mark.parametrize("leader", [1, 2], indirect=True)
def test_remote_index_files_follow_the_issue_format_and_point_at_the_right_messages(
    leader, tier, clock
):
    leader.fill(clock, 40)
    leader.remote.run_task_now(KEY)

    directory = leader.log.directory
    [log_index] = sorted(directory.glob("*.remoteLogIndex"))
    entries = parse_remote_log_index(log_index.read_bytes())
    segments = leader.remote.metadata.finished(*KEY)
    assert len(entries) > len(segments)  # several entries per remote segment
    assert int(log_index.name.split(".")[0]) == entries[0].first_offset == 0
    expected_next = 0
    for entry in entries:
        assert entry.first_offset == expected_next
        expected_next = entry.last_offset + 1
        data = Path(entry.uri.removeprefix("file://")).read_bytes()
        messages = list(iter_deep(data[entry.position : entry.position + entry.data_length]))
        assert messages[0].offset == entry.first_offset
        assert messages[-1].offset == entry.last_offset
        assert entry.last_timestamp == max(m.timestamp for m in messages)
    assert expected_next == segments[-1].end_offset + 1

    base = entries[0].first_offset
    offsets = parse_pairs(log_index.with_suffix(".remoteOffsetIndex").read_bytes(), ">ii")
    times = parse_pairs(log_index.with_suffix(".remoteTimeIndex").read_bytes(), ">qi")
    position = 0
    for entry, (relative, entry_position), (largest, time_relative) in zip(
        entries, offsets, times, strict=True
    ):
        assert (base + relative, base + time_relative) == (entry.first_offset,) * 2
        assert entry_position == position
        assert largest == max(
            e.last_timestamp for e in entries if e.first_offset <= entry.first_offset
        )
        position += 4 + int.from_bytes(log_index.read_bytes()[position + 2 : position + 4], "big")


@pytest.mark.parametrize("magic", [1, 2])
@pytest.mark.parametrize("step", COPY_STEPS)
def test_a_crash_at_any_step_of_a_copy_loses_nothing_and_copies_nothing_twice(
    tmp_path, tier, clock, step, magic
):
    config = remote_config(message_format_version=FORMATS[magic])
    broker = Broker(tmp_path / "leader", tier, clock, config, epoch=1)
    broker.fill(clock, 30)

    def crash(at: str, _segment) -> None:
        if at == step:
            raise CopyInterrupted(at)

    broker.remote.crash_at = crash
    with pytest.raises(CopyInterrupted):
        broker.remote.run_task_now(KEY)
    visible = broker.remote.metadata.finished(*KEY)
    assert len(visible) == (1 if step in ("finished", "indexed") else 0)
    broker.close()  # the process dies; a new leader (a later epoch) takes over on the same disk

    again = Broker(tmp_path / "leader", tier, clock, config, epoch=2)
    try:
        again.remote.run_task_now(KEY)
        listed = again.remote.metadata.list_segments(*KEY)
        assert all(m.state is SegmentState.COPY_SEGMENT_FINISHED for m in listed)
        assert len(remote_files(tier, ".log")) == len(listed)  # the orphan's objects are gone
        assert len(remote_files(tier, ".snapshot")) == len(listed)  # each with its snapshot
        assert all(m.producer_snapshot for m in listed)
        starts_and_ends = [(m.start_offset, m.end_offset) for m in listed]
        for (_, end), (start, _) in itertools.pairwise(starts_and_ends):
            assert start == end + 1  # contiguous: nothing twice, nothing missing
        [index_file] = sorted(again.log.directory.glob("*.remoteLogIndex"))
        entries = parse_remote_log_index(index_file.read_bytes())
        assert [e.first_offset for e in entries] == sorted({e.first_offset for e in entries})
        assert entries[-1].last_offset == listed[-1].end_offset
    finally:
        again.close()


def remote_messages(broker: Broker, below: int) -> dict[int, int]:
    """offset -> timestamp of every message below ``below``, read through the tier."""
    found, offset = {}, broker.log.log_start_offset
    while offset < below:
        data = asyncio.run(broker.remote.read(KEY, broker.log, offset, 10**6, True))
        batch = {m.offset: m.timestamp for m in iter_deep(data) if m.offset >= offset}
        found.update(batch)
        offset = max(batch) + 1
    return found


@pytest.mark.parametrize(
    ("magic", "codec"),
    [
        (0, Codec.NONE),
        (1, Codec.NONE),
        (0, Codec.GZIP),
        (1, Codec.SNAPPY),
        (2, Codec.NONE),
        (2, Codec.ZSTD),
    ],
)
def test_data_deleted_locally_is_read_back_from_the_tier(tmp_path, tier, clock, magic, codec):
    config = remote_config(
        message_format_version=FORMATS[magic],
        local_retention_ms=-1,
        local_retention_bytes=0,  # by size: v0 segments carry no timestamps
    )
    broker = Broker(tmp_path / "leader", tier, clock, config)
    try:
        broker.fill(clock, 40, codec=codec, magic=magic)
        broker.remote.run_task_now(KEY)
        clock.advance(120_000)
        assert broker.log.delete_old_segments() > 0
        local_start = broker.log.local_log_start_offset
        assert broker.log.log_start_offset == 0 < local_start

        assert list(remote_messages(broker, local_start)) == list(range(local_start))
        for offset in range(local_start):  # a read from inside a batch or wrapper holds it
            data = asyncio.run(broker.remote.read(KEY, broker.log, offset, 1, True))
            assert offset in {m.offset for m in iter_deep(data)}, offset
        if magic == 2:
            [first] = [m for m in iter_deep(data) if m.offset == local_start - 1]
            assert first.headers == (("n", b"4"),)
        with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE|outside"):
            broker.log.read(0, 1000)
    finally:
        broker.close()


@pytest.mark.parametrize("leader", [1, 2], indirect=True)
def test_timestamp_search_covers_the_remote_part(leader, clock):
    leader.fill(clock, 40)
    leader.remote.run_task_now(KEY)
    clock.advance(120_000)
    leader.log.delete_old_segments()
    local_start = leader.log.local_log_start_offset
    timestamps = remote_messages(leader, local_start)
    for target in sorted(set(timestamps.values()))[::3]:
        expected = min(o for o, t in timestamps.items() if t >= target)  # brute force
        found = asyncio.run(leader.remote.offset_for_timestamp(KEY, leader.log, target))
        assert found is not None and found.offset == expected


def test_a_minute_time_index_goes_to_the_tier_as_it_is_and_searches_there_agree(
    tmp_path, tier, clock
):
    config = remote_config(timeindex_granularity="minute", index_interval_bytes=0)
    broker = Broker(tmp_path / "leader", tier, clock, config)
    try:
        for _ in range(40):
            clock.advance(20_000)  # a segment of 5 batches spans about two minutes
            broker.log.append_as_leader(message_set(5, timestamp=clock.milliseconds()))
        broker.log.high_watermark = broker.log.log_end_offset
        local = [s.time_index.path.read_bytes() for s in broker.log.segments[:-1]]
        broker.remote.run_task_now(KEY)
        copied = [path.read_bytes() for path in remote_files(tier, ".timeindex")]
        clock.advance(120_000)
        broker.log.delete_old_segments()

        assert copied and all(data in local for data in copied)
        for data in copied:
            entries = list(struct.iter_unpack(">qi", data))[:-1]  # all but the roll's entry
            minutes = [timestamp // 60_000 for timestamp, _ in entries]
            assert minutes == sorted(set(minutes)), entries
        local_start = broker.log.local_log_start_offset
        timestamps = remote_messages(broker, local_start)
        assert len(timestamps) > 50
        for target in sorted(set(timestamps.values()))[::2]:
            expected = min(o for o, t in timestamps.items() if t >= target)  # brute force
            found = asyncio.run(broker.remote.offset_for_timestamp(KEY, broker.log, target))
            assert found is not None and found.offset == expected
    finally:
        broker.close()


@pytest.mark.parametrize("magic", [1, 2])
def test_total_retention_deletes_remote_segments_and_their_index_files(
    tmp_path, tier, clock, magic
):
    config = remote_config(retention_ms=300_000, message_format_version=FORMATS[magic])
    broker = Broker(tmp_path / "leader", tier, clock, config)
    try:
        broker.fill(clock, 40)
        broker.remote.run_task_now(KEY)
        copied = len(broker.remote.metadata.finished(*KEY))
        clock.advance(120_000)
        broker.log.delete_old_segments()
        broker.fill(clock, 20)
        clock.advance(300_000 - 1000)
        broker.remote.run_task_now(KEY)

        left = broker.remote.metadata.finished(*KEY)
        assert 0 < len(left) < copied + 2
        assert len(remote_files(tier, ".log")) == len(left)
        assert broker.log.log_start_offset == left[0].start_offset
        for index_file in broker.log.directory.glob("*.remoteLogIndex"):
            entries = parse_remote_log_index(index_file.read_bytes())
            assert entries[-1].last_offset >= broker.log.log_start_offset
    finally:
        broker.close()


@pytest.mark.parametrize("leader", [1, 2], indirect=True)
def test_a_follower_builds_its_remote_indexes_from_the_tier(leader, tmp_path, tier, clock):
    leader.fill(clock, 40)
    leader.remote.run_task_now(KEY)
    follower = Broker(tmp_path / "follower", tier, clock, leader.log.config, epoch=None)
    try:
        follower.remote.run_task_now(KEY)
        mine = sorted(follower.log.directory.glob("*.remoteLogIndex"))
        theirs = sorted(leader.log.directory.glob("*.remoteLogIndex"))
        assert [p.read_bytes() for p in mine] == [p.read_bytes() for p in theirs]
        assert (
            follower.log.highest_offset_in_remote_storage
            == leader.log.highest_offset_in_remote_storage
        )
        assert follower.remote.metadata.list_segments(*KEY) != []
    finally:
        follower.close()


@pytest.mark.parametrize("magic", [1, 2])
def test_a_rebuilt_broker_serves_the_remote_part_before_its_first_task(
    tmp_path, tier, clock, magic
):
    config = remote_config(
        local_retention_ms=-1, local_retention_bytes=0, message_format_version=FORMATS[magic]
    )
    leader = Broker(tmp_path / "leader", tier, clock, config)
    rebuilt = Broker(tmp_path / "rebuilt", tier, clock, config, epoch=None)
    try:
        leader.fill(clock, 40)
        leader.remote.run_task_now(KEY)
        leader.log.delete_old_segments()
        local_start = leader.log.local_log_start_offset
        expected = remote_messages(leader, local_start)
        # as a wiped follower does: start at the leader's local log start, no task run yet
        rebuilt.log.truncate_fully_and_start_at(local_start, log_start_offset=0)
        assert not list(rebuilt.log.directory.glob("*.remoteLogIndex"))

        assert remote_messages(rebuilt, local_start) == expected
        timestamps = sorted(set(expected.values()))
        target = timestamps[len(timestamps) // 3]
        found = asyncio.run(rebuilt.remote.offset_for_timestamp(KEY, rebuilt.log, target))
        assert found is not None
        assert found.offset == min(o for o, t in expected.items() if t >= target)
    finally:
        rebuilt.close()
        leader.close()


def run_scheduled_task(broker: Broker) -> None:
    """One task as the scheduler starts it, on the copy pool; returns when it is done."""
    assert broker.remote.run_tasks() == 1
    deadline = time.monotonic() + 10
    while KEY in broker.remote._running:
        assert time.monotonic() < deadline, "the task did not end in 10 s"
        time.sleep(0.005)


class Partitions:
    """40 remote-enabled partitions, their manager's tasks started by the log manager's
    scheduler on a manual clock, each task run as it is handed to the copy pool."""

    def __init__(self, directory: Path, tier: Path, clock) -> None:
        self.clock = clock
        self.logs = LogManager(
            [directory],
            parse_config({}, BROKER_KEYS),
            clock=clock,
            topic_configs={TOPIC: remote_config()},
        )
        self.keys = [(TOPIC, p) for p in range(40)]
        for key in self.keys:
            self.logs.get_or_create(*key)
        self.remote = RemoteLogManager(
            self.logs, RemoteStorageManager(f"file://{tier}"), clock,
            leader_epoch_of=lambda *_: 0, task_interval_ms=1000,
        )  # fmt: skip
        self.handed: list[list[str]] = []
        self.remote.copier.submit = lambda work, what="": (self.handed[-1].append(what), work())
        self.remote.startup()

    def tick(self, ms: int) -> list[str]:
        """Moves the clock, runs what is due; the tasks handed out meanwhile."""
        self.handed.append([])
        self.clock.advance(ms)
        self.logs.scheduler.run_due()
        return self.handed[-1]

    def ticks_of(self, key: TopicPartition) -> list[int]:
        name = f"remote log task of {key[0]}-{key[1]}"
        return [tick for tick, names in enumerate(self.handed) if name in names]

    def close(self) -> None:
        self.remote.shutdown()
        self.logs.shutdown()


@pytest.fixture
def partitions(tmp_path, tier, clock):
    partitions = Partitions(tmp_path / "logs", tier, clock)
    yield partitions
    partitions.close()


def test_each_partition_gets_one_task_an_interval_a_tenth_of_them_at_a_time(partitions):
    assert partitions.tick(5000) == []  # the scheduler's first call, however late: ticks begin
    for _ in range(20):  # two intervals
        assert len(partitions.tick(100)) == 4

    for key in partitions.keys:
        first, second = partitions.ticks_of(key)
        assert second - first == 10


def test_a_late_tick_starts_the_tasks_of_the_ticks_it_missed_once(partitions):
    partitions.tick(100)  # the ticks begin
    assert len(partitions.tick(350)) == 12  # the 3 ticks that came due since the last call
    assert len(partitions.tick(100)) == 4
    late = partitions.tick(2000)  # more than an interval late: all but the next tick's
    assert len(late) == len(set(late)) == 36
    assert len(partitions.tick(100)) == 4  # the tick after it: the rest, and none again

    for key in partitions.keys:  # in ticks 0-3 if its phase is one of theirs, then once more
        assert len(partitions.ticks_of(key)) == (2 if task_phase(key) <= 3 else 1)


def test_frequent_tasks_list_the_tier_every_few_tasks_and_see_their_own_copies_between(
    leader, tmp_path, tier, clock
):
    follower = Broker(tmp_path / "follower", tier, clock, remote_config(), epoch=None)
    listings = {"leader": 0, "follower": 0}
    for name, broker in (("leader", leader), ("follower", follower)):
        original = broker.remote.metadata._list

        def counted(*args, name=name, original=original):
            listings[name] += 1
            return original(*args)

        broker.remote.metadata._list = counted
    interval = leader.remote.listing_interval_ms
    try:
        for _ in range(3):
            leader.fill(clock, 15)
            for broker in (leader, follower):
                run_scheduled_task(broker)
            clock.advance(interval // 4)
        assert listings == {"leader": 1, "follower": 1}
        copied = leader.remote.metadata.list_segments(*KEY, afresh=False)
        assert len(copied) == len(leader.remote.metadata.list_segments(*KEY)) > 1
        assert leader.log.highest_offset_in_remote_storage == copied[-1].end_offset

        clock.advance(interval)
        run_scheduled_task(follower)
        assert listings["follower"] == 2
        assert follower.log.highest_offset_in_remote_storage == copied[-1].end_offset
    finally:
        follower.close()


@pytest.mark.parametrize("magic", [1, 2])
def test_a_lost_log_start_checkpoint_is_restored_from_the_tier(tmp_path, tier, clock, magic):
    config = remote_config(
        local_retention_ms=-1, local_retention_bytes=0, message_format_version=FORMATS[magic]
    )
    broker = Broker(tmp_path / "leader", tier, clock, config)
    broker.fill(clock, 40)
    broker.remote.run_task_now(KEY)
    broker.log.delete_old_segments()
    local_start = broker.log.local_log_start_offset
    broker.close()
    (tmp_path / "leader" / "log-start-offset-checkpoint").unlink()  # as after a crash

    again = Broker(tmp_path / "leader", tier, clock, config)
    try:
        assert again.log.log_start_offset == local_start > 0
        again.remote.run_task_now(KEY)
        assert again.log.log_start_offset == 0
        assert list(remote_messages(again, local_start)) == list(range(local_start))
    finally:
        again.close()


def test_a_tier_that_is_away_is_not_taken_for_an_empty_one(leader, tier, clock):
    leader.fill(clock, 40)
    leader.remote.run_task_now(KEY)
    leader.log.delete_old_segments()
    start, local_start = leader.log.log_start_offset, leader.log.local_log_start_offset
    hidden = tier.with_name("remote-away")
    tier.rename(hidden)
    try:
        leader.remote.run_task_now(KEY)  # fails to reach the tier; changes nothing
        assert (leader.log.log_start_offset, leader.log.local_log_start_offset) == (
            start,
            local_start,
        )
        assert leader.remote.stats.copy_errors == 1
    finally:
        hidden.rename(tier)


def test_retention_of_every_remote_segment_empties_the_remote_indexes(tmp_path, tier, clock):
    broker = Broker(tmp_path / "leader", tier, clock, remote_config(retention_ms=60_000))
    try:
        broker.fill(clock, 40)
        broker.remote.run_task_now(KEY)
        clock.advance(120_000)
        broker.log.delete_old_segments()
        broker.remote.run_task_now(KEY)
        assert broker.remote.metadata.finished(*KEY) == []
        assert list(broker.log.directory.glob("*.remoteLogIndex")) == []
        assert broker.log.log_start_offset == broker.log.local_log_start_offset
    finally:
        broker.close()


@pytest.mark.parametrize("magic", [1, 2])
@pytest.mark.parametrize("step", DELETE_STEPS)
def test_a_crash_at_any_step_of_a_remote_deletion_leaves_a_consistent_tier(
    tmp_path, tier, clock, step, magic
):
    config = remote_config(
        retention_bytes=20_000,
        local_retention_ms=-1,
        local_retention_bytes=0,
        message_format_version=FORMATS[magic],
    )
    broker = Broker(tmp_path / "leader", tier, clock, config, epoch=1)
    broker.fill(clock, 40)

    def crash(at: str, _segment) -> None:
        if at == step:
            raise CopyInterrupted(at)

    broker.remote.crash_at = crash
    with pytest.raises(CopyInterrupted):  # copies, then retention.bytes deletes the oldest
        broker.remote.run_task_now(KEY)
    broker.close()

    again = Broker(tmp_path / "leader", tier, clock, config, epoch=2)
    try:
        again.remote.run_task_now(KEY)
        again.log.delete_old_segments()
        listed = again.remote.metadata.list_segments(*KEY)
        assert listed and all(m.state is SegmentState.COPY_SEGMENT_FINISHED for m in listed)
        assert len(remote_files(tier, ".log")) == len(listed)
        assert again.log.log_start_offset == listed[0].start_offset > 0
        local_start = again.log.local_log_start_offset
        assert local_start > again.log.log_start_offset
        assert list(remote_messages(again, local_start)) == list(
            range(again.log.log_start_offset, local_start)
        )
    finally:
        again.close()


def idempotent_batches(broker: Broker, clock, producer_id: int, count: int) -> list[int]:
    """``count`` batches of 5 records from ``producer_id`` (epoch 0) appended by the leader;
    the first offset of each."""
    firsts = []
    for number in range(count):
        clock.advance(10)
        data = encode_batch(
            [BatchRecordInput(b"key", b"%03d" % n * 30, clock.milliseconds()) for n in range(5)],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=5 * number,
        )
        firsts.append(broker.log.append_as_leader(data, leader_epoch=0).first_offset)
    broker.log.high_watermark = broker.log.log_end_offset
    return firsts


def test_each_segment_goes_to_the_tier_with_the_producer_snapshot_at_its_end(tmp_path, tier, clock):
    broker = Broker(tmp_path / "leader", tier, clock, remote_config(message_format_version="2.1"))
    try:
        idempotent_batches(broker, clock, 7, 40)
        rolled = len(broker.log.segments) - 1
        broker.remote.run_task_now(KEY)

        listed = broker.remote.metadata.finished(*KEY)
        assert len(listed) == rolled > 3 and all(m.producer_snapshot for m in listed)
        for metadata in listed:
            copied = broker.remote.storage.fetch_index(
                metadata.segment_id, IndexType.PRODUCER_SNAPSHOT
            )
            [entry] = decode_snapshot(copied)  # the producer's last batch below the segment end
            assert entry.producer_id == 7 and entry.last_offset == metadata.end_offset
            assert copied == broker.log.producer_snapshot_at(metadata.end_offset + 1)
    finally:
        broker.close()


def test_snapshots_of_segments_not_yet_in_the_tier_are_kept_until_copied(tmp_path, tier, clock):
    """A roll keeps only the last two snapshots of a local log; a remote-enabled one keeps
    those its copies will need, from the first segment not yet copied."""
    broker = Broker(tmp_path / "leader", tier, clock, remote_config(message_format_version="2.1"))
    try:
        idempotent_batches(broker, clock, 40, 40)
        ends = [segment.next_offset for segment in broker.log.segments][:-1]
        assert len(ends) > 3
        snapshots = [offset for offset, _ in broker.log.producer_state.snapshot_files()]
        assert set(ends) <= set(snapshots)
        broker.remote.run_task_now(KEY)
        assert len(remote_files(tier, ".snapshot")) == len(ends)
    finally:
        broker.close()


def test_a_follower_started_at_the_local_log_start_takes_the_producer_state_from_the_tier(
    tmp_path, tier, clock
):
    config = remote_config(
        message_format_version="2.1", local_retention_ms=-1, local_retention_bytes=0
    )
    leader = Broker(tmp_path / "leader", tier, clock, config)
    follower = Broker(tmp_path / "follower", tier, clock, config, epoch=None)
    try:
        firsts = idempotent_batches(leader, clock, 7, 30)
        leader.remote.run_task_now(KEY)
        leader.log.delete_old_segments()
        local_start = leader.log.local_log_start_offset
        last_remote = max(first for first in firsts if first < local_start)

        # what the replica fetcher does for a follower behind the leader's local log start
        follower.log.truncate_fully_and_start_at(local_start, log_start_offset=0)
        asyncio.run(follower.remote.build_aux_state(KEY, follower.log))

        assert len(leader.remote.metadata.finished(*KEY)) > 3
        assert follower.remote.metadata.objects_read == 1  # the segment below, no other
        [entry] = follower.log.producer_state.producers.values()
        assert (entry.producer_id, entry.last_offset) == (7, last_remote + 4)
        # leading now: the producer's retry of that batch is answered as a duplicate
        sequence = 5 * firsts.index(last_remote)
        retry = encode_batch(
            [BatchRecordInput(b"key", b"x", clock.milliseconds()) for _ in range(5)],
            producer_id=7,
            producer_epoch=0,
            base_sequence=sequence,
        )
        assert follower.log.append_as_leader(retry, leader_epoch=1).first_offset == last_remote
        assert follower.log.log_end_offset == local_start
    finally:
        follower.close()
        leader.close()


def test_a_segment_copied_before_producer_snapshots_leaves_the_follower_state_empty(
    tmp_path, tier, clock
):
    config = remote_config(
        message_format_version="2.1", local_retention_ms=-1, local_retention_bytes=0
    )
    leader = Broker(tmp_path / "leader", tier, clock, config)
    follower = Broker(tmp_path / "follower", tier, clock, config, epoch=None)
    try:
        idempotent_batches(leader, clock, 7, 30)
        for path in leader.log.directory.glob("*.snapshot"):  # as a release before them
            path.unlink()
        leader.remote.run_task_now(KEY)
        leader.log.delete_old_segments()
        assert not any(m.producer_snapshot for m in leader.remote.metadata.finished(*KEY))
        local_start = leader.log.local_log_start_offset

        follower.log.truncate_fully_and_start_at(local_start, log_start_offset=0)
        asyncio.run(follower.remote.build_aux_state(KEY, follower.log))

        assert follower.log.producer_state.producers == {}
        assert follower.log.log_end_offset == local_start
    finally:
        follower.close()
        leader.close()
