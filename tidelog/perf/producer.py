"""``tidelog perf produce``: Kafka's producer perf test, on tidelog's own pipelined client.

Records are handed to the producer at the --throughput rate (or as fast as it takes them) and
go out in batches of up to --batch-size bytes, one partition after the other, with up to five
requests in flight per broker. A batch takes every record due when a request slot is free; with
--linger-ms it also waits up to that long for a full batch. A record's latency runs from the time
it was due to its acknowledgement. Message sets are cut from a ring of encoded messages (one
payload, or ``keys`` keyed messages with payloads drawn from ``seed``), so there is no Python
object per record. A produce that fails (an error code, or a leader that went away) counts its
records as failed, as Kafka's producer does with retries=0, and the leaders are looked up again.
With ``idempotent`` (record batches only) the batches carry a producer id from InitProducerId and
each partition's sequence; after a failure the producer takes a new producer id and starts its
sequences again (it does not retry, so the failed batch's sequence is never sent again).
"""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelog import rundata
from tidelog.errors import ErrorCode, KafkaError
from tidelog.perf.stats import Summary
from tidelog.protocol.client import Client
from tidelog.protocol.schemas import ApiKey
from tidelog.records.compression import compress
from tidelog.records.format import OFFSET_AND_SIZE, Codec, encode_entry, encode_message
from tidelog.records.record_batch import (
    Header,
    encode_batch_body,
    encode_record,
    read_varint,
    write_varint,
)

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
    seed: int = 0  # of the payloads (and keys)
    keys: int = 0  # distinct keys, cycled through; 0: records without keys, one payload
    # 1: v1 message sets in Produce v2; 2: v2 record batches in Produce v3 (a 0.11+ broker)
    message_format: int = 1
    headers: tuple[tuple[str, bytes], ...] = ()  # on every record (format 2 only)
    idempotent: bool = False  # a producer id and sequences (format 2 only)


# Errors after which the partition's leader is looked up again (the broker's or the connection's)
LEADER_MOVED = {ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}
METADATA_REFRESH_INTERVAL = 0.5


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


def repeated_batch(
    payload: bytes, count: int, timestamp: int, codec: Codec, key: bytes | None = None
) -> bytes:
    """``count`` copies of one record as one v2 record batch (offset deltas 0..count-1, all
    of ``timestamp``): the record is encoded once, each copy only its offset delta."""
    record = encode_record(0, 0, key, payload, ())
    _, start = read_varint(record, 0, len(record))
    tail = record[start + 3 :]  # after attributes and the two zero deltas
    body = bytearray()
    for delta in range(count):
        head = bytearray(b"\x00\x00")  # attributes, timestamp delta 0
        write_varint(head, delta)
        write_varint(body, len(head) + len(tail))
        body += head
        body += tail
    return encode_batch_body(bytes(body), count, timestamp, codec)


