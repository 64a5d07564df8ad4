"""The cleaner's offset map and which messages a clean keeps, on message sets built as producers
and the broker write them, with every codec and both formats."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.log import compaction
from tidelog.log import offset_map as offset_map_module
from tidelog.log.compaction import filter_entries
from tidelog.log.offset_map import OffsetMap, OffsetMapFull
from tidelog.records.compression import decompress
from tidelog.records.format import (
    MESSAGE_SET_CODECS,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    iter_deep,
    iter_shallow,
)


def test_the_offset_map_keeps_the_latest_offset_per_key_and_fills_at_its_load_factor():
    offset_map = OffsetMap(memory=24 * 10, load_factor=0.5)
    for offset, key in enumerate([b"a", b"b", b"a", b"c", b"d"]):
        offset_map.put(key, offset)

    assert (offset_map.get(b"a"), offset_map.get(b"b"), offset_map.get(b"zzz")) == (2, 1, -1)
    assert offset_map.size == 4 and offset_map.latest_offset == 4
    offset_map.put(b"a", 7)  # a known key still fits
    assert offset_map.get(b"a") == 7 and offset_map.latest_offset == 7
    offset_map.put(b"e", 8)  # the fifth key: 10 slots at load factor 0.5
    with pytest.raises(OffsetMapFull):
        offset_map.put(b"f", 9)
    offset_map.clear()
    assert offset_map.get(b"a") == -1 and offset_map.size == 0


@given(keys=st.lists(st.binary(max_size=6), max_size=60))
def test_the_offset_map_agrees_with_a_dict_even_when_every_slot_is_probed(keys):
    offset_map = OffsetMap(memory=24 * 64, load_factor=1.0)
    model: dict[bytes, int] = {}
    for offset, key in enumerate(keys):
        offset_map.put(key, offset)
        model[key] = offset
    for key in {*keys, b"never-put"}:
        assert offset_map.get(key) == model.get(key, -1)


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=4), max_size=80),
    slots=st.integers(min_value=1, max_value=64),
    load_factor=st.sampled_from([0.5, 0.9, 1.0]),
)
def test_putting_keys_in_one_pass_fills_the_buffer_as_putting_them_one_at_a_time(
    keys, slots, load_factor
):
    def filled(put_in_one_pass: bool, walk) -> tuple[bytes, int, int] | str:
        offset_map = OffsetMap(memory=24 * slots, load_factor=load_factor)
        try:
            with mock.patch.object(offset_map_module, "native", walk):
                if put_in_one_pass:
                    offset_map.put_all({key: offset for offset, key in enumerate(keys)})
                else:
                    for offset, key in enumerate(keys):
                        offset_map.put(key, offset)
        except OffsetMapFull:
            return "full"
        return bytes(offset_map.buffer), offset_map.size, offset_map.latest_offset

    one_at_a_time = filled(False, None)
    assert filled(True, None) == one_at_a_time
    assert filled(True, offset_map_module.native) == one_at_a_time


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.binary(max_size=3), max_size=40), asked=st.lists(st.binary(max_size=3)))
def test_keys_looked_up_at_once_are_remembered_as_get_finds_them(keys, asked):
    offset_map = OffsetMap(memory=24 * 40, load_factor=1.0)
    offset_map.put_all({key: offset for offset, key in enumerate(keys)})
    offset_map.remember(asked)
    assert set(offset_map.remembered) == ({*asked} if offset_map_module.native else set())
    found = {key: offset_map.get(key) for key in asked}
    offset_map.remembered.clear()
    assert {key: offset_map.get(key) for key in asked} == found


# A batch: (codec, records as (key, value) with None for null).
BATCHES = st.lists(
    st.tuples(
        st.sampled_from(list(MESSAGE_SET_CODECS)),
        st.lists(
            st.tuples(
                st.none() | st.sampled_from([b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]),
                st.none() | st.binary(min_size=1, max_size=8),
            ),
            min_size=1,
            max_size=6,
        ),
    ),
    min_size=1,
    max_size=12,
)


def log_of(batches, magic: int, timestamp_type=TimestampType.CREATE_TIME) -> bytes:
    data, offset = b"", 0
    for codec, records in batches:
        data += build_message_set(
            [Record(k, v, 1000 + offset + i) for i, (k, v) in enumerate(records)],
            magic=magic,
            codec=codec,
            base_offset=offset,
            timestamp_type=timestamp_type,
            wrapper_timestamp=5555 if timestamp_type == TimestampType.LOG_APPEND_TIME else None,
        )
        offset += len(records)
    return data


def mapped(data: bytes) -> OffsetMap:
    offset_map = OffsetMap(memory=24 * 100)
    for message in iter_deep(data):
        if message.key is not None:
            offset_map.put(message.key, message.offset)
    return offset_map


@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, magic=st.sampled_from([0, 1]), retain_deletes=st.booleans())
def test_a_clean_keeps_exactly_the_last_message_of_every_key_at_its_offset(
    batches, magic, retain_deletes
):
    data = log_of(batches, magic)
    before = list(iter_deep(data))
    last = {m.key: m for m in before if m.key is not None}
    expected = sorted(
        (m.offset, m.key, m.value) for m in last.values() if m.value is not None or retain_deletes
    )

    cleaned, stats = filter_entries(data, mapped(data), retain_deletes)

    after = list(iter_deep(bytes(cleaned)))
    assert [(m.offset, m.key, m.value) for m in after] == expected
    assert all(m.crc_valid for m in iter_shallow(bytes(cleaned)))
    assert (stats.messages_read, stats.messages_kept) == (len(before), len(after))
    assert (stats.bytes_read, stats.bytes_kept) == (len(data), len(cleaned))
    original_codecs = {m.offset: m.codec for m in iter_shallow(data)}
    for wrapper in iter_shallow(bytes(cleaned)):
        if wrapper.codec != Codec.NONE:  # a rewritten wrapper keeps its codec and its offset
            assert any(
                codec == wrapper.codec and offset >= wrapper.offset
                for offset, codec in original_codecs.items()
            )


def test_a_partly_kept_v1_wrapper_keeps_the_gaps_and_its_log_append_time():
    records = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4"), (b"b", b"5"), (b"d", b"6")]
    data = log_of([(Codec.GZIP, records[:4]), (Codec.NONE, records[4:])], 1,
                  TimestampType.LOG_APPEND_TIME)  # fmt: skip

    cleaned, _ = filter_entries(data, mapped(data), retain_deletes=True)

    (wrapper, *plain) = list(iter_shallow(bytes(cleaned)))
    assert wrapper.offset == 3 and wrapper.codec == Codec.GZIP and wrapper.timestamp == 5555
    inner = list(iter_shallow(decompress(Codec.GZIP, wrapper.value, 1)))
    assert [m.offset for m in inner] == [0, 1]  # offsets 2 and 3, relative to the first kept
    assert [(m.offset, m.value) for m in iter_deep(bytes(cleaned))] == [
        (2, b"3"),
        (3, b"4"),
        (4, b"5"),
        (5, b"6"),
    ]
    assert [m.offset for m in plain] == [4, 5]


def test_tombstones_go_only_when_deletes_are_not_retained_and_unkeyed_messages_always_go():
    data = log_of([(Codec.NONE, [(b"a", b"1"), (b"a", None), (None, b"x"), (b"b", b"2")])], 1)

    kept, _ = filter_entries(data, mapped(data), retain_deletes=True)
    dropped, _ = filter_entries(data, mapped(data), retain_deletes=False)

    assert [(m.key, m.value) for m in iter_deep(bytes(kept))] == [(b"a", None), (b"b", b"2")]
    assert [(m.key, m.value) for m in iter_deep(bytes(dropped))] == [(b"b", b"2")]


@settings(max_examples=150, deadline=None)
@given(
    batches=BATCHES,
    magic=st.sampled_from([0, 1]),
    retain_deletes=st.booleans(),
    cut=st.integers(min_value=0, max_value=40),
)
def test_the_native_loops_take_what_the_python_loops_take(batches, magic, retain_deletes, cut):
    data = log_of(batches, magic)
    data = data[: max(len(data) - cut, 0)]  # perhaps ending in part of an entry
    offset_map = mapped(data)
    results = []
    for walk in (compaction.native, None):
        with mock.patch.object(compaction, "native", walk):
            latest: dict[bytes, int] = {}
            ended = compaction.latest_offsets(data, latest)
            kept, stats = filter_entries(data, offset_map, retain_deletes, partial_tail=True)
        results.append((ended, list(latest.items()), bytes(kept), stats))
    assert results[0] == results[1]
