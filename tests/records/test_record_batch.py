"""Format v2 record batches: what tidelog writes reads back through a decoder written here from
the layout alone and through kafka-python's own, what kafka-python writes tidelog reads, and
the shallow walkers read segments mixing v0, v1 and v2."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record._crc32c import crc as reference_crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from tidelog.errors import KafkaError
from tidelog.records.format import (
    Codec,
    Record,
    build_message_set,
    iter_deep,
    read_entry,
    scan_entries,
)
from tidelog.records.record_batch import (
    BatchRecordInput,
    check_records,
    check_records_python,
    encode_batch,
    native,
    read_varint,
    write_varint,
)

NOW = 1_700_000_000_000
KAFKA_PYTHON_CODECS = {Codec.NONE: 0, Codec.GZIP: 1, Codec.SNAPPY: 2, Codec.LZ4: 3}


# -- an independent decoder: the layout of DESIGN.md, nothing of tidelog's ---------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), at


def _varbytes(data: bytes, at: int) -> tuple[bytes | None, int]:
    length, at = _varint(data, at)
    if length < 0:
        return None, at
    return data[at : at + length], at + length


def decode_independently(batch: bytes, decompress) -> dict:
    (
        base_offset,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = struct.unpack_from(">qiibIhiqqqhii", batch)
    assert magic == 2 and length == len(batch) - 12
    assert reference_crc32c(batch[21:]) == crc
    body = batch[61:]
    if attributes & 7:
        body = decompress(attributes & 7, body)
    records, at = [], 0
    for _ in range(count):
        size, at = _varint(body, at)
        end = at + size
        at += 1
        ts_delta, at = _varint(body, at)
        offset_delta, at = _varint(body, at)
        key, at = _varbytes(body, at)
        value, at = _varbytes(body, at)
        header_count, at = _varint(body, at)
        headers = []
        for _ in range(header_count):
            name, at = _varbytes(body, at)
            header_value, at = _varbytes(body, at)
            headers.append((name.decode(), header_value))
        assert at == end
        records.append((base_offset + offset_delta, first_ts + ts_delta, key, value, headers))
    assert at == len(body)
    return {
        "base_offset": base_offset,
        "last_offset": base_offset + last_delta,
        "max_timestamp": max_ts,
        "producer": (producer_id, producer_epoch, base_sequence),
        "leader_epoch": leader_epoch,
        "records": records,
    }


optional_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3).map(tuple)
records = st.lists(
    st.builds(
        BatchRecordInput,
        key=optional_bytes,
        value=optional_bytes,
        timestamp=st.integers(NOW - 10**6, NOW + 10**6),
        headers=headers,
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records,
    codec=st.sampled_from(list(Codec)),
    base_offset=st.integers(0, 2**40),
    producer=st.tuples(st.integers(-1, 2**40), st.integers(-1, 300), st.integers(-1, 2**30)),
)
def test_a_batch_reads_back_through_a_decoder_written_from_the_layout(
    records, codec, base_offset, producer
):
    from tidelog.records.compression import decompress

    batch = encode_batch(
        records,
        base_offset=base_offset,
        codec=codec,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        partition_leader_epoch=7,
    )

    decoded = decode_independently(batch, lambda c, data: decompress(c, data, 2))

    assert decoded["base_offset"] == base_offset
    assert decoded["last_offset"] == base_offset + len(records) - 1
    assert decoded["max_timestamp"] == max(r.timestamp for r in records)
    assert decoded["producer"] == producer
    assert decoded["leader_epoch"] == 7
    assert decoded["records"] == [
        (base_offset + i, r.timestamp, r.key, r.value, list(r.headers))
        for i, r in enumerate(records)
    ]
    # and tidelog's own walkers agree
    assert read_entry(batch, 0, len(batch))[0] == base_offset + len(records) - 1
    assert [(m.offset, m.key, m.value, m.headers) for m in iter_deep(batch)] == [
        (base_offset + i, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("codec", list(KAFKA_PYTHON_CODECS))
def test_kafka_python_reads_what_tidelog_writes_and_the_other_way_round(codec):
    ours = encode_batch(
        [BatchRecordInput(b"k%d" % i, b"v" * i, NOW + i, (("h", b"x"),)) for i in range(5)],
        base_offset=40,
        codec=codec,
    )
    batch = MemoryRecords(ours).next_batch()
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == [
        (40 + i, NOW + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(5)
    ]

    builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODECS[codec], False, 17, 3, 99, 1 << 20)
    for i in range(4):
        builder.append(i, NOW + i, b"key", b"value %d" % i, [("trace", b"t%d" % i)])
    theirs = bytes(builder.build())
    assert [(m.offset, m.timestamp, m.value, m.headers) for m in iter_deep(theirs)] == [
        (i, NOW + i, b"value %d" % i, (("trace", b"t%d" % i),)) for i in range(4)
    ]


def test_a_segment_may_mix_all_three_formats():
    v0 = build_message_set([Record(b"a", b"0")], magic=0, base_offset=0)
    v1 = build_message_set(
        [Record(b"b", b"1", NOW), Record(b"c", b"2", NOW + 5)],
        magic=1,
        codec=Codec.GZIP,
        base_offset=1,
    )
    v2 = encode_batch([BatchRecordInput(b"d", b"3", NOW + 9)] * 3, base_offset=3)
    data = v0 + v1 + v2

    scan = scan_entries(data, 0)

    assert (scan.first_offset, scan.last_offset, scan.end) == (0, 5, len(data))
    assert (scan.max_timestamp, scan.offset_of_max_timestamp) == (NOW + 9, 5)
    assert [(m.offset, m.magic) for m in iter_deep(data)] == [
        (0, 0),
        (1, 1),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 2),
    ]


def test_the_walkers_refuse_a_damaged_batch():
    batch = bytearray(encode_batch([BatchRecordInput(b"k", b"v", NOW)] * 2))
    batch[70] ^= 0xFF
    with pytest.raises(KafkaError, match="CRC-32C"):
        read_entry(batch, 0, len(batch))
    with pytest.raises(KafkaError, match="CRC-32C"):
        scan_entries(bytes(batch), 0)


@given(st.integers(-(2**63), 2**63 - 1))
def test_varints_round_trip(value):
    out = bytearray()
    write_varint(out, value)
    assert read_varint(out, 0, len(out)) == (value, len(out))


def test_a_varint_past_ten_bytes_is_corrupt():
    with pytest.raises(KafkaError, match="ten bytes"):
        read_varint(b"\xff" * 11, 0, 11)


def _walk(check, data: bytes, count: int, keys_required: bool):
    try:
        return check(data, count, keys_required=keys_required)
    except KafkaError as error:
        return error.message


@settings(max_examples=300, deadline=None)
@given(
    records=records,
    cut=st.integers(0, 40),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    extra_count=st.integers(-1, 1),
    keys_required=st.booleans(),
)
def test_the_c_walk_over_records_answers_as_the_python_one(
    records, cut, flips, extra_count, keys_required
):
    """Whole sections and damaged ones (cut short, bytes changed, the count off by one): the
    C loop and the Python reference give the same answer, fault messages included."""
    assert native is not None, "make install builds tidelog/records/_record_walk.c"
    body = bytearray(encode_batch(records)[61:])
    if cut and len(body) > cut:
        del body[-cut:]
    for at, value in flips:
        if body:
            body[at % len(body)] = value
    count = max(len(records) + extra_count, 0)

    python = _walk(check_records_python, bytes(body), count, keys_required)
    c = _walk(check_records, bytes(body), count, keys_required)

    assert c == python
