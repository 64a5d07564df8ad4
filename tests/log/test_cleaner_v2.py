"""The log cleaner on format v2 batches, as Kafka 2.1's cleaner treats them: records filtered
inside a batch, the batch rewritten with its own base offset, last offset, leader epoch,
producer fields, codec and headers; an emptied batch gone unless it is its producer's last;
tombstones gone past the delete horizon; a log holding v0, v1 and v2 (a format upgrade in the
middle) cleaned to the last value of each key."""

from __future__ import annotations

import os
import time
from unittest import mock

import pytest

from tidelog.clock import ManualClock
from tidelog.log import compaction
from tidelog.log.cleaner import Cleaner, log_to_clean
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.log.offset_map import OffsetMap
from tidelog.records.compression import decompress
from tidelog.records.format import Codec, Record, TimestampType, build_message_set, iter_deep
from tidelog.records.record_batch import (
    BatchRecordInput,
    check_batch,
    encode_batch,
    read_header,
    read_records,
)

COMPACTED = {
    "cleanup.policy": "compact",
    "message.format.version": "2.1",
    "segment.bytes": "100000",
    "min.cleanable.dirty.ratio": "0",
}


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def keyed(tmp_path, clock):
    partition_log = Log(tmp_path / "keyed-0", LogConfig.from_topic_config(COMPACTED), clock=clock)
    yield partition_log
    partition_log.close()


def append_batch(partition_log: Log, records, **fields) -> None:
    """A v2 batch as a leader of epoch 4 wrote it (offsets from the log end)."""
    partition_log.append_as_follower(
        encode_batch(
            records,
            base_offset=partition_log.log_end_offset,
            partition_leader_epoch=4,
            **fields,
        )
    )
    partition_log.clock.advance(5)


def clean(partition_log: Log, clock: ManualClock, first_dirty: int = 0):
    partition_log.roll("cleaned up to here")
    partition_log.high_watermark = partition_log.log_end_offset
    to_clean = log_to_clean(("keyed", 0), partition_log, first_dirty, clock.milliseconds())
    return Cleaner(OffsetMap(24 * 1000), clock).clean(to_clean)


def batches(partition_log: Log) -> list[tuple[object, list]]:
    """(header, records) of every v2 batch of the log, in order."""
    found = []
    for segment in partition_log.segments:
        data = segment.log_path.read_bytes()[: segment.size]
        for entry in iter_deep_batches(data):
            header = check_batch(data, entry, len(data))
            found.append((header, read_records(data, header)))
    return found


def iter_deep_batches(data: bytes):
    position = 0
    while position + 12 <= len(data):
        header = read_header(data, position)
        if data[position + 16] == 2:
            yield position
        position += header.size


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_batch_keeps_its_header_fields_and_its_codec_when_some_records_go(keyed, clock, codec):
    now = clock.milliseconds()
    append_batch(
        keyed,
        [
            BatchRecordInput(b"a", b"old a", now + 10, (("trace", b"1"),)),
            BatchRecordInput(b"b", b"b", now + 30, (("trace", b"2"), ("null", None))),
            BatchRecordInput(b"c", b"old c", now + 20, ()),
            BatchRecordInput(b"d", b"d", now + 5, (("trace", b"4"),)),
        ],
        codec=codec,
        producer_id=-1,
    )
    append_batch(keyed, [BatchRecordInput(b"a", b"new a", now), BatchRecordInput(b"c", b"c", now)])

    clean(keyed, clock)

    (first, records), (second, _) = batches(keyed)
    assert (first.base_offset, first.last_offset_delta, first.partition_leader_epoch) == (0, 3, 4)
    assert (first.codec, first.record_count, first.timestamp_type) == (codec, 2, 0)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (-1, -1, -1)
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (1, b"b", b"b", (("trace", b"2"), ("null", None))),
        (3, b"d", b"d", (("trace", b"4"),)),
    ]
    # times as they were, counted from the first survivor's (Kafka's builder)
    assert [r.timestamp for r in records] == [now + 30, now + 5]
    assert (first.first_timestamp, first.max_timestamp) == (now + 30, now + 30)
    assert second.base_offset == 4 and second.record_count == 2
    assert keyed.log_end_offset == 6


