"""A blocking Kafka client for locust users: one request at a time on plain sockets.

Under locust, ``socket`` is gevent's (locust patches the standard library when it starts), so a
user waiting for an answer yields to the others. Requests and answers are encoded and decoded by
tidelog's protocol code (``tidelog.protocol.frames``); this module only moves the frames.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterable

from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.client import PartitionLeader, fetch_body, partition_leaders
from tidelog.protocol.frames import SIZE, decode_response, encode_request
from tidelog.protocol.schemas import ApiKey

CLIENT_ID = "tidelog-locust"
# Produce v2 / Fetch v3 / ListOffsets v1: message format v1, served by tidelog at every release
# from 0.10.1 on (the versions kafka-python 2.x and librdkafka send to a 0.10.1 broker)
PRODUCE_VERSION, FETCH_VERSION, LIST_OFFSETS_VERSION = 2, 3, 1
LATEST, EARLIEST = -1, -2


class BlockingConnection:
    """One socket to one broker. A request is written whole and its answer read whole before the
    next goes out, so answers need no matching beyond a check of the correlation id."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.socket = socket.create_connection((host, port), timeout=timeout)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self.closed = False

    def request(self, api_key: ApiKey, version: int, body: dict) -> dict:
        """Sends a request and returns its answer's body; a lost connection (or one that does
        not answer within the timeout) raises ConnectionError and closes this one."""
        correlation_id = next(self._ids)
        try:
            self.socket.sendall(encode_request(api_key, version, correlation_id, CLIENT_ID, body))
            (size,) = SIZE.unpack(self._read(SIZE.size))
            received_id, answer = decode_response(api_key, version, self._read(size))
        except OSError as error:  # timeouts included
            self.close()
            raise ConnectionError(f"connection lost: {error!r}") from error
        if received_id != correlation_id:
            self.close()
            raise ConnectionError(f"answer {received_id} to request {correlation_id}")
        return answer

    def _read(self, size: int) -> memoryview:
        buffer = memoryview(bytearray(size))
        position = 0
        while position < size:
            received = self.socket.recv_into(buffer[position:])
            if not received:
                raise ConnectionResetError("the broker closed the connection")
            position += received
        return buffer

    def close(self) -> None:
        self.closed = True
        self.socket.close()


class BlockingClient:
    """Bootstrap, metadata, and one connection per broker, opened on first use. Not shared
    between users: each locust user owns one, so its requests never interleave with another's."""

    def __init__(self, bootstrap_servers: str, timeout: float = 30.0) -> None:
        self.bootstrap = [server.rsplit(":", 1) for server in bootstrap_servers.split(",")]
        self.timeout = timeout
        self.brokers: dict[int, tuple[str, int]] = {}
        self.connections: dict[int, BlockingConnection] = {}

    def partitions(self, topic: str, wait: float = 30.0) -> list[PartitionLeader]:
        """The topic's partitions and their leaders, waiting up to ``wait`` seconds for every
        partition to have one (a topic being created, or auto-created by this request)."""
        deadline = time.monotonic() + wait
        while True:
            metadata = self._metadata(topic)
            self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
            (described,) = metadata["topic_metadata"]
            leaders = partition_leaders(described)
            if leaders is not None:
                return leaders
            if time.monotonic() > deadline:
                code = ErrorCode(described["error_code"])
                raise KafkaError(code, f"topic {topic} has no leader for every partition")
            time.sleep(0.2)

    def _metadata(self, topic: str) -> dict:
        failures = []
        for host, port in self.bootstrap:
            try:
                connection = BlockingConnection(host, int(port), self.timeout)
            except OSError as error:
                failures.append(f"{host}:{port}: {error.strerror or error}")
                continue
            try:
                return connection.request(ApiKey.METADATA, 0, {"topics": [topic]})
            finally:
                connection.close()
        raise ConnectionError("no bootstrap server answered: " + "; ".join(failures))

    def connection(self, broker_id: int) -> BlockingConnection:
        existing = self.connections.get(broker_id)
        if existing is None or existing.closed:
            host, port = self.brokers[broker_id]
            existing = self.connections[broker_id] = BlockingConnection(host, port, self.timeout)
        return existing

    def request(self, broker_id: int, api_key: ApiKey, version: int, body: dict) -> dict:
        return self.connection(broker_id).request(api_key, version, body)

    def produce(
        self,
        leader: int,
        topic: str,
        partition: int,
        records: bytes,
        acks: int,
        version: int = PRODUCE_VERSION,
    ) -> tuple[ErrorCode, int]:
        """(error, base offset) of one message set sent to one partition, by Produce
        ``version`` (3 or later for v2 record batches). acks=0 is not offered: with no answer
        there is no acknowledgement to time."""
        body = {
            "transactional_id": None,  # Produce v3+
            "acks": acks,
            "timeout": int(self.timeout * 1000),
            "topic_data": [
                {"topic": topic, "data": [{"partition": partition, "record_set": records}]}
            ],
        }
        answer = self.request(leader, ApiKey.PRODUCE, version, body)
        (partition_answer,) = answer["responses"][0]["partition_responses"]
        return ErrorCode(partition_answer["error_code"]), partition_answer["base_offset"]

    def fetch(
        self,
        leader: int,
        topic: str,
        offsets: dict[int, int],
        partition_max_bytes: int,
        max_wait_ms: int = 100,
    ) -> list[dict]:
        """One Fetch of the partitions in ``offsets`` (partition → fetch offset) from their
        leader: each partition's answer (partition, error_code, high_watermark, record_set)."""
        body = fetch_body(topic, offsets, partition_max_bytes, max_wait_ms)
        answer = self.request(leader, ApiKey.FETCH, FETCH_VERSION, body)
        return answer["responses"][0]["partition_responses"] if answer["responses"] else []

    def list_offsets(
        self, leader: int, topic: str, partitions: Iterable[int], timestamp: int
    ) -> dict[int, int]:
        """Each partition's offset for ``timestamp`` (LATEST: the log end, EARLIEST: the log
        start) from its leader; an error raises KafkaError with its code."""
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": p, "timestamp": timestamp} for p in partitions],
                }
            ],
        }
        answer = self.request(leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body)
        offsets = {}
        for found in answer["responses"][0]["partition_responses"]:
            if found["error_code"]:
                code = ErrorCode(found["error_code"])
                raise KafkaError(code, f"list offsets of {topic}-{found['partition']}")
            offsets[found["partition"]] = found["offset"]
        return offsets

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()
