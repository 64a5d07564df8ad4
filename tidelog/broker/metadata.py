"""What a broker knows of the cluster: live brokers, topics, partition leaders.

The cache is filled from ZooKeeper by the controller package and read by request handlers; it
never talks to ZooKeeper itself. A partition's leader is the one in its state, and only while
that broker is alive (registered); otherwise it has none (-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker as registered: ``host``/``port`` is where other brokers reach it (its
    inter-broker listener), ``listeners`` every advertised ``(name, host, port)``."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    admin: str | None = None  # host:port of the admin API, where the controller sends requests
    listeners: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client that came in on ``listener`` reaches this broker (None: it has no
        such listener). A registration without named listeners has one address for all."""
        if not self.listeners:
            return self.host, self.port
        for name, host, port in self.listeners:
            if name == listener:
                return host, port
        return None

    def to_json(self) -> dict:
        return {
            "id": self.broker_id,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
            "admin": self.admin,
            "listeners": [list(listener) for listener in self.listeners],
        }

    @classmethod
    def from_json(cls, document: dict) -> BrokerEndpoint:
        return cls(
            int(document["id"]),
            document["host"],
            int(document["port"]),
            document.get("rack"),
            document.get("admin"),
            tuple((name, host, int(port)) for name, host, port in document.get("listeners", ())),
        )


@dataclass(frozen=True)
class PartitionState:
    """As in /brokers/topics/{t}/partitions/{p}/state. ``zk_version``: the version of that node
    this state was read from or written as (-1: not known), as Kafka's LeaderAndIsr and
    UpdateMetadata carry it. Within one leader epoch only the leader changes the state (its ISR,
    by compare-and-set), so of two states of one epoch the higher version is the newer."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = field(default=-1, compare=False)

    def is_older_than(self, other: PartitionState) -> bool:
        """Whether ``other`` supersedes this state: a later leader epoch, or the same epoch at
        a later version of the node (both versions known)."""
        if self.leader_epoch != other.leader_epoch:
            return self.leader_epoch < other.leader_epoch
        return 0 <= self.zk_version < other.zk_version


@dataclass
class TopicMetadata:
    name: str
    assignment: dict[int, tuple[int, ...]]  # partition -> replicas, the first one preferred
    states: dict[int, PartitionState] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class MetadataCache:
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    # topics marked for deletion (/admin/delete_topics): no replica is created for them again
    deleting: set[str] = field(default_factory=set)

    def leader_of(self, topic: str, partition: int) -> int:
        metadata = self.topics.get(topic)
        if metadata is None or partition not in metadata.assignment:
            return -1
        state = metadata.states.get(partition)
        if state is None or state.leader not in self.brokers:
            return -1
        return state.leader

    def copy_of_topics(self) -> MetadataCache:
        """The brokers and each topic's assignment and states, copied (for a worker thread)."""
        return MetadataCache(
            brokers=dict(self.brokers),
            topics={
                name: TopicMetadata(name, dict(topic.assignment), dict(topic.states))
                for name, topic in self.topics.items()
            },
        )

    def has_partition(self, topic: str, partition: int) -> bool:
        metadata = self.topics.get(topic)
        return metadata is not None and partition in metadata.assignment


@dataclass
class MetadataDelta:
    """What changed in ZooKeeper since the cache was last brought up to date: only the nodes
    whose watches fired are read again. ``topics`` are read whole (new, or their assignment
    changed), ``states`` one partition each (None: the state is gone), ``removed`` topics left
    the cluster; None in the other fields means unchanged."""

    brokers: dict[int, BrokerEndpoint] | None = None
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    states: dict[tuple[str, int], PartitionState | None] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    controller_id: int | None = None
    deleting: set[str] | None = None

    def apply_to(self, cache: MetadataCache) -> None:
        if self.brokers is not None:
            cache.brokers = self.brokers
        for name in self.removed:
            cache.topics.pop(name, None)
        cache.topics.update(self.topics)
        for (name, number), state in self.states.items():
            topic = cache.topics.get(name)
            if topic is None:
                continue
            if state is None:
                topic.states.pop(number, None)
            else:
                topic.states[number] = state
        for name, config in self.configs.items():
            if name in cache.topics:
                cache.topics[name].config = config
        if self.controller_id is not None:
            cache.controller_id = self.controller_id
        if self.deleting is not None:
            cache.deleting = self.deleting
