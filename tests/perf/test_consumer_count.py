"""The perf consumer counts records exactly: inner records of wrappers, from the fetch offset,
up to the number wanted, with their key and value bytes beside the bytes fetched."""

from __future__ import annotations

import pytest

from tidelog.perf.consumer import count_records
from tidelog.records.format import Codec, Record, build_message_set


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_records_are_counted_from_the_fetch_offset_up_to_the_number_wanted(codec, magic):
    records = [Record(b"k", b"v" * 100, 0) for _ in range(10)]
    data = build_message_set(records, magic=magic, codec=codec, base_offset=20) + (
        build_message_set(records, magic=magic, codec=codec, base_offset=30)
    )

    everything = count_records(data, 20, 1000)
    assert (everything.records, everything.next_offset) == (20, 40)
    assert everything.record_bytes == 20 * 101
    assert everything.fetched_bytes == len(data)

    from_the_middle = count_records(data, 25, 1000)  # inside the first wrapper
    assert (from_the_middle.records, from_the_middle.next_offset) == (15, 40)

    some = count_records(data, 25, 7)
    assert (some.records, some.next_offset, some.record_bytes) == (7, 32, 7 * 101)


def test_a_partial_entry_at_the_end_is_not_counted():
    data = build_message_set([Record(None, b"x" * 50, 0)] * 3, magic=1)
    counted = count_records(data[:-10], 0, 100)
    assert (counted.records, counted.record_bytes) == (2, 100)
