"""``spark.readStream.format("tidelog")``: Structured Streaming over a live topic, read through
the Kafka Fetch API by tidelog's own client (no Java Kafka connector).

    spark.readStream.format("tidelog")
        .option("kafka.bootstrap.servers", "127.0.0.1:19092").option("topic", "events")
        .option("startingOffsets", "earliest").load()

Progress is the next offset to read per partition, ``{"0": 120, "1": 97}``: Spark checkpoints
it, so a restarted query goes on where it stopped. A micro-batch ends at each partition's high
watermark (ListOffsets latest) and reads [start, end) of every partition that grew with Fetch
v3 from its leader. Rows have the batch schema; ``tier`` is null, since a Fetch response does
not say which tier the broker read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from tidelog.errors import ErrorCode, KafkaError
from tidelog.pipeline.segments import decode_message_set
from tidelog.protocol.client import Client
from tidelog.protocol.schemas import ApiKey

EARLIEST, LATEST = -2, -1
FETCH_MAX_BYTES = 4 << 20
RETRY_SECONDS = 30.0
STARTING_OFFSETS = {"earliest": EARLIEST, "latest": LATEST}


async def list_offsets(bootstrap_servers: str, topic: str, timestamp: int) -> dict[int, int]:
    """Each partition's earliest (-2) or latest (-1: the high watermark) offset."""
    client = Client(bootstrap_servers)
    try:
        leaders: dict[int, list[int]] = {}
        for found in await client.partitions(topic):
            leaders.setdefault(found.leader, []).append(found.partition)
        offsets = {}
        for leader, numbers in leaders.items():
            connection = await client.connection(leader)
            response = await connection.request(
                ApiKey.LIST_OFFSETS,
                1,
                {
                    "replica_id": -1,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": p, "timestamp": timestamp} for p in numbers
                            ],
                        }
                    ],
                },
            )
            for answer in response["responses"][0]["partition_responses"]:
                if answer["error_code"]:
                    code = ErrorCode(answer["error_code"])
                    raise KafkaError(code, f"ListOffsets {topic}-{answer['partition']}")
                offsets[answer["partition"]] = answer["offset"]
        return offsets
    finally:
        await client.close()


async def fetch_range(
    bootstrap_servers: str, topic: str, partition: int, start: int, end: int
) -> list[pa.RecordBatch]:
    """The rows of offsets [start, end) of one partition, fetched from its leader (found again
    after an error or an empty answer; KafkaError after RETRY_SECONDS without progress)."""
    client = Client(bootstrap_servers)
    batches, offset = [], start
    deadline = asyncio.get_running_loop().time() + RETRY_SECONDS
    leaders: dict[int, int] | None = None
    try:
        while offset < end:
            if leaders is None:
                leaders = {p.partition: p.leader for p in await client.partitions(topic)}
            try:
                connection = await client.connection(leaders[partition])
                response = await connection.request(
                    ApiKey.FETCH,
                    3,
                    {
                        "replica_id": -1,
                        "max_wait_time": 500,
                        "min_bytes": 1,
                        "max_bytes": FETCH_MAX_BYTES,
                        "topics": [
                            {
                                "topic": topic,
                                "partitions": [
                                    {
                                        "partition": partition,
                                        "fetch_offset": offset,
                                        "max_bytes": FETCH_MAX_BYTES,
                                    }
                                ],
                            }
                        ],
                    },
                )
                answer = response["responses"][0]["partition_responses"][0]
            except (OSError, ConnectionError, KeyError):
                answer = {"error_code": ErrorCode.NETWORK_EXCEPTION, "record_set": None}
            batch, _ = decode_message_set(
                bytes(answer["record_set"] or b""), topic, partition, None
            )
            offsets = batch.column("offset").to_pylist()
            if answer["error_code"] or not offsets:
                if asyncio.get_running_loop().time() > deadline:
                    code = ErrorCode(answer["error_code"])
                    raise KafkaError(
                        code, f"no progress fetching {topic}-{partition} at offset {offset}"
                    )
                await client.close()  # the leader may have moved: ask again
                leaders = None
                await asyncio.sleep(0.2)
                continue
            batches.append(batch.filter(pa.array([start <= o < end for o in offsets])))
            offset = max(offset, offsets[-1] + 1)
            deadline = asyncio.get_running_loop().time() + RETRY_SECONDS
    finally:
        await client.close()
    return batches


class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class FetchStreamReader(DataSourceStreamReader):
    """Options: ``kafka.bootstrap.servers``, ``topic``, ``startingOffsets`` (earliest, the
    default, or latest)."""

    def __init__(self, options: dict[str, str]) -> None:
        missing = [k for k in ("kafka.bootstrap.servers", "topic") if k not in options]
        if missing:
            raise ValueError(f'readStream.format("tidelog") needs option(s) {", ".join(missing)}')
        self.bootstrap_servers = options["kafka.bootstrap.servers"]
        self.topic = options["topic"]
        starting = options.get("startingOffsets", "earliest")
        if starting not in STARTING_OFFSETS:
            raise ValueError(f"startingOffsets {starting!r}: allowed are earliest, latest")
        self.starting = STARTING_OFFSETS[starting]

    def _offsets(self, timestamp: int) -> dict[str, int]:
        found = asyncio.run(list_offsets(self.bootstrap_servers, self.topic, timestamp))
        return {str(partition): offset for partition, offset in sorted(found.items())}

    def initialOffset(self) -> dict:
        return self._offsets(self.starting)

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        latest = self._offsets(LATEST)
        if start:  # a partition never moves back, even if a fresh leader lags for a moment
            latest = {p: max(o, start.get(p, o)) for p, o in latest.items()}
        return latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [
            OffsetRange(int(partition), start.get(partition, 0), stop)
            for partition, stop in sorted(end.items(), key=lambda item: int(item[0]))
            if stop > start.get(partition, 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from asyncio.run(
            fetch_range(
                self.bootstrap_servers,
                self.topic,
                partition.partition,
                partition.start,
                partition.end,
            )
        )
