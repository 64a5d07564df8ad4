"""The cleaner's offset map and which messages a clean keeps, on message sets built as producers
and the broker write them, with every codec and both formats."""

from __future__ import annotations

import zlib
from functools import partial
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.log import compaction
from tidelog.log import offset_map as offset_map_module
from tidelog.log.compaction import filter_entries
from tidelog.log.offset_map import OffsetMap, OffsetMapFull
from tidelog.records.compression import compress, decompress
from tidelog.records.format import (
    CRC,
    INT32,
    LOG_OVERHEAD,
    MESSAGE_SET_CODECS,
    OFFSET_AND_SIZE,
    Codec,
    Record,
    TimestampType,
    build_message_set,
    encode_message,
    iter_deep,
    iter_shallow,
    key_position,
)
from tidelog.records.record_batch import (
    HEADER,
    HEADER_SIZE,
    BatchRecordInput,
    encode_batch,
    set_crc,
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
    assert offset_map.buffer == bytes(24 * 10)  # zeroed in place: every slot empty again


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


@pytest.mark.skipif(offset_map_module.native is None, reason="make install builds the C loops")
@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.integers(min_value=0, max_value=30), max_size=120),
    start=st.integers(min_value=0, max_value=130),
    length=st.integers(min_value=1, max_value=140),
    asked=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), max_size=30),
)
def test_the_marks_name_the_offsets_that_are_a_keys_latest(keys, start, length, asked):
    offset_map = OffsetMap(memory=24 * 64, load_factor=1.0)
    offset_map.put_all({b"%d" % key: offset for offset, key in enumerate(keys)})
    latest = {offset_map.get(b"%d" % key) for key in keys}
    offset_map.mark_latest(start, start + length)

    for first, span in asked:
        last = first + span
        within = start <= first and last < start + length
        expected = any(first <= offset <= last for offset in latest) if within else True
        assert offset_map.holds_latest(first, last) == expected, (first, last)


def test_marks_are_forgotten_by_any_put_or_clear():
    offset_map = OffsetMap(memory=24 * 64)
    for forget in (
        lambda: offset_map.put(b"b", 3),
        lambda: offset_map.put_all({b"b": 3}),
        offset_map.clear,
    ):
        offset_map.clear()
        offset_map.put_all({b"a": 0})
        offset_map.put_all({b"a": 1, b"b": 2})  # offset 0 is no key's latest
        offset_map.mark_latest(0, 3)
        assert offset_map.holds_latest(0, 0) == (offset_map_module.native is None)
        forget()
        assert offset_map.holds_latest(0, 0)  # may hold: nothing marked


def test_a_range_of_offsets_too_sparse_for_the_map_is_not_marked():
    offset_map = OffsetMap(memory=24 * 4)
    offset_map.put_all({b"a": 0, b"b": 1})
    offset_map.mark_latest(0, 4 * offset_map_module.MARKS_PER_SLOT + 1)
    assert offset_map.marks is None and offset_map.holds_latest(0, 0)


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
    results = []
    # the last: the C walks with an offset map that remembers nothing at once (each key is
    # then looked up alone)
    for walk, probe in (
        (compaction.native, offset_map_module.native),
        (None, None),
        (compaction.native, None),
    ):
        offset_map = mapped(data)
        with (
            mock.patch.object(compaction, "native", walk),
            mock.patch.object(offset_map_module, "native", probe),
        ):
            latest: dict[bytes, int] = {}
            ended = compaction.latest_offsets(data, latest)
            kept, stats = filter_entries(data, offset_map, retain_deletes, partial_tail=True)
        results.append((ended, list(latest.items()), bytes(kept), stats))
    assert results[0] == results[1] == results[2]


# -- damaged compressed entries: the C walks leave them to the Python loops, which fail or map as
# they always did

WRAPPED = [(b"k0", b"v0"), (b"k1", b"v1"), (b"k0", None), (b"k2", b"v2")]


def wrapper_around(inner: bytes, magic: int, codec: Codec, last_offset: int) -> bytes:
    """A compressed wrapper entry whose inner message set is ``inner``, whatever it holds."""
    message = encode_message(magic, None, compress(codec, inner, magic), 5555, codec)
    return OFFSET_AND_SIZE.pack(last_offset, len(message)) + message


def inner_set(magic: int) -> bytearray:
    """WRAPPED as the inner message set of a wrapper (v1: offsets relative, 0..3)."""
    return bytearray(
        build_message_set([Record(k, v, 1000 + i) for i, (k, v) in enumerate(WRAPPED)], magic=magic)
    )


