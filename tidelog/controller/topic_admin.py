"""CreateTopics v0-v3, DeleteTopics v0-v3 and CreatePartitions v0-v1 on the wire, answered by
the controller.

Any other broker answers NOT_CONTROLLER for every topic, as Kafka does, so the client retries
on the controller it finds in Metadata. Each topic gets its own error code (Kafka's): a bad
name, an existing topic, an invalid config, too few brokers or a bad explicit assignment. With
a positive timeout the answer waits until the change is in this broker's metadata (every new
partition with a leader, a deleted topic gone); past the timeout it is REQUEST_TIMED_OUT.
CreatePartitions goes through topics.add_partitions, the path of `tidelog topic add-partitions`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.client import KazooClient

from tidelog.broker.metadata import MetadataCache
from tidelog.controller import topics, zookeeper
from tidelog.errors import ErrorCode, KafkaError
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import ApiKey

log = logging.getLogger(__name__)

POLL_SECONDS = 0.05


class TopicAdminRequests:
    def __init__(
        self,
        metadata: MetadataCache,
        zk: Callable[[], KazooClient],
        is_controller: Callable[[], bool],
    ) -> None:
        self.metadata = metadata
        self.zk = zk
        self.is_controller = is_controller

    def handlers(self) -> dict[ApiKey, Callable[[Request], Awaitable[dict | None]]]:
        return {
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
        }

    # -- CreateTopics --------------------------------------------------------------------------

    async def create_topics(self, request: Request) -> dict:
        body = request.body
        wanted = body["create_topic_requests"]
        validate_only = body.get("validate_only", False)
        counts = Counter(t["topic"] for t in wanted)
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        created: dict[str, int] = {}
        for entry in wanted:
            name = entry["topic"]
            if counts[name] > 1:
                results[name] = (ErrorCode.INVALID_REQUEST, f"topic {name!r} named twice")
                continue
            try:
                partitions = await self._create(entry, validate_only)
                results[name] = (ErrorCode.NONE, None)
                if not validate_only:
                    created[name] = partitions
                    log.info(
                        "CreateTopics from %s: created %s (%d partitions)",
                        request.client_id,
                        name,
                        partitions,
                    )
            except KafkaError as error:
                results[name] = (error.code, error.message)
        if created and body["timeout"] > 0:
            ready = await self._wait(
                lambda: all(self._has_leaders(n, p) for n, p in created.items()), body["timeout"]
            )
            if not ready:
                for name in created:
                    if not self._has_leaders(name, created[name]):
                        results[name] = (
                            ErrorCode.REQUEST_TIMED_OUT,
                            f"{name!r} was created but its partitions have no leaders yet",
                        )
        return {
            "throttle_time_ms": 0,  # v2 and later
            "topic_errors": [
                {"topic": name, "error_code": int(code), "error_message": message}
                for name, (code, message) in results.items()
            ],
        }

    async def _create(self, entry: dict[str, Any], validate_only: bool) -> int:
        if not self.is_controller():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        partitions, replication_factor = entry["num_partitions"], entry["replication_factor"]
        assignment = None
        if entry["replica_assignment"]:
            if partitions != -1 or replication_factor != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "a replica assignment comes with num_partitions and replication_factor -1",
                )
            assignment = {a["partition"]: list(a["replicas"]) for a in entry["replica_assignment"]}
            if len(assignment) != len(entry["replica_assignment"]):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "a partition named twice")
        config: dict[str, str] = {}
        for item in entry["config_entries"]:
            if item["config_value"] is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{item['config_name']}: no value")
            config[item["config_name"]] = item["config_value"]
        done = await asyncio.to_thread(
            topics.create_topic,
            self.zk(),
            entry["topic"],
            partitions,
            replication_factor,
            config,
            assignment=assignment,
            validate_only=validate_only,
        )
        return len(done)

    def _has_leaders(self, name: str, partitions: int) -> bool:
        topic = self.metadata.topics.get(name)
        return (
            topic is not None
            and len(topic.assignment) == partitions
            and all(self.metadata.leader_of(name, p) >= 0 for p in topic.assignment)
        )

    # -- DeleteTopics --------------------------------------------------------------------------

    async def delete_topics(self, request: Request) -> dict:
        names = list(dict.fromkeys(request.body["topics"]))
        results: dict[str, ErrorCode] = {}
        asked = []
        for name in names:
            if not self.is_controller():
                results[name] = ErrorCode.NOT_CONTROLLER
                continue
            try:
                await asyncio.to_thread(zookeeper.request_topic_deletion, self.zk(), name)
                results[name] = ErrorCode.NONE
                asked.append(name)
                log.info("DeleteTopics from %s: deleting %s", request.client_id, name)
            except KeyError:
                results[name] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        timeout = request.body["timeout"]
        if asked and timeout > 0:
            await self._wait(lambda: not any(n in self.metadata.topics for n in asked), timeout)
            for name in asked:
                if name in self.metadata.topics:
                    results[name] = ErrorCode.REQUEST_TIMED_OUT
        return {
            "throttle_time_ms": 0,  # v1 and later
            "topic_error_codes": [
                {"topic": name, "error_code": int(code)} for name, code in results.items()
            ],
        }

    # -- CreatePartitions ----------------------------------------------------------------------

    async def create_partitions(self, request: Request) -> dict:
        body = request.body
        wanted = body["topic_partitions"]
        counts = Counter(t["topic"] for t in wanted)
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        grown: dict[str, int] = {}
        for entry in wanted:
            name, new = entry["topic"], entry["new_partitions"]
            if counts[name] > 1:
                results[name] = (ErrorCode.INVALID_REQUEST, f"topic {name!r} named twice")
                continue
            try:
                await self._add_partitions(name, new["count"], new["assignment"], body)
                results[name] = (ErrorCode.NONE, None)
                if not body["validate_only"]:
                    grown[name] = new["count"]
                    log.info(
                        "CreatePartitions from %s: %s now has %d partitions",
                        request.client_id,
                        name,
                        new["count"],
                    )
            except KafkaError as error:
                results[name] = (error.code, error.message)
        if grown and body["timeout"] > 0:
            await self._wait(
                lambda: all(self._has_leaders(n, p) for n, p in grown.items()), body["timeout"]
            )
            for name, count in grown.items():
                if not self._has_leaders(name, count):
                    results[name] = (
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{name!r} has {count} partitions but not all have leaders yet",
                    )
        return {
            "throttle_time_ms": 0,
            "topic_errors": [
                {"topic": name, "error_code": int(code), "error_message": message}
                for name, (code, message) in results.items()
            ],
        }

    async def _add_partitions(
        self, name: str, count: int, replicas: list[list[int]] | None, body: dict[str, Any]
    ) -> None:
        if not self.is_controller():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this broker is not the controller")
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        assignment = None
        if replicas is not None:
            first = len(topic.assignment)
            assignment = {first + i: list(r) for i, r in enumerate(replicas)}
            if any(len(set(r)) != len(r) for r in replicas):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT, "an assignment names a broker twice"
                )
        await asyncio.to_thread(
            topics.add_partitions,
            self.zk(),
            name,
            count,
            assignment,
            validate_only=body["validate_only"],
        )

    @staticmethod
    async def _wait(done: Callable[[], bool], timeout_ms: int) -> bool:
        """Polls this broker's metadata (kept current by ZooKeeper watches) until ``done`` or
        the request's timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while not done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # never past the deadline: what comes after it is too late
            await asyncio.sleep(min(POLL_SECONDS, remaining))
        return True
