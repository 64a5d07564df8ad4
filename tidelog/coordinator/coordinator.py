"""The group coordinator: membership, rebalances and committed offsets of the groups whose
``__consumer_offsets`` partitions this broker leads (Kafka 0.10's GroupCoordinator)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.clock import Clock
from tidelog.config import INTER_BROKER_PROTOCOL_VERSIONS
from tidelog.coordinator import records
from tidelog.coordinator.group import Group, GroupState, Member
from tidelog.coordinator.records import CommittedOffset, partition_for
from tidelog.errors import ErrorCode, KafkaError
from tidelog.log.log import Log
from tidelog.protocol.types import ProtocolError
from tidelog.records.format import iter_deep

log = logging.getLogger(__name__)

NO_OFFSET = -1
# How long a failed load of an offsets partition waits before it reads again (doubling).
LOAD_RETRY_BACKOFF_MS = 100
LOAD_RETRY_BACKOFF_MAX_MS = 10000
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CoordinatorSettings:
    """The broker's ``offsets.*`` and ``group.*`` settings (Kafka's names and defaults)."""

    offsets_topic_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_retention_ms: int = 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offsets_commit_required_acks: int = -1
    offsets_load_buffer_size: int = 5242880
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 300000
    # the offset commit value version of a commit with no retention of its own, as Kafka 2.1
    # picks it by inter.broker.protocol.version: 1 below 2.1-IV0, 2 at 2.1-IV0, 3 (with the
    # committed leader epoch) from 2.1-IV1; a commit that names its retention is written as 1
    offset_value_version: int = 1

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CoordinatorSettings:
        protocol = INTER_BROKER_PROTOCOL_VERSIONS.index(config["inter.broker.protocol.version"])
        value_version = (
            3
            if protocol >= INTER_BROKER_PROTOCOL_VERSIONS.index("2.1-IV1")
            else 2
            if protocol >= INTER_BROKER_PROTOCOL_VERSIONS.index("2.1-IV0")
            else 1
        )
        return cls(
            offset_value_version=value_version,
            offsets_topic_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60 * 1000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offsets_commit_timeout_ms=config["offsets.commit.timeout.ms"],
            offsets_commit_required_acks=config["offsets.commit.required.acks"],
            offsets_load_buffer_size=config["offsets.load.buffer.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            group_min_session_timeout_ms=config["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=config["group.max.session.timeout.ms"],
        )


class OffsetsLog(Protocol):
    """The coordinator's view of ``__consumer_offsets`` on this broker."""

    async def append(self, partition: int, entries: list[tuple[bytes, bytes | None]]) -> int:
        """Appends keyed messages as leader (before its first await) and waits for
        offsets.commit.required.acks; returns the log offset of the last message. Raises
        KafkaError (NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT, ...) if it cannot."""
        ...

    def log(self, partition: int) -> Log | None: ...


# A failed write to the offsets topic, as the client sees it (Kafka's mapping).
_STORE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_FOR_PARTITION: ErrorCode.NOT_COORDINATOR_FOR_GROUP,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def _store_error(error: Exception, too_large: ErrorCode) -> ErrorCode:
    """What a client is told when a write to the offsets topic failed: a commit too large is
    INVALID_COMMIT_OFFSET_SIZE, group metadata too large UNKNOWN (as in Kafka)."""
    if not isinstance(error, KafkaError):
        return ErrorCode.UNKNOWN
    code = _STORE_ERRORS.get(error.code, ErrorCode.UNKNOWN)
    return too_large if code == ErrorCode.INVALID_COMMIT_OFFSET_SIZE else code


