"""Creating topics and changing their configuration in ZooKeeper.

Replicas are spread as Kafka's AdminUtils spreads them: the first replica of partition p goes to
broker (p + start) mod n, the others follow it at a shift that grows every n partitions, so
leaders and followers are both balanced over the live brokers.
"""

from __future__ import annotations

import random

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidelog.broker.handlers import valid_topic_name
from tidelog.config import TOPIC_KEYS, ConfigError, check_format_supported, parse_config
from tidelog.controller import zookeeper
from tidelog.errors import ErrorCode, KafkaError


def assign_replicas(
    brokers: list[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    shift: int | None = None,
    first_partition: int = 0,
) -> dict[int, list[int]]:
    """Partitions ``first_partition`` to ``first_partition + partitions - 1`` over ``brokers``
    (AdminUtils.assignReplicasToBrokers: a topic's added partitions continue its spread)."""
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
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            next_shift += 1
        first = (partition + start) % count
        replicas = [brokers[first]]
        for number in range(replication_factor - 1):
            step = 1 + (next_shift + number) % (count - 1)
            replicas.append(brokers[(first + step) % count])
        assignment[partition] = replicas
    return assignment


def check_assignment(brokers: list[int], assignment: dict[int, list[int]]) -> None:
    """An explicit assignment: partitions 0..n-1, each with the same number of distinct live
    brokers; INVALID_REPLICA_ASSIGNMENT otherwise."""

    def invalid(why: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, why)

    if sorted(assignment) != list(range(len(assignment))) or not assignment:
        raise invalid(f"partitions {sorted(assignment)} are not numbered 0 to n-1")
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise invalid(f"partitions have different replica counts {sorted(sizes)}")
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise invalid(f"partition {partition} names a broker twice: {replicas}")
        if not set(replicas) <= set(brokers):
            raise invalid(
                f"partition {partition}: brokers {sorted(set(replicas) - set(brokers))} "
                f"are not live (live: {sorted(brokers)})"
            )


def colliding_topics(topic: str, existing: list[str]) -> list[str]:
    """Existing topics other than ``topic`` that are the same name once '.' is read as '_', as
    Kafka refuses them (they would share metric names)."""
    folded = topic.replace(".", "_")
    return sorted(name for name in existing if name != topic and name.replace(".", "_") == folded)


def check_remote_storage(zk: KazooClient, values: dict) -> None:
    """A format and codec that do not go together (check_format_supported), and Kafka's
    refusals of remote.storage.enable=true: on a compacted topic, and on a cluster
    whose brokers do not have the tier (remote.log.storage.system.enable)."""
    check_format_supported(values)
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
    *,
    assignment: dict[int, list[int]] | None = None,
    validate_only: bool = False,
) -> dict[int, list[int]]:
    """Creates ``topic`` over the live brokers (or on the brokers an explicit ``assignment``
    names); TOPIC_ALREADY_EXISTS if it is there. ``validate_only`` checks and creates nothing.
    A bad config is INVALID_CONFIG, naming the key and the allowed values."""
    if not valid_topic_name(topic):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{topic!r}: a topic name is 1 to 249 of the characters a-z A-Z 0-9 . _ -",
        )
    config = dict(config or {})
    try:
        # a bad key or value fails here, naming it; so does remote storage where Kafka refuses it
        check_remote_storage(zk, parse_config(config, TOPIC_KEYS))
    except ConfigError as error:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(error)) from None
    colliding = colliding_topics(topic, zk.get_children(zookeeper.TOPICS))
    if colliding:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic {topic!r} collides with existing topics: {', '.join(colliding)} "
            "('.' and '_' are the same in metric names)",
        )
    brokers = list(zookeeper.read_brokers(zk))
    if assignment is None:
        assignment = assign_replicas(brokers, partitions, replication_factor)
    else:
        check_assignment(brokers, assignment)
    if zk.exists(zookeeper.topic_path(topic)):
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic!r} exists")
    if validate_only:
        return assignment
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
    return set_topic_config(zk, topic, config)


def set_topic_config(
    zk: KazooClient, topic: str, config: dict[str, str], *, validate_only: bool = False
) -> dict[str, str]:
    """Makes ``config`` the whole set of ``topic``'s overrides (AlterConfigs' meaning), checked
    first (ConfigError naming a bad key or value); ``validate_only`` checks and writes nothing."""
    if not zk.exists(zookeeper.topic_path(topic)):
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
    check_remote_storage(zk, parse_config(config, TOPIC_KEYS))
    if not validate_only:
        zookeeper.write_topic_config(zk, topic, config)
    return config


