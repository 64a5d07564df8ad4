"""A consumer group member on the blocking client: join, sync, heartbeat, commit, leave.

The member speaks Kafka's "consumer" protocol type with the range assignor, so it can share a
group with kafka-python or librdkafka consumers. It is driven by its owner's loop (a locust
user's task): ``heartbeat`` is called between fetches, and a rebalance is answered by ``join``.
"""

from __future__ import annotations

import time

from tidelog.errors import ErrorCode, KafkaError
from tidelog.perf.locust.client import BlockingClient, BlockingConnection
from tidelog.protocol.schemas import CONSUMER_ASSIGNMENT_V0, CONSUMER_SUBSCRIPTION_V0, ApiKey
from tidelog.protocol.types import decode, encode

PROTOCOL_TYPE, ASSIGNOR = "consumer", "range"
# answers that mean "ask again, perhaps of another coordinator", not that the member failed
COORDINATOR_MOVED = {
    ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR_FOR_GROUP,
    ErrorCode.GROUP_LOAD_IN_PROGRESS,
}
REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
# answers to a heartbeat or commit after which the member must join again
STALE_MEMBERSHIP = REJOIN | {ErrorCode.UNKNOWN_MEMBER_ID}


def range_assignment(members: list[str], partitions: list[int]) -> dict[str, list[int]]:
    """Kafka's RangeAssignor for one topic: members in id order get consecutive partitions,
    the first ``len(partitions) % len(members)`` of them one more than the rest."""
    ordered, members = sorted(partitions), sorted(members)
    share, extra = divmod(len(ordered), len(members))
    assignment, start = {}, 0
    for index, member in enumerate(members):
        count = share + (1 if index < extra else 0)
        assignment[member] = ordered[start : start + count]
        start += count
    return assignment


