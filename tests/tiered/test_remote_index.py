"""Remote index entries and files: encoding, CRC, rotation, lookups, a torn or flipped tail."""

from __future__ import annotations

import pytest

from tests.tiered.remote_format import parse_pairs, parse_remote_log_index
from tidelog.tiered.remote_index import (
    CorruptRemoteIndexError,
    RemoteLogIndex,
    RemoteLogIndexEntry,
    decode_entries,
)


def entry(first: int, last: int, timestamp: int = 0) -> RemoteLogIndexEntry:
    return RemoteLogIndexEntry(
        first,
        last,
        timestamp,
        timestamp + 5,
        1000,
        f"file:///tier/t-0/{first:020d}-x.log",
        first * 10,
    )


def open_index(directory, max_file_bytes=10**6, roll_ms=10**9, now_ms=0) -> RemoteLogIndex:
    return RemoteLogIndex(directory, max_file_bytes=max_file_bytes, roll_ms=roll_ms, now_ms=now_ms)


def test_an_entry_reads_back_with_an_independent_parser(tmp_path):
    written = [entry(0, 9, 100), entry(10, 19, 50), entry(20, 29, 300)]
    index = open_index(tmp_path)
    index.append(written, now_ms=0)

    [log_file] = tmp_path.glob("*.remoteLogIndex")
    assert log_file.name == "00000000000000000000.remoteLogIndex"
    parsed = parse_remote_log_index(log_file.read_bytes())
    assert [
        (e.first_offset, e.last_offset, e.last_timestamp, e.uri, e.position) for e in parsed
    ] == [(w.first_offset, w.last_offset, w.last_timestamp, w.uri, w.position) for w in written]
    times = parse_pairs(log_file.with_suffix(".remoteTimeIndex").read_bytes(), ">qi")
    assert times == [(105, 0), (105, 10), (305, 20)]  # the largest timestamp so far


def test_lookups_go_through_the_offset_index_across_rotated_files(tmp_path):
    index = open_index(tmp_path, max_file_bytes=200)
    for first in range(0, 100, 10):
        index.append([entry(first, first + 9, first)], now_ms=0)
    assert index.file_count > 2
    assert index.lookup(37).first_offset == 30
    assert index.lookup(0).first_offset == 0
    assert index.lookup(100) is None
    assert index.search(41).first_offset == 40  # the entry holding timestamps 40..45
    with pytest.raises(ValueError, match="does not follow"):
        index.append([entry(95, 120)], now_ms=0)

    reopened = open_index(tmp_path, max_file_bytes=200)
    assert [e.first_offset for e in reopened.entries()] == list(range(0, 100, 10))
    reopened.delete_below(55)
    assert reopened.lowest_offset <= 50 and reopened.lookup(55).first_offset == 50


def test_one_append_of_many_entries_rotates_where_single_appends_would(tmp_path):
    single, batch = tmp_path / "single", tmp_path / "batch"
    single.mkdir()
    batch.mkdir()
    one_by_one = open_index(single, max_file_bytes=200)
    for first in range(0, 100, 10):
        one_by_one.append([entry(first, first + 9, first)], now_ms=0)
    at_once = open_index(batch, max_file_bytes=200)
    at_once.append([entry(first, first + 9, first) for first in range(0, 100, 10)], now_ms=0)

    names = sorted(p.name for p in single.iterdir())
    assert names == sorted(p.name for p in batch.iterdir()) and len(names) > 6
    for name in names:
        assert (single / name).read_bytes() == (batch / name).read_bytes()
    assert at_once.lookup(37).first_offset == 30


def test_a_flipped_byte_is_caught_by_the_entry_crc(tmp_path):
    index = open_index(tmp_path)
    index.append([entry(0, 9), entry(10, 19), entry(20, 29)], now_ms=0)
    [log_file] = tmp_path.glob("*.remoteLogIndex")
    data = bytearray(log_file.read_bytes())
    second = len(entry(0, 9).encode())
    data[second + 20] ^= 0x01  # inside the second entry's lastOffset
    log_file.write_bytes(bytes(data))

    with pytest.raises(CorruptRemoteIndexError, match="CRC mismatch"):
        decode_entries(bytes(data))
    with pytest.raises(AssertionError, match="CRC mismatch"):
        parse_remote_log_index(bytes(data))
    # At open the file is cut before the bad entry and its indexes follow.
    reopened = open_index(tmp_path)
    assert [e.first_offset for e in reopened.entries()] == [0]
    assert len(log_file.with_suffix(".remoteOffsetIndex").read_bytes()) == 8


def test_a_read_only_index_changes_no_file(tmp_path):
    index = open_index(tmp_path)
    index.append([entry(0, 9), entry(10, 19)], now_ms=0)
    [log_file] = tmp_path.glob("*.remoteLogIndex")
    torn = log_file.read_bytes() + entry(20, 29).encode()[:-3]  # an append cut short
    log_file.write_bytes(torn)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}

    reader = RemoteLogIndex.open_read_only(tmp_path)

    assert [e.first_offset for e in reader.entries()] == [0, 10]
    assert reader.lookup(15).first_offset == 10 and reader.search(3).first_offset == 0
    with pytest.raises(ValueError, match="read-only"):
        reader.append([entry(20, 29)], now_ms=0)
    with pytest.raises(ValueError, match="read-only"):
        reader.delete_below(100)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
