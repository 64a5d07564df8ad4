"""Opening a log after a crash: cut what is corrupt, rebuild what is missing, keep the rest."""

from __future__ import annotations

import logging
import os

import pytest

from tests.conftest import message_set, read_everything
from tidelog.log.dump import dump_index_file
from tidelog.records.format import Codec

MESSAGE_BYTES = 137
SMALL = {"segment_bytes": 20 * MESSAGE_BYTES, "index_interval_bytes": 2 * MESSAGE_BYTES}


def crash(log) -> None:
    """Drops the log as a killed process would: no flush, no trim, no clean-shutdown marker."""
    for segment in log.segments:
        segment.index.close()
        segment.time_index.close()
        segment.file.close()


def all_offsets(log) -> list[int]:
    return [message.offset for message in read_everything(log)]


def assert_indexes_verify(log) -> None:
    for segment in log.segments:
        for path in (segment.index.path, segment.time_index.path):
            if not path.exists():  # an index never written yet has no file
                assert segment is log.active_segment, path
                continue
            assert dump_index_file(path, verify=True)["mismatches"] == [], path


@pytest.fixture
def crashed_log(make_log, clock):
    """A log of 3 segments x 4 batches x 5 messages that was never closed."""
    log = make_log(**SMALL)
    for _ in range(12):
        clock.advance(10)
        log.append_as_leader(message_set(5, timestamp=clock.milliseconds()))
    assert [s.base_offset for s in log.segments] == [0, 20, 40]
    crash(log)
    return log


def test_a_partial_tail_is_cut_at_the_last_whole_message(make_log, crashed_log, caplog):
    last = crashed_log.segments[-1].log_path
    with open(last, "r+b") as file:
        file.truncate(os.path.getsize(last) - 30)

    with caplog.at_level(logging.WARNING):
        log = make_log(**SMALL)

    assert log.log_end_offset == 59
    assert all_offsets(log) == list(range(59))
    assert "partial message" in caplog.text and "cutting" in caplog.text
    assert_indexes_verify(log)


def test_a_flipped_byte_cuts_the_log_there_and_drops_the_segments_after_it(
    make_log, crashed_log, caplog
):
    middle = crashed_log.segments[1].log_path
    with open(middle, "r+b") as file:
        file.seek(7 * MESSAGE_BYTES + 60)  # inside the value of offset 27
        byte = file.read(1)
        file.seek(-1, os.SEEK_CUR)
        file.write(bytes([byte[0] ^ 0x10]))

    with caplog.at_level(logging.WARNING):
        log = make_log(**SMALL)

    assert log.log_end_offset == 27
    assert [s.base_offset for s in log.segments] == [0, 20]
    assert all_offsets(log) == list(range(27))
    assert "CRC mismatch at offset 27" in caplog.text
    assert not (log.directory / "00000000000000000040.log").exists()
    log.append_as_leader(message_set(1))
    assert log.log_end_offset == 28


def test_an_untrimmed_index_left_by_a_crash_counts_only_its_written_entries(make_log, crashed_log):
    active = crashed_log.segments[-1]
    assert active.index.path.stat().st_size == 10485760  # still preallocated

    log = make_log(recovery_point=60, needs_recovery=False, **SMALL)

    assert log.log_end_offset == 60
    assert log.active_segment.index.entries == active.index.entries
    assert all_offsets(log) == list(range(60))
    assert_indexes_verify(log)


def test_recovery_starts_at_the_recovery_point(make_log, crashed_log):
    """Segments wholly below the recovery point were flushed; they are not scanned again."""
    first = crashed_log.segments[0].log_path
    with open(first, "r+b") as file:
        file.seek(100)
        file.write(b"\xff")

    log = make_log(recovery_point=45, **SMALL)

    assert log.log_end_offset == 60  # the damage in segment 0 was not looked for


