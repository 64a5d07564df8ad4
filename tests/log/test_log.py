"""A partition log: appends, reads, roll, retention, truncation and search by timestamp."""

from __future__ import annotations

import os
import random

import pytest

from tests.conftest import message_set, read_everything
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    iter_deep,
)

MESSAGE_BYTES = 12 + 22 + 3 + 100  # a v1 entry: header, fixed fields, a 3-byte key, 100-byte value


def offsets_in(data) -> list[int]:
    return [message.offset for message in iter_deep(data.slice.read())]


def fill(log, clock, batches: int, per_batch: int = 5, codec: Codec = Codec.NONE, step_ms=10):
    for _ in range(batches):
        clock.advance(step_ms)
        log.append_as_leader(message_set(per_batch, codec=codec, timestamp=clock.milliseconds()))


# -- appends and reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(MESSAGE_SET_CODECS))
def test_what_is_appended_is_read_back_from_any_offset(make_log, clock, codec):
    log = make_log(segment_bytes=600, index_interval_bytes=200)
    fill(log, clock, 20, codec=codec)

    assert log.log_end_offset == 100
    assert len(log.segments) > 3
    for start in (0, 1, 37, 58, 99):
        data = log.read(start, 10**6)
        assert offsets_in(data)[0] <= start
        assert start in offsets_in(data)
    assert [m.offset for m in read_everything(log)] == list(range(100))


def test_a_read_at_the_log_end_is_empty_and_beyond_it_out_of_range(make_log, clock):
    log = make_log()
    fill(log, clock, 2)

    assert log.read(10, 1000).slice.length == 0
    for offset in (11, -1):
        with pytest.raises(KafkaError) as raised:
            log.read(offset, 1000)
        assert raised.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_read_stops_below_max_offset(make_log, clock):
    log = make_log(index_interval_bytes=100)
    fill(log, clock, 4)

    assert offsets_in(log.read(3, 10**6, max_offset=12)) == list(range(3, 12))
    assert log.read(12, 10**6, max_offset=12).slice.length == 0


def test_max_bytes_may_cut_the_last_entry_but_min_one_message_returns_a_whole_first_one(
    make_log, clock
):
    log = make_log()
    fill(log, clock, 1)

    assert log.read(0, 200).slice.length == 200
    assert offsets_in(log.read(0, 200)) == [0]
    assert log.read(0, 50).slice.length == 50
    assert log.read(0, 50, min_one_message=True).slice.length == MESSAGE_BYTES


def test_a_follower_append_keeps_the_leaders_offsets_and_timestamps(make_log, clock):
    leader, follower = make_log("leader-0"), make_log("follower-0")
    fill(leader, clock, 3, codec=Codec.GZIP)
    fill(leader, clock, 3)
    fetched = leader.read(0, 10**6).slice.read()

    info = follower.append_as_follower(fetched)

    assert follower.log_end_offset == leader.log_end_offset == 30
    assert info.max_timestamp == leader.last_appended_timestamp
    assert follower.last_appended_timestamp == leader.last_appended_timestamp
    assert follower.read(0, 10**6).slice.read() == fetched


def test_a_follower_leaves_a_partial_last_entry_for_the_next_fetch(make_log, clock):
    leader, follower = make_log("leader-0"), make_log("follower-0")
    fill(leader, clock, 2)
    fetched = leader.read(0, 10**6).slice.read()

    follower.append_as_follower(fetched[:-30])
    assert follower.log_end_offset == 9
    follower.append_as_follower(leader.read(9, 10**6).slice.read())
    assert follower.log_end_offset == 10


def test_a_follower_refuses_offsets_below_its_log_end(make_log, clock):
    leader, follower = make_log("leader-0"), make_log("follower-0")
    fill(leader, clock, 2)
    follower.append_as_follower(leader.read(0, 10**6).slice.read())

    with pytest.raises(KafkaError, match="offset 0 at position 0 is below 10"):
        follower.append_as_follower(leader.read(0, 10**6).slice.read())


