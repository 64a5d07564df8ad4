"""The clients an upgrade runs under: producers and consumers of the 0.9, 0.10 and 0.11+ eras.

A v0-era client sends Produce v1 (format v0 messages) and Fetch v1 to every broker. The others
ask each broker's ApiVersions on a new connection, as 0.10 clients do, and send the newest
version up to their era's (ERA_VERSIONS): a broker that closes the connection (0.9.0) gets
Produce v1 / Fetch v1; a v1-era client sends at most Produce v2 (format v1 messages) and Fetch
v2, which reads a v2 log down-converted to v1; a v2-era client Produce v3 (v2 record batches)
and Fetch v4, the first Fetch that reads v2 batches as they are.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from tidelog.cluster.delivery import DeliveryProducer
from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.client import Client
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import iter_deep

ERAS = ("v0", "v1")  # the eras of the upgrades to 0.10; the upgrade to 2.1 adds v2
# era -> (newest Produce version, newest Fetch version) it sends
ERA_VERSIONS = {"v0": (1, 1), "v1": (2, 2), "v2": (3, 4)}


async def newest_version(client: Client, broker_id: int, api_key: ApiKey, cap: int) -> int:
    """The highest version of ``api_key`` up to ``cap`` that the broker advertises; 1 for a
    broker that closes the connection on ApiVersions (a 0.9 broker)."""
    connection = await client.connection(broker_id)
    try:
        async with asyncio.timeout(10):
            answer = await connection.request(ApiKey.API_VERSIONS, 0, {})
    except (ConnectionError, OSError, TimeoutError):
        client.connections.pop(broker_id, None)
        await connection.close()
        return 1
    tops = {v["api_key"]: v["max_version"] for v in answer["api_versions"]}
    return min(cap, tops.get(api_key, 1))


@dataclass
class EraProducer(DeliveryProducer):
    """The delivery oracle's producer, at the Produce version of its era (``era``)."""

    era: str = "v1"
    _versions: dict[Connection, int] = field(default_factory=dict, repr=False)

    async def version_for(self, client: Client, leader: int) -> int:
        cap = ERA_VERSIONS[self.era][0]
        if cap == 1:
            return 1
        try:
            connection = await client.connection(leader)
            if connection not in self._versions:
                version = await newest_version(client, leader, ApiKey.PRODUCE, cap)
                self._versions[await client.connection(leader)] = version
            return self._versions[await client.connection(leader)]
        except (OSError, ConnectionError, TimeoutError, KeyError):
            return cap  # the leader is away: the send fails, and leaders are asked again


@dataclass
class EraConsumer:
    """Reads every partition of ``topic`` from its leader for as long as it runs, at its era's
    Fetch version; keeps each partition's (offset, value, magic) and the magics it was sent.

    Draining ends at each partition's high watermark, and not before ``ends`` (the offset after
    the last acknowledged message, per partition): a leader elected during the run may answer
    with a high watermark below what its predecessor acknowledged until its followers fetch
    again, and a reader that stopped there would report acknowledged messages as missed. Only a
    pass begun after ``drain`` was set, and so with ``ends`` final, can end the draining.
    """

    bootstrap_servers: str
    topic: str
    era: str
    consumed: dict[int, list[tuple[int, bytes | None, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    errors: int = 0
    ends: dict[int, int] = field(default_factory=dict)

    async def run(self, stop: asyncio.Event, drain: asyncio.Event, timeout: float = 60.0) -> None:
        """Consumes until ``stop``; then, once ``drain`` is set, reads on to each partition's
        high watermark and ``ends``, and returns (after ``timeout`` seconds of draining at the
        latest: what it has not read by then counts as missed)."""
        client = Client(self.bootstrap_servers)
        offsets: dict[int, int] = defaultdict(int)
        versions: dict[Connection, int] = {}
        drain_deadline: float | None = None
        try:
            while True:
                # ends are final once drain is set: a pass that began before cannot end the run
                draining = drain.is_set()
                if draining:
                    now = asyncio.get_running_loop().time()
                    drain_deadline = drain_deadline or now + timeout
                    if now > drain_deadline:
                        return
                try:
                    partitions = await client.partitions(self.topic, wait=5)
                    caught_up = True
                    for target in partitions:
                        connection = await client.connection(target.leader)
                        if connection not in versions:
                            version = await self._version(client, target.leader)
                            connection = await client.connection(target.leader)
                            versions[connection] = version
                        version = versions[connection]
                        got, high_watermark = await self._fetch(
                            connection, version, target.partition, offsets[target.partition]
                        )
                        if got:
                            offsets[target.partition] = got[-1][0] + 1
                            self.consumed[target.partition] += got
                        end = max(high_watermark, self.ends.get(target.partition, 0))
                        caught_up &= offsets[target.partition] >= end
                except (ConnectionError, OSError, TimeoutError, KafkaError, KeyError):
                    self.errors += 1
                    await client.close()
                    versions.clear()
                    await asyncio.sleep(0.2)
                    continue
                if draining and caught_up:
                    return
                if not stop.is_set() or draining:
                    continue
                await asyncio.sleep(0.05)
        finally:
            await client.close()

    async def _version(self, client: Client, broker_id: int) -> int:
        cap = ERA_VERSIONS[self.era][1]
        if cap == 1:
            return 1
        return await newest_version(client, broker_id, ApiKey.FETCH, cap)

    async def _fetch(
        self, connection: Connection, version: int, partition: int, offset: int
    ) -> tuple[list[tuple[int, bytes | None, int]], int]:
        wanted = {"partition": partition, "fetch_offset": offset, "max_bytes": 1 << 20}
        body = {
            "replica_id": -1,
            "max_wait_time": 100,
            "min_bytes": 1,
            "max_bytes": 1 << 22,  # Fetch v3+
            "isolation_level": 0,  # Fetch v4+: read_uncommitted
            "topics": [{"topic": self.topic, "partitions": [wanted]}],
        }
        async with asyncio.timeout(10):
            response = await connection.request(ApiKey.FETCH, version, body)
        answer = response["responses"][0]["partition_responses"][0]
        if answer["error_code"]:
            raise KafkaError(ErrorCode(answer["error_code"]), f"{self.topic}-{partition}")
        records = answer["record_set"] or b""
        got = [(m.offset, m.value, m.magic) for m in iter_deep(records) if m.offset >= offset]
        return got, answer["high_watermark"]
