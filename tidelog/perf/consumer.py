"""``tidelog perf consume``: Kafka's consumer perf test, reading every partition from its start.

One pipelined fetch loop per leader; the records of a response are counted from the offsets of
its whole entries (no Python object per record), so the figure is what the broker can serve.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable

from tidelog.perf.client import Client, Connection
from tidelog.perf.stats import Summary
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import LOG_OVERHEAD, OFFSET_AND_SIZE

PROGRESS_INTERVAL = 5.0


def whole_entries(records: memoryview | bytes) -> tuple[int, int]:
    """(offset after the last whole entry, bytes of whole entries); (-1, 0) if none."""
    position, limit, last = 0, len(records), -1
    while limit - position >= LOG_OVERHEAD:
        offset, size = OFFSET_AND_SIZE.unpack_from(records, position)
        if position + LOG_OVERHEAD + size > limit:
            break
        last = offset
        position += LOG_OVERHEAD + size
    return last + 1, position


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
    totals = {"records": 0, "bytes": 0}
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
            body = {
                "replica_id": -1,
                "max_wait_time": 100,
                "min_bytes": 1,
                "max_bytes": fetch_size * len(numbers),
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": p, "fetch_offset": offsets[p], "max_bytes": fetch_size}
                            for p in numbers
                        ],
                    }
                ],
            }
            sent = time.perf_counter()
            response = await connection.request(ApiKey.FETCH, 3, body)
            latencies.append((time.perf_counter() - sent) * 1000)
            for answer in response["responses"][0]["partition_responses"]:
                if answer["error_code"] or answer["record_set"] is None:
                    continue
                next_offset, size = whole_entries(answer["record_set"])
                if next_offset > offsets[answer["partition"]]:
                    totals["records"] += next_offset - offsets[answer["partition"]]
                    totals["bytes"] += size
                    offsets[answer["partition"]] = next_offset
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
    return Summary(totals["records"], totals["bytes"], elapsed, latencies)
