"""Kafka message format v2 (0.11 to 2.1): the record batch, laid out as Kafka's
DefaultRecordBatch.

    RecordBatch => BaseOffset:int64 Length:int32 PartitionLeaderEpoch:int32 Magic:int8(2)
                   CRC:uint32 Attributes:int16 LastOffsetDelta:int32 FirstTimestamp:int64
                   MaxTimestamp:int64 ProducerId:int64 ProducerEpoch:int16 BaseSequence:int32
                   Records:[Record]   (int32 count, then the records, compressed as a whole)
    Record => Length:varint Attributes:int8 TimestampDelta:varlong OffsetDelta:varint
              Key:varbytes Value:varbytes Headers:[Key:varstring Value:varbytes]

The first 12 bytes (base offset, length) frame a batch exactly as they frame a v0/v1 entry, and
the magic byte sits at the same place (16), so one walker reads segments that mix all three.
The CRC is CRC-32C over Attributes..end: base offset and partition leader epoch lie outside
it, so a leader assigns offsets and stamps its epoch without recomputing it. A batch's last
offset is base offset + last offset delta; the offset field of a v0/v1 entry is already its
last offset (a v1 wrapper carries its last inner message's offset).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType

from crc32c import crc32c

from tidelog.records.format import (
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    Buffer,
    Codec,
    Record,
    TimestampType,
    corrupt,
)

native: ModuleType | None
try:  # the leader's walk over uncompressed records, built by make install (setup.py)
    import tidelog.records._record_walk as native
except ImportError:  # a source tree nobody built: check_records_python does the same
    native = None

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# Positions inside a batch, counted from its base offset.
PARTITION_LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers from here to the end
LAST_OFFSET_DELTA_AT = 23
FIRST_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
RECORD_COUNT_AT = 57
# The smallest Length a batch can have: its header after the base offset and length fields.
MIN_LENGTH = HEADER_SIZE - 12

TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
CODEC_MASK = 0x07
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT32 = struct.Struct(">I")
INT16 = struct.Struct(">h")

Header = tuple[str, bytes | None]


# -- varints (zigzag, as protobuf's sint32/sint64) ---------------------------------------------


UINT64_MASK = 2**64 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # a Java long's range: offsets, times, deltas


def int64(value: int) -> int:
    """``value`` wrapped to a signed 64-bit integer, as Java's long arithmetic wraps: a v2
    record's time is its batch's first time plus its delta, a sum Kafka makes in a long (and a
    rewritten batch's deltas differences it makes so), so a delta at the end of the range
    gives a time at the other end, and every such time still fits the format's fields."""
    return ((value + 2**63) & UINT64_MASK) - 2**63


def write_varint(out: bytearray, value: int) -> None:
    """Appends ``value`` zigzag-encoded (varint and varlong alike: the encoding is the same)."""
    value = (value << 1) ^ (value >> 63)
    value &= UINT64_MASK
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_varint(buffer: Buffer, position: int, limit: int) -> tuple[int, int]:
    """(value, next position) of the zigzag varint at ``position``; CORRUPT_MESSAGE if it runs
    past ``limit`` or past ten bytes. A tenth byte's bits past the 64th are dropped, as Kafka's
    readVarlong drops them: the value is always a signed 64-bit integer."""
    result = shift = 0
    while True:
        if position >= limit:
            raise corrupt("a varint runs past the end of its record")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            result &= UINT64_MASK
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift >= 70:
            raise corrupt("a varint is longer than ten bytes")


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchRecord:
    """One record as read from a batch: absolute offset and timestamp resolved."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    size: int = 0  # the record's bytes, its length varint included


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    body = bytearray(b"\x00")  # attributes: unused in v2, always 0
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    write_varint(body, len(headers))
    for name, header_value in headers:
        _write_bytes(body, name.encode())
        _write_bytes(body, header_value)
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def _read_bytes(buffer: Buffer, position: int, limit: int) -> tuple[bytes | None, int]:
    length, position = read_varint(buffer, position, limit)
    if length < 0:
        if length != -1:
            raise corrupt(f"negative length {length} in a record")
        return None, position
    if position + length > limit:
        raise corrupt("a record's field runs past the end of the record")
    return bytes(buffer[position : position + length]), position + length


def iter_records(
    data: Buffer, count: int, base_offset: int, first_timestamp: int
) -> Iterator[BatchRecord]:
    """The ``count`` records of an uncompressed records section; CORRUPT_MESSAGE if they do not
    exactly fill it or any field is malformed."""
    position, end = 0, len(data)
    for _ in range(count):
        start = position
        length, position = read_varint(data, position, end)
        limit = position + length
        if length < 1 or limit > end:
            raise corrupt(f"record length {length} does not fit its batch")
        position += 1  # attributes
        timestamp_delta, position = read_varint(data, position, limit)
        offset_delta, position = read_varint(data, position, limit)
        key, position = _read_bytes(data, position, limit)
        value, position = _read_bytes(data, position, limit)
        header_count, position = read_varint(data, position, limit)
        if header_count < 0:
            raise corrupt(f"negative header count {header_count}")
        headers = []
        for _ in range(header_count):
            name, position = _read_bytes(data, position, limit)
            if name is None:
                raise corrupt("a record header has a null key")
            header_value, position = _read_bytes(data, position, limit)
            headers.append((name.decode("utf-8", "replace"), header_value))
        if position != limit:
            raise corrupt("a record's fields do not fill its length")
        yield BatchRecord(
            base_offset + offset_delta,
            int64(first_timestamp + timestamp_delta),
            key,
            value,
            tuple(headers),
            limit - start,
        )
    if position != end:
        raise corrupt(f"{end - position} bytes after a batch's {count} records")


# -- batches -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchHeader:
    """The 61-byte header of a batch at ``position`` in some buffer."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """The whole batch, its base offset and length fields included."""
        return 12 + self.length

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 2**31


def read_header(buffer: Buffer, position: int = 0) -> BatchHeader:
    return BatchHeader(*HEADER.unpack_from(buffer, position), position=position)  # type: ignore[misc]


def batch_crc(buffer: Buffer, position: int, end: int) -> int:
    return crc32c(memoryview(buffer)[position + ATTRIBUTES_AT : end])


def check_batch(buffer: Buffer, position: int, limit: int) -> BatchHeader:
    """The header of the whole, CRC-checked v2 batch at ``position``; CORRUPT_MESSAGE naming the
    fault otherwise (partial, too short, CRC-32C mismatch, codec or counts that cannot be)."""
    if limit - position < HEADER_SIZE:
        raise corrupt(f"partial batch header at position {position}")
    header = read_header(buffer, position)
    if header.magic != MAGIC:
        raise corrupt(f"magic {header.magic} at position {position} is not a v2 batch")
    if header.length < MIN_LENGTH:
        raise corrupt(f"batch length {header.length} at position {position} is below the minimum")
    end = position + header.size
    if end > limit:
        raise corrupt(
            f"partial batch at position {position}: length {header.length}, "
            f"{limit - position - 12} left"
        )
    if batch_crc(buffer, position, end) != header.crc:
        raise corrupt(f"CRC-32C mismatch in the batch at offset {header.base_offset}")
    if header.attributes & CODEC_MASK > Codec.ZSTD:
        raise corrupt(f"unknown compression codec {header.attributes & CODEC_MASK}")
    if header.record_count < 0 or header.last_offset_delta < 0:
        raise corrupt(
            f"record count {header.record_count} and last offset delta "
            f"{header.last_offset_delta} cannot be"
        )
    return header


def records_section(buffer: Buffer, header: BatchHeader) -> bytes:
    """The batch's records, decompressed."""
    from tidelog.records.compression import decompress

    start = header.position + HEADER_SIZE
    data = bytes(buffer[start : header.position + header.size])
    if header.codec == Codec.NONE:
        return data
    return decompress(header.codec, data, MAGIC)


def read_records(buffer: Buffer, header: BatchHeader) -> list[BatchRecord]:
    return list(
        iter_records(
            records_section(buffer, header),
            header.record_count,
            header.base_offset,
            header.first_timestamp,
        )
    )


@dataclass(frozen=True)
class BatchRecordInput:
    """What a producer hands over for a v2 record: a key, a value, a create time and headers."""

    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP
    headers: tuple[Header, ...] = field(default=())


def encode_batch(
    records: Iterable[Record | BatchRecordInput],
    *,
    base_offset: int = 0,
    codec: Codec = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
) -> bytes:
    """One batch as a producer (or the broker, converting) writes it: offset deltas 0..n-1,
    timestamp deltas from the first record's time. ``max_timestamp`` overrides the largest
    record time (LogAppendTime: the broker's)."""
    from tidelog.records.compression import compress

    records = list(records)
    if not records:
        raise ValueError("a batch needs at least one record")
    first_timestamp = records[0].timestamp
    body = b"".join(
        encode_record(
            delta,
            int64(record.timestamp - first_timestamp),  # Kafka's builder: a long difference
            record.key,
            record.value,
            getattr(record, "headers", ()),
        )
        for delta, record in enumerate(records)
    )
    if codec != Codec.NONE:
        body = compress(codec, body, MAGIC)
    attributes = int(codec)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if max_timestamp is None:
        max_timestamp = max(record.timestamp for record in records)
    header = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_SIZE - 12 + len(body),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            len(records) - 1,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + body
    UINT32.pack_into(batch, CRC_AT, batch_crc(batch, 0, len(batch)))
    return bytes(batch)


def encode_batch_body(
    records: bytes,
    count: int,
    timestamp: int,
    codec: Codec = Codec.NONE,
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, -1, -1),
) -> bytes:
    """A batch around ``count`` records already encoded (offset deltas 0..count-1, all of
    ``timestamp``), compressed with ``codec``, from ``producer`` (id, epoch, base sequence):
    what a producer that keeps encoded records (tidelog's perf producer) sends."""
    from tidelog.records.compression import compress

    body = records if codec == Codec.NONE else compress(codec, records, MAGIC)
    batch = bytearray(
        HEADER.pack(
            0,
            HEADER_SIZE - 12 + len(body),
            NO_PARTITION_LEADER_EPOCH,
            MAGIC,
            0,
            int(codec),
            count - 1,
            timestamp,
            timestamp,
            *producer,
            count,
        )
    )
    batch += body
    set_crc(batch, 0, len(batch))
    return bytes(batch)