def test_log_append_time_never_goes_backwards_after_a_slower_clock(make_log, clock):
    log = make_log(message_timestamp_type="LogAppendTime")
    log.append_as_leader(message_set(1))
    first = log.last_appended_timestamp
    clock.now_ms -= 60_000  # this broker's clock is now a minute behind

    info = log.append_as_leader(message_set(1))

    assert info.log_append_time == first
    assert [m.timestamp for m in iter_deep(log.read(0, 10**6).slice.read())] == [first, first]


# -- indexes and roll ----------------------------------------------------------------------------


def test_an_index_entry_is_added_every_index_interval_bytes_but_never_for_the_first_batch(
    make_log, clock
):
    log = make_log(index_interval_bytes=4 * MESSAGE_BYTES)
    for _ in range(12):
        clock.advance(1)
        log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))

    segment = log.active_segment
    entries = [segment.index.entry_at(i) for i in range(segment.index.entries)]
    # An entry goes in before the batch that follows more than 4 entries' worth of bytes; the
    # time entry beside it carries the largest timestamp including that batch.
    assert entries == [(5, 5 * MESSAGE_BYTES), (10, 10 * MESSAGE_BYTES)]
    time_entries = [segment.time_index.entry_at(i) for i in range(segment.time_index.entries)]
    assert time_entries == [(clock.milliseconds() - 6, 5), (clock.milliseconds() - 1, 10)]


def test_a_new_segments_index_files_are_made_in_the_background_after_its_first_append(
    tmp_path, clock
):
    queued: list = []  # the log manager's background thread, run by hand
    config = LogConfig(index_interval_bytes=4 * MESSAGE_BYTES, segment_index_bytes=800)
    log = Log(tmp_path / "t-0", config, clock=clock, background=queued.append)
    segment = log.active_segment
    index_files = [segment.index.path, segment.time_index.path]
    log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    assert [path.exists() for path in index_files] == [False, False]

    while queued:
        queued.pop(0)()
    # made, empty: the first entry opens the file and gives it its slots
    assert [path.stat().st_size for path in index_files] == [0, 0]
    assert (segment.index.entries, segment.time_index.entries) == (0, 0)
    for _ in range(5):
        clock.advance(1)
        log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    assert segment.index.entry_at(0) == (5, 5 * MESSAGE_BYTES)
    assert [path.stat().st_size for path in index_files] == [800, 792]
    assert not queued  # only a segment's first append asks for its files


def test_index_files_asked_for_a_segment_truncated_or_rolled_meanwhile_stay_as_the_loop_left_them(
    tmp_path, clock
):
    queued: list = []
    config = LogConfig(index_interval_bytes=MESSAGE_BYTES - 1)  # an entry before each append
    log = Log(tmp_path / "t-0", config, clock=clock, background=queued.append)
    truncated = log.active_segment
    log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    log.truncate_fully_and_start_at(50)  # before the background ran: the segment is gone
    rolled = log.active_segment
    for _ in range(3):
        log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    log.roll("the test rolls")  # the roll trims the indexes to their entries

    while queued:
        queued.pop(0)()
    assert not truncated.index.path.exists() and not truncated.time_index.path.exists()
    assert rolled.index.entries == 2
    assert rolled.index.path.stat().st_size == 2 * 8
    assert sorted(path.name for path in log.directory.glob("*index")) == [
        "00000000000000000050.index",
        "00000000000000000050.timeindex",
    ]


def test_the_time_index_only_grows_when_the_largest_timestamp_grows(make_log, clock):
    log = make_log(index_interval_bytes=0)
    now = clock.milliseconds()
    for timestamp in [now, now + 50, now + 10, now + 20, now + 60]:
        log.append_as_leader(message_set(1, timestamp=timestamp))

    segment = log.active_segment
    time_entries = [segment.time_index.entry_at(i) for i in range(segment.time_index.entries)]
    # The first batch of a segment never gets an entry; the two growths after it do.
    assert time_entries == [(now + 50, 1), (now + 60, 4)]
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == (now + 60, 4)


def test_a_segment_rolls_before_it_would_exceed_segment_bytes(make_log, clock):
    log = make_log(segment_bytes=10 * MESSAGE_BYTES)
    fill(log, clock, 5, per_batch=3)

    assert [s.base_offset for s in log.segments] == [0, 9]
    assert all(s.size <= 10 * MESSAGE_BYTES for s in log.segments)


