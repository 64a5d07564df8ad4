"""The replication throttle of KIP-73 (Kafka 0.10.1): moving replicas without starving the rest.

Two byte rates per broker, leader.replication.throttled.rate (what this broker sends to
followers of throttled partitions it leads) and follower.replication.throttled.rate (what it
fetches for throttled partitions it follows), and per topic the replicas they apply to,
leader.replication.throttled.replicas and follower.replication.throttled.replicas: '*' or
"partition:broker" pairs, an entry counting on the broker it names. As in Kafka, only replicas
outside the ISR are ever held back (a follower in sync is never throttled, so acks=all produce
is not slowed), and a throttled partition is left out of a fetch while its quota is exceeded;
the bytes of every throttled partition count against it. A follower does not hold back a
partition its last answer left at the leader's high watermark (the fetcher's rule, Kafka's
in-sync by lag): the leader adds it to the ISR on its next fetch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from tidelog.broker.metadata import MetadataCache

UNTHROTTLED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE bytes a second
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


def valid_throttled_replicas(value: str) -> bool:
    """'' (none), '*' (all) or partition:broker pairs separated by ','."""
    if value.strip() in ("", "*"):
        return True
    try:
        parse_throttled_replicas(value)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def parse_throttled_replicas(value: str) -> frozenset[tuple[int, int]] | None:
    """The (partition, broker) pairs a list names; None for '*' (every replica)."""
    if value.strip() == "*":
        return None
    pairs = set()
    for entry in value.split(","):
        if not entry.strip():
            continue
        partition, separator, broker = entry.strip().partition(":")
        if not separator:
            raise ValueError(f"{entry!r} is not partition:broker")
        pairs.add((int(partition), int(broker)))
    return frozenset(pairs)


class Quota:
    """A byte rate as a token bucket holding at most one second of bytes: ``exceeded`` while
    more was recorded than the rate allows (the debt is paid back at the rate), so over any
    long run the bytes recorded stay within the rate plus one fetch."""

    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.rate = rate
        self._tokens = float(min(rate, UNTHROTTLED))
        self._at = clock()

    def set_rate(self, rate: int) -> None:
        self._refill()
        self.rate = rate
        self._tokens = min(self._tokens, float(rate))

    @property
    def unlimited(self) -> bool:
        return self.rate >= UNTHROTTLED

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def exceeded(self) -> bool:
        if self.unlimited:
            return False
        self._refill()
        return self._tokens < 0

    def record(self, size: int) -> None:
        if not self.unlimited:
            self._refill()
            self._tokens -= size


class ReplicationThrottle:
    """Broker ``broker_id``'s two quotas, and which of its replicas they apply to (read from
    the topics' settings in the metadata cache, kept current by the broker's watches)."""

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        leader_rate: int = UNTHROTTLED,
        follower_rate: int = UNTHROTTLED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.leader = Quota(leader_rate, clock)
        self.follower = Quota(follower_rate, clock)

    def _listed(self, key: str, topic: str, partition: int) -> bool:
        described = self.metadata.topics.get(topic)
        value = described.config.get(key, "") if described is not None else ""
        if not value:
            return False
        try:
            pairs = parse_throttled_replicas(value)
        except ValueError:
            return False  # refused when it was set; an old value is not throttled
        return pairs is None or (partition, self.broker_id) in pairs

    def leader_throttled(self, topic: str, partition: int, follower: int, isr) -> bool:
        """Whether this broker, leading the partition, counts what ``follower`` fetches of it
        against its leader quota (never for a follower in the ISR)."""
        return (
            not self.leader.unlimited
            and follower not in isr
            and self._listed(LEADER_REPLICAS, topic, partition)
        )

    def follower_throttled(self, topic: str, partition: int) -> bool:
        """Whether this broker, following the partition, counts what it fetches of it against
        its follower quota (never while it is in the partition's ISR)."""
        if self.follower.unlimited or not self._listed(FOLLOWER_REPLICAS, topic, partition):
            return False
        described = self.metadata.topics.get(topic)
        state = described.states.get(partition) if described is not None else None
        return state is None or self.broker_id not in state.isr

    def set_rates(self, config: dict[str, str], defaults: tuple[int, int]) -> None:
        """The rates of /config/brokers/{id} (Kafka's dynamic broker config, which
        kafka-reassign-partitions.sh --throttle writes), or the broker's settings without."""
        self.leader.set_rate(int(config.get(LEADER_RATE, defaults[0])))
        self.follower.set_rate(int(config.get(FOLLOWER_RATE, defaults[1])))
