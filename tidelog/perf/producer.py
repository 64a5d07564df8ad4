"""``tidelog perf produce``: Kafka's producer perf test, on tidelog's own pipelined client.

Records are handed to the producer at the --throughput rate (or as fast as it takes them) and
go out in batches of up to --batch-size bytes, one partition after the other, with up to five
requests in flight per broker. A batch takes every record due when a request slot is free; with
--linger-ms it also waits up to that long for a full batch. A record's latency runs from the time
it was due to its acknowledgement. Message sets are built from one encoded message repeated, so
there is no Python object per record.
"""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tidelog import rundata
from tidelog.errors import ErrorCode
from tidelog.perf.client import Client
from tidelog.perf.stats import Summary
from tidelog.protocol.schemas import ApiKey
from tidelog.records.compression import compress
from tidelog.records.format import OFFSET_AND_SIZE, Codec, encode_entry, encode_message

MAX_IN_FLIGHT = 5
PROGRESS_INTERVAL = 5.0


@dataclass(frozen=True)
class ProducerSettings:
    topic: str
    num_records: int
    record_size: int
    throughput: float = -1  # records/s; -1: as fast as possible
    acks: int = 1
    codec: Codec = Codec.NONE
    batch_size: int = 16384
    linger_ms: float = 0


def repeated_message_set(
    payload: bytes, count: int, timestamp: int, codec: Codec, key: bytes | None = None
) -> bytes:
    """``count`` copies of one v1 message (offsets are the broker's to assign)."""
    message = encode_message(1, key, payload, timestamp)
    entry = encode_entry(0, message)
    if codec == Codec.NONE:
        return entry * count
    inner = bytearray(entry * count)
    for number in range(1, count):  # relative inner offsets 0..n-1
        OFFSET_AND_SIZE.pack_into(inner, number * len(entry), number, len(message))
    wrapper = encode_message(1, None, compress(codec, inner, 1), timestamp, codec)
    return encode_entry(count - 1, wrapper)


@dataclass(frozen=True)
class _Batch:
    """An acknowledged batch: its records were due from ``first_due`` on, ``spacing`` seconds
    apart (0 when unthrottled: all due when sent). Latencies are worked out after the run, so
    that the producer does no per-record work while it measures."""

    acknowledged_at: float
    first_due: float
    spacing: float
    count: int
    partition: int = -1
    base_offset: int = -1

    def latencies_ms(self) -> array:
        oldest = self.acknowledged_at - self.first_due
        return array("d", ((oldest - k * self.spacing) * 1000 for k in range(self.count)))


