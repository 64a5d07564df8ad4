"""tidelog's own asyncio Kafka client: pipelined requests over one connection per broker."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from dataclasses import dataclass

from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.frames import SIZE, decode_response, encode_request
from tidelog.protocol.schemas import ApiKey


class Connection:
    """Requests go out as soon as they are sent; responses come back in order, so each is
    matched to the oldest request still waiting (and its correlation id checked)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._ids = itertools.count(1)
        self._pending: deque[tuple[int, ApiKey, int, asyncio.Future]] = deque()
        self._receiver = asyncio.create_task(self._receive())

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    def send(self, api_key: ApiKey, version: int, body: dict, expect_response: bool = True):  # type: ignore[no-untyped-def]
        """Sends a request; returns a future of its response body (None: no response)."""
        correlation_id = next(self._ids)
        self.writer.write(encode_request(api_key, version, correlation_id, "tidelog-perf", body))
        if not expect_response:
            return None
        future = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, api_key, version, future))
        return future

    async def request(self, api_key: ApiKey, version: int, body: dict) -> dict:
        future = self.send(api_key, version, body)
        await self.writer.drain()
        return await future

    async def _receive(self) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await self.reader.readexactly(SIZE.size))
                frame = await self.reader.readexactly(size)
                correlation_id, api_key, version, future = self._pending.popleft()
                received_id, body = decode_response(api_key, version, frame)
                if received_id != correlation_id:
                    raise ConnectionError(f"response {received_id} for request {correlation_id}")
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, IndexError) as error:
            while self._pending:
                _, _, _, future = self._pending.popleft()
                if not future.done():
                    future.set_exception(ConnectionError(f"connection lost: {error!r}"))

    async def close(self) -> None:
        self._receiver.cancel()
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@dataclass(frozen=True, order=True)
class PartitionLeader:
    partition: int
    leader: int


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
            host, port = self.bootstrap[0]
            connection = await Connection.open(host, int(port))
            try:
                metadata = await connection.request(ApiKey.METADATA, 1, {"topics": [topic]})
            finally:
                await connection.close()
            self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
            (described,) = metadata["topic_metadata"]
            partitions = described["partition_metadata"]
            if (
                described["error_code"] == 0
                and partitions
                and all(p["leader"] >= 0 for p in partitions)
            ):
                return sorted(PartitionLeader(p["partition"], p["leader"]) for p in partitions)
            if asyncio.get_running_loop().time() > deadline:
                code = ErrorCode(described["error_code"])
                raise KafkaError(code, f"topic {topic} has no leader for every partition")
            await asyncio.sleep(0.2)

    async def connection(self, broker_id: int) -> Connection:
        if broker_id not in self.connections:
            host, port = self.brokers[broker_id]
            self.connections[broker_id] = await Connection.open(host, port)
        return self.connections[broker_id]

    async def close(self) -> None:
        for connection in self.connections.values():
            await connection.close()
        self.connections.clear()
