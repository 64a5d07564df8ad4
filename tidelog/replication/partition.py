"""One partition as this broker holds it: leader or follower, its ISR and high watermark."""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping
from dataclasses import dataclass, field

from tidelog.log.log import Log

log = logging.getLogger(__name__)


@dataclass
class FollowerState:
    """What the leader knows of one follower: the log end offset its last fetch asked from,
    when it was last caught up, the log start offset its last fetch named (Fetch v5 and later;
    -1 until one does), and when its last fetch read the partition and the leader's log end
    then."""

    log_end_offset: int = -1
    caught_up_ms: int = 0
    log_start_offset: int = -1
    fetch_ms: int = 0
    end_at_fetch: int = -1


@dataclass
class Partition:
    """A partition on this broker.

    As leader (leader_id == broker_id) it tracks every follower's log end offset; the ISR holds
    the replicas caught up within replica.lag.time.max.ms, the leader always among them;
    ``joining`` holds the followers whose entry into the ISR is being written (once written, the
    controller may elect one); the high watermark is the smallest log end offset in the ISR and
    ``joining`` (Kafka's maximal ISR, KIP-497), so every follower that may be elected holds all
    it acknowledges, and never goes down while this broker leads. A follower joins the ISR once
    it holds the high watermark and ``epoch_start_offset``, the log end when this leadership
    began: a high watermark carried over from a follower's view can be below what the last
    leader acknowledged (KAFKA-7128). As follower, the high watermark is the leader's, capped at
    the local log end offset.
    """

    topic: str
    partition: int
    broker_id: int
    log: Log
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: frozenset[int] = frozenset()
    joining: frozenset[int] = frozenset()
    epoch_start_offset: int = -1
    followers: dict[int, FollowerState] = field(default_factory=dict)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def make_leader(
        self, leader_epoch: int, replicas: tuple[int, ...], isr: frozenset[int], now: int
    ) -> None:
        if leader_epoch != self.leader_epoch or not self.is_leader:
            # a write of the last epoch's ISR can no longer land (it names that epoch); one of
            # this epoch's, under way while the replicas change, still may
            self.joining = frozenset()
            self.epoch_start_offset = self.log.log_end_offset
        self.leader_id, self.leader_epoch = self.broker_id, leader_epoch
        self.replicas, self.isr = replicas, isr | {self.broker_id}
        # Followers count as caught up at the start of the epoch: they get a full lag interval.
        self.followers = {r: FollowerState(-1, now) for r in replicas if r != self.broker_id}
        self.log.high_watermark = min(
            max(self.log.high_watermark, self.log.log_start_offset), self.log.log_end_offset
        )
        self.maybe_advance_high_watermark()
        log.info(
            "%s-%d: leader in epoch %d, ISR %s, log end %d, high watermark %d",
            self.topic,
            self.partition,
            leader_epoch,
            sorted(self.isr),
            self.log.log_end_offset,
            self.log.high_watermark,
        )

    def make_follower(
        self, leader_id: int, leader_epoch: int, replicas: tuple[int, ...], isr: frozenset[int]
    ) -> None:
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self.replicas, self.isr = replicas, isr
        self.joining = frozenset()
        self.followers = {}

    def update_follower(self, replica_id: int, fetch_offset: int, now: int) -> bool:
        """Records a follower's fetch; returns whether the high watermark moved. A follower is
        caught up now if it asks from the log end, and as of its previous fetch if it asks from
        where the log ended then (Kafka's lastFetchLeaderLogEndOffset): under steady appends a
        follower that keeps up seldom finds the log end where it left it."""
        state = self.followers.setdefault(replica_id, FollowerState())
        end = self.log.log_end_offset
        if fetch_offset >= end:
            state.caught_up_ms = now
        elif fetch_offset >= state.end_at_fetch:
            state.caught_up_ms = max(state.caught_up_ms, state.fetch_ms)
        state.log_end_offset = fetch_offset
        state.fetch_ms, state.end_at_fetch = now, end
        return self.maybe_advance_high_watermark()

    def update_follower_log_start(self, replica_id: int, log_start_offset: int) -> bool:
        """Records the log start offset a follower's fetch named; returns whether it changed."""
        state = self.followers.get(replica_id)
        if state is None or state.log_start_offset == log_start_offset:
            return False
        state.log_start_offset = log_start_offset
        return True

    def low_watermark(self, live_brokers: Container[int]) -> int:
        """The smallest log start offset among this leader and its followers on live brokers
        (Kafka 2.1's lowWatermarkIfLeader): what a DeleteRecords waits for. -1 while a live
        follower has not named its log start."""
        low = self.log.log_start_offset
        for replica, state in self.followers.items():
            if replica in live_brokers and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    def credit_caught_up(self, last_fetch_ms: Mapping[int, int]) -> None:
        """Called before an append moves the log end: a follower at the log end was caught up
        as of its last fetch, even if no fetch named this partition since (a fetch session
        names only what changed)."""
        end = self.log.log_end_offset
        for replica, state in self.followers.items():
            if state.log_end_offset >= end:
                state.caught_up_ms = max(state.caught_up_ms, last_fetch_ms.get(replica, 0))

    def maybe_advance_high_watermark(self) -> bool:
        """Moves the high watermark to the smallest log end offset in the ISR and ``joining``
        if that is higher (called on every append and follower fetch: no list built)."""
        candidate = self.log.log_end_offset
        followers = self.followers
        for replica in self.isr | self.joining if self.joining else self.isr:
            state = followers.get(replica)
            if state is not None and state.log_end_offset < candidate:
                candidate = state.log_end_offset
        if candidate > self.log.high_watermark:
            self.log.high_watermark = candidate
            return True
        return False

    def isr_to_expand(self, replica_id: int) -> frozenset[int] | None:
        """The ISR with ``replica_id`` if that follower is out of it but has caught up to the
        high watermark and to where this leadership began (called on its fetch, Kafka's rule
        for rejoining)."""
        state = self.followers.get(replica_id)
        if (
            replica_id in self.isr
            or replica_id not in self.replicas
            or state is None
            or state.log_end_offset < self.log.high_watermark
            or state.log_end_offset < self.epoch_start_offset
        ):
            return None
        return self.isr | {replica_id}

    def isr_to_shrink(
        self, now: int, max_lag_ms: int, last_fetch_ms: Mapping[int, int] | None = None
    ) -> frozenset[int] | None:
        """The ISR without the followers not caught up for max_lag_ms, if any is out.

        ``last_fetch_ms`` is when each follower last fetched from this broker: in a fetch
        session a caught-up partition with no appends is not named, and a follower still at the
        log end counts as caught up as of its last fetch."""
        fetched = last_fetch_ms or {}
        lagging = set()
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica, FollowerState())
            caught_up_ms = state.caught_up_ms
            if state.log_end_offset >= self.log.log_end_offset:
                caught_up_ms = max(caught_up_ms, fetched.get(replica, 0))
            if now - caught_up_ms > max_lag_ms:
                lagging.add(replica)
        return self.isr - lagging if lagging else None
