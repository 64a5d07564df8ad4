"""A partition log of message format v2: appends as leader and follower, rolls, indexes, search
by time, recovery of a damaged tail, and a segment that holds v0, v1 and v2 entries."""

from __future__ import annotations

import os
import subprocess
import sys

from kafka.record import MemoryRecords

from tests.conftest import message_set, read_everything
from tests.log.test_recovery import assert_indexes_verify, crash
from tidelog.records.format import Codec
from tidelog.records.record_batch import BatchRecordInput, encode_batch, read_header

V2 = {"message_format_version": "2.1", "segment_bytes": 2000, "index_interval_bytes": 300}


def batch_of(count: int, at: int, codec: Codec = Codec.NONE) -> bytes:
    return encode_batch(
        [BatchRecordInput(b"key", b"x" * 100, at + i, (("n", b"%d" % i),)) for i in range(count)],
        codec=codec,
    )


def fill(log, clock, batches: int = 30) -> None:
    for number in range(batches):
        clock.advance(10)
        codec = (Codec.NONE, Codec.SNAPPY, Codec.ZSTD)[number % 3]
        log.append_as_leader(batch_of(4, clock.milliseconds(), codec), leader_epoch=3)


def test_a_v2_log_rolls_indexes_and_reads_back_every_record(make_log, clock):
    log = make_log(**V2)

    fill(log, clock)

    assert log.log_end_offset == 120
    assert len(log.segments) > 2
    messages = read_everything(log)
    assert [m.offset for m in messages] == list(range(120))
    assert {m.magic for m in messages} == {2}
    assert messages[5].headers == (("n", b"1"),)
    assert_indexes_verify(log)
    # every batch on disk carries the epoch of the leader that wrote it
    data = log.segments[0].log_path.read_bytes()
    assert read_header(data).partition_leader_epoch == 3
    assert log.leader_epochs.entries == [(3, 0)]


def test_kafka_python_reads_a_v2_segment(make_log, clock):
    log = make_log(**V2)
    fill(log, clock, batches=6)
    log.close()

    reader = MemoryRecords(log.segments[0].log_path.read_bytes())
    offsets = []
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        offsets += [record.offset for record in batch]

    assert offsets == list(range(len(offsets))) and offsets


def test_search_by_time_finds_the_first_record_at_or_after_it(make_log, clock):
    log = make_log(**V2)
    fill(log, clock)
    first_time = read_everything(log)[0].timestamp

    found = log.offset_for_timestamp(first_time + 41)

    # the batches are 10 ms apart and hold records 0-3 ms after their start
    assert found is not None
    assert found.offset == next(
        m.offset for m in read_everything(log) if m.timestamp >= first_time + 41
    )


def test_a_damaged_v2_tail_is_cut_at_the_last_whole_batch(make_log, clock):
    log = make_log(**V2)
    fill(log, clock)
    crash(log)
    last = log.segments[-1].log_path
    with open(last, "r+b") as file:
        file.truncate(os.path.getsize(last) - 20)

    recovered = make_log(**V2)

    assert recovered.log_end_offset == 116
    assert [m.offset for m in read_everything(recovered)] == list(range(116))
    assert_indexes_verify(recovered)


def test_a_log_holds_v0_v1_and_v2_entries_one_after_another(make_log, clock):
    """A topic moved from format 0.9.0 through 0.10.0 to 2.1, as an upgrade does it."""
    make_log(message_format_version="0.9.0").append_as_leader(message_set(3, magic=0))
    log = make_log(message_format_version="0.10.0")
    log.append_as_leader(message_set(3, magic=1, codec=Codec.GZIP, timestamp=clock.milliseconds()))
    log.close()
    log = make_log(message_format_version="2.1")
    log.append_as_leader(batch_of(3, clock.milliseconds()))
    crash(log)

    recovered = make_log(message_format_version="2.1")

    assert [(m.offset, m.magic) for m in read_everything(recovered)] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 1),
        (4, 1),
        (5, 1),
        (6, 2),
        (7, 2),
        (8, 2),
    ]
    assert_indexes_verify(recovered)


def test_a_follower_appends_the_leaders_batches_as_they_are(make_log, clock):
    leader = make_log("leader-0", **V2)
    fill(leader, clock, batches=5)
    follower = make_log("follower-0", **V2)

    data = leader.read(0, 10**9).slice.read()
    follower.append_as_follower(data, leader_epoch=3)

    assert follower.log_end_offset == 20
    assert follower.segments[0].log_path.read_bytes()[: len(data)] == data


def test_a_follower_learns_each_leaders_epoch_from_the_batches_it_wrote(make_log, clock):
    leader = make_log("leader-0", **V2)
    leader.append_as_leader(batch_of(3, clock.milliseconds()), leader_epoch=1)
    leader.append_as_leader(batch_of(2, clock.milliseconds()), leader_epoch=1)
    leader.append_as_leader(batch_of(4, clock.milliseconds()), leader_epoch=5)
    follower = make_log("follower-0", **V2)

    # fetched only now, from the leader of epoch 7: the batches still say who wrote them
    follower.append_as_follower(leader.read(0, 10**9).slice.read(), leader_epoch=7)

    assert follower.leader_epochs.entries == [(1, 0), (5, 5)]


def test_dump_log_prints_batches_and_their_records_as_kafkas_dump_log_segments(make_log, clock):
    log = make_log(**V2)
    sent = encode_batch(
        [
            BatchRecordInput(b"k%d" % i, b"v%d" % i, 1000 + i, (("trace", b"x"), ("n", None)))
            for i in range(3)
        ],
        codec=Codec.GZIP,
        producer_id=42,
        producer_epoch=1,
        base_sequence=7,
        partition_leader_epoch=2,
    )
    # as a follower: a leader would refuse sequence 7 from a producer it has no record of
    log.append_as_follower(sent)
    log.close()
    segment = str(log.segments[0].log_path)

    dump = subprocess.run(
        [
            sys.executable,
            "-m",
            "tidelog.cli",
            "dump-log",
            "--deep-iteration",
            "--print-data-log",
            segment,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()

    assert dump[2].startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 7 lastSequence: 9 producerId: 42 "
        "producerEpoch: 1 partitionLeaderEpoch: 2 isTransactional: false isControl: false "
        "position: 0 CreateTime: 1002 isvalid: true size: "
    )
    assert dump[2].endswith(f"magic: 2 compresscodec: GZIP crc: {read_header(sent).crc}")
    assert dump[4] == (
        "| offset: 1 position: 0 CreateTime: 1001 isvalid: true keysize: 2 valuesize: 2 "
        "magic: 2 compresscodec: GZIP producerId: 42 producerEpoch: 1 sequence: 8 "
        "isTransactional: false headerKeys: [trace,n] key: k1 payload: v1"
    )
    assert (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tidelog.cli",
                "dump-log",
                "--verify-index",
                segment.replace(".log", ".index"),
            ],
            capture_output=True,
            text=True,
        ).returncode
        == 0
    )