def test_a_batch_larger_than_segment_bytes_still_goes_into_a_fresh_segment(make_log, clock):
    log = make_log(segment_bytes=2 * MESSAGE_BYTES)
    fill(log, clock, 2, per_batch=5)

    assert [(s.base_offset, s.next_offset) for s in log.segments] == [(0, 5), (5, 10)]


def test_a_full_index_rolls_the_segment(make_log, clock):
    log = make_log(segment_index_bytes=24, index_interval_bytes=0)  # 3 offset entries, 2 time
    fill(log, clock, 6, per_batch=1)

    assert len(log.segments) > 1
    assert log.segments[0].index.entries <= 3


def test_an_offset_that_would_overflow_a_relative_offset_rolls_the_segment(make_log, clock):
    leader, follower = make_log("leader-0"), make_log("follower-0")
    leader.append_as_leader(message_set(1))
    follower.append_as_follower(leader.read(0, 10**6).slice.read())
    far = build_message_set([Record(b"k", b"v", clock.milliseconds())], magic=1, base_offset=2**31)

    follower.append_as_follower(far)

    assert [s.base_offset for s in follower.segments] == [0, 2**31]


def test_segment_ms_after_the_largest_timestamp_rolls_on_the_next_append(make_log, clock):
    log = make_log(segment_ms=60_000)
    fill(log, clock, 1)
    clock.advance(60_001)
    fill(log, clock, 1)

    assert [s.base_offset for s in log.segments] == [0, 5]


def test_an_idle_segment_rolls_without_any_append(make_log, clock):
    log = make_log(segment_ms=60_000)
    fill(log, clock, 1)

    assert not log.roll_if_idle()
    clock.advance(60_001)
    assert log.roll_if_idle()
    assert [s.base_offset for s in log.segments] == [0, 5]
    assert not log.roll_if_idle()  # the new segment is empty


def test_an_empty_segment_never_rolls(make_log, clock):
    log = make_log(segment_ms=1)
    clock.advance(10)

    assert not log.roll_if_idle()
    assert log.roll() is log.active_segment
    assert len(log.segments) == 1


def test_roll_writes_the_final_time_entry_and_trims_the_indexes(make_log, clock):
    log = make_log(index_interval_bytes=MESSAGE_BYTES)
    fill(log, clock, 3)
    largest = log.active_segment.max_timestamp

    old = log.segments[0]
    log.roll()

    assert old.time_index.last_entry == (largest, 15)
    assert old.index.path.stat().st_size == 8 * old.index.entries
    assert old.time_index.path.stat().st_size == 12 * old.time_index.entries
    assert log.recovery_point == 15


def test_roll_of_a_segment_without_timestamps_uses_its_modification_time(make_log, clock):
    log = make_log(message_format_version="0.9.0")
    log.append_as_leader(message_set(3, magic=0))
    old = log.segments[0]
    os.utime(old.log_path, ns=(1_600_000_000_000_000_000,) * 2)

    log.roll()

    assert old.time_index.last_entry == (1_600_000_000_000, 3)


