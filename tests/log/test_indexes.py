"""The offset and time indexes on their own."""

from __future__ import annotations

import os
import threading
from bisect import bisect_left, bisect_right
from itertools import accumulate

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.log.index_file import CorruptIndexError
from tidelog.log.offset_index import OffsetIndex
from tidelog.log.time_index import TimeIndex


@pytest.fixture
def offset_index(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 80)  # room for 10 entries
    yield index
    index.close()


@pytest.fixture
def time_index(tmp_path):
    index = TimeIndex(tmp_path / "00000000000000000100.timeindex", 100, 60)  # 5 slots
    yield index
    index.close()


def test_a_new_index_is_preallocated_and_empty_from_its_first_write(offset_index):
    assert not offset_index.path.exists()  # a new segment creates no index file until needed
    assert (offset_index.entries, offset_index.max_entries) == (0, 10)
    assert offset_index.lookup(150) == (100, 0)
    offset_index.append(110, 1000)
    assert offset_index.path.stat().st_size == 80
    assert offset_index.is_open


def test_an_index_is_searched_without_an_open_file_and_released_when_idle(offset_index):
    offset_index.append(110, 1000)
    offset_index.append(120, 2000)
    assert offset_index.release_if_idle() is False  # written since the last check
    assert offset_index.release_if_idle() is True
    assert not offset_index.is_open
    reopened = type(offset_index)(offset_index.path, 100, 80)
    assert reopened.lookup(125) == (120, 2000)
    assert reopened.last_entry == (120, 2000)
    assert not reopened.is_open  # lookups read the file once, into memory
    reopened.append(130, 3000)  # the next write opens it again
    assert reopened.is_open and reopened.lookup(10**9) == (130, 3000)
    offset_index.append(130, 3000)  # the first one's columns are its own
    reopened.close()
    assert type(offset_index)(offset_index.path, 100, 80).entries == 3


def test_trim_of_an_index_never_written_leaves_an_empty_file(offset_index):
    offset_index.trim()
    assert offset_index.path.stat().st_size == 0


def test_lookup_finds_the_last_entry_at_or_below_the_offset(offset_index):
    for offset, position in [(110, 1000), (120, 2000), (130, 3000)]:
        offset_index.append(offset, position)

    assert offset_index.lookup(109) == (100, 0)
    assert offset_index.lookup(110) == (110, 1000)
    assert offset_index.lookup(125) == (120, 2000)
    assert offset_index.lookup(10**9) == (130, 3000)


def test_an_append_out_of_order_fails_loudly(offset_index):
    offset_index.append(110, 1000)

    with pytest.raises(ValueError, match="not after"):
        offset_index.append(110, 2000)
    with pytest.raises(ValueError, match="not after"):
        offset_index.append(120, 900)


def test_a_full_index_refuses_more_entries(offset_index):
    for number in range(10):
        offset_index.append(101 + number, 100 * (number + 1))

    assert offset_index.is_full
    with pytest.raises(IndexError):
        offset_index.append(200, 5000)


def test_truncation_zeroes_the_freed_slots_so_a_reopen_counts_right(tmp_path, offset_index):
    for number in range(5):
        offset_index.append(110 + 10 * number, 1000 * (number + 1))

    offset_index.truncate_to(125)  # keeps 110 and 120
    assert offset_index.last_entry == (120, 2000)
    offset_index.flush()
    reopened = OffsetIndex(offset_index.path, 100, 80)

    assert reopened.entries == 2
    assert reopened.lookup(10**9) == (120, 2000)
    with pytest.raises(ValueError, match="not after the last entry"):
        reopened.append(120, 3000)  # checked against the newest entry read at opening
    offset_index.truncate_to(0)
    assert (offset_index.entries, offset_index.last_entry) == (0, (100, 0))
    offset_index.append(105, 500)  # any entry follows an emptied index
    reopened.close()


def test_trim_shrinks_the_file_to_its_entries_and_resize_grows_it_back(offset_index):
    offset_index.append(110, 1000)
    offset_index.trim()
    assert offset_index.path.stat().st_size == 8

    offset_index.resize(80)
    offset_index.append(120, 2000)

    assert offset_index.path.stat().st_size == 80
    assert offset_index.lookup(121) == (120, 2000)