class _Window:
    """Figures for the progress line printed every few seconds."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.records = 0
        self.latency_sum = 0.0
        self.latency_max = 0.0

    def line(self, record_size: int) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.records / elapsed
        average = self.latency_sum / self.records if self.records else 0.0
        return (
            f"{self.records} records sent, {rate:,.1f} records/sec "
            f"({rate * record_size / 1_000_000:.2f} MB/sec), {average:.1f} ms avg latency, "
            f"{self.latency_max:.1f} ms max latency."
        )


def write_acks(
    run_dir: Path, batches: list[_Batch], perf_to_epoch: float, record_size: int
) -> None:
    """acks.parquet of a run directory: one row per acknowledged record (tidelog/rundata.py)."""
    acked_at: list[int] = []
    partitions: list[int] = []
    offsets: list[int] = []
    latencies = array("d")
    for batch in batches:
        moment = rundata.epoch_microseconds(batch.acknowledged_at + perf_to_epoch)
        acked_at += [moment] * batch.count
        partitions += [batch.partition] * batch.count
        first = batch.base_offset
        offsets += range(first, first + batch.count) if first >= 0 else [-1] * batch.count
        latencies.extend(batch.latencies_ms())
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": acked_at,
            "latency_ms": latencies,
            "partition": partitions,
            "offset": offsets,
            "bytes": [record_size] * len(acked_at),
            "message": [None] * len(acked_at),
        },
    )


async def run_producer(
    bootstrap_servers: str,
    settings: ProducerSettings,
    progress: Callable[[str], None] = print,
    run_dir: Path | None = None,
) -> tuple[Summary, dict[str, int]]:
    """Runs the test; returns the summary and the count of each error code seen. With
    ``run_dir``, also writes every acknowledgement to its acks table."""
    client = Client(bootstrap_servers)
    partitions = await client.partitions(settings.topic)
    payload = random.Random(0).randbytes(settings.record_size)
    per_batch = max(1, settings.batch_size // (settings.record_size + 34))
    throttled = settings.throughput > 0
    acknowledged: list[_Batch] = []
    errors: dict[str, int] = {}
    slots = asyncio.Semaphore(MAX_IN_FLIGHT * len({p.leader for p in partitions}))
    window = _Window()
    pending: set[asyncio.Task] = set()
    start = time.perf_counter()
    perf_to_epoch = time.time() - start  # acknowledgement times in acks.parquet are wall times
    last_progress = start
    sent = 0
    batch_number = 0

    async def complete(
        future, count: int, first_due: float, spacing: float, partition: int
    ) -> None:
        try:
            response = await future if future is not None else None
        except ConnectionError as error:
            errors[f"connection: {error}"] = errors.get(f"connection: {error}", 0) + count
            return
        finally:
            slots.release()
        now = time.perf_counter()
        base_offset = -1
        if response is not None:
            answer = response["responses"][0]["partition_responses"][0]
            code = answer["error_code"]
            if code:
                errors[ErrorCode(code).name] = errors.get(ErrorCode(code).name, 0) + count
                return
            base_offset = answer["base_offset"]
        acknowledged.append(_Batch(now, first_due, spacing, count, partition, base_offset))
        oldest = (now - first_due) * 1000
        window.records += count
        window.latency_sum += count * (oldest - spacing * 1000 * (count - 1) / 2)
        window.latency_max = max(window.latency_max, oldest)

    while sent < settings.num_records:
        await slots.acquire()
        now = time.perf_counter()
        if throttled:
            due_count = min(settings.num_records, int((now - start) * settings.throughput) + 1)
            if due_count - sent < per_batch and settings.linger_ms > 0:
                full_at = start + (sent + per_batch - 1) / settings.throughput
                oldest_due = start + sent / settings.throughput
                wake = min(full_at, oldest_due + settings.linger_ms / 1000)
                if wake > now:
                    await asyncio.sleep(wake - now)
                    now = time.perf_counter()
                    due_count = min(
                        settings.num_records, int((now - start) * settings.throughput) + 1
                    )
            if due_count <= sent:
                await asyncio.sleep(start + sent / settings.throughput - now)
                now = time.perf_counter()
                due_count = sent + 1
            count = min(per_batch, due_count - sent)
            first_due, spacing = start + sent / settings.throughput, 1 / settings.throughput
        else:
            count = min(per_batch, settings.num_records - sent)
            first_due, spacing = now, 0.0
        partition = partitions[batch_number % len(partitions)]
        batch_number += 1
        records = repeated_message_set(payload, count, int(time.time() * 1000), settings.codec)
        connection = await client.connection(partition.leader)
        body = {
            "acks": settings.acks,
            "timeout": 30000,
            "topic_data": [
                {
                    "topic": settings.topic,
                    "data": [{"partition": partition.partition, "record_set": records}],
                }
            ],
        }
        future = connection.send(ApiKey.PRODUCE, 2, body, expect_response=settings.acks != 0)
        await connection.writer.drain()
        task = asyncio.create_task(complete(future, count, first_due, spacing, partition.partition))
        pending.add(task)
        task.add_done_callback(pending.discard)
        sent += count
        if time.perf_counter() - last_progress >= PROGRESS_INTERVAL:
            progress(window.line(settings.record_size))
            window = _Window()
            last_progress = time.perf_counter()
    await asyncio.gather(*pending)
    elapsed = time.perf_counter() - start
    await client.close()
    latencies = array("d")
    for batch in acknowledged:
        latencies.extend(batch.latencies_ms())
    sent = len(latencies)
    summary = Summary(sent, sent * settings.record_size, elapsed, latencies)
    if run_dir is not None:
        write_acks(run_dir, acknowledged, perf_to_epoch, settings.record_size)
    return summary, errors