def test_appends_and_rolls_of_a_reopened_log_read_nothing_from_its_files(
    make_log, clock, monkeypatch
):
    """Appending writes only: a disk whose reads fail (EIO) must not fail an append, which a
    broker would halt on, while Kafka, whose indexes are memory maps, reads nothing there. So
    the indexes' newest entries, which every index append and roll checks, are known from
    opening, not read on the first append after a restart."""
    fill(make_log(segment_bytes=2000, index_interval_bytes=200), clock, 12)
    log = make_log(segment_bytes=2000, index_interval_bytes=200, needs_recovery=False)
    assert log.active_segment.index.entries and log.active_segment.time_index.entries

    def failing_pread(fd: int, length: int, offset: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pread", failing_pread)
    rolls = len(log.segments)
    fill(log, clock, 12)

    assert len(log.segments) > rolls
    monkeypatch.undo()
    assert [m.offset for m in read_everything(log)] == list(range(120))


# -- retention -----------------------------------------------------------------------------------


def segments_of(log) -> list[int]:
    return [segment.base_offset for segment in log.segments]


def test_retention_by_time_deletes_segments_whose_last_time_entry_is_too_old(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, retention_ms=60_000)
    fill(log, clock, 3)  # segments [0, 5, 10], each one batch
    clock.advance(30_000)
    fill(log, clock, 1)  # segment 15
    log.high_watermark = log.log_end_offset
    clock.advance(30_000 - 10)

    deleted = log.delete_old_segments()

    # Segments 0 and 5 end before now - 60 s; segment 10's last entry is 10 ms younger.
    assert deleted == 2
    assert segments_of(log) == [10, 15]
    assert log.log_start_offset == 10


def test_local_retention_of_a_remote_enabled_log_deletes_only_what_is_remote(
    make_log, clock, caplog
):
    log = make_log(
        segment_bytes=5 * MESSAGE_BYTES,
        retention_ms=10**9,
        local_retention_ms=60_000,
        remote_storage_enable=True,
    )
    fill(log, clock, 4)  # segments [0, 5, 10, 15]
    log.high_watermark = log.log_end_offset
    clock.advance(120_000)
    log.highest_offset_in_remote_storage = 9  # segments 0 and 5 are in the tier

    assert log.delete_old_segments() == 2
    assert segments_of(log) == [10, 15]
    # The data stays readable through the tier: the log start does not move with local deletes.
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 10)
    assert "segment 10 is due for deletion by local.retention.ms 60000 but is kept" in caplog.text

    log.highest_offset_in_remote_storage = 19  # the active segment itself is never shipped
    assert log.delete_old_segments() == 1
    assert segments_of(log) == [15]


def test_retention_stops_at_a_segment_with_a_future_timestamp(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, retention_ms=60_000)
    now = clock.milliseconds()
    for timestamp in [now, now + 10**9, now, now]:  # segment 5 claims a time far ahead
        log.append_as_leader(message_set(5, timestamp=timestamp))
    log.high_watermark = log.log_end_offset
    clock.advance(120_000)

    assert log.delete_old_segments() == 1
    assert segments_of(log) == [5, 10, 15]


def test_retention_by_size_deletes_the_oldest_segments_beyond_retention_bytes(make_log, clock):
    segment_size = 5 * MESSAGE_BYTES
    log = make_log(segment_bytes=segment_size, retention_bytes=2 * segment_size + 1)
    fill(log, clock, 5)
    log.high_watermark = log.log_end_offset

    assert log.delete_old_segments() == 2
    assert segments_of(log) == [10, 15, 20]


def descriptors_of(path) -> int:
    """How many of this process's descriptors are open on ``path`` (deleted or not)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        count += target in (str(path), f"{path} (deleted)")
    return count


def slice_of_the_first_of_five_segments(make_log, clock):
    """A log of five one-segment-sized fills whose retention keeps two segments, and a fetch
    answer's slice read from its first segment: (log, that segment's path, the slice)."""
    segment_size = 5 * MESSAGE_BYTES
    log = make_log(segment_bytes=segment_size, retention_bytes=2 * segment_size + 1)
    fill(log, clock, 5)
    log.high_watermark = log.log_end_offset
    return log, log.segments[0].log_path, log.read(0, 10**6).slice


@pytest.mark.parametrize("deleted_by", ["retention", "truncation"])
def test_a_slice_read_before_its_segment_was_deleted_still_reads_whole(make_log, clock, deleted_by):
    """A fetch answer holds file slices until it is sent; a segment deleted meanwhile (local
    retention of a tiered topic deletes one every few seconds) must not close the descriptor
    under it: the leader closed a catching-up follower's connection over it."""
    log, first_path, first_slice = slice_of_the_first_of_five_segments(make_log, clock)
    expected = first_slice.read()

    if deleted_by == "retention":
        assert log.delete_old_segments() == 2
    else:
        log.truncate_fully_and_start_at(log.log_end_offset)

    assert not first_path.exists()
    assert first_slice.read() == expected
    assert [m.offset for m in iter_deep(expected)][:5] == [0, 1, 2, 3, 4]


