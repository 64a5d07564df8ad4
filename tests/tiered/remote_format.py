"""An independent reader of the remote index files, written from the format in issue 9 (not
from tidelog's code), so the tests check what the broker writes against the specification."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    data_length: int
    position: int
    uri: str


def parse_remote_log_index(data: bytes) -> list[Entry]:
    """magic int16 = 0, length int16, crc int32 over firstOffset..end, firstOffset int64,
    lastOffset int64, firstTimestamp int64, lastTimestamp int64, dataLength int32,
    rdiLength int16, rdi (byte position int64 + the object's URI)."""
    entries, at = [], 0
    while at < len(data):
        magic, length = struct.unpack(">hh", data[at : at + 4])
        assert magic == 0, f"magic {magic} at {at}"
        (crc,) = struct.unpack(">i", data[at + 4 : at + 8])
        body = data[at + 8 : at + 4 + length]
        assert len(body) == length - 4, f"entry at {at} runs past the file"
        assert zlib.crc32(body) == crc & 0xFFFFFFFF, f"CRC mismatch at {at}"
        first, last, first_ts, last_ts, data_length, rdi_length = struct.unpack(
            ">qqqqih", body[:38]
        )
        rdi = body[38:]
        assert len(rdi) == rdi_length
        (position,) = struct.unpack(">q", rdi[:8])
        entries.append(
            Entry(first, last, first_ts, last_ts, data_length, position, rdi[8:].decode())
        )
        at += 4 + length
    return entries


def parse_pairs(data: bytes, layout: str) -> list[tuple[int, int]]:
    size = struct.calcsize(layout)
    assert len(data) % size == 0
    return [struct.unpack(layout, data[i : i + size]) for i in range(0, len(data), size)]
