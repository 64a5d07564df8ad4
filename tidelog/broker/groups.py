"""The consumer-group APIs on the wire: from a decoded request to the group coordinator and back.

GroupCoordinator (FindCoordinator from v1) names the leader of the group's
``__consumer_offsets`` partition (creating the topic on first use, as Kafka does); asked for a
transaction coordinator, it answers INVALID_REQUEST with a message saying tidelog serves no
transactions (no coordinator will come: Kafka's answer to what it cannot serve, which clients
report instead of retrying as they do COORDINATOR_NOT_AVAILABLE). OffsetCommit v0 and
OffsetFetch v0 keep offsets in ZooKeeper as 0.9 did and are answered by any broker; every other
group API goes to the coordinator. Answers of Kafka 0.11 and later carry a throttle time of 0.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tidelog.broker.metadata import MetadataCache
from tidelog.broker.replica_manager import ReplicaManager
from tidelog.coordinator.coordinator import GroupCoordinator, TopicPartition
from tidelog.coordinator.records import OFFSETS_TOPIC
from tidelog.errors import ErrorCode
from tidelog.log.log import Log
from tidelog.protocol.frames import Request
from tidelog.protocol.schemas import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, ApiKey
from tidelog.records.format import Record, build_message_set
from tidelog.records.record_batch import MAGIC, BatchRecordInput, encode_batch

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[dict | None]]
# every answer of Kafka 0.11 and later carries a throttle time: always 0 here (no quotas); a
# field an older version's schema lacks is not written
NOT_THROTTLED = {"throttle_time_ms": 0}
NO_TRANSACTIONS = (
    "tidelog serves no transactions (there is no transaction coordinator): use a producer "
    "without transactional.id"
)


class ZooKeeperOffsets(Protocol):
    """OffsetCommit/OffsetFetch v0's store: /consumers/{group}/offsets/{topic}/{partition}."""

    async def write(self, group: str, topic: str, partition: int, offset: int) -> None: ...

    async def read(self, group: str, topic: str, partition: int) -> int | None: ...


class ReplicatedOffsetsLog:
    """``__consumer_offsets`` through the replica manager: appended as leader, acknowledged
    once offsets.commit.required.acks replicas have it (all in-sync replicas for -1)."""

    def __init__(self, replicas: ReplicaManager, acks: int, timeout_ms: int) -> None:
        self.replicas = replicas
        self.acks = acks
        self.timeout_ms = timeout_ms

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> int:
        partition_log = self.replicas.leader_log(OFFSETS_TOPIC, partition)
        now = self.replicas.clock.milliseconds()
        magic = partition_log.config.magic
        if magic == MAGIC:  # the log's own format, as Kafka's GroupMetadataManager writes
            data = encode_batch([BatchRecordInput(key, value, now) for key, value in entries])
        else:
            data = build_message_set(
                [Record(key, value, now) for key, value in entries], magic=magic
            )
        info = self.replicas.append(OFFSETS_TOPIC, partition, memoryview(data), self.acks)
        if self.acks == -1:
            await self.replicas.wait_for_replication(
                OFFSETS_TOPIC, partition, info.last_offset + 1, self.timeout_ms / 1000
            )
        return info.last_offset

    def log(self, partition: int) -> Log | None:
        held = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
        return held.log if held is not None and held.is_leader else None