def parse_replica_assignment(text: str, first_partition: int = 0) -> dict[int, list[int]]:
    """Kafka's --replica-assignment: partitions separated by ',', each partition's brokers by
    ':' ("1:2,2:3"), numbered from ``first_partition``; ValueError naming what is wrong."""
    assignment: dict[int, list[int]] = {}
    for offset, part in enumerate(text.split(",")):
        try:
            replicas = [int(broker) for broker in part.strip().split(":")]
        except ValueError:
            raise ValueError(
                f"--replica-assignment: {part!r} is not broker ids separated by ':' (e.g. 1:2,2:3)"
            ) from None
        if len(set(replicas)) != len(replicas):
            raise ValueError(f"--replica-assignment: {part!r} names a broker twice")
        assignment[first_partition + offset] = replicas
    return assignment


ADD_PARTITIONS_ATTEMPTS = 5


def add_partitions(
    zk: KazooClient,
    topic: str,
    partitions: int,
    assignment: dict[int, list[int]] | None = None,
    *,
    validate_only: bool = False,
) -> dict[int, list[int]]:
    """Raises ``topic`` to ``partitions`` partitions, as Kafka's AdminUtils.addPartitions: the
    new ones continue the spread from partition 0's first replica (or take ``assignment``, one
    entry per new partition, at the topic's replication factor, on live brokers); returns the
    new partitions' replicas. Written with a compare-and-set on the topic's node, with each new
    partition's first state (leader: its first replica, all replicas in sync), as at creation;
    brokers learn of them through their watches. INVALID_PARTITIONS if not more than now.

    A topic changed by someone else between the read and the write (another admin adding
    partitions, a reassignment) is read again and the request judged against what it is now,
    up to ADD_PARTITIONS_ATTEMPTS times."""
    for _ in range(ADD_PARTITIONS_ATTEMPTS):
        try:
            return _add_partitions_once(zk, topic, partitions, assignment, validate_only)
        except BadVersionError:
            continue
        except NoNodeError:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"topic {topic!r} was deleted while its partitions were being added",
            ) from None
        except NodeExistsError:  # the topic's node unchanged: a partition's node left behind
            raise KafkaError(
                ErrorCode.UNKNOWN,
                f"ZooKeeper holds a partition node of {topic!r} that the topic's assignment "
                "does not name; nothing was written",
            ) from None
    raise KafkaError(
        ErrorCode.UNKNOWN,
        f"topic {topic!r} changed during each of {ADD_PARTITIONS_ATTEMPTS} attempts to add its "
        "partitions; nothing was written",
    )


def _add_partitions_once(
    zk: KazooClient,
    topic: str,
    partitions: int,
    assignment: dict[int, list[int]] | None,
    validate_only: bool,
) -> dict[int, list[int]]:
    """One read, check and compare-and-set write of add_partitions; BadVersionError if the
    topic changed since the read, NoNodeError if it is gone (nothing written)."""
    stat = zk.exists(zookeeper.topic_path(topic))
    current = zookeeper.read_topic(zk, topic)
    if stat is None or current is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")
    if topic in zookeeper.pending_topic_deletions(zk):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {topic!r} is being deleted")
    existing = len(current.assignment)
    if partitions <= existing:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {topic!r} has {existing} partitions; the number of partitions can only be "
            "increased",
        )
    replication_factor = len(current.assignment[0])
    brokers = sorted(zookeeper.read_brokers(zk))
    wanted = range(existing, partitions)
    if assignment is None:
        first = current.assignment[0][0]
        new = assign_replicas(
            brokers,
            len(wanted),
            replication_factor,
            start_index=brokers.index(first) if first in brokers else None,
            shift=brokers.index(first) if first in brokers else None,
            first_partition=existing,
        )
    else:
        if sorted(assignment) != list(wanted):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"the replica assignment names {len(assignment)} partitions; {len(wanted)} are "
                f"being added ({existing} to {partitions - 1})",
            )
        for partition, replicas in assignment.items():
            if len(replicas) != replication_factor:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {partition}: {len(replicas)} replicas; the topic's replication "
                    f"factor is {replication_factor}",
                )
            unknown = sorted(set(replicas) - set(brokers))
            if unknown:
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {partition}: brokers {unknown} are not live (live: {brokers})",
                )
        new = {p: list(r) for p, r in assignment.items()}
    if not validate_only:
        zookeeper.add_partition_nodes(zk, topic, new, stat.version)
    return new