def _apply_chunk(
    partition: int,
    read: Callable[[], bytes],
    position: int,
    offsets: dict[str, dict[tuple[str, int], CommittedOffset]],
    metadata: dict[str, dict],
    retention_ms: int = -1,
) -> int:
    """Reads one chunk of an offsets partition and applies its messages from ``position`` on to
    ``offsets`` (each group's, by topic and partition) and ``metadata`` (in a worker thread:
    nothing else touches them while it runs); returns the offset after the last message read.
    A commit stored without an expire timestamp expires ``retention_ms`` after it was made."""
    next_position = position
    for message in iter_deep(read()):
        next_position = message.offset + 1
        if message.offset < position or message.key is None:
            continue
        try:
            kind, key = records.read_key(message.key)
            if kind == "offset":
                group_offsets = offsets.get(key["group"])
                if group_offsets is None:
                    group_offsets = offsets[key["group"]] = {}
                tp = (key["topic"], key["partition"])
                if message.value is None:
                    group_offsets.pop(tp, None)
                else:
                    group_offsets[tp] = records.read_offset_value(message.value, retention_ms)
            elif message.value is None:
                metadata.pop(key["group"], None)
            else:
                metadata[key["group"]] = records.read_group_value(message.value)
        except ProtocolError as error:
            log.warning(
                "offsets partition %d: skipping offset %d: %s", partition, message.offset, error
            )
    return next_position


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol: str = ""
    leader_id: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()


