"""``tidelog dump-log`` for the remote index files: remoteLogIndex, remoteOffsetIndex,
remoteTimeIndex. Each dump is a plain dict (``--json`` prints it), ``format_dump`` makes lines.

``--verify-index`` checks:

- remoteLogIndex: every entry's CRC (an entry that fails is reported and skipped by its length
  field), that entries follow one another in offset, and that each points at the right
  messages: the range it names is fetched from the remote object, its messages are read with
  their CRCs, and the last offset, the largest timestamp and the byte count match the entry.
- remoteOffsetIndex / remoteTimeIndex: each entry points at an entry of the remoteLogIndex file
  beside it with that first offset, and a time entry's timestamp is the largest lastTimestamp
  up to that entry.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import fsspec

from tidelog.errors import KafkaError
from tidelog.log.dump import index_entry_lines, verification_lines
from tidelog.log.files import base_offset_of
from tidelog.records.format import iter_deep
from tidelog.tiered.remote_index import (
    ENTRY_HEADER,
    LOG_INDEX_SUFFIX,
    OFFSET_ENTRY,
    OFFSET_INDEX_SUFFIX,
    SUFFIXES,
    TIME_ENTRY,
    TIME_INDEX_SUFFIX,
    CorruptRemoteIndexError,
    RemoteLogIndexEntry,
    decode_entry,
)

KINDS = {
    LOG_INDEX_SUFFIX: "remote_log_index",
    OFFSET_INDEX_SUFFIX: "remote_offset_index",
    TIME_INDEX_SUFFIX: "remote_time_index",
}


def is_remote_index(path: Path) -> bool:
    return path.suffix in SUFFIXES


def _log_entries(data: bytes) -> tuple[list[tuple[int, RemoteLogIndexEntry | None]], list[str]]:
    """(position, entry or None if corrupt) of each entry, and what was wrong."""
    found: list[tuple[int, RemoteLogIndexEntry | None]] = []
    problems = []
    position = 0
    while position < len(data):
        try:
            entry, after = decode_entry(data, position)
            found.append((position, entry))
            position = after
        except CorruptRemoteIndexError as error:
            problems.append(f"entry at position {position}: {error}")
            found.append((position, None))
            if len(data) - position < ENTRY_HEADER.size:
                break
            _, length, _ = ENTRY_HEADER.unpack_from(data, position)
            if length <= 0:
                break
            position += 4 + length
    return found, problems


def _pairs(data: bytes, layout: struct.Struct) -> list[tuple[int, int]]:
    usable = len(data) - len(data) % layout.size
    return [layout.unpack_from(data, at) for at in range(0, usable, layout.size)]


def dump_remote_index(path: Path, *, verify: bool = False) -> dict[str, Any]:
    base = base_offset_of(path)
    kind = KINDS[path.suffix]
    data = path.read_bytes()
    result: dict[str, Any] = {"file": str(path), "kind": kind, "base_offset": base}
    if kind == "remote_log_index":
        found, problems = _log_entries(data)
        result["entries"] = [
            {"position": position, **_entry_fields(entry)}
            for position, entry in found
            if entry is not None
        ]
        if verify:
            result["mismatches"] = problems + verify_log_index(
                [entry for _, entry in found if entry is not None]
            )
        return result
    log_index = path.with_suffix(LOG_INDEX_SUFFIX)
    if kind == "remote_offset_index":
        result["entries"] = [
            {"offset": base + relative, "position": position}
            for relative, position in _pairs(data, OFFSET_ENTRY)
        ]
    else:
        result["entries"] = [
            {"timestamp": timestamp, "offset": base + relative}
            for timestamp, relative in _pairs(data, TIME_ENTRY)
        ]
    if verify:
        if not log_index.exists():
            raise ValueError(f"{path}: --verify-index needs {log_index.name} beside it")
        found, _ = _log_entries(log_index.read_bytes())
        result["mismatches"] = verify_pointers(kind, result["entries"], found)
    return result


def _entry_fields(entry: RemoteLogIndexEntry) -> dict[str, Any]:
    return {
        "first_offset": entry.first_offset,
        "last_offset": entry.last_offset,
        "first_timestamp": entry.first_timestamp,
        "last_timestamp": entry.last_timestamp,
        "data_length": entry.data_length,
        "uri": entry.uri,
        "object_position": entry.position,
    }


def verify_log_index(entries: list[RemoteLogIndexEntry]) -> list[str]:
    mismatches = []
    previous: RemoteLogIndexEntry | None = None
    for entry in entries:
        where = f"entry {entry.first_offset}-{entry.last_offset}"
        if previous is not None and entry.first_offset <= previous.last_offset:
            mismatches.append(f"{where} overlaps the entry before it (to {previous.last_offset})")
        previous = entry
        try:
            fs, object_path = fsspec.core.url_to_fs(entry.uri)
            data = fs.cat_file(
                object_path, start=entry.position, end=entry.position + entry.data_length
            )
        except Exception as error:  # the tier's own exception kinds
            mismatches.append(f"{where}: cannot read {entry.uri}: {error!r}")
            continue
        if len(data) != entry.data_length:
            mismatches.append(f"{where}: {len(data)} bytes in the object, not {entry.data_length}")
            continue
        try:
            messages = list(iter_deep(data))
            invalid = [m.offset for m in messages if not m.crc_valid]
        except (KafkaError, ValueError) as error:
            mismatches.append(f"{where}: the range does not parse as messages ({error})")
            continue
        if invalid or not messages:
            mismatches.append(f"{where}: messages with a bad CRC or none at all {invalid[:5]}")
            continue
        last = messages[-1].offset
        if last != entry.last_offset or messages[0].offset > entry.first_offset:
            mismatches.append(f"{where}: the range holds offsets {messages[0].offset}-{last}")
        largest = max(m.timestamp for m in messages)
        if largest != entry.last_timestamp and not (largest < 0 and entry.last_timestamp < 0):
            mismatches.append(f"{where}: largest timestamp {largest}, not {entry.last_timestamp}")
    return mismatches


def verify_pointers(
    kind: str,
    entries: list[dict[str, Any]],
    found: list[tuple[int, RemoteLogIndexEntry | None]],
) -> list[str]:
    by_position = {position: entry for position, entry in found if entry is not None}
    by_first = {entry.first_offset: entry for entry in by_position.values()}
    ordered = [entry for _, entry in found if entry is not None]
    mismatches = []
    for entry in entries:
        if kind == "remote_offset_index":
            target = by_position.get(entry["position"])
            if target is None or target.first_offset != entry["offset"]:
                mismatches.append(
                    f"offset entry ({entry['offset']}, {entry['position']}): no remoteLogIndex "
                    "entry with that first offset starts there"
                )
        else:
            target = by_first.get(entry["offset"])
            if target is None:
                mismatches.append(f"time entry {entry}: no remoteLogIndex entry starts there")
                continue
            largest = max(
                e.last_timestamp for e in ordered if e.first_offset <= target.first_offset
            )
            if largest != entry["timestamp"]:
                mismatches.append(
                    f"time entry ({entry['timestamp']}, {entry['offset']}): the largest "
                    f"timestamp up to there is {largest}"
                )
    return mismatches


def format_dump(dump: dict[str, Any]) -> list[str]:
    lines = [f"Dumping {dump['file']}"]
    if dump["kind"] == "remote_log_index":
        lines += [
            f"position: {e['position']} firstOffset: {e['first_offset']} lastOffset: "
            f"{e['last_offset']} firstTimestamp: {e['first_timestamp']} lastTimestamp: "
            f"{e['last_timestamp']} dataLength: {e['data_length']} rdi: {e['uri']}"
            f"@{e['object_position']}"
            for e in dump["entries"]
        ]
    else:
        lines += index_entry_lines(dump, offsets=dump["kind"] == "remote_offset_index")
    return lines + verification_lines(dump, "remote index entries")
