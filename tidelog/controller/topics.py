"""Creating topics and changing their configuration in ZooKeeper.

Replicas are spread as Kafka's AdminUtils spreads them: the first replica of partition p goes to
broker (p + start) mod n, the others follow it at a shift that grows every n partitions, so
leaders and followers are both balanced over the live brokers.
"""

from __future__ import annotations

import random

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from tidelog.broker.handlers import valid_topic_name
from tidelog.config import TOPIC_KEYS, ConfigError, parse_config
from tidelog.controller import zookeeper
from tidelog.errors import ErrorCode, KafkaError


def assign_replicas(
    brokers: list[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    shift: int | None = None,
) -> dict[int, list[int]]:
    brokers = sorted(brokers)
    count = len(brokers)
    if partitions < 1:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions; at least 1")
    if not 1 <= replication_factor <= count:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} with {count} live brokers",
        )
    chance = random.Random()
    start = chance.randrange(count) if start_index is None else start_index
    next_shift = chance.randrange(count) if shift is None else shift
    assignment = {}
    for partition in range(partitions):
        if partition > 0 and partition % count == 0:
            next_shift += 1
        first = (partition + start) % count
        replicas = [brokers[first]]
        for number in range(replication_factor - 1):
            step = 1 + (next_shift + number) % (count - 1)
            replicas.append(brokers[(first + step) % count])
        assignment[partition] = replicas
    return assignment


def check_remote_storage(zk: KazooClient, values: dict) -> None:
    """Kafka's refusals of remote.storage.enable=true: on a compacted topic, and on a cluster
    whose brokers do not have the tier (remote.log.storage.system.enable)."""
    if not values["remote.storage.enable"]:
        return
    if "compact" in values["cleanup.policy"]:
        raise ConfigError(
            "remote.storage.enable: Remote log storage is unsupported for the compacted topics"
        )
    without = zookeeper.brokers_without_remote_storage(zk)
    if without:
        raise ConfigError(
            "remote.storage.enable: Tiered Storage functionality is disabled in the broker. "
            f"Topic cannot be configured with remote log storage. (brokers {without} run "
            "without remote.log.storage.system.enable=true)"
        )


def create_topic(
    zk: KazooClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    config: dict[str, str] | None = None,
) -> dict[int, list[int]]:
    """Creates ``topic`` over the live brokers; TOPIC_ALREADY_EXISTS if it is there."""
    if not valid_topic_name(topic):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{topic!r}: a topic name is 1 to 249 of the characters a-z A-Z 0-9 . _ -",
        )
    config = dict(config or {})
    check_remote_storage(zk, parse_config(config, TOPIC_KEYS))  # a bad key or value fails here
    brokers = list(zookeeper.read_brokers(zk))
    assignment = assign_replicas(brokers, partitions, replication_factor)
    try:
        zookeeper.create_topic_nodes(zk, topic, assignment, config)
    except NodeExistsError:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic!r} exists") from None
    return assignment


def alter_topic_config(
    zk: KazooClient, topic: str, changes: dict[str, str | None]
) -> dict[str, str]:
    """Sets (or, with None, removes) topic-level overrides; returns the overrides now in force."""
    if not zk.exists(zookeeper.topic_path(topic)):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
    config = zookeeper.read_topic_config(zk, topic)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    check_remote_storage(zk, parse_config(config, TOPIC_KEYS))
    zookeeper.write_topic_config(zk, topic, config)
    return config
