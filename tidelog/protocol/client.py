"""tidelog's own asyncio Kafka client: metadata, and one pipelined connection per broker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.connection import Connection
from tidelog.protocol.schemas import ApiKey
from tidelog.reach import Unreachable

# How long a bootstrap server has to take a connection, and then to answer Metadata: a broker
# answers in milliseconds; one that is stopped (SIGSTOP) or a port that is not a broker's never
# does, and a command would wait for it without end.
BOOTSTRAP_TIMEOUT = 5.0


@dataclass(frozen=True, order=True)
class PartitionLeader:
    partition: int
    leader: int


def partition_leaders(described: dict) -> list[PartitionLeader] | None:
    """A Metadata answer's topic as its partitions and leaders; None while the topic has an
    error, no partitions, or a partition without a leader."""
    partitions = described["partition_metadata"]
    if described["error_code"] != 0 or not partitions or any(p["leader"] < 0 for p in partitions):
        return None
    return sorted(PartitionLeader(p["partition"], p["leader"]) for p in partitions)


def fetch_body(
    topic: str, offsets: dict[int, int], fetch_size: int, max_wait_ms: int = 100
) -> dict:
    """A consumer's Fetch request (v0-v3 fields) for ``offsets`` (partition -> next offset) of
    one topic: ``fetch_size`` bytes at most per partition, an answer within ``max_wait_ms``."""
    return {
        "replica_id": -1,
        "max_wait_time": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": fetch_size * len(offsets),
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "max_bytes": fetch_size}
                    for p, offset in offsets.items()
                ],
            }
        ],
    }


class Client:
    """Bootstrap, metadata, and a connection per broker."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap = [server.rsplit(":", 1) for server in bootstrap_servers.split(",")]
        self.brokers: dict[int, tuple[str, int]] = {}
        self.connections: dict[int, Connection] = {}

    async def partitions(self, topic: str, wait: float = 30.0) -> list[PartitionLeader]:
        """The topic's partitions and leaders (created by auto-creation if need be)."""
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            metadata = await self._metadata(topic)
            self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
            (described,) = metadata["topic_metadata"]
            leaders = partition_leaders(described)
            if leaders is not None:
                return leaders
            if asyncio.get_running_loop().time() > deadline:
                code = ErrorCode(described["error_code"])
                raise KafkaError(code, f"topic {topic} has no leader for every partition")
            await asyncio.sleep(0.2)

    async def _metadata(self, topic: str) -> dict:
        """Metadata from the first bootstrap server that answers within BOOTSTRAP_TIMEOUT;
        Unreachable if none does."""
        failures = {}
        for host, port in self.bootstrap:
            server = f"{host}:{port}"
            try:
                connection = await asyncio.wait_for(
                    Connection.open(host, int(port), client_id="tidelog-perf"), BOOTSTRAP_TIMEOUT
                )
            except TimeoutError:
                failures[server] = f"no connection in {BOOTSTRAP_TIMEOUT:g} s"
                continue
            except OSError as error:
                failures[server] = (error.strerror or str(error)).lower()
                continue
            try:
                # v0: served by brokers of every release (a 0.9.0 broker has no v1)
                request = connection.request(ApiKey.METADATA, 0, {"topics": [topic]})
                return await asyncio.wait_for(request, BOOTSTRAP_TIMEOUT)
            except TimeoutError:
                failures[server] = f"no answer in {BOOTSTRAP_TIMEOUT:g} s"
            finally:
                await connection.close()
        reasons = (
            "; ".join(f"{server}: {reason}" for server, reason in failures.items())
            if len(failures) > 1
            else next(iter(failures.values()))
        )
        raise Unreachable("Kafka", ",".join(failures), reasons)

    async def connection(self, broker_id: int) -> Connection:
        existing = self.connections.get(broker_id)
        if existing is not None and existing.closed:
            del self.connections[broker_id]
        if broker_id not in self.connections:
            host, port = self.brokers[broker_id]
            self.connections[broker_id] = await Connection.open(
                host, port, client_id="tidelog-perf"
            )
        return self.connections[broker_id]

    async def init_producer_id(self, broker_id: int) -> tuple[int, int]:
        """A new producer id and epoch for an idempotent producer, from ``broker_id``
        (InitProducerId v0, served from release 0.11.0 on); KafkaError if it refuses."""
        connection = await self.connection(broker_id)
        body = {"transactional_id": None, "transaction_timeout_ms": 60000}
        answer = await connection.request(ApiKey.INIT_PRODUCER_ID, 0, body)
        code = ErrorCode(answer["error_code"])
        if code != ErrorCode.NONE:
            raise KafkaError(code, f"InitProducerId from broker {broker_id}")
        return answer["producer_id"], answer["producer_epoch"]

    async def close(self) -> None:
        for connection in self.connections.values():
            await connection.close()
        self.connections.clear()