def _flip_last_value_byte(inner: bytearray) -> bytes:
    inner[-1] ^= 0xFF
    return bytes(inner)


def _first_key_length(inner: bytearray, magic: int, length: int) -> bytes:
    INT32.pack_into(inner, LOG_OVERHEAD + key_position(magic), length)
    return bytes(inner)


def _first_crc_matching(inner: bytes) -> bytes:
    """``inner`` with its first message's CRC made to match what the message now holds."""
    fixed = bytearray(inner)
    (size,) = INT32.unpack_from(fixed, 8)
    CRC.pack_into(fixed, LOG_OVERHEAD, zlib.crc32(fixed[LOG_OVERHEAD + 4 : LOG_OVERHEAD + size]))
    return bytes(fixed)


def _first_magic(inner: bytearray, magic: int) -> bytes:
    inner[LOG_OVERHEAD + 4] = magic
    return bytes(inner)


INNER_DAMAGES = {
    "a CRC that does not match": lambda inner, magic: _flip_last_value_byte(inner),
    "the last message cut": lambda inner, magic: bytes(inner[:-5]),
    "a few bytes after the last message": lambda inner, magic: bytes(inner) + b"\x00" * 7,
    "an unknown inner magic": lambda inner, magic: _first_magic(inner, 7),
    "an inner v2 magic": lambda inner, magic: _first_magic(inner, 2),
    "a key past its message": lambda inner, magic: _first_key_length(inner, magic, 40),
    "a key of length -2": lambda inner, magic: _first_key_length(inner, magic, -2),
    "a key past its message, its CRC matching": lambda inner, magic: _first_crc_matching(
        _first_key_length(inner, magic, 40)
    ),
    "a key of length -2, its CRC matching": lambda inner, magic: _first_crc_matching(
        _first_key_length(inner, magic, -2)
    ),
    "a key over the value length, its CRC matching": lambda inner, magic: _first_crc_matching(
        _first_key_length(inner, magic, 4)
    ),
    "nothing inside": lambda inner, magic: b"",
}


def outcome(run) -> tuple:  # type: ignore[no-untyped-def]
    """What ``run()`` returned, or the type and text of what it raised."""
    try:
        return ("returned", run())
    except Exception as error:  # the same failure from both paths, whatever it is
        return ("raised", type(error).__name__, str(error))


def both_paths(data: bytes, offset_map: OffsetMap, retain_deletes: bool) -> list[tuple]:
    """(what mapping ``data`` returned or raised, the keys it put in order, what filtering it
    kept or raised) with the C walks and with the Python loops."""
    results = []
    for walk in (compaction.native, None):
        with mock.patch.object(compaction, "native", walk):
            latest: dict[bytes, int] = {}
            mapped_outcome = outcome(partial(compaction.latest_offsets, data, latest))
            filtered = outcome(partial(filter_entries, data, offset_map, retain_deletes))
        if filtered[0] == "returned":
            filtered = ("returned", bytes(filtered[1][0]), filtered[1][1])
        results.append((mapped_outcome, list(latest.items()), filtered))
    return results


def offsets_of_wrapped(base_offset: int) -> OffsetMap:
    offset_map = OffsetMap(memory=24 * 100)
    for offset, (key, _) in enumerate(WRAPPED):
        offset_map.put(key, base_offset + offset + 2)  # k0 and k1 stay, k2 goes
    return offset_map


@pytest.mark.parametrize("damage", INNER_DAMAGES)
@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("retain_deletes", [True, False])
def test_a_damaged_wrapper_maps_and_fails_alike_with_the_native_walk_and_without(
    damage, codec, magic, retain_deletes
):
    inner = INNER_DAMAGES[damage](inner_set(magic), magic)
    data = build_message_set([Record(b"k9", b"plain", 1)], magic=magic, base_offset=10)
    data += wrapper_around(inner, magic, codec, 14 if magic else 3)
    offset_map = offsets_of_wrapped(11)
    offset_map.put(b"k0", 11)

    with_native, without = both_paths(data, offset_map, retain_deletes)

    assert with_native == without


def _records_of(batch: bytes) -> bytearray:
    return bytearray(batch[HEADER_SIZE:])


def _first_record_body(section: bytearray, filler: int) -> bytes:
    length = section[0] >> 1  # a short record: its length is one varint byte
    section[2 : 1 + length] = bytes([filler]) * (length - 1)
    return bytes(section)


