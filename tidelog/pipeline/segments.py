"""Segment files as rows: finding a partition's segments, planning a bounded scan with the
indexes, and decoding a segment into Arrow record batches. No Spark here, so the data source,
the benchmark and the tests share one reader.

A scan is planned per segment. Bounds come from filters on ``offset`` and ``timestamp``:

- a segment is skipped whole when its offsets [base, next base) miss the offset bounds, or when
  it is rolled (its time index ends with the final entry written at roll) and that entry's
  timestamp, the segment's largest, is below the lower timestamp bound;
- inside a segment, the scan starts at the offset index's position for the lower offset bound,
  or for the offset after the time index entry (T, O) with the largest T below the lower
  timestamp bound (every message with a larger timestamp comes after O), whichever is later;
- the scan stops after the first entry whose offset is above the upper offset bound.

Bounds only skip what cannot match; the rows read still hold some that do not, and Spark applies
the filters to them. ``ScanStats`` counts the bytes a scan read and the bytes it skipped.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tidelog.log.dump import OFFSET_ENTRY, TIME_ENTRY, read_index_entries
from tidelog.log.files import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from tidelog.log.segment import segment_file
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    LOG_OVERHEAD,
    MESSAGE_OVERHEAD,
    OFFSET_AND_SIZE,
    TIMESTAMP_TYPE_BIT,
    V0_ENTRY_HEADER,
    V1_ENTRY_HEADER,
    Codec,
    iter_inner,
    view_at,
)

log = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),  # milliseconds since the epoch, as Kafka; -1 for format v0
        ("timestamp_type", pa.int32()),  # -1 none (v0), 0 CreateTime, 1 LogAppendTime
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("magic", pa.int32()),
        ("codec", pa.string()),  # none, gzip, snappy, lz4, zstd: the wrapper's or batch's codec
        ("tier", pa.string()),  # local (segments on a broker's disk) or remote
        # a v2 record's headers, in order (empty for v0/v1 messages)
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
SPARK_SCHEMA = (
    "topic string, partition int, offset long, timestamp long, timestamp_type int, "
    "key binary, value binary, magic int, codec string, tier string, "
    "headers array<struct<key:string,value:binary>>"
)
CODEC_NAMES = [codec.name.lower() for codec in Codec]
READ_CHUNK = 8 * 1024 * 1024
BATCH_ROWS = 65536
PARTITION_DIRECTORY = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
NO_BOUND = None


@dataclass(frozen=True)
class Segment:
    """One segment file of one replica: offsets [base_offset, next_base_offset) (None: the
    newest segment, which may still grow) in ``size`` bytes."""

    topic: str
    partition: int
    directory: str
    base_offset: int
    next_base_offset: int | None
    size: int

    @property
    def log_path(self) -> Path:
        return segment_file(Path(self.directory), self.base_offset, ".log")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}/{self.log_path.name}"


@dataclass(frozen=True)
class Bounds:
    """What the filters allow: offsets in [min_offset, max_offset], timestamps >= min_timestamp
    (None: unbounded). An upper timestamp bound skips nothing: a later message may carry an
    earlier CreateTime."""

    min_offset: int | None = NO_BOUND
    max_offset: int | None = NO_BOUND
    min_timestamp: int | None = NO_BOUND


@dataclass(frozen=True)
class SegmentScan:
    """The part of a segment to read: from ``start_position`` until an entry's offset passes
    ``max_offset``. ``skipped`` says the whole segment needs no reading."""

    segment: Segment
    start_position: int
    max_offset: int | None
    skipped: bool


@dataclass(frozen=True)
class ScanStats:
    """Bytes of the segments a scan covered, of those it read, and of those it skipped."""

    segment_bytes: int = 0
    bytes_read: int = 0
    rows: int = 0

    @property
    def bytes_skipped(self) -> int:
        return self.segment_bytes - self.bytes_read

    def __add__(self, other: ScanStats) -> ScanStats:
        return ScanStats(
            self.segment_bytes + other.segment_bytes,
            self.bytes_read + other.bytes_read,
            self.rows + other.rows,
        )


# -- finding segments ---------------------------------------------------------------------------


def partition_directories(root: Path) -> list[Path]:
    """The partition directories under ``root``: a cluster directory (broker-*/logs/...), a log
    directory (topic-partition/...), or one partition directory."""
    if any(root.glob("*.log")):
        return [root]
    found = sorted(root.glob("broker-*/logs/*-*")) or sorted(root.glob("*-*"))
    return [d for d in found if d.is_dir() and PARTITION_DIRECTORY.match(d.name)]


def _replica_extent(directory: Path) -> tuple[int, int]:
    """(newest segment's base offset, its size): the replica holding more sorts higher."""
    logs = sorted(directory.glob("*.log"))
    if not logs:
        return -1, 0
    return int(logs[-1].stem), logs[-1].stat().st_size


def partition_replicas(
    root: str | Path, topic: str | None = None
) -> dict[tuple[str, int], list[Path]]:
    """The directories of every replica of every partition under ``root`` (only ``topic``'s,
    if given), by (topic, partition)."""
    replicas: dict[tuple[str, int], list[Path]] = {}
    for directory in partition_directories(Path(root)):
        match = PARTITION_DIRECTORY.match(directory.name)
        assert match is not None
        if topic is not None and match["topic"] != topic:
            continue
        replicas.setdefault((match["topic"], int(match["partition"])), []).append(directory)
    return dict(sorted(replicas.items()))


def segments_of(replicas: dict[tuple[str, int], list[Path]]) -> list[Segment]:
    """Every segment of each partition, from the replica that holds the most (the newest
    segment with the highest base offset, then the largest): in-sync replicas hold the same
    bytes, and a lagging one holds less."""
    segments = []
    for (name, partition), directories in replicas.items():
        directory = max(directories, key=_replica_extent)
        bases = sorted(int(path.stem) for path in directory.glob("*.log"))
        for base, next_base in zip(bases, [*bases[1:], None], strict=True):
            size = segment_file(directory, base, ".log").stat().st_size
            segments.append(Segment(name, partition, str(directory), base, next_base, size))
    return segments


def find_segments(root: str | Path, topic: str | None = None) -> list[Segment]:
    """Every local segment of every partition under ``root`` (only ``topic``'s, if given),
    one replica's of each (``segments_of``)."""
    return segments_of(partition_replicas(root, topic))


def first_offset(segment: Segment) -> int:
    """The smallest offset a segment holds: its first entry's first message, which may be below
    the base offset (a compressed wrapper carries its last inner offset); the base offset when
    the segment is empty."""
    with open(segment.log_path, "rb", buffering=0) as file:
        header = os.pread(file.fileno(), LOG_OVERHEAD, 0)
        if len(header) < LOG_OVERHEAD:
            return segment.base_offset
        _, size = OFFSET_AND_SIZE.unpack(header)
        entry = os.pread(file.fileno(), LOG_OVERHEAD + size, 0)
    batch, _ = decode_message_set(entry, segment.topic, segment.partition, None)
    offsets = batch.column("offset").to_pylist()
    return min(offsets) if offsets else segment.base_offset


# -- planning ------------------------------------------------------------------------------------


def written_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    """An index file's entries; none if the file is absent (a broker creates a segment's index
    files with their first entry, so a small or new segment may have none yet)."""
    try:
        return read_index_entries(path, entry)
    except FileNotFoundError:
        return []


def plan_segment(segment: Segment, bounds: Bounds) -> SegmentScan:
    """Where a scan of ``segment`` within ``bounds`` starts, or that it can be skipped."""
    directory = Path(segment.directory)
    if (bounds.min_offset is not None and segment.next_base_offset is not None) and (
        segment.next_base_offset <= bounds.min_offset
    ):
        return SegmentScan(segment, segment.size, bounds.max_offset, True)
    if bounds.max_offset is not None and segment.base_offset > bounds.max_offset:
        return SegmentScan(segment, segment.size, bounds.max_offset, True)
    start_offset = segment.base_offset
    if bounds.min_offset is not None:
        start_offset = max(start_offset, bounds.min_offset)
    if bounds.min_timestamp is not None and bounds.min_timestamp >= 0:
        time_entries = written_entries(
            segment_file(directory, segment.base_offset, TIME_INDEX_SUFFIX), TIME_ENTRY
        )
        timestamps = [timestamp for timestamp, _ in time_entries]
        if (
            segment.next_base_offset is not None
            and timestamps
            and timestamps[-1] < bounds.min_timestamp
        ):
            return SegmentScan(segment, segment.size, bounds.max_offset, True)
        slot = bisect_left(timestamps, bounds.min_timestamp) - 1
        if slot >= 0:
            start_offset = max(start_offset, segment.base_offset + time_entries[slot][1] + 1)
    offset_entries = written_entries(
        segment_file(directory, segment.base_offset, INDEX_SUFFIX), OFFSET_ENTRY
    )
    slot = (
        bisect_right(
            [relative for relative, _ in offset_entries], start_offset - segment.base_offset
        )
        - 1
    )
    position = offset_entries[slot][1] if slot >= 0 else 0
    return SegmentScan(segment, min(position, segment.size), bounds.max_offset, False)


# -- reading -------------------------------------------------------------------------------------


class _Columns:
    """Column lists filled entry by entry and cut into record batches."""

    def __init__(self, topic: str, partition: int, tier: str | None) -> None:
        self.topic, self.partition, self.tier = topic, partition, tier
        self.clear()

    def clear(self) -> None:
        self.offset: list[int] = []
        self.timestamp: list[int] = []
        self.timestamp_type: list[int] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.magic: list[int] = []
        self.codec: list[str] = []
        self.headers: list[list[dict[str, str | bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offset)

    def batch(self) -> pa.RecordBatch:
        rows = len(self.offset)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * rows, pa.string()),
                pa.array([self.partition] * rows, pa.int32()),
                pa.array(self.offset, pa.int64()),
                pa.array(self.timestamp, pa.int64()),
                pa.array(self.timestamp_type, pa.int32()),
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.magic, pa.int32()),
                pa.array(self.codec, pa.string()),
                pa.array([self.tier] * rows, pa.string()),
                pa.array(self.headers, SCHEMA.field("headers").type),
            ],
            schema=SCHEMA,
        )
        self.clear()
        return batch


