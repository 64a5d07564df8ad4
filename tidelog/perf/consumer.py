"""``tidelog perf consume``: Kafka's consumer perf test, reading every partition from its start.

One pipelined fetch loop per leader. Records are counted exactly, up to the number asked for, with
their key and value bytes (what the producer perf test counts), beside the bytes fetched (the
message sets as they came, compressed or not). Entries are read with ``struct`` (no Python object
per record); a compressed wrapper is decompressed to count what it holds.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tidelog.perf.stats import Summary
from tidelog.protocol.client import Client, fetch_body
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.compression import decompress
from tidelog.records.format import (
    CODEC_MASK,
    INT32,
    LOG_OVERHEAD,
    MAGIC_AND_ATTRIBUTES,
    MAGIC_POSITION,
    OFFSET_AND_SIZE,
    Codec,
    key_position,
    value_slice,
)

PROGRESS_INTERVAL = 5.0


@dataclass(frozen=True)
class Counted:
    """What one partition's answer held from ``fetch_offset`` on, up to the records wanted."""

    next_offset: int
    records: int
    record_bytes: int  # keys and values
    fetched_bytes: int  # whole entries read, as they came


def _entries(buffer: bytes | memoryview) -> Iterator[tuple[int, int, int]]:
    """(offset, message start, message size) of each whole entry."""
    position, limit = 0, len(buffer)
    while limit - position >= LOG_OVERHEAD:
        offset, size = OFFSET_AND_SIZE.unpack_from(buffer, position)
        if position + LOG_OVERHEAD + size > limit:
            return
        yield offset, position + LOG_OVERHEAD, size
        position += LOG_OVERHEAD + size


def _key_and_value_bytes(buffer: bytes | memoryview, message_start: int, magic: int) -> int:
    position = message_start + key_position(magic)
    (key_length,) = INT32.unpack_from(buffer, position)
    position += 4 + max(key_length, 0)
    (value_length,) = INT32.unpack_from(buffer, position)
    return max(key_length, 0) + max(value_length, 0)


def _logical(buffer: bytes | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, key and value bytes) of every logical record, inner records for wrappers."""
    for offset, start, _ in _entries(buffer):
        magic, attributes = MAGIC_AND_ATTRIBUTES.unpack_from(buffer, start + MAGIC_POSITION)
        codec = attributes & CODEC_MASK
        if codec == Codec.NONE:
            yield offset, _key_and_value_bytes(buffer, start, magic)
            continue
        value = value_slice(buffer, start, magic)
        if value is None:
            continue
        inner = decompress(codec, buffer[value], magic)
        records = [(o, _key_and_value_bytes(inner, s, magic)) for o, s, _ in _entries(inner)]
        # v1 inner offsets are relative; the wrapper carries the last one's absolute offset
        shift = offset - records[-1][0] if magic == 1 and records else 0
        for inner_offset, size in records:
            yield inner_offset + shift, size


def count_records(records: bytes | memoryview, fetch_offset: int, wanted: int) -> Counted:
    """Counts the records at or after ``fetch_offset`` (a wrapper may begin before it), at most
    ``wanted`` of them."""
    count, record_bytes, next_offset = 0, 0, fetch_offset
    for offset, size in _logical(records):
        if offset < next_offset:
            continue
        if count == wanted:
            break
        count, record_bytes, next_offset = count + 1, record_bytes + size, offset + 1
    fetched = sum(LOG_OVERHEAD + size for _, _, size in _entries(records))
    return Counted(next_offset, count, record_bytes, fetched)


async def run_consumer(
    bootstrap_servers: str,
    topic: str,
    num_records: int,
    *,
    fetch_size: int = 1024 * 1024,
    timeout: float = 10.0,
    progress: Callable[[str], None] = print,
) -> Summary:
    client = Client(bootstrap_servers)
    partitions = await client.partitions(topic)
    by_leader: dict[int, list[int]] = {}
    for partition in partitions:
        by_leader.setdefault(partition.leader, []).append(partition.partition)
    latencies = array("d")
    totals = {"records": 0, "bytes": 0, "fetched": 0}
    started = time.perf_counter()
    last_activity = started
    stop = asyncio.Event()

    async def earliest(connection: Connection, numbers: list[int]) -> dict[int, int]:
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            1,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [{"partition": p, "timestamp": -2} for p in numbers],
                    }
                ],
            },
        )
        return {
            p["partition"]: p["offset"] for p in response["responses"][0]["partition_responses"]
        }

    async def fetch_loop(leader: int, numbers: list[int]) -> None:
        nonlocal last_activity
        connection = await client.connection(leader)
        offsets = await earliest(connection, numbers)
        while not stop.is_set():
            body = fetch_body(topic, {p: offsets[p] for p in numbers}, fetch_size)
            sent = time.perf_counter()
            response = await connection.request(ApiKey.FETCH, 3, body)
            latencies.append((time.perf_counter() - sent) * 1000)
            for answer in response["responses"][0]["partition_responses"]:
                if answer["error_code"] or answer["record_set"] is None:
                    continue
                counted = count_records(
                    answer["record_set"],
                    offsets[answer["partition"]],
                    num_records - totals["records"],
                )
                totals["fetched"] += counted.fetched_bytes
                if counted.records:
                    totals["records"] += counted.records
                    totals["bytes"] += counted.record_bytes
                    offsets[answer["partition"]] = counted.next_offset
                    last_activity = time.perf_counter()
            if totals["records"] >= num_records or time.perf_counter() - last_activity > timeout:
                stop.set()

    async def report() -> None:
        previous, previous_time = 0, time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(PROGRESS_INTERVAL)
            now = time.perf_counter()
            rate = (totals["records"] - previous) / (now - previous_time)
            progress(f"{totals['records']} records consumed, {rate:,.1f} records/sec")
            previous, previous_time = totals["records"], now

    reporter = asyncio.create_task(report())
    await asyncio.gather(*(fetch_loop(leader, numbers) for leader, numbers in by_leader.items()))
    reporter.cancel()
    elapsed = (last_activity if totals["records"] < num_records else time.perf_counter()) - started
    await client.close()
    return Summary(
        totals["records"], totals["bytes"], elapsed, latencies, fetched_bytes=totals["fetched"]
    )