def _first_record_length(section: bytearray, length: int) -> bytes:
    section[0] = length << 1
    return bytes(section)


def _first_key_length_past_64_bits(section: bytearray) -> bytes:
    """The first record's key length (2: zigzag 4, one byte after its attributes, timestamp
    and offset deltas of one byte each) written as a ten-byte varint whose last byte carries
    bits past the 64th: Python's read_varint reads it whole, a 64-bit decoder would lose them."""
    length = section[0] >> 1
    body = section[1 : 1 + length]
    assert body[3] == 4
    longer = body[:3] + bytes([0x84, *[0x80] * 8, 0x02]) + body[4:]
    return bytes([len(longer) << 1]) + bytes(longer) + bytes(section[1 + length :])


RECORDS_DAMAGES = {
    "the last record cut": lambda section: bytes(section[:-3]),
    "bytes after the last record": lambda section: bytes(section) + b"\x02\x00",
    "varints running past their record": lambda section: _first_record_body(section, 0xFF),
    "a key past its record": lambda section: _first_record_body(section, 0x7E),
    "a record length past the section": lambda section: _first_record_length(section, 60),
    "a record length of zero": lambda section: _first_record_length(section, 0),
    "nothing inside": lambda section: b"",
    "a varint past 64 bits": _first_key_length_past_64_bits,
}


def batch_around(batch: bytes, section: bytes, codec: Codec, count_change: int) -> bytes:
    """``batch`` (uncompressed) with ``section`` as its records, compressed with ``codec``, and
    its record count changed by ``count_change``; its CRC matches."""
    body = compress(codec, section, 2)
    header = bytearray(batch[:HEADER_SIZE])
    fields = list(HEADER.unpack_from(header, 0))
    fields[1] = HEADER_SIZE - LOG_OVERHEAD + len(body)
    fields[5] |= codec
    fields[12] += count_change
    rebuilt = bytearray(HEADER.pack(*fields)) + body
    set_crc(rebuilt, 0, len(rebuilt))
    return bytes(rebuilt)


@pytest.mark.parametrize("damage", [*RECORDS_DAMAGES, "a count past the records", "count -1"])
@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.ZSTD])
@pytest.mark.parametrize("producer_id", [-1, 7])
@pytest.mark.parametrize("retain_deletes", [True, False])
def test_a_damaged_batch_maps_and_fails_alike_with_the_native_walk_and_without(
    damage, codec, producer_id, retain_deletes
):
    plain = encode_batch(
        [BatchRecordInput(k, v, 1000 + i, ()) for i, (k, v) in enumerate(WRAPPED)],
        base_offset=11,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )
    section = _records_of(plain)
    count_change = {"a count past the records": 1, "count -1": -5}.get(damage, 0)
    if damage in RECORDS_DAMAGES:
        section = bytearray(RECORDS_DAMAGES[damage](section))
    data = build_message_set([Record(b"k9", b"plain", 1)], magic=1, base_offset=10)
    data += batch_around(plain, bytes(section), codec, count_change)

    with_native, without = both_paths(data, offsets_of_wrapped(11), retain_deletes)

    assert with_native == without


def test_the_native_walks_take_undamaged_compressed_entries(monkeypatch):
    """Every equivalence test above would also pass with C walks that hand every wrapper and
    batch back to the Python loops: on undamaged ones each walk answers itself."""
    assert compaction.native is not None, "make install builds tidelog/log/_entry_walk.c"
    answered: dict[str, list[bool]] = {}
    names = ("map_inner", "filter_inner", "map_records", "filter_records")
    for name in names:
        real = getattr(compaction.native, name)

        def spy(*args, _real=real, _name=name):  # type: ignore[no-untyped-def]
            result = _real(*args)
            answered.setdefault(_name, []).append(result is not None)
            return result

        monkeypatch.setattr(compaction.native, name, spy)
    plain = encode_batch(
        [BatchRecordInput(k, v, 1000 + i, ()) for i, (k, v) in enumerate(WRAPPED)],
        base_offset=20,
    )
    data = build_message_set([Record(b"k9", b"plain", 1)], magic=1, base_offset=10)
    data += wrapper_around(inner_set(1), 1, Codec.GZIP, 14)
    data += batch_around(plain, bytes(_records_of(plain)), Codec.GZIP, 0)
    offset_map = offsets_of_wrapped(11)
    offset_map.put(b"k0", 22)

    compaction.latest_offsets(data, {})
    filter_entries(data, offset_map, False)

    assert {name: answered.get(name) for name in names} == {name: [True] for name in names}