class GroupRequests:
    """The handlers of the group APIs, for RequestHandler.register."""

    def __init__(
        self,
        broker_id: int,
        coordinator: GroupCoordinator,
        metadata: MetadataCache,
        replicas: ReplicaManager,
        create_offsets_topic: Callable[[], Awaitable[None]],
        zookeeper_offsets: ZooKeeperOffsets,
    ) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.metadata = metadata
        self.replicas = replicas
        self.create_offsets_topic = create_offsets_topic
        self.zookeeper_offsets = zookeeper_offsets
        replicas.leadership_listeners.append(self.leadership_changed)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {
            ApiKey.GROUP_COORDINATOR: self.group_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
        }

    def leadership_changed(self) -> None:
        led = {
            number: partition.leader_epoch
            for (topic, number), partition in self.replicas.partitions.items()
            if topic == OFFSETS_TOPIC and partition.is_leader
        }
        self.coordinator.on_leadership(led)

    # -- GroupCoordinator ----------------------------------------------------------------------

    async def group_coordinator(self, request: Request) -> dict:
        unavailable = {
            **NOT_THROTTLED,
            "error_code": int(ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE),
            "error_message": None,
            "coordinator_id": -1,
            "host": "",
            "port": -1,
        }
        body = request.body
        if body.get("coordinator_type", COORDINATOR_GROUP) == COORDINATOR_TRANSACTION:
            return {
                **unavailable,
                "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": NO_TRANSACTIONS,
            }
        if OFFSETS_TOPIC not in self.metadata.topics:
            await self.create_offsets_topic()
            return unavailable
        key = body["coordinator_key"] if request.api_version >= 1 else body["group_id"]
        partition = self.coordinator.partition_of(key)
        leader = self.metadata.leader_of(OFFSETS_TOPIC, partition)
        endpoint = self.metadata.brokers.get(leader)
        address = endpoint.address(request.listener) if endpoint is not None else None
        if address is None:
            return unavailable
        return {
            **unavailable,
            "error_code": 0,
            "coordinator_id": leader,
            "host": address[0],
            "port": address[1],
        }

    # -- membership ----------------------------------------------------------------------------

    async def join_group(self, request: Request) -> dict:
        body = request.body
        result = await self.coordinator.join_group(
            body["group_id"],
            body["member_id"],
            request.client_id or "",
            request.client_host,
            body["session_timeout"],
            body.get("rebalance_timeout", body["session_timeout"]),
            body["protocol_type"],
            [
                (p["protocol_name"], bytes(p["protocol_metadata"] or b""))
                for p in body["group_protocols"]
            ],
        )
        return {
            **NOT_THROTTLED,
            "error_code": int(result.error),
            "generation_id": result.generation,
            "group_protocol": result.protocol,
            "leader_id": result.leader_id,
            "member_id": result.member_id,
            "members": [
                {"member_id": member_id, "member_metadata": metadata}
                for member_id, metadata in result.members
            ],
        }

    async def sync_group(self, request: Request) -> dict:
        body = request.body
        error, assignment = await self.coordinator.sync_group(
            body["group_id"],
            body["generation_id"],
            body["member_id"],
            {
                a["member_id"]: bytes(a["member_assignment"] or b"")
                for a in body["group_assignment"]
            },
        )
        return {**NOT_THROTTLED, "error_code": int(error), "member_assignment": assignment}

    async def heartbeat(self, request: Request) -> dict:
        body = request.body
        error = await self.coordinator.heartbeat(
            body["group_id"], body["generation_id"], body["member_id"]
        )
        return {**NOT_THROTTLED, "error_code": int(error)}

    async def leave_group(self, request: Request) -> dict:
        error = await self.coordinator.leave_group(
            request.body["group_id"], request.body["member_id"]
        )
        return {**NOT_THROTTLED, "error_code": int(error)}

    # -- offsets -------------------------------------------------------------------------------

    async def offset_commit(self, request: Request) -> dict:
        body, version = request.body, request.api_version
        group_id = body["group_id"]
        codes: dict[TopicPartition, ErrorCode] = {}
        wanted: dict[TopicPartition, tuple[int, str, int]] = {}
        leader_epochs: dict[TopicPartition, int] = {}  # v6
        for topic in body["topics"]:
            for p in topic["partitions"]:
                tp = (topic["topic"], p["partition"])
                if topic["topic"] not in self.metadata.topics:
                    codes[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    wanted[tp] = (p["offset"], p["metadata"] or "", p.get("timestamp", -1))
                    leader_epochs[tp] = p.get("committed_leader_epoch", -1)
        if version == 0:
            codes.update(await self._commit_to_zookeeper(group_id, wanted))
        elif wanted:
            codes.update(
                await self.coordinator.commit_offsets(
                    group_id,
                    body["generation_id"],
                    body["member_id"],
                    body.get("retention_time", -1),
                    wanted,
                    leader_epochs,
                )
            )
        return {
            **NOT_THROTTLED,
            "responses": _per_topic(body["topics"], lambda tp: {"error_code": int(codes[tp])}),
        }

    async def _commit_to_zookeeper(
        self, group_id: str, wanted: dict[TopicPartition, tuple[int, str, int]]
    ) -> dict[TopicPartition, ErrorCode]:
        codes = {}
        limit = self.coordinator.settings.offset_metadata_max_bytes
        for (topic, partition), (offset, metadata, _) in wanted.items():
            if not group_id:
                codes[(topic, partition)] = ErrorCode.INVALID_GROUP_ID
                continue
            if len(metadata.encode("utf-8")) > limit:
                codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            try:
                await self.zookeeper_offsets.write(group_id, topic, partition, offset)
                codes[(topic, partition)] = ErrorCode.NONE
            except Exception as error:  # ZooKeeper away: the client retries
                log.warning("group %s: offset commit to ZooKeeper failed: %s", group_id, error)
                codes[(topic, partition)] = ErrorCode.UNKNOWN
        return codes

    async def offset_fetch(self, request: Request) -> dict:
        if request.api_version >= 2:
            return self._offset_fetch_v2(request)
        body, version = request.body, request.api_version
        group_id = body["group_id"]
        wanted = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
        found: dict[TopicPartition, tuple[int, str, ErrorCode]] = {}
        if version == 0:
            for topic, partition in wanted:
                if not group_id:
                    found[(topic, partition)] = (-1, "", ErrorCode.INVALID_GROUP_ID)
                    continue
                if topic not in self.metadata.topics:
                    found[(topic, partition)] = (-1, "", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                try:
                    offset = await self.zookeeper_offsets.read(group_id, topic, partition)
                    found[(topic, partition)] = (
                        -1 if offset is None else offset,
                        "",
                        ErrorCode.NONE,
                    )
                except Exception as error:
                    log.warning("group %s: offset fetch from ZooKeeper failed: %s", group_id, error)
                    found[(topic, partition)] = (-1, "", ErrorCode.UNKNOWN)
        else:
            found = self.coordinator.fetch_offsets(group_id, wanted)

        def answer(tp: TopicPartition) -> dict[str, Any]:
            offset, metadata, error = found[tp]
            return {"offset": offset, "metadata": metadata, "error_code": int(error)}

        return {"responses": _per_topic(body["topics"], answer)}

    def _offset_fetch_v2(self, request: Request) -> dict:
        """OffsetFetch v2 and later: a group-wide error alone at the top (as Kafka 2.1 answers
        it, with no partitions); null topics ask for every partition the group committed. The
        leader epoch of each offset (v5) is the one its commit named (OffsetCommit v6), -1 if
        none."""
        topics = request.body["topics"]
        wanted = (
            None
            if topics is None
            else [(t["topic"], p["partition"]) for t in topics for p in t["partitions"]]
        )
        error, found = self.coordinator.fetch_group_offsets(request.body["group_id"], wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), (offset, metadata, code) in found.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition": partition,
                    "offset": offset,
                    "leader_epoch": self.coordinator.committed_leader_epoch(
                        request.body["group_id"], (topic, partition)
                    ),
                    "metadata": metadata,
                    "error_code": int(code),
                }
            )
        return {
            **NOT_THROTTLED,
            "responses": [
                {"topic": topic, "partition_responses": answers}
                for topic, answers in by_topic.items()
            ],
            "error_code": int(error),
        }

    # -- DescribeGroups, ListGroups -----------------------------------------------------------

    async def describe_groups(self, request: Request) -> dict:
        return {
            **NOT_THROTTLED,
            "groups": [self.coordinator.describe_group(g) for g in request.body["group_ids"]],
        }

    async def list_groups(self, request: Request) -> dict:
        error, groups = self.coordinator.list_groups()
        return {
            **NOT_THROTTLED,
            "error_code": int(error),
            "groups": [{"group_id": g, "protocol_type": t} for g, t in groups],
        }


def _per_topic(
    topics: list[dict], answer: Callable[[TopicPartition], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Kafka's response layout for the topics and partitions a request names."""
    return [
        {
            "topic": t["topic"],
            "partition_responses": [
                {"partition": p["partition"], **answer((t["topic"], p["partition"]))}
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]