def set_crc(batch: bytearray, position: int, end: int) -> None:
    UINT32.pack_into(batch, position + CRC_AT, batch_crc(batch, position, end))


def epoch_starts(buffer: Buffer, end: int, latest_epoch: int) -> list[tuple[int, int]]:
    """(epoch, base offset) of each v2 batch in ``buffer[:end]`` whose partition leader epoch is
    newer than the one before it (starting from ``latest_epoch``): where each leader's writes
    begin, as a follower's leader epoch cache learns it from the batches (Kafka 0.11+)."""
    starts = []
    position = 0
    while position + HEADER_SIZE <= end:
        (base_offset, length, epoch, magic) = HEADER.unpack_from(buffer, position)[:4]
        if magic == MAGIC and epoch > latest_epoch:
            starts.append((epoch, base_offset))
            latest_epoch = epoch
        position += 12 + length
    return starts


def _varint_at(data: Buffer, position: int, limit: int) -> tuple[int, int]:
    """read_varint with the one-byte case (most lengths and deltas) inline."""
    if position < limit:
        byte = data[position]
        if byte < 0x80:
            return (byte >> 1) ^ -(byte & 1), position + 1
    return read_varint(data, position, limit)


def check_records(data: Buffer, count: int, *, keys_required: bool) -> tuple[int, int, int]:
    """check_records_python's walk, in C where make install built it (_record_walk.c)."""
    if native is None:
        return check_records_python(data, count, keys_required=keys_required)
    answer = native.check_records(data, count, keys_required)
    if isinstance(answer, str):
        raise corrupt(answer)
    return answer