def test_an_index_whose_size_is_not_a_whole_number_of_entries_is_corrupt(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\x00" * 13)

    with pytest.raises(CorruptIndexError, match="not a multiple"):
        OffsetIndex(path, 0, 80)


def test_time_entries_are_added_only_when_the_timestamp_grows(time_index):
    assert time_index.maybe_append(1000, 105)
    assert not time_index.maybe_append(1000, 106)
    assert not time_index.maybe_append(900, 107)
    assert time_index.maybe_append(2000, 110)

    assert time_index.entries == 2


def test_time_lookup_returns_the_last_entry_strictly_before_the_target(time_index):
    time_index.maybe_append(1000, 105)
    time_index.maybe_append(2000, 110)

    assert time_index.lookup(999) == (-1, 100)
    assert time_index.lookup(1000) == (-1, 100)
    assert time_index.lookup(1001) == (1000, 105)
    assert time_index.lookup(5000) == (2000, 110)


def test_one_time_slot_is_kept_for_the_entry_written_at_roll(time_index):
    for number in range(4):
        time_index.maybe_append(1000 + number, 101 + number)

    assert time_index.is_full
    with pytest.raises(IndexError):
        time_index.maybe_append(5000, 120)
    assert time_index.maybe_append(1003, 130, final=True)
    assert time_index.last_entry == (1003, 130)


def test_time_index_truncation_removes_entries_at_or_above_the_offset(time_index):
    for timestamp, offset in [(1000, 105), (2000, 110), (3000, 115)]:
        time_index.maybe_append(timestamp, offset)

    time_index.truncate_to(110)

    assert time_index.last_entry == (1000, 105)
    assert time_index.maybe_append(1500, 108)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    gaps=st.lists(st.one_of(st.integers(1, 3), st.integers(1000, 100_000)), max_size=300),
    probes=st.lists(st.integers(-5, 20_000_000), max_size=60),
)
def test_lookups_agree_with_a_plain_bisect_however_the_keys_are_spread(tmp_path, gaps, probes):
    """Lookups guess a slot by interpolation; clustered keys must not change the answers."""
    keys = list(accumulate(gaps, initial=0))[1:]
    offsets = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 8 * (len(keys) + 2))
    times = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 12 * (len(keys) + 2))
    try:
        for slot, key in enumerate(keys):
            offsets.append(key, slot + 1)
            times.maybe_append(key, slot + 1)
        for probe in probes + keys[:20] + [k + 1 for k in keys[:20]]:
            at_or_below = bisect_right(keys, probe) - 1
            below = bisect_left(keys, probe) - 1
            assert offsets.lookup(probe) == (
                (keys[at_or_below], at_or_below + 1) if at_or_below >= 0 else (0, 0)
            )
            assert times.lookup(probe) == ((keys[below], below + 1) if below >= 0 else (-1, 0))
    finally:
        offsets.delete()
        times.delete()


@pytest.mark.parametrize("entries", [0, 1, 511, 512, 513, 1500])
def test_a_reopen_of_a_large_sparse_index_counts_every_entry(tmp_path, entries):
    """The count searches only the written part of the file (before its first hole): entries
    that end on, before and past a page boundary are all found."""
    index = OffsetIndex(tmp_path / "big.index", 0, 10 * 1024 * 1024)
    for number in range(entries):
        index.append(number + 1, number * 100)
    index.flush()
    index.close()

    reopened = OffsetIndex(tmp_path / "big.index", 0, 10 * 1024 * 1024)
    assert reopened.entries == entries
    if entries:
        assert reopened.lookup(10**9) == (entries, (entries - 1) * 100)
    reopened.close()


def test_a_truncation_whose_write_fails_leaves_the_index_as_it_was(offset_index, monkeypatch):
    for number in range(3):
        offset_index.append(110 + 10 * number, 1000 * (number + 1))

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    with pytest.raises(OSError):
        offset_index.truncate_to(115)
    monkeypatch.undo()

    assert (offset_index.entries, offset_index.last_entry) == (3, (130, 3000))
    with pytest.raises(ValueError, match="not after the last entry"):
        offset_index.append(125, 2500)  # still checked against the newest entry kept


def _raced_by(index, racer: str, real, tmp_path, opened: list[int], used: list[int]):
    """``real`` (os.fsync or os.pread) that, once it has run, has another thread release the
    index as the event loop does (``racer``: its idle check, or a close), then opens another
    file, which takes the lowest free descriptor number: the released one, if it was closed."""

    def call(fd, *args):
        used.append(fd)
        result = real(fd, *args)
        thread = threading.Thread(target=getattr(index, racer))
        thread.start()
        thread.join(5)
        assert not thread.is_alive()  # the release waits for nobody
        opened.append(os.open(tmp_path / "another-file", os.O_RDWR | os.O_CREAT))
        return result

    return call


@pytest.mark.parametrize("racer", ["release_if_idle", "release"])
@pytest.mark.parametrize("call", ["flush", "lookup"])
def test_a_flush_or_a_read_racing_the_writers_release_closes_only_its_own_descriptor(
    offset_index, tmp_path, monkeypatch, call, racer
):
    offset_index.append(110, 1000)  # the writer's descriptor is open, the entry not flushed
    offset_index.recently_written = False  # and idle by the next check
    opened: list[int] = []
    used: list[int] = []
    if call == "flush":
        monkeypatch.setattr(
            os, "fsync", _raced_by(offset_index, racer, os.fsync, tmp_path, opened, used)
        )
        offset_index.flush()
    else:  # the first lookup reads the entries from the file
        monkeypatch.setattr(
            os, "pread", _raced_by(offset_index, racer, os.pread, tmp_path, opened, used)
        )
        assert offset_index.lookup(115) == (110, 1000)
    monkeypatch.undo()

    [other], [borrowed] = opened, used
    assert other != borrowed  # the borrowed descriptor stayed open while it was used
    os.fstat(other)  # and nothing closed the other file's
    os.close(other)
    with pytest.raises(OSError):
        os.fstat(borrowed)  # closed once given back: released, not leaked
    assert not offset_index.is_open
    offset_index.append(120, 2000)  # the next write opens the index again
    assert offset_index.lookup(125) == (120, 2000)


def test_a_trim_while_the_index_is_released_opens_the_file_for_itself(offset_index):
    offset_index.append(110, 1000)
    offset_index.release()

    offset_index.trim()

    assert offset_index.path.stat().st_size == 8
    assert not offset_index.is_open


def test_a_flush_that_finds_its_index_deleted_meanwhile_has_nothing_to_do(
    offset_index, monkeypatch
):
    offset_index.append(110, 1000)
    offset_index.release()  # not written since: the flush opens the file for itself
    real_open = os.open

    def open_after_the_delete(path, *args):
        offset_index.delete()  # the writer deletes the segment between the check and the open
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", open_after_the_delete)
    offset_index.flush()
    monkeypatch.undo()

    assert not offset_index.path.exists()
