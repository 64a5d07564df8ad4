"""The remote tier as rows: the part of a partition that only the tier holds, found through the
partition's remote indexes (tidelog/tiered/remote_index.py), planned with the scan's bounds, and
read range by range from the tier (tidelog/tiered/storage.py). No Spark here.

A partition's remote-only part is the offsets [log start, local log start): the log start offset
is the largest a replica checkpointed (``log-start-offset-checkpoint``; what consumers may read),
the local log start is the first offset in the first local segment of the replica whose local
segments are read (tidelog/pipeline/segments.py; below that segment's base offset when it starts
with a compressed wrapper), so no offset is read twice and none in between is missed. The
remote indexes come from the replica whose indexes reach furthest (every replica keeps them).

Each remote segment (one object in the tier) with remote-only data is one scan. Its remoteLogIndex
entries are byte ranges of the object; a scan fetches only the ranges the bounds leave, adjacent
ones merged up to READ_CHUNK:

- a lower offset bound starts at the entry ``RemoteLogIndex.lookup`` finds (remoteOffsetIndex);
- a lower timestamp bound starts at the entry ``RemoteLogIndex.search`` finds (remoteTimeIndex),
  and leaves out any later range whose largest timestamp (its entry's lastTimestamp) is below it;
- an upper offset bound ends at the last entry starting at or below it.

Rows of the ranges read that fall outside [log start, local log start) are dropped; rows outside
the bounds are not (Spark applies the filters to every row, as for local segments).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidelog.log.checkpoint import read_checkpoint
from tidelog.log.files import segment_files
from tidelog.log.manager import LOG_START_OFFSET_CHECKPOINT
from tidelog.pipeline.segments import (
    READ_CHUNK,
    Bounds,
    ScanStats,
    decode_message_set,
)
from tidelog.tiered.remote_index import LOG_INDEX_SUFFIX, RemoteLogIndex, RemoteLogIndexEntry
from tidelog.tiered.storage import RemoteStorageManager

TIER = "remote"


@dataclass(frozen=True)
class RemoteSegmentScan:
    """The ranges ``(position, length)`` of the object at ``uri`` to read, keeping the rows with
    offsets in [keep_from, keep_below). ``segment_bytes`` counts the segment's remote-only
    ranges, read or not; ``skipped`` says none needs reading."""

    topic: str
    partition: int
    uri: str
    first_offset: int  # the segment's first remote-only offset
    ranges: tuple[tuple[int, int], ...]
    keep_from: int
    keep_below: int
    segment_bytes: int

    @property
    def skipped(self) -> bool:
        return not self.ranges

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}/{self.uri.rsplit('/', 1)[-1]} (remote)"


def _reach(index: RemoteLogIndex) -> tuple[int, int]:
    return index.highest_offset, -index.lowest_offset


def remote_index_of(replicas: list[Path]) -> RemoteLogIndex | None:
    """The remote indexes, read-only, of the replica whose indexes reach furthest; None if no
    replica has any."""
    found = [
        RemoteLogIndex.open_read_only(directory)
        for directory in replicas
        if segment_files(directory, LOG_INDEX_SUFFIX)
    ]
    found = [index for index in found if index.highest_offset >= 0]
    return max(found, key=_reach) if found else None


def log_start_offset(topic: str, partition: int, replicas: list[Path]) -> int:
    """The largest log start offset any replica's log dir checkpointed (0 if none did)."""
    starts = [
        read_checkpoint(directory.parent / LOG_START_OFFSET_CHECKPOINT).get((topic, partition), 0)
        for directory in replicas
    ]
    return max(starts, default=0)


def _wanted(index: RemoteLogIndex, bounds: Bounds) -> set[int]:
    """The first offsets of the entries the bounds leave (all others hold no matching row)."""
    entries = list(index.entries())
    start = entries[0].first_offset if entries else 0
    if bounds.min_offset is not None:
        found = index.lookup(bounds.min_offset)
        start = found.first_offset if found is not None else index.highest_offset + 1
    min_timestamp = bounds.min_timestamp
    if min_timestamp is not None and min_timestamp >= 0:
        found = index.search(min_timestamp)
        start = max(start, found.first_offset if found is not None else index.highest_offset + 1)
    return {
        entry.first_offset
        for entry in entries
        if entry.first_offset >= start
        and (bounds.max_offset is None or entry.first_offset <= bounds.max_offset)
        and (min_timestamp is None or min_timestamp < 0 or entry.last_timestamp >= min_timestamp)
    }


def _merged(entries: list[RemoteLogIndexEntry]) -> tuple[tuple[int, int], ...]:
    """The entries' byte ranges, adjacent ones joined while the result stays within
    READ_CHUNK."""
    ranges: list[tuple[int, int]] = []
    for entry in entries:
        if ranges:
            position, length = ranges[-1]
            if position + length == entry.position and length + entry.data_length <= READ_CHUNK:
                ranges[-1] = (position, length + entry.data_length)
                continue
        ranges.append((entry.position, entry.data_length))
    return tuple(ranges)


def plan_remote(
    topic: str,
    partition: int,
    replicas: list[Path],
    local_log_start: int | None,
    bounds: Bounds,
) -> list[RemoteSegmentScan]:
    """The scans of a partition's remote-only segments (skipped ones included, so their bytes
    count as skipped). ``local_log_start`` is None when no local segment is read."""
    index = remote_index_of(replicas)
    if index is None:
        return []
    keep_from = log_start_offset(topic, partition, replicas)
    keep_below = index.highest_offset + 1 if local_log_start is None else local_log_start
    remote_only = [
        entry
        for entry in index.entries()
        if entry.first_offset < keep_below and entry.last_offset >= keep_from
    ]
    wanted = _wanted(index, bounds)
    scans = []
    for uri, group in itertools.groupby(remote_only, key=lambda entry: entry.uri):
        entries = list(group)
        scans.append(
            RemoteSegmentScan(
                topic,
                partition,
                uri,
                entries[0].first_offset,
                _merged([entry for entry in entries if entry.first_offset in wanted]),
                keep_from,
                keep_below,
                sum(entry.data_length for entry in entries),
            )
        )
    return scans


def storage_for(uri: str, options: Mapping[str, Any] | None = None) -> RemoteStorageManager:
    """A RemoteStorageManager of the tier directory holding the object at ``uri``."""
    return RemoteStorageManager(uri.rsplit("/", 1)[0], options)


def read_remote(
    scan: RemoteSegmentScan,
    options: Mapping[str, Any] | None = None,
    stats: list[ScanStats] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of a planned remote scan, a record batch per range fetched; appends the scan's
    ScanStats to ``stats`` at the end (bytes read: those fetched)."""
    storage = None if scan.skipped else storage_for(scan.uri, options)
    rows = bytes_read = 0
    for position, length in scan.ranges:
        assert storage is not None
        data = storage.fetch_range(scan.uri, position, position + length)
        bytes_read += len(data)
        batch, _ = decode_message_set(data, scan.topic, scan.partition, TIER)
        offsets = batch.column("offset")
        kept = pc.and_(pc.greater_equal(offsets, scan.keep_from), pc.less(offsets, scan.keep_below))
        batch = batch.filter(kept)
        if batch.num_rows:
            rows += batch.num_rows
            yield batch
    if stats is not None:
        stats.append(ScanStats(scan.segment_bytes, bytes_read, rows))
