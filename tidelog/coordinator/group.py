"""One consumer group's membership and committed offsets, as the coordinator holds them."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tidelog.coordinator.records import MEMBER_FIELDS, CommittedOffset

# The Member attribute behind each field of a stored member whose name differs; the stored
# "subscription" is the member's metadata for the group's protocol.
_ATTRIBUTE_OF_FIELD = {
    "session_timeout": "session_timeout_ms",
    "rebalance_timeout": "rebalance_timeout_ms",
}
_STORED_AS_IS = [name for name in MEMBER_FIELDS if name != "subscription"]


class GroupState(Enum):
    """Kafka's group states; ``value`` is the name DescribeGroups reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    AWAITING_SYNC = "AwaitingSync"
    STABLE = "Stable"
    DEAD = "Dead"


# Which state each state may move to (Kafka's GroupMetadata.validPreviousStates, turned round).
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.AWAITING_SYNC, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.AWAITING_SYNC: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


@dataclass
class Member:
    """A member: what it joined with, its assignment, and the requests it is waiting on.

    ``join_waiter``/``sync_waiter`` are the futures of its JoinGroup/SyncGroup in flight; a
    member waiting on one is kept alive whatever its heartbeats. ``expiry`` is the timer that
    removes it session_timeout after its last sign of life.
    """

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    expiry: asyncio.TimerHandle | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        return next(name for name, _ in self.protocols if name in candidates)

    def rejoin(
        self, protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int
    ) -> None:
        """What a rejoining member's JoinGroup says replaces what it joined with before."""
        self.protocols = protocols
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms

    def to_record(self, protocol: str, assignment: bytes) -> dict[str, Any]:
        """The member as the group metadata record stores it (records.MEMBER_FIELDS)."""
        stored = {
            name: getattr(self, _ATTRIBUTE_OF_FIELD.get(name, name)) for name in _STORED_AS_IS
        }
        stored["subscription"] = self.metadata_for(protocol)
        stored["assignment"] = assignment
        return stored

    @classmethod
    def from_record(cls, stored: dict[str, Any], protocol_type: str, protocol: str) -> Member:
        """A member read back from a group metadata record."""
        fields = {_ATTRIBUTE_OF_FIELD.get(name, name): stored[name] for name in _STORED_AS_IS}
        return cls(
            **fields,
            protocol_type=protocol_type,
            protocols=[(protocol, stored["subscription"])],
        )

    @property
    def kept_alive(self) -> bool:
        return self.join_waiter is not None or self.sync_waiter is not None


@dataclass
class Group:
    """A group on its coordinator.

    Invariants: the state only moves along TRANSITIONS (``transition`` raises otherwise);
    ``leader_id`` names a member or is None; in Empty and Dead there are no members; the
    generation grows by one each time a rebalance completes. ``offsets`` are the committed
    offsets, kept whatever the membership; ``offset_positions`` the log offset of the record
    behind each (a commit whose record is older than the one applied is not applied), and
    ``pending_commits`` counts the commits of each partition written but not yet acknowledged
    (offset expiry leaves those partitions alone).
    """

    group_id: str
    partition: int  # of __consumer_offsets, where the group is stored
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline: asyncio.TimerHandle | None = None
    offset_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    pending_commits: Counter[tuple[str, int]] = field(default_factory=Counter)

    def apply_commit(self, tp: tuple[str, int], committed: CommittedOffset, position: int) -> None:
        """Takes a commit whose record is at log offset ``position``, unless a later record of
        the same partition was applied already (acknowledgements may come out of order)."""
        if position > self.offset_positions.get(tp, -1):
            self.offsets[tp] = committed
            self.offset_positions[tp] = position

    def commits_ended(self, tps: list[tuple[str, int]]) -> None:
        self.pending_commits.subtract(tps)
        for tp in tps:
            if self.pending_commits[tp] <= 0:
                del self.pending_commits[tp]

    def transition(self, state: GroupState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"group {self.group_id}: no move from {self.state} to {state}")
        self.state = state

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.expiry is not None:
            member.expiry.cancel()
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def candidate_protocols(self) -> set[str]:
        names = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: any, if the group is empty."""
        if not self.members:
            return bool(protocols)
        return self.protocol_type == protocol_type and bool(
            {name for name, _ in protocols} & self.candidate_protocols()
        )

    def select_protocol(self) -> str:
        """The protocol most members like best among those all of them support."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return votes.most_common(1)[0][0]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_waiter is None]