def test_a_deleted_segments_descriptor_closes_with_its_last_slice(make_log, clock):
    log, first_path, first_slice = slice_of_the_first_of_five_segments(make_log, clock)
    assert log.delete_old_segments() == 2

    assert descriptors_of(first_path) == 1  # the slice's
    del first_slice
    assert descriptors_of(first_path) == 0


def test_retention_never_deletes_above_the_high_watermark(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, retention_ms=1000)
    fill(log, clock, 4)
    log.high_watermark = 9  # segment 5 holds 5..9: offset 9 is not yet committed
    clock.advance(10_000)

    assert log.delete_old_segments() == 1
    assert segments_of(log) == [5, 10, 15]


def test_retention_rolls_an_expired_active_segment_before_deleting_it(make_log, clock):
    log = make_log(retention_ms=1000)
    fill(log, clock, 2)
    log.high_watermark = log.log_end_offset
    clock.advance(10_000)

    assert log.delete_old_segments() == 1
    assert segments_of(log) == [10]
    assert log.active_segment.size == 0
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)


def test_a_compacted_topic_is_not_trimmed_by_retention(make_log, clock):
    log = make_log(retention_ms=1000, cleanup_policy=("compact",))
    fill(log, clock, 2)
    log.high_watermark = log.log_end_offset
    clock.advance(10_000)

    assert log.delete_old_segments() == 0


# -- truncation ----------------------------------------------------------------------------------


def test_truncation_inside_an_index_interval_cuts_log_and_both_indexes(make_log, clock):
    log = make_log(index_interval_bytes=2 * MESSAGE_BYTES)
    for _ in range(10):
        clock.advance(10)
        log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    segment = log.active_segment

    log.truncate_to(7)

    assert log.log_end_offset == 7
    assert segment.size == 7 * MESSAGE_BYTES
    assert all(segment.index.entry_at(i)[0] < 7 for i in range(segment.index.entries))
    assert all(segment.time_index.entry_at(i)[1] < 7 for i in range(segment.time_index.entries))
    assert segment.max_timestamp == clock.milliseconds() - 30  # reloaded: offset 6's time
    assert segment.offset_of_max_timestamp == 6
    log.append_as_leader(message_set(1, timestamp=clock.milliseconds()))
    assert offsets_in(log.read(0, 10**6)) == list(range(8))


def test_truncation_removes_later_segments_and_reopens_the_one_it_lands_in(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES)
    fill(log, clock, 4)

    log.truncate_to(7)

    assert segments_of(log) == [0, 5]
    assert log.log_end_offset == 7
    assert log.active_segment.index.max_entries > log.active_segment.index.entries
    fill(log, clock, 1)
    assert offsets_in(log.read(5, 10**6)) == [5, 6]
    assert offsets_in(log.read(7, 10**6)) == list(range(7, 12))


def test_truncation_into_a_compressed_wrapper_removes_the_whole_wrapper(make_log, clock):
    log = make_log()
    fill(log, clock, 2, codec=Codec.GZIP)  # wrappers 0..4 and 5..9

    log.truncate_to(7)

    assert log.log_end_offset == 5


def test_truncation_below_the_first_segment_empties_the_log_and_starts_it_there(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, retention_bytes=0)
    fill(log, clock, 4)
    log.high_watermark = log.log_end_offset
    log.delete_old_segments()
    assert log.log_start_offset == 20

    log.truncate_to(3)

    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (3, 3, 3)
    fill(log, clock, 1)
    assert offsets_in(log.read(3, 10**6)) == [3, 4, 5, 6, 7]


def test_truncation_of_an_empty_log_and_to_the_end_changes_nothing(make_log, clock):
    log = make_log()
    log.truncate_to(0)
    fill(log, clock, 1)
    log.truncate_to(5)

    assert log.log_end_offset == 5