class GroupCoordinator:
    """Serves the groups of the offsets partitions this broker leads.

    A partition becomes served once its log has been read into memory (``on_leadership``
    starts the load when this broker becomes its leader; until it ends, its groups answer
    GROUP_LOAD_IN_PROGRESS) and stops being served the moment leadership goes (its groups are
    dropped and their waiting requests answered NOT_COORDINATOR_FOR_GROUP). Every change that
    must survive this broker (offset commits, a rebalance's assignment) is written to the
    partition, and only what the log took is kept in memory.
    """

    def __init__(self, settings: CoordinatorSettings, store: OffsetsLog, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.owned: dict[int, int] = {}  # offsets partition -> leader epoch it was loaded in
        self.loading: dict[int, asyncio.Task] = {}
        self.load_failed: set[int] = set()  # loading partitions waiting to retry their read
        self._loading_epochs: dict[int, int] = {}

    # -- ownership -----------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.settings.offsets_topic_partitions)

    def _check_coordinator(self, group_id: str, *, while_loading: bool = False) -> None:
        """Raises the error a request for ``group_id`` gets if this broker cannot serve it now.
        A partition still loading is GROUP_LOAD_IN_PROGRESS, unless ``while_loading`` (the
        caller answers as Kafka does for a group not read yet)."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "a group id may not be empty")
        partition = self.partition_of(group_id)
        if partition in self.load_failed:
            raise KafkaError(
                ErrorCode.GROUP_COORDINATOR_NOT_AVAILABLE,
                f"offsets partition {partition} could not be read; retrying",
            )
        if partition in self.loading:
            if not while_loading:
                raise KafkaError(ErrorCode.GROUP_LOAD_IN_PROGRESS, f"loading partition {partition}")
        elif partition not in self.owned:
            raise KafkaError(
                ErrorCode.NOT_COORDINATOR_FOR_GROUP,
                f"group {group_id!r} (offsets partition {partition}) is not served here",
            )

    def on_leadership(self, led: dict[int, int]) -> None:
        """Called whenever leadership may have changed: ``led`` maps each offsets partition
        this broker leads to its leader epoch. Partitions no longer led (or led in a new
        epoch) are unloaded; newly led ones start loading."""
        for partition in [p for p in self.owned if self.owned[p] != led.get(p)]:
            self._unload(partition)
        for partition in [p for p in self.loading if self._loading_epochs[p] != led.get(p)]:
            self.loading.pop(partition).cancel()
            self._unload(partition)
        for partition, epoch in led.items():
            if partition not in self.owned and partition not in self.loading:
                self._loading_epochs[partition] = epoch
                self.loading[partition] = asyncio.get_running_loop().create_task(
                    self._load(partition, epoch)
                )

    def _unload(self, partition: int) -> None:
        self.owned.pop(partition, None)
        self.load_failed.discard(partition)
        unloaded = [g.group_id for g in self.groups.values() if g.partition == partition]
        for group_id in unloaded:
            group = self.groups.pop(group_id)
            self._cancel_timers(group)
            for member in group.members.values():
                self._answer_join(member, JoinResult(ErrorCode.NOT_COORDINATOR_FOR_GROUP))
                self._answer_sync(member, ErrorCode.NOT_COORDINATOR_FOR_GROUP, b"")
        (log.info if unloaded else log.debug)(
            "offsets partition %d unloaded: its %d groups are served elsewhere now",
            partition,
            len(unloaded),
        )

    async def _load(self, partition: int, epoch: int) -> None:
        """Reads the partition into memory and starts serving it. A failed read (a disk error,
        a corrupt message) is retried after LOAD_RETRY_BACKOFF_MS, doubling up to
        LOAD_RETRY_BACKOFF_MAX_MS; meanwhile its groups get GROUP_COORDINATOR_NOT_AVAILABLE, so
        clients look for the coordinator again and come back."""
        started = self.clock.milliseconds()
        backoff_ms = LOAD_RETRY_BACKOFF_MS
        while True:
            try:
                offsets, metadata = await self._read_partition(partition)
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "offsets partition %d: loading failed; retrying in %d ms", partition, backoff_ms
                )
                self.load_failed.add(partition)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, LOAD_RETRY_BACKOFF_MAX_MS)
        self.load_failed.discard(partition)
        # on the loop: work per group, not per committed offset (a dict's update each)
        committed = 0
        for group_id, group_offsets in offsets.items():
            if group_offsets:
                self._loaded_group(group_id, partition).offsets.update(group_offsets)
                committed += len(group_offsets)
        for group_id, value in metadata.items():
            self._restore(self._loaded_group(group_id, partition), value)
        self.loading.pop(partition, None)
        self.owned[partition] = epoch
        (log.info if committed or metadata else log.debug)(
            "offsets partition %d loaded in %d ms: %d groups, %d committed offsets",
            partition,
            self.clock.milliseconds() - started,
            len({g for g, o in offsets.items() if o} | set(metadata)),
            committed,
        )

    def _loaded_group(self, group_id: str, partition: int) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, partition)
        return group

    async def _read_partition(
        self, partition: int
    ) -> tuple[dict[str, dict[tuple[str, int], CommittedOffset]], dict[str, dict]]:
        """The latest offset commit of every (topic, partition) of each group, and the latest
        metadata of every group, in the partition's log, tombstones applied. Each chunk is read and
        parsed off the event loop; a message larger than offsets.load.buffer.size is read
        whole (as Kafka reads it)."""
        partition_log = self.store.log(partition)
        offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        metadata: dict[str, dict] = {}
        if partition_log is None:
            return offsets, metadata
        position, end = partition_log.log_start_offset, partition_log.log_end_offset
        while position < end:
            data = partition_log.read(
                position, self.settings.offsets_load_buffer_size, min_one_message=True
            )
            if not data.slice.length:
                break
            next_position = await asyncio.to_thread(
                _apply_chunk,
                partition,
                data.slice.read,
                position,
                offsets,
                metadata,
                self.settings.offsets_retention_ms,
            )
            if next_position <= position:
                raise RuntimeError(f"offsets partition {partition}: no message at {position}")
            position = next_position
        return offsets, metadata

    def _restore(self, group: Group, value: dict) -> None:
        """A group as its last stored metadata says: Stable with its members (whose sessions
        start now), or Empty."""
        group.generation = value["generation"]
        group.protocol_type = value["protocol_type"]
        group.protocol = value["protocol"]
        group.leader_id = value["leader"]
        group.members.clear()
        for stored in value["members"]:
            member = Member.from_record(stored, value["protocol_type"], value["protocol"] or "")
            group.members[member.member_id] = member
            self._schedule_expiry(group, member)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if not group.members:
            group.leader_id = None

    # -- JoinGroup -----------------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """Kafka's doJoinGroup: answered when the rebalance this join starts or joins ends."""
        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return JoinResult(error.code, member_id=member_id)
        settings = self.settings
        if not (
            settings.group_min_session_timeout_ms
            <= session_timeout_ms
            <= settings.group_max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            group = self.groups[group_id] = Group(group_id, self.partition_of(group_id))
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        if not protocols or not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        if member_id and member_id not in group.members:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if not member_id:
            member = Member(
                f"{client_id}-{uuid.uuid4()}",
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
            group.add(member)
            self._set_join_waiter(member, future)
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        else:
            member = group.members[member_id]
            changed = member.protocols != protocols
            if group.state == GroupState.PREPARING_REBALANCE:
                member.rejoin(protocols, session_timeout_ms, rebalance_timeout_ms)
                self._set_join_waiter(member, future)
            elif group.state == GroupState.AWAITING_SYNC and not changed:
                # the member missed the join response: the same answer again
                future.set_result(self._join_result(group, member))
            elif group.state == GroupState.STABLE and not changed and member_id != group.leader_id:
                future.set_result(self._join_result(group, member))
            else:
                member.rejoin(protocols, session_timeout_ms, rebalance_timeout_ms)
                self._set_join_waiter(member, future)
                self._prepare_rebalance(group, f"member {member_id} rejoined")
        if group.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        return await future

    def _set_join_waiter(self, member: Member, future: asyncio.Future) -> None:
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(
                JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id)
            )
        member.join_waiter = future

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = (
            tuple(
                (m.member_id, m.metadata_for(group.protocol or "")) for m in group.members.values()
            )
            if is_leader
            else ()
        )
        return JoinResult(
            ErrorCode.NONE,
            group.generation,
            group.protocol or "",
            group.leader_id or "",
            member.member_id,
            members,
        )

    def _prepare_rebalance(self, group: Group, why: str) -> None:
        if group.state == GroupState.PREPARING_REBALANCE:
            return
        if group.state == GroupState.AWAITING_SYNC:
            self._reset_assignments(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.transition(GroupState.PREPARING_REBALANCE)
        timeout = group.rebalance_timeout_ms
        log.info(
            "group %s: preparing to rebalance (generation %d, %s); waiting up to %d ms for "
            "its members to rejoin",
            group.group_id,
            group.generation,
            why,
            timeout,
        )
        if group.join_deadline is not None:
            group.join_deadline.cancel()
        group.join_deadline = asyncio.get_running_loop().call_later(
            timeout / 1000, self._complete_join, group
        )

    def _try_complete_join(self, group: Group) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and not group.not_yet_rejoined:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """The rebalance's join phase ends: members that did not rejoin are dropped, the next
        generation starts, and every waiting member gets its answer (the leader, the members
        to assign)."""
        if group.join_deadline is not None:
            group.join_deadline.cancel()
            group.join_deadline = None
        if (
            group.state != GroupState.PREPARING_REBALANCE
            or self.groups.get(group.group_id) is not group
        ):
            return
        for member in group.not_yet_rejoined:
            group.remove(member.member_id)
            log.info("group %s: member %s did not rejoin in time", group.group_id, member.member_id)
        group.generation += 1
        if group.members:
            group.protocol = group.select_protocol()
            group.transition(GroupState.AWAITING_SYNC)
        else:
            group.protocol = None
            group.leader_id = None
            group.transition(GroupState.EMPTY)
        log.info(
            "group %s: generation %d with %d members (protocol %s)",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
        )
        if group.state == GroupState.EMPTY:
            asyncio.get_running_loop().create_task(self._store_empty(group))
            return
        for member in group.members.values():
            self._answer_join(member, self._join_result(group, member))
            self._schedule_expiry(group, member)

    async def _store_empty(self, group: Group) -> None:
        try:
            await self._store_group(group, {})
        except Exception as error:
            log.warning("group %s: could not store its empty generation: %s", group.group_id, error)

    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        waiter, member.join_waiter = member.join_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    @staticmethod
    def _answer_sync(member: Member, error: ErrorCode, assignment: bytes) -> None:
        waiter, member.sync_waiter = member.sync_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((error, assignment))

    def _reset_assignments(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            self._answer_sync(member, error, b"")

    # -- sessions ------------------------------------------------------------------------------

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = asyncio.get_running_loop().call_later(
            member.session_timeout_ms / 1000, self._expire, group, member
        )

    def _expire(self, group: Group, member: Member) -> None:
        if (
            group.members.get(member.member_id) is not member
            or self.groups.get(group.group_id) is not group
        ):
            return
        if member.kept_alive:
            self._schedule_expiry(group, member)
            return
        log.info(
            "group %s: member %s sent no heartbeat for session.timeout.ms %d",
            group.group_id,
            member.member_id,
            member.session_timeout_ms,
        )
        self._remove_member(group, member.member_id, "its session expired")

    def _remove_member(self, group: Group, member_id: str, why: str) -> None:
        member = group.remove(member_id)
        self._answer_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        self._answer_sync(member, ErrorCode.UNKNOWN_MEMBER_ID, b"")
        if group.state in (GroupState.STABLE, GroupState.AWAITING_SYNC):
            self._prepare_rebalance(group, f"member {member_id} left: {why}")
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _cancel_timers(self, group: Group) -> None:
        if group.join_deadline is not None:
            group.join_deadline.cancel()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()

    def _member_of(self, group_id: str, member_id: str, generation: int) -> tuple[Group, Member]:
        """The group and member a request names, after the checks Kafka makes of both. While
        the group's partition loads, the group is not known yet: UNKNOWN_MEMBER_ID, as Kafka's
        handleSyncGroup answers (GROUP_LOAD_IN_PROGRESS would be fatal to a 0.10 Java client)."""
        self._check_coordinator(group_id, while_loading=True)
        group = self.groups.get(group_id)
        if group is None or group.state in (GroupState.DEAD, GroupState.EMPTY):
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not in {group_id!r}")
        if generation != group.generation:
            raise KafkaError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation} of {group_id!r} is not {group.generation}",
            )
        return group, member

    # -- SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------

    async def sync_group(
        self, group_id: str, generation: int, member_id: str, assignments: dict[str, bytes]
    ) -> tuple[ErrorCode, bytes]:
        try:
            group, member = self._member_of(group_id, member_id, generation)
        except KafkaError as error:
            return error.code, b""
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        if group.state == GroupState.STABLE:
            self._schedule_expiry(group, member)
            return ErrorCode.NONE, member.assignment
        future: asyncio.Future[tuple[ErrorCode, bytes]] = asyncio.get_running_loop().create_future()
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))
        member.sync_waiter = future
        if member_id == group.leader_id:
            asyncio.get_running_loop().create_task(
                self._store_assignment(group, generation, assignments)
            )
        return await future

    async def _store_assignment(
        self, group: Group, generation: int, assignments: dict[str, bytes]
    ) -> None:
        """The leader's assignment is written to the log; once it is there, the group is
        Stable and every member gets its part. A failed write starts a new rebalance."""
        given = {m: assignments.get(m, b"") for m in group.members}
        try:
            await self._store_group(group, given)
            error = ErrorCode.NONE
        except Exception as failure:  # whatever it was, the members waiting must be answered
            error = _store_error(failure, ErrorCode.UNKNOWN)
            log.warning("group %s: could not store its assignment: %s", group.group_id, failure)
        if (
            group.state != GroupState.AWAITING_SYNC
            or group.generation != generation
            or self.groups.get(group.group_id) is not group
        ):
            return  # the group moved on while the write went out
        if error != ErrorCode.NONE:
            self._reset_assignments(group, error)
            self._prepare_rebalance(group, "its assignment could not be stored")
            return
        for member_id, member in group.members.items():
            member.assignment = given.get(member_id, b"")
            self._answer_sync(member, ErrorCode.NONE, member.assignment)
        group.transition(GroupState.STABLE)
        log.info("group %s: generation %d is stable", group.group_id, group.generation)

    async def heartbeat(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        try:
            self._check_coordinator(group_id, while_loading=True)
            if self.partition_of(group_id) in self.loading:
                return ErrorCode.NONE  # Kafka answers blindly while the group loads
            group = self.groups.get(group_id)
            if group is not None and group.state == GroupState.AWAITING_SYNC:
                if member_id not in group.members:
                    return ErrorCode.UNKNOWN_MEMBER_ID
                return ErrorCode.REBALANCE_IN_PROGRESS
            group, member = self._member_of(group_id, member_id, generation)
        except KafkaError as error:
            return error.code
        self._schedule_expiry(group, member)
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def leave_group(self, group_id: str, member_id: str) -> ErrorCode:
        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return error.code
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s leaves", group_id, member_id)
        self._remove_member(group, member_id, "it asked to")
        return ErrorCode.NONE

    # -- offsets -------------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        retention_ms: int,
        offsets: dict[TopicPartition, tuple[int, str, int]],
        leader_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's doCommitOffsets. ``offsets`` maps a partition to (offset, metadata, commit
        timestamp or -1); ``retention_ms`` -1 means offsets.retention.minutes. Generation -1
        with no member is a commit by a consumer that assigns its own partitions.
        ``leader_epochs`` are the committed leader epochs (OffsetCommit v6), stored where the
        offset commit value version keeps them (v3) and returned by OffsetFetch v5."""
        epochs = leader_epochs or {}

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return every(error.code)
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:
                return every(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.groups[group_id] = Group(group_id, self.partition_of(group_id))
        elif group.state == GroupState.DEAD:
            return every(ErrorCode.UNKNOWN_MEMBER_ID)
        elif not (generation < 0 and group.state == GroupState.EMPTY):
            if group.state == GroupState.AWAITING_SYNC:
                return every(ErrorCode.REBALANCE_IN_PROGRESS)
            member = group.members.get(member_id)
            if member is None:
                return every(ErrorCode.UNKNOWN_MEMBER_ID)
            if generation != group.generation:
                return every(ErrorCode.ILLEGAL_GENERATION)
            self._schedule_expiry(group, member)
        now = self.clock.milliseconds()
        retention = self.settings.offsets_retention_ms if retention_ms < 0 else retention_ms
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, metadata, timestamp) in offsets.items():
            if len(metadata.encode("utf-8")) > self.settings.offset_metadata_max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            committed_at = timestamp if timestamp >= 0 else now
            accepted[tp] = CommittedOffset(
                offset,
                metadata,
                committed_at,
                committed_at + retention,
                max(epochs.get(tp, -1), -1),
            )
        if accepted:
            # Kafka 2.1: an expire timestamp is stored (value v1) for a commit that names its
            # retention, and below inter.broker.protocol.version 2.1-IV0
            version = 1 if retention_ms >= 0 else self.settings.offset_value_version
            entries: list[tuple[bytes, bytes | None]] = [
                (records.offset_key(group_id, t, p), records.offset_value(c, version))
                for (t, p), c in accepted.items()
            ]
            code = ErrorCode.NONE
            pending = list(accepted)
            group.pending_commits.update(pending)
            try:
                position = await self.store.append(group.partition, entries)
            except Exception as error:
                code = _store_error(error, ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
                log.warning("group %s: offset commit not stored: %s", group_id, error)
            finally:
                group.commits_ended(pending)
            if code == ErrorCode.NONE and self.groups.get(group_id) is group:
                for tp, committed in accepted.items():
                    group.apply_commit(tp, committed, position)
            results.update(dict.fromkeys(accepted, code))
        return results

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, str, ErrorCode]]:
        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return dict.fromkeys(partitions, (NO_OFFSET, "", error.code))
        group = self.groups.get(group_id)
        found: dict[TopicPartition, tuple[int, str, ErrorCode]] = {}
        for tp in partitions:
            committed = group.offsets.get(tp) if group else None
            if committed is None:
                found[tp] = (NO_OFFSET, "", ErrorCode.NONE)
            else:
                found[tp] = (committed.offset, committed.metadata, ErrorCode.NONE)
        return found

    def committed_leader_epoch(self, group_id: str, tp: TopicPartition) -> int:
        """The leader epoch stored with the group's commit of ``tp`` (OffsetFetch v5), -1 if
        none is known."""
        group = self.groups.get(group_id)
        committed = group.offsets.get(tp) if group else None
        return committed.leader_epoch if committed is not None else -1

    def fetch_group_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[int, str, ErrorCode]]]:
        """OffsetFetch v2 and later: a group-wide error (nothing else with it), or the offsets
        of ``partitions``, of every partition the group committed when None."""
        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return error.code, {}
        if partitions is None:
            group = self.groups.get(group_id)
            partitions = sorted(group.offsets) if group else []
        return ErrorCode.NONE, self.fetch_offsets(group_id, partitions)

    async def expire_offsets(self) -> int:
        """Drops commits past their expire timestamp, and Empty groups with no commits left
        (tombstones in the log for both); returns how many offsets expired."""
        now = self.clock.milliseconds()
        expired_total = 0
        for group_id, group in list(self.groups.items()):
            if group.partition not in self.owned:
                continue
            # a partition with a commit waiting for its acknowledgement is left alone: its
            # tombstone would land after that commit and erase it (as Kafka 0.11 does)
            expired = {
                tp: c
                for tp, c in group.offsets.items()
                if 0 <= c.expire_timestamp <= now and tp not in group.pending_commits
            }
            entries: list[tuple[bytes, bytes | None]] = [
                (records.offset_key(group_id, t, p), None) for t, p in expired
            ]
            dead = group.state == GroupState.EMPTY and len(expired) == len(group.offsets)
            if dead:
                entries.append((records.group_key(group_id), None))
            if not entries:
                continue
            try:
                position = await self.store.append(group.partition, entries)
            except KafkaError as error:
                log.warning("group %s: expired offsets not removed yet: %s", group_id, error)
                continue
            if self.groups.get(group_id) is not group:
                continue  # unloaded while the tombstones went out
            for tp, committed in expired.items():
                if group.offsets.get(tp) is committed:  # not replaced by a commit meanwhile
                    del group.offsets[tp]
                    group.offset_positions[tp] = position
                    expired_total += 1
            if (
                dead
                and group.state == GroupState.EMPTY
                and not group.offsets
                and not group.pending_commits
            ):
                group.transition(GroupState.DEAD)
                del self.groups[group_id]
                log.info("group %s: removed (empty, no committed offsets)", group_id)
        return expired_total

    async def run_offset_expiry(self) -> None:
        while True:
            await asyncio.sleep(self.settings.offsets_retention_check_interval_ms / 1000)
            try:
                count = await self.expire_offsets()
                if count:
                    log.info("removed %d expired offsets", count)
            except Exception:
                log.exception("offset expiry failed; it will run again")

    # -- DescribeGroups, ListGroups -----------------------------------------------------------

    def describe_group(self, group_id: str) -> dict[str, Any]:
        blank: dict[str, Any] = {
            "error_code": 0,
            "group_id": group_id,
            "state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol": "",
            "members": [],
        }
        try:
            self._check_coordinator(group_id)
        except KafkaError as error:
            return {**blank, "error_code": int(error.code), "state": ""}
        group = self.groups.get(group_id)
        if group is None:
            return blank
        stable = group.state == GroupState.STABLE
        return {
            **blank,
            "state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol": (group.protocol or "") if stable else "",  # Kafka's NoProtocol otherwise
            "members": [
                {
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata_for(group.protocol or "") if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ],
        }

    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str]]]:
        if self.loading:
            return ErrorCode.GROUP_LOAD_IN_PROGRESS, []
        return ErrorCode.NONE, [
            (g.group_id, g.protocol_type or "")
            for g in self.groups.values()
            if g.partition in self.owned and g.state != GroupState.DEAD
        ]

    # -- storage -------------------------------------------------------------------------------

    async def _store_group(self, group: Group, assignments: dict[str, bytes]) -> None:
        value = {
            "protocol_type": group.protocol_type or "",
            "generation": group.generation,
            "protocol": group.protocol,
            "leader": group.leader_id,
            "members": [
                m.to_record(group.protocol or "", assignments.get(m.member_id, b""))
                for m in group.members.values()
            ],
        }
        await self.store.append(
            group.partition,
            [(records.group_key(group.group_id), records.group_value(value))],
        )

    def stop(self) -> None:
        for task in self.loading.values():
            task.cancel()
        for partition in list(self.owned):
            self._unload(partition)
