"""derive_entries (the segment's own indexes and a few headers per range) against build_entries
(a walk over every entry's header) on generated segments of formats v0, v1 and v2, and reads
through derived entries."""

from __future__ import annotations

import random

import pytest

from tests.conftest import message_set
from tidelog.clock import ManualClock
from tidelog.log.config import LogConfig
from tidelog.log.log import Log
from tidelog.records.format import Codec, iter_deep
from tidelog.records.record_batch import BatchRecordInput, encode_batch
from tidelog.tiered.remote_index import RemoteLogIndex, build_entries, derive_entries

URI = "file:///tier/t-0/x.log"


def generated_log(
    directory,
    *,
    magic: int,
    codec: Codec,
    index_interval_bytes: int,
    timestamps: str,
    seed: int = 1,
) -> Log:
    """A log of rolled segments of batches of 1-30 records, 20-400 bytes each; timestamps
    growing, or shuffled around a base (they fall as often as they grow), or all equal."""
    chance = random.Random(seed)
    clock = ManualClock()
    config = LogConfig(
        segment_bytes=20_000,
        index_interval_bytes=index_interval_bytes,
        message_format_version={0: "0.9.0", 1: "0.10.0", 2: "2.1"}[magic],
    )
    log = Log(directory, config, clock=clock)
    for _ in range(250):
        clock.advance(chance.randrange(0, 5))
        now = clock.milliseconds()
        stamp = {
            "growing": lambda _, now=now: now,
            "shuffled": lambda _, now=now: now - chance.randrange(0, 10_000),
            "equal": lambda _: 1_000,
        }[timestamps]
        count, value_size = chance.randrange(1, 31), chance.randrange(20, 400)
        if magic == 2:
            data = encode_batch(
                [
                    BatchRecordInput(b"key", chance.randbytes(value_size), stamp(n))
                    for n in range(count)
                ],
                codec=codec,
            )
        else:
            data = message_set(
                count, magic=magic, codec=codec, timestamp=stamp, value_size=value_size
            )
        log.append_as_leader(data)
    log.roll()
    return log


@pytest.mark.parametrize("timestamps", ["growing", "shuffled", "equal"])
@pytest.mark.parametrize("index_interval_bytes", [64, 4096, 10**9])  # dense, usual, empty
@pytest.mark.parametrize(
    ("magic", "codec"),
    [
        (0, Codec.NONE),
        (0, Codec.GZIP),
        (1, Codec.NONE),
        (1, Codec.SNAPPY),
        (1, Codec.GZIP),
        (2, Codec.NONE),
        (2, Codec.ZSTD),
    ],
)
def test_derived_entries_are_those_of_a_walk_over_every_entry(
    tmp_path, magic, codec, index_interval_bytes, timestamps
):
    log = generated_log(
        tmp_path,
        magic=magic,
        codec=codec,
        index_interval_bytes=index_interval_bytes,
        timestamps=timestamps,
    )
    rolled = [s for s in log.segments if s is not log.active_segment]
    assert len(rolled) > 2
    if index_interval_bytes == 10**9:
        assert all(s.index.entries == 0 for s in rolled)
    chance = random.Random(2)
    compared = 0
    for segment in rolled:
        starts = [segment.base_offset, segment.next_offset - 1]
        starts += chance.choices(range(segment.base_offset, segment.next_offset), k=2)
        for from_offset in starts:  # a copy may start inside a segment
            for interval in (1, 3000, 10**9):
                walked = build_entries(segment, from_offset, interval, URI)
                assert derive_entries(segment, from_offset, interval, URI) == walked
                compared += len(walked)
    assert compared > 100
    log.close()


def test_a_time_index_entry_its_data_contradicts_is_not_believed(tmp_path):
    """The time index names the entry carrying a range's largest timestamp; where that entry's
    header says otherwise, the range is read whole."""
    log = generated_log(
        tmp_path, magic=1, codec=Codec.NONE, index_interval_bytes=256, timestamps="growing"
    )
    segment = log.segments[0]
    expected = build_entries(segment, segment.base_offset, 5000, URI)
    assert derive_entries(segment, segment.base_offset, 5000, URI) == expected
    lying = segment.time_index
    entry_at = lying.entry_at
    lying.entry_at = lambda slot: (entry_at(slot)[0] + 10**6, entry_at(slot)[1])  # type: ignore
    try:
        assert derive_entries(segment, segment.base_offset, 5000, URI) == expected
    finally:
        del lying.entry_at
    log.close()


@pytest.mark.parametrize(("magic", "codec"), [(1, Codec.SNAPPY), (2, Codec.LZ4)])
def test_reads_through_derived_entries_find_every_message(tmp_path, magic, codec):
    """Every offset and timestamp search through remote indexes of derived entries lands where
    it does through walked ones, and the range it names holds the message sought."""
    log = generated_log(
        tmp_path / "log",
        magic=magic,
        codec=codec,
        index_interval_bytes=512,
        timestamps="shuffled",
    )
    indexes = {}
    for name, build in (("walked", build_entries), ("derived", derive_entries)):
        directory = tmp_path / name
        directory.mkdir()
        index = RemoteLogIndex(directory, max_file_bytes=2000, roll_ms=10**9, now_ms=0)
        for segment in log.segments:
            if segment is not log.active_segment:
                index.append(build(segment, segment.base_offset, 3000, str(segment.log_path)), 0)
        indexes[name] = index
    walked, derived = indexes["walked"], indexes["derived"]
    assert list(derived.entries()) == list(walked.entries())
    for offset in range(0, derived.highest_offset + 1, 7):
        entry = derived.lookup(offset)
        assert entry == walked.lookup(offset)
        with open(entry.uri, "rb") as data:
            data.seek(entry.position)
            messages = list(iter_deep(data.read(entry.data_length)))
        assert offset in {m.offset for m in messages}
        assert max(m.timestamp for m in messages) == entry.last_timestamp
    for timestamp in range(
        log.segments[0].time_index.entry_at(0)[0] - 20_000, log.segments[-1].max_timestamp, 997
    ):
        assert derived.search(timestamp) == walked.search(timestamp)
    log.close()