class GroupMember:
    """This client's membership of ``group_id``, subscribed to one topic.

    After ``join`` returns, ``generation`` and ``member_id`` name the current generation and
    ``assigned`` holds this member's partitions in it. A heartbeat or commit answered with
    REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION means the assignment is stale: join again.
    """

    def __init__(
        self,
        client: BlockingClient,
        group_id: str,
        topic: str,
        session_timeout_ms: int = 10_000,
        wait: float = 30.0,
    ) -> None:
        self.client, self.group_id, self.topic = client, group_id, topic
        self.session_timeout_ms = session_timeout_ms
        self.wait = wait
        self.member_id = ""
        self.generation = -1
        self.assigned: list[int] = []
        self._coordinator: BlockingConnection | None = None

    def _coordinator_request(self, api_key: ApiKey, version: int, body: dict) -> dict:
        """A request to the group's coordinator, found (again) while it is unknown or moved."""
        if self._coordinator is None or self._coordinator.closed:
            self._coordinator = self._find_coordinator()
        return self._coordinator.request(api_key, version, body)

    def _find_coordinator(self) -> BlockingConnection:
        deadline = time.monotonic() + self.wait
        if not self.client.brokers:
            self.client.partitions(self.topic)  # the brokers, from metadata
        while True:
            broker_id = min(self.client.brokers)
            answer = self.client.request(
                broker_id, ApiKey.GROUP_COORDINATOR, 0, {"group_id": self.group_id}
            )
            code = ErrorCode(answer["error_code"])
            if code == ErrorCode.NONE:
                return BlockingConnection(answer["host"], answer["port"], self.client.timeout)
            if code not in COORDINATOR_MOVED or time.monotonic() > deadline:
                raise KafkaError(code, f"no coordinator for group {self.group_id}")
            time.sleep(0.2)

    def _forget_coordinator(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()

    def join(self, partitions: list[int]) -> list[int]:
        """Joins (or rejoins) the group and returns this member's partitions of the topic,
        which has ``partitions``. The leader assigns them by range over every member."""
        deadline = time.monotonic() + self.wait
        subscription = encode(
            CONSUMER_SUBSCRIPTION_V0, {"version": 0, "topics": [self.topic], "user_data": b""}
        )
        while True:
            joined = self._coordinator_request(
                ApiKey.JOIN_GROUP,
                0,
                {
                    "group_id": self.group_id,
                    "session_timeout": self.session_timeout_ms,
                    "member_id": self.member_id,
                    "protocol_type": PROTOCOL_TYPE,
                    "group_protocols": [
                        {"protocol_name": ASSIGNOR, "protocol_metadata": subscription}
                    ],
                },
            )
            code = ErrorCode(joined["error_code"])
            if code == ErrorCode.NONE:
                self.member_id, self.generation = joined["member_id"], joined["generation_id"]
                code = self._sync(joined, partitions)
                if code == ErrorCode.NONE:
                    return self.assigned
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code in COORDINATOR_MOVED:
                self._forget_coordinator()
            elif code not in REJOIN:
                raise KafkaError(code, f"join group {self.group_id}")
            if time.monotonic() > deadline:
                raise KafkaError(code, f"join group {self.group_id}: still rebalancing")

    def _sync(self, joined: dict, partitions: list[int]) -> ErrorCode:
        assignments = []
        if joined["leader_id"] == self.member_id:
            members = [m["member_id"] for m in joined["members"]]
            for member, given in range_assignment(members, partitions).items():
                assignment = {
                    "version": 0,
                    "partitions": [{"topic": self.topic, "partitions": given}],
                    "user_data": b"",
                }
                assignments.append(
                    {
                        "member_id": member,
                        "member_assignment": encode(CONSUMER_ASSIGNMENT_V0, assignment),
                    }
                )
        synced = self._coordinator_request(
            ApiKey.SYNC_GROUP,
            0,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_assignment": assignments,
            },
        )
        code = ErrorCode(synced["error_code"])
        if code == ErrorCode.NONE:
            self.assigned = []
            if synced["member_assignment"]:  # empty: a member given nothing
                assignment, _ = decode(CONSUMER_ASSIGNMENT_V0, synced["member_assignment"])
                for topic in assignment["partitions"]:
                    if topic["topic"] == self.topic:
                        self.assigned = sorted(topic["partitions"])
        return code

    def heartbeat(self) -> ErrorCode:
        body = {"group_id": self.group_id, "generation_id": self.generation}
        answer = self._coordinator_request(
            ApiKey.HEARTBEAT, 0, {**body, "member_id": self.member_id}
        )
        return self._answered(ErrorCode(answer["error_code"]))

    def _answered(self, code: ErrorCode) -> ErrorCode:
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""  # the coordinator forgot it: join as a new member
        elif code in COORDINATOR_MOVED:
            self._forget_coordinator()  # found again on the next request
        return code

    def committed(self) -> dict[int, int]:
        """The group's committed offset of each assigned partition that has one."""
        if not self.assigned:
            return {}
        deadline = time.monotonic() + self.wait
        while True:
            answer = self._coordinator_request(
                ApiKey.OFFSET_FETCH,
                1,
                {
                    "group_id": self.group_id,
                    "topics": [
                        {
                            "topic": self.topic,
                            "partitions": [{"partition": p} for p in self.assigned],
                        }
                    ],
                },
            )
            found, code = {}, ErrorCode.NONE
            for topic in answer["responses"]:
                for partition in topic["partition_responses"]:
                    code = ErrorCode(partition["error_code"]) or code
                    if partition["offset"] >= 0:
                        found[partition["partition"]] = partition["offset"]
            if code == ErrorCode.NONE:
                return found
            if self._answered(code) not in COORDINATOR_MOVED or time.monotonic() > deadline:
                raise KafkaError(code, f"offsets of group {self.group_id}")
            time.sleep(0.2)  # the offsets are loading, or moved with their coordinator

    def commit(self, offsets: dict[int, int]) -> ErrorCode:
        """Commits the next offset to read of each partition; the first error code any
        partition got (NONE when all were stored)."""
        answer = self._coordinator_request(
            ApiKey.OFFSET_COMMIT,
            2,
            {
                "group_id": self.group_id,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "retention_time": -1,
                "topics": [
                    {
                        "topic": self.topic,
                        "partitions": [
                            {"partition": p, "offset": o, "metadata": None}
                            for p, o in offsets.items()
                        ],
                    }
                ],
            },
        )
        for topic in answer["responses"]:
            for partition in topic["partition_responses"]:
                if partition["error_code"]:
                    return self._answered(ErrorCode(partition["error_code"]))
        return ErrorCode.NONE

    def leave(self) -> None:
        """Leaves the group so that the others rebalance at once, not after a session timeout."""
        if self.member_id:
            self._coordinator_request(
                ApiKey.LEAVE_GROUP, 0, {"group_id": self.group_id, "member_id": self.member_id}
            )
            self.member_id, self.assigned = "", []
        self._forget_coordinator()