def closed_log(make_log, clock, **config):
    log = make_log(**SMALL, **config)
    magic = 0 if config.get("message_format_version") == "0.9.0" else 1
    for _ in range(8):
        clock.advance(10)
        log.append_as_leader(message_set(5, magic=magic, timestamp=clock.milliseconds()))
    log.close()
    return log


def test_a_deleted_offset_index_is_rebuilt(make_log, clock, caplog):
    before = closed_log(make_log, clock)
    before.segments[0].index.path.unlink()

    with caplog.at_level(logging.WARNING):
        log = make_log(recovery_point=40, needs_recovery=False, **SMALL)

    assert "missing or corrupt" in caplog.text
    assert log.segments[0].index.entries > 0
    assert log.read(13, 10**6).slice.position > 0
    assert all_offsets(log) == list(range(40))
    assert_indexes_verify(log)


def test_a_corrupt_offset_index_is_rebuilt(make_log, clock, caplog):
    before = closed_log(make_log, clock)
    before.segments[0].index.path.write_bytes(b"\x00\x00\x00\x05\x7f\xff\xff\xff" * 3)

    with caplog.at_level(logging.WARNING):
        log = make_log(recovery_point=40, needs_recovery=False, **SMALL)

    assert "rebuilding" in caplog.text
    assert all_offsets(log) == list(range(40))
    assert_indexes_verify(log)


def test_a_v1_segment_without_a_time_index_gets_one_rebuilt_from_its_messages(make_log, clock):
    before = closed_log(make_log, clock)
    path = before.segments[0].time_index.path
    last = dump_index_file(path)["entries"][-1]
    path.unlink()

    log = make_log(recovery_point=40, needs_recovery=False, **SMALL)

    assert log.segments[0].time_index.last_entry == (last["timestamp"], last["offset"])
    assert log.offset_for_timestamp(clock.milliseconds() - 65).offset == 5
    assert_indexes_verify(log)


def test_a_v0_segment_without_a_time_index_gets_one_entry_of_its_modification_time(make_log, clock):
    before = closed_log(make_log, clock, message_format_version="0.9.0")
    segment = before.segments[0]
    os.utime(segment.log_path, ns=(1_600_000_000_000_000_000,) * 2)
    segment.time_index.path.unlink()

    log = make_log(recovery_point=40, needs_recovery=False, message_format_version="0.9.0", **SMALL)

    time_index = log.segments[0].time_index
    assert (time_index.entries, time_index.last_entry) == (1, (1_600_000_000_000, 0))
    assert log.offset_for_timestamp(1_500_000_000_000).offset == 0


def test_a_clean_close_trims_indexes_and_reopens_without_a_scan(make_log, clock):
    before = closed_log(make_log, clock)
    active = before.segments[-1]
    assert active.index.path.stat().st_size == 8 * active.index.entries

    log = make_log(recovery_point=40, needs_recovery=False, **SMALL)

    assert log.log_end_offset == 40
    assert log.last_appended_timestamp == clock.milliseconds()
    log.append_as_leader(message_set(5, timestamp=clock.milliseconds()))
    assert all_offsets(log) == list(range(45))
    assert_indexes_verify(log)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4])
def test_recovery_of_compressed_segments_keeps_every_message(make_log, clock, codec):
    log = make_log(segment_bytes=2000, index_interval_bytes=300)
    for _ in range(30):
        clock.advance(1)
        log.append_as_leader(message_set(5, codec=codec, timestamp=clock.milliseconds()))
    crash(log)

    recovered = make_log()

    assert all_offsets(recovered) == list(range(150))
    assert_indexes_verify(recovered)


def test_leftovers_of_interrupted_operations_are_removed(make_log, clock, tmp_path):
    closed_log(make_log, clock)
    leftover = tmp_path / "t-0" / "00000000000000000000.log.deleted"
    leftover.write_bytes(b"old")
    orphan = tmp_path / "t-0" / "00000000000000099999.index"
    orphan.write_bytes(b"")

    make_log(recovery_point=40, needs_recovery=False, **SMALL)

    assert not leftover.exists() and not orphan.exists()
