"""Consumers that read a topic for as long as a load run lasts and sample their lag.

An in-sync reader starts at the log end and follows it; a catching-up reader (the design's
"out-of-sync consumer") starts at the earliest offset, remote tier included, and reads old data,
at most ``max_bytes_per_second``. Each runs one pipelined fetch loop per leader on tidelog's own
client, and follows leaders when they move. Fetched message sets are checked and walked entry by
entry without opening compressed wrappers (a wrapper's offset is its last record's, v0 and v1
alike), so reading costs no Python object per record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from tidelog import rundata
from tidelog.errors import KafkaError
from tidelog.protocol.client import Client, fetch_body
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import scan_entries

EARLIEST, LATEST = -2, -1
SAMPLE_INTERVAL = 1.0
RETRY_INTERVAL = 0.5


@dataclass(frozen=True)
class ReaderSettings:
    name: str  # the consumer column of consumer.parquet: "in-sync-1", "catching-up-3"
    topic: str
    from_start: bool  # True: the earliest offset (catching up); False: the log end (in sync)
    max_bytes_per_second: float = -1  # -1: as fast as the fetches come back
    fetch_size: int = 1024 * 1024  # per partition


@dataclass
class Samples:
    """consumer.parquet rows (rundata.CONSUMER), column by column. ``lag`` is the high
    watermark of the partition's last fetch answer minus the reader's next offset."""

    sampled_at: list[int] = field(default_factory=list)
    consumer: list[str] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    lag: list[int] = field(default_factory=list)

    def extend(self, other: Samples) -> None:
        for name in rundata.CONSUMER.names:
            getattr(self, name).extend(getattr(other, name))

    def columns(self) -> dict[str, list]:
        return {name: getattr(self, name) for name in rundata.CONSUMER.names}


class Reader:
    """One consumer. ``offsets`` (the next offset to read per partition) only grow; ``records``
    and ``bytes`` count what it read (records by offsets advanced, bytes as fetched)."""

    def __init__(self, bootstrap_servers: str, settings: ReaderSettings) -> None:
        self.settings = settings
        self.client = Client(bootstrap_servers)
        self.offsets: dict[int, int] = {}
        self.high_watermarks: dict[int, int] = {}
        self.records = 0
        self.bytes = 0
        self.errors: dict[str, int] = {}
        self.samples = Samples()
        self._started = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        """Reads until ``stop`` is set, sampling every partition each second."""
        self._started = time.monotonic()
        sampler = asyncio.create_task(self._sample(stop))
        try:
            while not stop.is_set():
                try:
                    await self._read_from_current_leaders(stop)
                except (ConnectionError, OSError, KafkaError) as error:
                    self._count_error(f"{type(error).__name__}: {error}")
                    await _wait(stop, RETRY_INTERVAL)
        finally:
            sampler.cancel()
            self._take_sample()
            await self.client.close()

    async def _read_from_current_leaders(self, stop: asyncio.Event) -> None:
        """Until ``stop``, or until a leader answers with an error (the caller looks again)."""
        partitions = await self.client.partitions(self.settings.topic)
        by_leader: dict[int, list[int]] = {}
        for partition in partitions:
            by_leader.setdefault(partition.leader, []).append(partition.partition)
        loops = [
            asyncio.create_task(self._fetch_loop(leader, numbers, stop))
            for leader, numbers in by_leader.items()
        ]
        stopping = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([*loops, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in [*loops, stopping]:
                task.cancel()
            await asyncio.gather(*loops, stopping, return_exceptions=True)
        for task in done:
            if task is not stopping and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _fetch_loop(self, leader: int, numbers: list[int], stop: asyncio.Event) -> None:
        """Returns when the leader answers a partition with an error."""
        connection = await self.client.connection(leader)
        missing = [p for p in numbers if p not in self.offsets]
        if missing:
            start = EARLIEST if self.settings.from_start else LATEST
            self.offsets.update(await self._list_offsets(connection, missing, start))
        topic, fetch_size = self.settings.topic, self.settings.fetch_size
        while not stop.is_set():
            body = fetch_body(topic, {p: self.offsets[p] for p in numbers}, fetch_size)
            response = await connection.request(ApiKey.FETCH, 3, body)
            moved = False
            for answer in response["responses"][0]["partition_responses"]:
                partition = answer["partition"]
                if answer["error_code"]:
                    self._count_error(f"fetch error {answer['error_code']}")
                    moved = True
                    continue
                self.high_watermarks[partition] = answer["high_watermark"]
                record_set = answer["record_set"]
                if not record_set:
                    continue
                scan = scan_entries(record_set, 0)
                if scan.last_offset >= self.offsets[partition]:
                    self.records += scan.last_offset + 1 - self.offsets[partition]
                    self.offsets[partition] = scan.last_offset + 1
                self.bytes += scan.end
            if moved:
                return
            await self._throttle(stop)

    async def _list_offsets(
        self, connection: Connection, numbers: list[int], timestamp: int
    ) -> dict[int, int]:
        partitions = [{"partition": p, "timestamp": timestamp} for p in numbers]
        response = await connection.request(
            ApiKey.LIST_OFFSETS,
            1,
            {
                "replica_id": -1,
                "topics": [{"topic": self.settings.topic, "partitions": partitions}],
            },
        )
        answers = response["responses"][0]["partition_responses"]
        failed = [a for a in answers if a["error_code"]]
        if failed:
            raise ConnectionError(f"ListOffsets answered error {failed[0]['error_code']}")
        return {a["partition"]: a["offset"] for a in answers}

    async def _throttle(self, stop: asyncio.Event) -> None:
        """Holds the reader back to ``max_bytes_per_second`` over its whole run."""
        cap = self.settings.max_bytes_per_second
        if cap <= 0:
            return
        ahead = self.bytes / cap - (time.monotonic() - self._started)
        if ahead > 0:
            await _wait(stop, ahead)

    async def _sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _wait(stop, SAMPLE_INTERVAL)
            self._take_sample()

    def _take_sample(self) -> None:
        moment = rundata.epoch_microseconds(time.time())
        for partition, offset in sorted(self.offsets.items()):
            high_watermark = self.high_watermarks.get(partition, offset)
            self.samples.sampled_at.append(moment)
            self.samples.consumer.append(self.settings.name)
            self.samples.partition.append(partition)
            self.samples.offset.append(offset)
            self.samples.lag.append(max(0, high_watermark - offset))

    def _count_error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    """Sleeps ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
