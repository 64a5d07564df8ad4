"""A partition's idempotent producers, as Kafka 2.1 keeps them: duplicates answered with their
first offset, sequence and epoch checks, and the state carried through rolls, restarts (clean,
crashed, a crash between a snapshot's write and its rename), truncation, retention and expiry."""

from __future__ import annotations

import pytest

from tests.log.test_recovery import crash
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.producer_state import (
    CorruptSnapshotError,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
)
from tidelog.records.record_batch import BatchRecordInput, encode_batch

V2 = {"message_format_version": "2.1", "segment_bytes": 1000}


NOW = 1_700_000_000_000  # the manual clock's start


def batch(producer_id: int, epoch: int, sequence: int, count: int = 2, at: int = NOW) -> bytes:
    return encode_batch(
        [BatchRecordInput(b"k", b"v" * 50, at) for _ in range(count)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def refused(log, data: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as raised:
        log.append_as_leader(data, leader_epoch=0)
    return raised.value.code


def test_a_retried_batch_is_answered_with_its_first_offset_and_not_appended(make_log, clock):
    log = make_log(**V2)
    log.append_as_leader(batch(7, 0, 0), leader_epoch=0)
    second = log.append_as_leader(batch(7, 0, 2), leader_epoch=0)

    again = log.append_as_leader(batch(7, 0, 2), leader_epoch=0)

    assert (again.first_offset, again.last_offset) == (second.first_offset, second.last_offset)
    assert again.log_append_time == NOW  # 2.1 answers with the batch's timestamp
    assert log.log_end_offset == 4
    # the oldest of 5 retained batches is still recognised; a 6th one back is not
    for sequence in range(4, 14, 2):
        log.append_as_leader(batch(7, 0, sequence), leader_epoch=0)
    assert log.append_as_leader(batch(7, 0, 4), leader_epoch=0).first_offset == 4
    assert refused(log, batch(7, 0, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        (batch(7, 0, 5), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),  # a gap
        (batch(7, 0, 1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),  # overlaps, not a repeat
        (batch(7, 1, 3), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),  # a new epoch not from 0
        (batch(8, 0, 3), ErrorCode.UNKNOWN_PRODUCER_ID),  # never seen here, not from 0
    ],
)
def test_sequence_rules(make_log, sent, code):
    log = make_log(**V2)
    log.append_as_leader(batch(7, 0, 0), leader_epoch=0)

    assert refused(log, sent) == code
    assert log.log_end_offset == 2


def test_an_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(make_log):
    log = make_log(**V2)
    log.append_as_leader(batch(7, 3, 0), leader_epoch=0)

    assert refused(log, batch(7, 2, 2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.append_as_leader(batch(7, 4, 0), leader_epoch=0).first_offset == 2


def test_a_bad_sequence_in_an_idempotent_batch_is_corrupt(make_log):
    log = make_log(**V2)
    assert refused(log, batch(7, 0, -1)) == ErrorCode.CORRUPT_MESSAGE


def test_a_follower_keeps_the_state_of_what_it_fetches(make_log, tmp_path):
    leader = make_log(**V2)
    for sequence in (0, 2, 4):
        leader.append_as_leader(batch(7, 0, sequence), leader_epoch=0)
    follower = make_log("f-0", **V2)

    follower.append_as_follower(leader.segments[0].log_path.read_bytes(), leader_epoch=0)

    # the follower, become leader, knows the batch a retry repeats
    assert follower.append_as_leader(batch(7, 0, 4), leader_epoch=1).first_offset == 4
    assert follower.log_end_offset == 6


def fill(log, producers: int = 3, rounds: int = 10) -> None:
    for round_ in range(rounds):
        for producer_id in range(producers):
            log.append_as_leader(batch(producer_id, 0, 2 * round_), leader_epoch=0)


def test_snapshots_at_rolls_and_a_clean_close_bring_the_state_back(make_log):
    log = make_log(**V2)
    fill(log)
    assert len(log.segments) > 2
    # the last two rolls' (the older ones are below the recovery point's segment)
    rolls = [offset for offset, _ in log.producer_state.snapshot_files()]
    assert rolls == [segment.base_offset for segment in log.segments[-2:]]
    log.close()
    assert log.producer_state.latest_snapshot_offset() == log.log_end_offset

    reopened = make_log(needs_recovery=False, **V2)

    assert reopened.append_as_leader(batch(2, 0, 18), leader_epoch=0).first_offset == 58
    assert reopened.log_end_offset == 60


def rolled_with_unlinks_pending(tmp_path, clock) -> tuple[Log, list]:
    """A log of segments of 10 offsets whose background work is queued: the flushes of the
    rolls while it was filled have run; then the append at 60 rolls (dropping the snapshots
    below the recovery point's segment, 50) and a roll at 62 follows, and their work (the
    unlinks, two flushes) has not run."""
    queued: list = []
    log = Log(tmp_path / "t-0", LogConfig(**V2), clock=clock, background=queued.append)
    fill(log)
    while queued:
        queued.pop(0)()  # the flushes move the recovery point up
    log.append_as_leader(batch(0, 0, 20), leader_epoch=0)
    log.roll("the test rolls")
    return log, queued


def test_a_roll_sets_old_snapshots_aside_and_the_background_unlinks_them(tmp_path, clock):
    # an unlink frees a file's blocks (on a disk mounted with discard it waits for the device):
    # the roll, on the event loop, only renames
    log, queued = rolled_with_unlinks_pending(tmp_path, clock)
    kept = [offset for offset, _ in log.producer_state.snapshot_files()]
    assert kept == [50, 60, 62]
    set_aside = sorted(
        int(path.name.split(".")[0]) for path in log.directory.glob("*.snapshot.deleted")
    )
    assert set_aside == [10, 20, 30, 40]

    for work in queued:
        work()

    assert not list(log.directory.glob("*.snapshot.deleted"))
    assert [offset for offset, _ in log.producer_state.snapshot_files()] == kept


def test_a_snapshot_gone_before_its_rename_is_skipped_and_the_rest_still_go(
    tmp_path, clock, monkeypatch
):
    log, queued = rolled_with_unlinks_pending(tmp_path, clock)
    for work in queued:
        work()
    listed = log.producer_state.snapshot_files()
    vanished = tmp_path / "t-0" / "00000000000000000055.snapshot"  # listed, then gone
    monkeypatch.setattr(log.producer_state, "snapshot_files", lambda: [(55, vanished), *listed])
    queued.clear()

    log.producer_state.delete_snapshots_below(62)

    assert sorted(p.name for p in log.directory.glob("*.snapshot.deleted")) == [
        "00000000000000000050.snapshot.deleted",
        "00000000000000000060.snapshot.deleted",
    ]
    for work in queued:
        work()
    monkeypatch.undo()
    assert [offset for offset, _ in log.producer_state.snapshot_files()] == [62]
    assert not list(log.directory.glob("*.snapshot.deleted"))


def test_snapshots_set_aside_before_a_crash_are_removed_when_the_log_is_loaded(
    tmp_path, clock, make_log
):
    log, _ = rolled_with_unlinks_pending(tmp_path, clock)
    assert list(log.directory.glob("*.snapshot.deleted"))
    crash(log)

    reopened = make_log(**V2)

    assert not list(reopened.directory.glob("*.snapshot.deleted"))
    assert reopened.producer_state.latest_snapshot_offset() == 62
    assert reopened.append_as_leader(batch(0, 0, 20), leader_epoch=0).first_offset == 60
    assert reopened.append_as_leader(batch(0, 0, 22), leader_epoch=0).first_offset == 62


def test_a_crash_rebuilds_from_the_last_snapshot_and_the_log_above_it(make_log):
    log = make_log(**V2)
    fill(log)
    crash(log)

    reopened = make_log(**V2)

    assert reopened.producer_state.latest_snapshot_offset() == 60
    assert reopened.append_as_leader(batch(1, 0, 18), leader_epoch=0).first_offset == 56
    assert reopened.append_as_leader(batch(1, 0, 20), leader_epoch=0).first_offset == 60


def test_a_crashed_log_in_format_v1_is_not_read_for_producer_state(make_log, monkeypatch):
    """Format v1 holds no producer batches: after a crash the state starts at the log end
    without a read of the log (Kafka 2.1's shortcut), with snapshots at the last two segments'
    bases and the end, so a truncation after it reads nothing either."""
    from tests.conftest import message_set
    from tidelog.log import log as log_module

    log = make_log(message_format_version="0.10.0", segment_bytes=1000)
    for _ in range(20):
        log.append_as_leader(message_set(3))
    crash(log)
    for path in log.directory.glob("*.snapshot"):  # as a release before producer state left it
        path.unlink()

    def read(*_):
        raise AssertionError("the log was read for producer state")

    monkeypatch.setattr(log_module, "file_batches", read)
    reopened = make_log(message_format_version="0.10.0", segment_bytes=1000)

    assert reopened.producer_state.map_end_offset == reopened.log_end_offset == 60
    assert reopened.producer_state.producers == {}
    bases = reopened.segments.base_offsets[-2:]
    assert [offset for offset, _ in reopened.producer_state.snapshot_files()] == [*bases, 60]
    reopened.truncate_to(bases[0] + 1)
    assert reopened.producer_state.map_end_offset == bases[0] + 1


def test_a_crash_between_a_snapshots_write_and_its_rename(make_log, monkeypatch):
    log = make_log(**V2)
    fill(log, rounds=4)
    written = []
    monkeypatch.setattr(
        "tidelog.log.producer_state.os.replace", lambda source, _: written.append(source)
    )
    log.roll("the crash comes in this roll's snapshot")
    monkeypatch.undo()
    assert written and written[0].exists()  # the temporary file, never renamed
    crash(log)

    reopened = make_log(**V2)

    assert not written[0].exists()  # a leftover, removed
    assert reopened.producer_state.latest_snapshot_offset() == reopened.log_end_offset
    assert reopened.append_as_leader(batch(0, 0, 6), leader_epoch=0).first_offset == 18
    assert reopened.append_as_leader(batch(0, 0, 8), leader_epoch=0).first_offset == 24


def test_a_corrupt_snapshot_is_deleted_and_the_state_rebuilt(make_log):
    log = make_log(**V2)
    fill(log)
    crash(log)
    _, latest = log.producer_state.snapshot_files()[-1]
    latest.write_bytes(latest.read_bytes()[:-3])

    reopened = make_log(**V2)

    assert reopened.append_as_leader(batch(1, 0, 18), leader_epoch=0).first_offset == 56


def test_truncation_drops_the_state_above_the_truncation_point(make_log):
    log = make_log(**V2)
    fill(log)

    log.truncate_to(40)

    assert all(offset <= 40 for offset, _ in log.producer_state.snapshot_files())
    # producer 2's batch at 40 is gone: its retry is appended again, at 40
    assert log.append_as_leader(batch(2, 0, 12), leader_epoch=1).first_offset == 40
    assert refused(log, batch(1, 0, 16)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_retention_forgets_producers_whose_last_batch_is_gone(make_log):
    log = make_log(**V2)
    log.append_as_leader(batch(9, 0, 0), leader_epoch=0)
    fill(log, producers=1)
    log.high_watermark = log.log_end_offset

    log.maybe_increment_log_start_offset(10, "records deleted")

    assert refused(log, batch(9, 0, 2)) == ErrorCode.UNKNOWN_PRODUCER_ID
    assert log.append_as_leader(batch(0, 0, 20), leader_epoch=0).first_offset == 22


def test_producers_expire_after_transactional_id_expiration_ms(make_log, clock):
    log = make_log(**V2)
    log.producer_state.expiration_ms = 60000
    log.append_as_leader(batch(7, 0, 0, at=clock.milliseconds()), leader_epoch=0)
    clock.advance(59999)
    assert log.remove_expired_producers() == 0
    clock.advance(1)

    assert log.remove_expired_producers() == 1
    assert refused(log, batch(7, 0, 2)) == ErrorCode.UNKNOWN_PRODUCER_ID


def test_the_snapshot_format_is_kafkas():
    entry = ProducerStateEntry(5, 2)
    entry.add(2, 10, 14, 99, 1234)
    data = encode_snapshot([entry])

    # version 1, CRC-32C, one entry of 46 bytes
    assert len(data) == 2 + 4 + 4 + 46 and data[:2] == b"\x00\x01"
    (decoded,) = decode_snapshot(data)
    assert (decoded.producer_id, decoded.epoch, list(decoded.batches)) == (
        5,
        2,
        [(10, 14, 99, 1234)],
    )
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(data[:6] + bytes([data[6] ^ 1]) + data[7:])
