"""A log start moved into the middle of the log (DeleteRecords on a leader, or the leader's log
start on a follower): reads below it are out of range, retention deletes the segments wholly
below it and keeps the one it falls in, a truncation below it brings it down with the log end,
and a reopened log keeps it from its checkpoint."""

from __future__ import annotations

import pytest

from tests.conftest import message_set
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.log import Log

MESSAGE_BYTES = len(message_set(1))


def five_segments(make_log, clock, **config) -> Log:
    """25 messages in segments [0, 5, 10, 15, 20], all below the high watermark."""
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, **config)
    for _ in range(5):
        clock.advance(10)
        log.append_as_leader(message_set(5, timestamp=clock.milliseconds()))
    log.high_watermark = log.log_end_offset
    return log


def test_a_read_below_the_log_start_is_out_of_range_while_its_segment_is_still_there(
    make_log, clock
):
    log = five_segments(make_log, clock)
    assert log.maybe_increment_log_start_offset(12, "DeleteRecords")
    assert log.local_log_start_offset == 0  # nothing deleted yet
    with pytest.raises(KafkaError) as refused:
        log.read(11, 1 << 20)
    assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert log.read(12, 1 << 20).slice.length > 0


def test_retention_deletes_the_segments_wholly_below_the_log_start(make_log, clock):
    log = five_segments(make_log, clock)
    log.maybe_increment_log_start_offset(12, "DeleteRecords")

    assert log.delete_old_segments() == 2
    # segment 10 holds the log start: kept; the log start stays where it was put
    assert [s.base_offset for s in log.segments] == [10, 15, 20]
    assert (log.log_start_offset, log.local_log_start_offset) == (12, 10)


def test_a_compacted_log_keeps_its_segments(make_log, clock):
    log = five_segments(make_log, clock, cleanup_policy=("compact",))
    log.maybe_increment_log_start_offset(12, "the leader's log start")
    assert log.delete_old_segments() == 0


def test_the_log_start_never_goes_past_the_high_watermark(make_log, clock):
    log = five_segments(make_log, clock)
    log.high_watermark = 8
    log.maybe_increment_log_start_offset(20, "the leader's log start")
    assert log.log_start_offset == 8


def test_a_truncation_below_the_log_start_brings_it_down_to_the_log_end(make_log, clock):
    log = five_segments(make_log, clock)
    log.maybe_increment_log_start_offset(22, "the leader's log start")
    log.truncate_to(21)
    assert (log.log_start_offset, log.log_end_offset) == (21, 21)


def reopen(log: Log, tmp_path, clock, log_start_offset: int) -> Log:
    """The log closed and opened again, as a restart does with its checkpointed log start."""
    log.close()
    return Log(
        tmp_path / "t-0",
        LogConfig(segment_bytes=5 * MESSAGE_BYTES),
        clock=clock,
        log_start_offset=log_start_offset,
    )


def test_a_reopened_log_keeps_a_checkpointed_log_start_inside_a_segment(make_log, clock, tmp_path):
    log = five_segments(make_log, clock)
    log.maybe_increment_log_start_offset(12, "DeleteRecords")
    reopened = reopen(log, tmp_path, clock, log_start_offset=12)
    assert reopened.log_start_offset == 12


def five_segments_in_epochs(make_log, clock, **config) -> Log:
    """five_segments, each segment appended by a leader of a new epoch: epochs 0-4 start at
    offsets 0, 5, 10, 15, 20."""
    log = make_log(segment_bytes=5 * MESSAGE_BYTES, **config)
    for epoch in range(5):
        clock.advance(10)
        log.append_as_leader(message_set(5, timestamp=clock.milliseconds()), leader_epoch=epoch)
    log.high_watermark = log.log_end_offset
    return log


def test_the_leader_epochs_below_a_new_log_start_are_forgotten(make_log, clock, tmp_path):
    log = five_segments_in_epochs(make_log, clock)

    log.maybe_increment_log_start_offset(12, "DeleteRecords")

    # epoch 2 started at 10 and now starts at the log start; 0 and 1 wrote nothing that is left
    assert log.leader_epochs.entries == [(2, 12), (3, 15), (4, 20)]
    assert log.leader_epochs.end_offset_for(1, log.log_end_offset) == -1
    assert log.leader_epochs.end_offset_for(2, log.log_end_offset) == 15
    reopened = reopen(log, tmp_path, clock, log_start_offset=12)
    assert reopened.leader_epochs.entries == [(2, 12), (3, 15), (4, 20)]


def test_retention_forgets_the_epochs_of_the_segments_it_deletes(make_log, clock):
    log = five_segments_in_epochs(make_log, clock, retention_bytes=3 * 5 * MESSAGE_BYTES)

    assert log.delete_old_segments() == 2

    assert log.leader_epochs.entries == [(2, 10), (3, 15), (4, 20)]