def _decode(buffer: bytes, columns: _Columns, max_offset: int | None) -> tuple[int, bool]:
    """Appends the rows of every whole entry in ``buffer``; returns the bytes used and whether
    an entry passed ``max_offset`` (the scan is over). Uncompressed entries are unpacked here
    with the format's header structs; wrappers are opened by tidelog.records."""
    position, limit = 0, len(buffer)
    unpack_v0, unpack_v1 = V0_ENTRY_HEADER.unpack_from, V1_ENTRY_HEADER.unpack_from
    minimum = MESSAGE_OVERHEAD[0]
    offsets, timestamps, types = columns.offset, columns.timestamp, columns.timestamp_type
    keys, values, magics, codecs = columns.key, columns.value, columns.magic, columns.codec
    headers = columns.headers
    while limit - position >= LOG_OVERHEAD:
        offset, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
        end = position + LOG_OVERHEAD + size
        if size < minimum or end > limit:
            break
        magic = buffer[position + 16]
        # a v2 batch's attributes are an int16 after its CRC: its low byte names the codec
        attributes = buffer[position + (22 if magic == 2 else 17)]
        codec = attributes & CODEC_MASK
        if codec or magic == 2:
            for message in iter_inner(view_at(buffer, position)):
                offsets.append(message.offset)
                timestamps.append(message.timestamp)
                types.append(int(message.timestamp_type))
                keys.append(message.key)
                values.append(message.value)
                magics.append(magic)
                codecs.append(CODEC_NAMES[codec])
                headers.append([{"key": k, "value": v} for k, v in message.headers])
        else:
            if magic == 1:
                *_, timestamp, key_length = unpack_v1(buffer, position)
                timestamp_type = 1 if attributes & TIMESTAMP_TYPE_BIT else 0
                cursor = position + V1_ENTRY_HEADER.size
            else:
                *_, key_length = unpack_v0(buffer, position)
                timestamp, timestamp_type = -1, -1
                cursor = position + V0_ENTRY_HEADER.size
            if key_length >= 0:
                keys.append(buffer[cursor : cursor + key_length])
                cursor += key_length
            else:
                keys.append(None)
            (value_length,) = INT32.unpack_from(buffer, cursor)
            values.append(buffer[cursor + 4 : end] if value_length >= 0 else None)
            offsets.append(offset)
            timestamps.append(timestamp)
            types.append(timestamp_type)
            magics.append(magic)
            codecs.append("none")
            headers.append([])
        position = end
        if max_offset is not None and offset > max_offset:
            return position, True
    return position, False