def check_records_python(data: Buffer, count: int, *, keys_required: bool) -> tuple[int, int, int]:
    """Walks an uncompressed records section without building a record: each record's length
    fills it exactly, its offset delta is its index, its fields and headers fit, and (with
    ``keys_required``) its key is not null. Returns (smallest and largest timestamp delta, the
    index of the record with the largest); CORRUPT_MESSAGE naming the first fault."""
    position, end = 0, len(data)
    low, high, index_of_high = INT64_MAX, INT64_MIN, 0
    for index in range(count):
        length, position = _varint_at(data, position, end)
        limit = position + length
        if length < 1 or limit > end:
            raise corrupt(f"record length {length} does not fit its batch")
        timestamp_delta, position = _varint_at(data, position + 1, limit)
        offset_delta, position = _varint_at(data, position, limit)
        if offset_delta != index:
            raise corrupt(f"record offset delta {offset_delta} where {index} belongs")
        if timestamp_delta > high:
            high, index_of_high = timestamp_delta, index
        low = min(low, timestamp_delta)
        for which in range(2):  # key, value
            size, position = _varint_at(data, position, limit)
            if size < -1 or position + max(size, 0) > limit:
                raise corrupt("a record's field runs past the end of the record")
            if size < 0 and which == 0 and keys_required:
                raise corrupt("a compacted topic accepts only records with a key")
            position += max(size, 0)
        headers, position = _varint_at(data, position, limit)
        if headers < 0:
            raise corrupt(f"negative header count {headers}")
        for _ in range(headers):
            for which in range(2):  # header key (never null), header value
                size, position = _varint_at(data, position, limit)
                if size < -1 or (size < 0 and which == 0) or position + max(size, 0) > limit:
                    raise corrupt("a record header does not fit its record")
                position += max(size, 0)
        if position != limit:
            raise corrupt("a record's fields do not fill its length")
    if position != end:
        raise corrupt(f"{end - position} bytes after a batch's {count} records")
    return low, high, index_of_high