class MessageRing:
    """Encoded v1 entries of equal size, in a fixed order, to cut message sets from.

    Entry k is record k modulo ``len(ring)``: key ``key-{k:08d}`` (no key when ``keys`` is 0) and
    a payload of ``record_size`` bytes drawn from ``seed``, so a run with the same seed sends the
    same records. Entries carry offset 0 (the broker assigns offsets) and a CreateTime of the
    second they were cut in. The ring is encoded in chunks of ``CHUNK`` entries, each encoded
    again the first time it is cut from in a new second: a second costs an encoding of the
    records sent in it (at most the whole ring), not of the whole ring, and no record is encoded
    on its own. ``entries(first, count, now_ms)`` is records first..first+count-1, wrapping.
    """

    CHUNK = 512

    def __init__(self, record_size: int, seed: int, keys: int) -> None:
        chooser = random.Random(seed)
        names = [f"key-{k:08d}".encode() for k in range(keys)] if keys > 0 else [None]
        self._records = [(key, chooser.randbytes(record_size)) for key in names]
        self.entry_size = len(encode_entry(0, encode_message(1, *self._records[0], 0)))
        chunks = -(-len(self._records) // self.CHUNK)
        self._chunks: list[tuple[int, bytes]] = [(-1, b"")] * chunks  # (second, entries)
        # format 2: each record's bytes after its offset delta, for the headers they were made with
        self._tails: tuple[tuple[Header, ...], list[bytes]] | None = None

    def __len__(self) -> int:
        return len(self._records)

    def _chunk(self, number: int, now_ms: int) -> bytes:
        second, encoded = self._chunks[number]
        if second != now_ms // 1000:
            first = number * self.CHUNK
            encoded = b"".join(
                encode_entry(0, encode_message(1, key, value, now_ms))
                for key, value in self._records[first : first + self.CHUNK]
            )
            self._chunks[number] = (now_ms // 1000, encoded)
        return encoded

    def entries(self, first: int, count: int, now_ms: int) -> bytes:
        pieces = []
        position = first % len(self._records)
        while count > 0:
            number, inside = divmod(position, self.CHUNK)
            chunk = self._chunk(number, now_ms)
            taken = min(count, len(chunk) // self.entry_size - inside)
            pieces.append(chunk[inside * self.entry_size : (inside + taken) * self.entry_size])
            count -= taken
            position = (position + taken) % len(self._records)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def batch(
        self,
        first: int,
        count: int,
        now_ms: int,
        codec: Codec,
        headers: Sequence[Header] = (),
        producer: tuple[int, int, int] = (-1, -1, -1),
    ) -> bytes:
        """Records first..first+count-1 as one v2 batch (offset deltas 0..count-1, all of
        ``now_ms``), each record's key, value and headers encoded once per ring pass."""
        if self._tails is None or self._tails[0] != tuple(headers):
            tails = []
            for key, value in self._records:
                record = encode_record(0, 0, key, value, headers)
                _, start = read_varint(record, 0, len(record))
                tails.append(record[start + 3 :])  # after attributes and the two zero deltas
            self._tails = (tuple(headers), tails)
        tails = self._tails[1]
        size = len(tails)
        body = bytearray()
        for delta in range(count):
            tail = tails[(first + delta) % size]
            head = bytearray(b"\x00\x00")  # attributes, timestamp delta 0
            write_varint(head, delta)
            write_varint(body, len(head) + len(tail))
            body += head
            body += tail
        return encode_batch_body(bytes(body), count, now_ms, codec, producer)

    def message_set(self, first: int, count: int, now_ms: int, codec: Codec) -> bytes:
        """Records first..first+count-1, uncompressed or in one wrapper with relative inner
        offsets 0..count-1."""
        entries = self.entries(first, count, now_ms)
        if codec == Codec.NONE:
            return entries
        inner = bytearray(entries)
        message_size = self.entry_size - OFFSET_AND_SIZE.size
        for number in range(1, count):
            OFFSET_AND_SIZE.pack_into(inner, number * self.entry_size, number, message_size)
        wrapper = encode_message(1, None, compress(codec, inner, 1), now_ms, codec)
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
    stop: asyncio.Event | None = None,
) -> tuple[Summary, dict[str, int]]:
    """Runs the test (until ``num_records`` are sent, or ``stop`` is set); returns the summary
    and the count of each error seen. With ``run_dir``, also writes every acknowledgement to its
    acks table."""
    client = Client(bootstrap_servers)
    partitions = await client.partitions(settings.topic)
    per_batch = max(1, settings.batch_size // (settings.record_size + 34))
    ring = MessageRing(settings.record_size, settings.seed, settings.keys)
    # v3 is the first to carry batches, v7 the first to carry zstd (Kafka 2.1)
    produce_version = (
        2 if settings.message_format == 1 else 7 if settings.codec == Codec.ZSTD else 3
    )
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
    leaders_moved = False  # a produce failed in a way that says: look the leaders up again
    looked_up = start
    # idempotent: (producer id, epoch), each partition's next sequence; a failure asks for a
    # new producer id (None) before the next batch
    producer: tuple[int, int] | None = None
    sequences: dict[int, int] = {}

    def failed(name: str, count: int) -> None:
        nonlocal producer
        errors[name] = errors.get(name, 0) + count
        producer = None  # idempotent: this partition's sequence has a gap now

    async def complete(
        future, count: int, first_due: float, spacing: float, partition: int
    ) -> None:
        nonlocal leaders_moved
        try:
            response = await future if future is not None else None
        except ConnectionError as error:
            failed(f"connection: {error}", count)
            leaders_moved = True
            return
        finally:
            slots.release()
        now = time.perf_counter()
        base_offset = -1
        if response is not None:
            answer = response["responses"][0]["partition_responses"][0]
            code = answer["error_code"]
            if code:
                failed(ErrorCode(code).name, count)
                leaders_moved = leaders_moved or code in LEADER_MOVED
                return
            base_offset = answer["base_offset"]
        acknowledged.append(_Batch(now, first_due, spacing, count, partition, base_offset))
        oldest = (now - first_due) * 1000
        window.records += count
        window.latency_sum += count * (oldest - spacing * 1000 * (count - 1) / 2)
        window.latency_max = max(window.latency_max, oldest)

    while sent < settings.num_records and not (stop is not None and stop.is_set()):
        await slots.acquire()
        now = time.perf_counter()
        if leaders_moved and now - looked_up >= METADATA_REFRESH_INTERVAL:
            leaders_moved, looked_up = False, now
            try:
                partitions = await client.partitions(settings.topic)
            except (ConnectionError, OSError, KafkaError):
                leaders_moved = True  # still moving: the next batch tries again
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
        now_ms = int(time.time() * 1000)
        sequence = (-1, -1, -1)
        if settings.idempotent:
            if producer is None:
                try:
                    producer = await client.init_producer_id(partition.leader)
                except (ConnectionError, OSError, KafkaError) as error:
                    slots.release()
                    failed(f"InitProducerId: {error}", 0)
                    leaders_moved = True
                    await asyncio.sleep(METADATA_REFRESH_INTERVAL)
                    continue
                sequences.clear()
            next_sequence = sequences.get(partition.partition, 0)
            sequences[partition.partition] = (next_sequence + count) % 2**31
            sequence = (*producer, next_sequence)
        if settings.message_format == 2:
            records = ring.batch(sent, count, now_ms, settings.codec, settings.headers, sequence)
        else:
            records = ring.message_set(sent, count, now_ms, settings.codec)
        body = {
            "transactional_id": None,  # Produce v3+
            "acks": settings.acks,
            "timeout": 30000,
            "topic_data": [
                {
                    "topic": settings.topic,
                    "data": [{"partition": partition.partition, "record_set": records}],
                }
            ],
        }
        sent += count
        try:
            connection = await client.connection(partition.leader)
            future = connection.send(
                ApiKey.PRODUCE, produce_version, body, expect_response=settings.acks != 0
            )
            await connection.writer.drain()
        # the leader went away (uvloop's transport says so with a RuntimeError once closed)
        except (ConnectionError, OSError, RuntimeError) as error:
            slots.release()
            failed(f"connection: {error}", count)
            leaders_moved = True
            continue
        task = asyncio.create_task(complete(future, count, first_due, spacing, partition.partition))
        pending.add(task)
        task.add_done_callback(pending.discard)
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