def test_a_follower_truncated_into_the_offset_gap_after_a_rolled_segment_appends_and_rolls_again(
    make_log, clock
):
    # A compacted leader's batches skip offsets: the follower rolled when the batch at 15
    # followed offset 9, and segment 0 got its trimmed indexes and final time index entry
    # (-> 15). A truncation to 12 drops segment 15 and makes segment 0, whose last offset is 9,
    # the active one again: it must take appends and roll like any active segment.
    log = make_log(segment_bytes=10 * MESSAGE_BYTES, index_interval_bytes=MESSAGE_BYTES)
    for offset in [*range(10), 15, 16]:
        clock.advance(10)
        record = Record(b"key", b"A" * 100, clock.milliseconds())
        log.append_as_follower(build_message_set([record], magic=1, base_offset=offset))
    assert segments_of(log) == [0, 15]

    log.truncate_to(12)

    assert segments_of(log) == [0]
    assert log.log_end_offset == 10
    segment = log.active_segment
    assert all(segment.time_index.entry_at(i)[1] < 10 for i in range(segment.time_index.entries))
    assert not segment.indexes_full
    fill(log, clock, 4)  # 20 more: segment 0 fills and rolls
    assert segments_of(log) == [0, 10, 20]
    assert offsets_in(log.read(0, 10**6)) == list(range(10))
    assert [m.offset for m in read_everything(log)] == list(range(30))


# -- search by timestamp -------------------------------------------------------------------------


def brute_force_first_at_or_after(log, target):
    return next(
        ((m.timestamp, m.offset) for m in read_everything(log) if m.timestamp >= target), None
    )


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.SNAPPY])
def test_search_by_timestamp_agrees_with_a_brute_force_scan(make_log, clock, codec):
    log = make_log(segment_bytes=600, index_interval_bytes=200)
    chance = random.Random(7)
    base = clock.milliseconds()
    for _ in range(30):
        stamps = [base + chance.randrange(0, 10_000) for _ in range(3)]  # out of order
        log.append_as_leader(message_set(3, codec=codec, timestamp=lambda i, s=stamps: s[i]))
    assert len(log.segments) > 3

    for target in [base - 1, *(base + chance.randrange(0, 10_001) for _ in range(60))]:
        found = log.offset_for_timestamp(target)
        expected = brute_force_first_at_or_after(log, target)
        assert (found.timestamp, found.offset) == expected if expected else found is None


def test_search_for_latest_and_earliest(make_log, clock):
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, retention_bytes=0)
    fill(log, clock, 3)
    log.high_watermark = log.log_end_offset
    log.delete_old_segments()

    assert log.offset_for_timestamp(-1).offset == 15
    assert log.offset_for_timestamp(-2).offset == log.log_start_offset == 15


def test_search_past_every_timestamp_finds_nothing(make_log, clock):
    log = make_log()
    fill(log, clock, 2)

    assert log.offset_for_timestamp(clock.milliseconds() + 1) is None


def test_search_in_log_append_time_data_returns_the_first_message_of_a_wrapper(make_log, clock):
    log = make_log(message_timestamp_type="LogAppendTime")
    fill(log, clock, 3, codec=Codec.LZ4)

    found = log.offset_for_timestamp(clock.milliseconds() - 15)

    assert (found.offset, found.timestamp) == (5, clock.milliseconds() - 10)
    assert {m.timestamp_type for m in iter_deep(log.read(0, 10**6).slice.read())} == {
        TimestampType.LOG_APPEND_TIME
    }


# -- an empty log --------------------------------------------------------------------------------


def test_an_empty_log_reads_nothing_finds_nothing_and_survives_a_crash(make_log, clock):
    log = make_log()

    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0, 1000).slice.length == 0
    assert log.offset_for_timestamp(0) is None
    assert log.offset_for_timestamp(-1).offset == log.offset_for_timestamp(-2).offset == 0
    assert log.delete_old_segments() == 0
    for segment in log.segments:  # a crash before anything was written
        segment.close()

    reopened = make_log()
    assert reopened.log_end_offset == 0
    reopened.append_as_leader(message_set(2, timestamp=clock.milliseconds()))
    assert reopened.log_end_offset == 2


def test_flush_messages_flushes_once_that_many_messages_are_unflushed(make_log):
    log = make_log(flush_messages=10, segment_ms=2**62)  # no roll (that flushes too)
    log.append_as_leader(message_set(9))
    assert log.recovery_point == 0
    log.append_as_leader(message_set(1))
    assert log.recovery_point == log.log_end_offset == 10