def read_segment(
    scan: SegmentScan, tier: str = "local", stats: list[ScanStats] | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of a planned segment scan, in record batches (one per chunk read, cut once they
    reach BATCH_ROWS rows).

    Reads chunks of READ_CHUNK bytes (more when one entry is larger) and stops quietly at a
    partial last entry (a live segment being appended to). A segment that retention deleted
    since it was planned has no rows: its messages are no longer in the log. Appends the
    scan's ScanStats to ``stats`` when the scan ends: the bytes read are those of the entries
    decoded.
    """
    segment = scan.segment
    columns = _Columns(segment.topic, segment.partition, tier)
    rows, position = 0, scan.start_position
    file = None
    if not scan.skipped:
        try:
            file = open(segment.log_path, "rb", buffering=0)  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            log.info("%s: deleted since the scan was planned; no rows", segment.log_path)
    if file is not None:
        with file:
            descriptor = file.fileno()
            size, chunk_size = os.fstat(descriptor).st_size, READ_CHUNK
            while position < size:
                buffer = os.pread(descriptor, chunk_size, position)
                used, done = _decode(buffer, columns, scan.max_offset)
                position += used
                if len(columns) >= BATCH_ROWS or (done and len(columns)):
                    rows += len(columns)
                    yield columns.batch()
                if done:
                    break
                if used == 0:
                    if len(buffer) < LOG_OVERHEAD or position + len(buffer) >= size:
                        break  # a partial entry at the end
                    (_, entry_size) = OFFSET_AND_SIZE.unpack_from(buffer, 0)
                    chunk_size = max(chunk_size, LOG_OVERHEAD + entry_size)
    if len(columns):
        rows += len(columns)
        yield columns.batch()
    if stats is not None:
        bytes_read = 0 if file is None else position - scan.start_position
        stats.append(ScanStats(max(segment.size, position), bytes_read, rows))


def decode_message_set(
    records: bytes, topic: str, partition: int, tier: str | None
) -> tuple[pa.RecordBatch, int]:
    """The rows of a message set (a Fetch response's, say) and the bytes of its whole entries;
    a partial last entry is left out, as a consumer leaves it."""
    columns = _Columns(topic, partition, tier)
    used, _ = _decode(records, columns, None)
    return columns.batch(), used
