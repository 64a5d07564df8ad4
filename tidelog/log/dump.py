"""``tidelog dump-log``: what is in segment and index files, as Kafka's DumpLogSegments shows it.

Each dump is a plain dict (``--json`` prints it as is); ``format_dump`` turns it into lines.
Index verification checks every entry against its ``.log`` file:

- ``.index`` entry (O, P): a whole entry starts at P, its offset is >= O and the entry before it
  (if any) has an offset < O, so a reader looking for O may start at P.
- ``.timeindex`` entry (T, O): entries never go back in timestamp and grow in offset; no message
  up to offset O has a timestamp above T; and if O is inside the segment, some message up to O
  has timestamp T.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path
from typing import Any

from tidelog.errors import KafkaError
from tidelog.log.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, base_offset_of
from tidelog.records.format import (
    LOG_OVERHEAD,
    MessageView,
    TimestampType,
    iter_inner,
    read_entry,
    view_at,
)
from tidelog.records.record_batch import read_header

# As Kafka's TimestampType prints itself.
TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


def _message_fields(message: MessageView, print_data: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "offset": message.offset,
        "position": message.position,
        "magic": message.magic,
        "codec": message.codec.name.lower(),
        "timestamp_type": TIMESTAMP_TYPE_NAMES[message.timestamp_type],
        "timestamp": message.timestamp,
        "key_size": -1 if message.key is None else len(message.key),
        "value_size": -1 if message.value is None else len(message.value),
        "crc": message.crc,
        "crc_valid": message.crc_valid,
    }
    if print_data:
        fields["key"] = None if message.key is None else message.key.decode("utf-8", "replace")
        fields["value"] = (
            None if message.value is None else message.value.decode("utf-8", "replace")
        )
    if message.magic == 2:
        _add_v2_fields(fields, message)
    return fields


def _add_v2_fields(fields: dict[str, Any], message: MessageView) -> None:
    """A v2 batch's header fields (its shallow line), or a record's producer fields and header
    keys (its deep line), as DumpLogSegments prints them since Kafka 0.11."""
    if message.batch is not None:
        header = read_header(message.batch)
        fields.update(
            base_offset=header.base_offset,
            last_offset=header.last_offset,
            count=header.record_count,
            base_sequence=header.base_sequence,
            last_sequence=header.last_sequence,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            size=header.size,
        )
    else:
        fields["header_keys"] = [name for name, _ in message.headers]


def scan_log(path: Path) -> tuple[list[tuple[int, int, int, int]], int, str]:
    """(offset, position, size, magic) of every valid shallow entry, the valid byte count, and
    why the scan stopped early ("" if it reached the end)."""
    data = path.read_bytes()
    entries, position, reason = [], 0, ""
    while position < len(data):
        try:
            offset, size, magic, _ = read_entry(data, position, len(data))
        except KafkaError as error:
            reason = error.message
            break
        entries.append((offset, position, size, magic))
        position += LOG_OVERHEAD + size
    return entries, position, reason


def dump_log_file(path: Path, *, deep_iteration: bool = False, print_data: bool = False) -> dict:
    data = path.read_bytes()
    entries, valid_bytes, reason = scan_log(path)
    messages = []
    for _, position, _, _ in entries:
        shallow = view_at(data, position)
        fields = _message_fields(shallow, print_data)
        if deep_iteration and (shallow.codec or shallow.magic == 2):
            inner = [_message_fields(message, print_data) for message in iter_inner(shallow)]
            if shallow.magic == 2:  # a record's sequence: the batch's base sequence onwards
                for record in inner:
                    record["producer_id"] = fields["producer_id"]
                    record["producer_epoch"] = fields["producer_epoch"]
                    record["is_transactional"] = fields["is_transactional"]
                    record["sequence"] = (
                        -1
                        if fields["base_sequence"] < 0
                        else (fields["base_sequence"] + record["offset"] - fields["base_offset"])
                        % 2**31
                    )
            fields["inner"] = inner
        messages.append(fields)
    return {
        "file": str(path),
        "kind": "log",
        "base_offset": base_offset_of(path),
        "messages": messages,
        "valid_bytes": valid_bytes,
        "invalid_bytes": len(data) - valid_bytes,
        "stopped_because": reason,
    }


def read_index_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    """The written entries of an index file, read without mapping or resizing it (so a live
    broker's preallocated index is left alone)."""
    data = path.read_bytes()
    entries = []
    for position in range(0, len(data) - len(data) % entry.size, entry.size):
        fields = entry.unpack_from(data, position)
        if not any(fields):
            break  # preallocated, never-written slots
        entries.append(fields)
    return entries


def dump_index_file(path: Path, *, verify: bool = False) -> dict:
    base = base_offset_of(path)
    log_path = path.with_suffix(LOG_SUFFIX)
    result: dict[str, Any] = {"file": str(path), "base_offset": base}
    if path.suffix == INDEX_SUFFIX:
        result["kind"] = "offset_index"
        result["entries"] = [
            {"offset": base + relative, "position": position}
            for relative, position in read_index_entries(path, OFFSET_ENTRY)
        ]
    elif path.suffix == TIME_INDEX_SUFFIX:
        result["kind"] = "time_index"
        result["entries"] = [
            {"timestamp": timestamp, "offset": base + relative}
            for timestamp, relative in read_index_entries(path, TIME_ENTRY)
        ]
    else:
        raise ValueError(f"{path}: not a .log, .index or .timeindex file")
    if verify:
        if not log_path.exists():
            raise ValueError(f"{path}: --verify-index needs {log_path.name} beside it")
        if result["kind"] == "offset_index":
            result["mismatches"] = verify_offset_index(result["entries"], log_path)
        else:
            result["mismatches"] = verify_time_index(result["entries"], log_path)
    return result


def verify_offset_index(entries: list[dict], log_path: Path) -> list[str]:
    log_entries, _, _ = scan_log(log_path)
    offset_before: dict[int, tuple[int, int | None]] = {}
    previous = None
    for offset, position, _, _ in log_entries:
        offset_before[position] = (offset, previous)
        previous = offset
    mismatches = []
    last = None
    for entry in entries:
        offset, position = entry["offset"], entry["position"]
        if last is not None and (offset <= last[0] or position <= last[1]):
            mismatches.append(
                f"index entry ({offset}, {position}) is not after ({last[0]}, {last[1]})"
            )
        last = (offset, position)
        if position not in offset_before:
            mismatches.append(f"index entry ({offset}, {position}): no valid entry starts there")
            continue
        found, before = offset_before[position]
        if found < offset or (before is not None and before >= offset):
            mismatches.append(
                f"index entry ({offset}, {position}): the entry there has offset {found} "
                f"and the one before it {before}"
            )
    return mismatches


def verify_time_index(entries: list[dict], log_path: Path) -> list[str]:
    log_entries, _, _ = scan_log(log_path)
    data = log_path.read_bytes()
    timestamps = [
        (offset, view_at(data, position).timestamp if magic >= 1 else -1)
        for offset, position, _, magic in log_entries
    ]
    end_offset = timestamps[-1][0] + 1 if timestamps else base_offset_of(log_path)
    offsets = [offset for offset, _ in timestamps]
    largest_so_far = list(accumulate((t for _, t in timestamps), max))
    mismatches = []
    last = None
    for entry in entries:
        timestamp, offset = entry["timestamp"], entry["offset"]
        if last is not None and (timestamp < last[0] or offset <= last[1]):
            mismatches.append(f"time index entry ({timestamp}, {offset}) goes back from {last}")
        last = (timestamp, offset)
        count = bisect_right(offsets, offset)
        largest = largest_so_far[count - 1] if count else -1
        if largest > timestamp:
            mismatches.append(
                f"time index entry ({timestamp}, {offset}): a message up to that offset has "
                f"the larger timestamp {largest}"
            )
        elif offset < end_offset and largest != timestamp:
            mismatches.append(
                f"time index entry ({timestamp}, {offset}): no message up to that offset has "
                f"that timestamp (largest is {largest})"
            )
    return mismatches


def dump_file(
    path: Path, *, deep_iteration: bool = False, print_data: bool = False, verify: bool = False
) -> dict:
    if path.suffix == LOG_SUFFIX:
        return dump_log_file(path, deep_iteration=deep_iteration, print_data=print_data)
    return dump_index_file(path, verify=verify)


def format_dump(dump: dict) -> list[str]:
    lines = [f"Dumping {dump['file']}"]
    if dump["kind"] == "log":
        lines.append(f"Starting offset: {dump['base_offset']}")
        for message in dump["messages"]:
            if message["magic"] < 2 and "inner" in message:
                # Kafka 0.10's --deep-iteration: a wrapper's messages in its place, each at the
                # wrapper's position
                lines += [
                    _format_message({**inner, "position": message["position"]}, "")
                    for inner in message["inner"]
                ]
                continue
            lines.append(_format_message(message, ""))
            for inner in message.get("inner", []):
                lines.append(_format_message(inner, "| "))
        if dump["invalid_bytes"]:
            lines.append(
                f"Found {dump['invalid_bytes']} invalid bytes at the end of {dump['file']} "
                f"(after position {dump['valid_bytes']}: {dump['stopped_because']})"
            )
    else:
        lines += index_entry_lines(dump, offsets=dump["kind"] == "offset_index")
    lines += verification_lines(dump, "index entries against the log")
    return lines


def _format_message(message: dict, prefix: str) -> str:
    if "base_offset" in message:
        return prefix + _format_batch(message)
    if "header_keys" in message:
        return prefix + _format_record(message)
    # a v0/v1 message, in Kafka 0.10.2's words and order: the key size only for a key, and
    # with --print-data-log the key and payload that are not null
    text = (
        f"{prefix}offset: {message['offset']} position: {message['position']} "
        f"{message['timestamp_type']}: {message['timestamp']} "
        f"isvalid: {str(message['crc_valid']).lower()} payloadsize: {message['value_size']} "
        f"magic: {message['magic']} compresscodec: {message['codec'].upper()} "
        f"crc: {message['crc']}"
    )
    if message["key_size"] >= 0:
        text += f" keysize: {message['key_size']}"
    if message.get("key") is not None:
        text += f" key: {message['key']}"
    if message.get("value") is not None:
        text += f" payload: {message['value']}"
    return text


def _format_batch(batch: dict) -> str:
    """A v2 batch's line, Kafka 2.1's DumpLogSegments' words and order."""
    return (
        f"baseOffset: {batch['base_offset']} lastOffset: {batch['last_offset']} "
        f"count: {batch['count']} baseSequence: {batch['base_sequence']} "
        f"lastSequence: {batch['last_sequence']} producerId: {batch['producer_id']} "
        f"producerEpoch: {batch['producer_epoch']} "
        f"partitionLeaderEpoch: {batch['partition_leader_epoch']} "
        f"isTransactional: {str(batch['is_transactional']).lower()} "
        f"isControl: {str(batch['is_control']).lower()} position: {batch['position']} "
        f"{batch['timestamp_type']}: {batch['timestamp']} "
        f"isvalid: {str(batch['crc_valid']).lower()} size: {batch['size']} magic: 2 "
        f"compresscodec: {batch['codec'].upper()} crc: {batch['crc']}"
    )


def _format_record(record: dict) -> str:
    """A v2 record's line under --deep-iteration, as Kafka 2.1's DumpLogSegments prints it."""
    text = (
        f"offset: {record['offset']} position: {record['position']} "
        f"{record['timestamp_type']}: {record['timestamp']} "
        f"isvalid: {str(record['crc_valid']).lower()} keysize: {record['key_size']} "
        f"valuesize: {record['value_size']} magic: 2 compresscodec: {record['codec'].upper()} "
        f"producerId: {record['producer_id']} producerEpoch: {record['producer_epoch']} "
        f"sequence: {record['sequence']} "
        f"isTransactional: {str(record['is_transactional']).lower()} "
        f"headerKeys: [{','.join(record['header_keys'])}]"
    )
    if "key" in record:
        text += f" key: {record['key']} payload: {record['value']}"
    return text


def index_entry_lines(dump: dict[str, Any], *, offsets: bool) -> list[str]:
    """An offset index's (or a time index's) entries as DumpLogSegments prints them; the local
    and the remote indexes share the shape."""
    if offsets:
        return [f"offset: {e['offset']} position: {e['position']}" for e in dump["entries"]]
    return [f"timestamp: {e['timestamp']} offset: {e['offset']}" for e in dump["entries"]]


def verification_lines(dump: dict[str, Any], what: str) -> list[str]:
    """The mismatches --verify-index found, or one line saying every entry matched."""
    if "mismatches" not in dump:
        return []
    if dump["mismatches"]:
        return [f"Mismatch: {mismatch}" for mismatch in dump["mismatches"]]
    return [f"Verified {len(dump['entries'])} {what}: all match"]