def test_a_log_append_time_batch_keeps_its_time_for_every_survivor(keyed, clock):
    now = clock.milliseconds()
    append_batch(
        keyed,
        [BatchRecordInput(b"a", b"1", now - 50), BatchRecordInput(b"b", b"2", now - 40)],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        max_timestamp=now + 1000,
    )
    append_batch(keyed, [BatchRecordInput(b"a", b"3", now)])

    clean(keyed, clock)

    (first, records), _ = batches(keyed)
    assert first.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert (first.first_timestamp, first.max_timestamp) == (now + 1000, now + 1000)
    assert [(r.offset, r.key) for r in records] == [(1, b"b")]
    assert [m.timestamp for m in iter_deep(keyed.segments[0].log_path.read_bytes())][:1] == [
        now + 1000
    ]


def test_an_emptied_batch_goes_unless_it_is_the_last_of_its_producer(keyed, clock):
    now = clock.milliseconds()
    # producer 7 writes twice, producer 8 once, a producer without an id once; then every key
    # is written again by a producer without an id, so all four batches empty
    append_batch(
        keyed, [BatchRecordInput(b"a", b"1", now)], producer_id=7, producer_epoch=0, base_sequence=0
    )
    append_batch(
        keyed,
        [BatchRecordInput(b"b", b"1", now), BatchRecordInput(b"c", b"1", now)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=1,
    )
    append_batch(
        keyed,
        [BatchRecordInput(b"d", b"1", now)],
        producer_id=8,
        producer_epoch=2,
        base_sequence=41,
    )
    append_batch(keyed, [BatchRecordInput(b"e", b"1", now)])
    append_batch(keyed, [BatchRecordInput(k, b"2", now) for k in (b"a", b"b", b"c", b"d", b"e")])

    stats = clean(keyed, clock)

    found = [
        (h.base_offset, h.last_offset, h.producer_id, h.record_count) for h, _ in batches(keyed)
    ]
    assert found == [(1, 2, 7, 0), (3, 3, 8, 0), (5, 9, -1, 5)]
    empty = batches(keyed)[1][0]
    assert (empty.producer_epoch, empty.base_sequence, empty.codec) == (2, 41, Codec.NONE)
    assert (empty.first_timestamp, empty.partition_leader_epoch) == (-1, 4)
    assert stats.messages_read == 10 and stats.messages_written == 5
    # the emptied batch still holds its offsets: the log end stays, reads go past it
    assert keyed.log_end_offset == 10
    assert [m.offset for m in iter_deep(keyed.read(1, 10**6).slice.read())] == [5, 6, 7, 8, 9]


@pytest.mark.skipif(compaction.native is None, reason="make install builds the C loops")
def test_a_batch_whose_every_record_has_a_later_one_is_dropped_without_reading_it_again(
    keyed, clock
):
    now = clock.milliseconds()
    for value in (b"1", b"2", b"3"):
        append_batch(
            keyed, [BatchRecordInput(k, value, now) for k in (b"a", b"b", b"c")], codec=Codec.LZ4
        )
    read = []

    def counted(codec, data, magic):
        read.append(bytes(data))
        return decompress(codec, data, magic)

    with mock.patch.object(compaction, "decompress", counted):
        stats = clean(keyed, clock)

    assert [(h.base_offset, [r.value for r in rs]) for h, rs in batches(keyed)] == [
        (6, [b"3", b"3", b"3"])
    ]
    # each batch's records are read to map their keys; only the last batch's to filter them
    assert len(read) == 4 and read[3] == read[2]
    assert (stats.messages_read, stats.messages_written) == (9, 3)


def test_a_checkpoint_inside_a_segment_keeps_the_records_past_it_that_were_not_mapped(keyed, clock):
    """A follower's truncation below the cleaner's checkpoint leaves it inside the segment the
    follower appends again; that segment is not mapped, so none of its records may be taken
    for superseded (nor may those of a merged segment a stopped clean left the checkpoint in)."""
    now = clock.milliseconds()
    for first in range(0, 20, 2):
        append_batch(
            keyed,
            [
                BatchRecordInput(b"k%d" % first, b"1", now),
                BatchRecordInput(b"k%d" % (first + 1), b"1", now),
            ],
            codec=Codec.LZ4,
        )
    checkpoint = clean(keyed, clock).end_offset
    keyed.truncate_to(14)
    for offset in range(14, 30):
        append_batch(keyed, [BatchRecordInput(b"new%d" % offset, b"1", now)], codec=Codec.LZ4)
    keyed.roll("the next leader's records after the truncation")
    for offset in range(30, 40):
        append_batch(keyed, [BatchRecordInput(b"later%d" % offset, b"1", now)], codec=Codec.LZ4)

    clean(keyed, clock, first_dirty=checkpoint)

    kept = [m.key for m in iter_deep(keyed.read(0, 10**6).slice.read())]
    expected = [b"k%d" % n for n in range(14)] + [b"new%d" % n for n in range(14, 30)]
    assert (checkpoint, kept) == (20, expected + [b"later%d" % n for n in range(30, 40)])


def test_tombstones_go_past_the_delete_horizon_and_stay_before_it(tmp_path, clock):
    """Kafka 2.1's rule for v2 as for v1: a tombstone stays while its segment was modified
    after the delete horizon, the clean tail's last modification less delete.retention.ms."""
    partition_log = Log(
        tmp_path / "keyed-0",
        LogConfig.from_topic_config(
            {**COMPACTED, "delete.retention.ms": "100", "segment.bytes": "100"}
        ),
        clock=clock,
    )
    now = clock.milliseconds()
    append_batch(
        partition_log, [BatchRecordInput(b"a", b"1", now), BatchRecordInput(b"b", b"1", now)]
    )
    append_batch(partition_log, [BatchRecordInput(b"a", None, now)])
    append_batch(partition_log, [BatchRecordInput(b"c", b"1", now)])
    first = clean(partition_log, clock)
    assert values(partition_log) == [(b"b", b"1"), (b"a", None), (b"c", b"1")]

    # the tombstone's segment is now older than the clean tail's last by more than 100 ms
    tombstone_segment, last_clean = partition_log.segments[1], partition_log.segments[2]
    real_now = time.time_ns()
    os.utime(tombstone_segment.log_path, ns=(real_now - 10**10, real_now - 10**10))
    os.utime(last_clean.log_path, ns=(real_now, real_now))
    append_batch(partition_log, [BatchRecordInput(b"d", b"1", now)])
    clean(partition_log, clock, first.end_offset)
    assert values(partition_log) == [(b"b", b"1"), (b"c", b"1"), (b"d", b"1")]
    partition_log.close()


def values(partition_log: Log) -> list[tuple[bytes | None, bytes | None]]:
    data = b"".join(s.log_path.read_bytes()[: s.size] for s in partition_log.segments)
    return [(m.key, m.value) for m in iter_deep(data)]


def test_a_log_upgraded_from_v0_through_v1_to_v2_cleans_to_the_last_value_of_each_key(keyed, clock):
    written = []
    for magic, codec in ((0, Codec.NONE), (0, Codec.GZIP), (1, Codec.SNAPPY), (1, Codec.NONE)):
        records = [
            Record(k, f"v{magic}{codec}{k!r}".encode(), clock.milliseconds())
            for k in (b"a", b"b", b"c")
        ]
        keyed.append_as_follower(
            build_message_set(records, magic=magic, codec=codec, base_offset=keyed.log_end_offset)
        )
        written += [(r.key, r.value) for r in records]
    for codec in (Codec.NONE, Codec.LZ4):
        now = clock.milliseconds()
        records = [
            BatchRecordInput(k, f"v2{codec}{k!r}".encode(), now, (("h", k),)) for k in (b"b", b"d")
        ]
        append_batch(keyed, records, codec=codec)
        written += [(r.key, r.value) for r in records]

    clean(keyed, clock)

    last = {key: value for key, value in written}
    read = list(iter_deep(keyed.read(0, 10**6).slice.read()))
    assert {m.key: m.value for m in read} == last
    assert sorted(m.key for m in read) == sorted(last)
    assert {m.key: m.magic for m in read} == {b"a": 1, b"c": 1, b"b": 2, b"d": 2}
    assert {m.key: m.headers for m in read if m.magic == 2} == {
        b"b": (("h", b"b"),),
        b"d": (("h", b"d"),),
    }
