"""Partition reassignment as Kafka's kafka-reassign-partitions.sh prepares and checks it: its
JSON documents, the proposal (--generate), the checks before a move is written (--execute) and
the status of each partition (--verify). The controller does the moving
(controller.advance_reassignments).

Documents are Kafka's: a reassignment is {"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[1,2,3]}]}, topics to move are {"version":1,"topics":[{"topic":"t"}]}. A document
that fails a check raises ReassignmentError naming the problem, before anything is written.
"""

from __future__ import annotations

import json
from collections import Counter

from kazoo.client import KazooClient

from tidelog.controller import topics, zookeeper
from tidelog.replication import throttle

Assignment = dict[tuple[str, int], list[int]]


class ReassignmentError(ValueError):
    """A reassignment that cannot be done as asked; nothing was changed."""


def as_json(assignment: Assignment) -> str:
    """Kafka's ZkUtils.formatAsReassignmentJson: compact, partitions in order."""
    return json.dumps(zookeeper.reassignment_document(assignment), separators=(",", ":"))


def _document(text: str, what: str) -> dict:
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ReassignmentError(f"the {what} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ReassignmentError(f"the {what} is not a JSON object")
    return document


def parse_reassignment(text: str) -> list[tuple[tuple[str, int], list[int]]]:
    """The (topic, partition) and replicas of each entry, in order and duplicates kept."""
    document = _document(text, "reassignment")
    entries = document.get("partitions")
    if not isinstance(entries, list):
        raise ReassignmentError('the reassignment has no "partitions" list')
    parsed = []
    for entry in entries:
        try:
            topic, partition, replicas = entry["topic"], entry["partition"], entry["replicas"]
            if not (
                isinstance(topic, str)
                and isinstance(partition, int)
                and isinstance(replicas, list)
                and all(isinstance(r, int) for r in replicas)
            ):
                raise TypeError
        except (KeyError, TypeError):
            raise ReassignmentError(
                f"partition entry {json.dumps(entry)} is not "
                '{"topic": NAME, "partition": N, "replicas": [BROKER, ...]}'
            ) from None
        parsed.append(((topic, partition), replicas))
    return parsed


def parse_topics_to_move(text: str) -> list[str]:
    document = _document(text, "topics-to-move file")
    entries = document.get("topics")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries
    ):
        raise ReassignmentError('the topics-to-move file has no "topics" list of {"topic": NAME}')
    names = [e["topic"] for e in entries]
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise ReassignmentError(
            f"List of topics to reassign contains duplicate entries: {','.join(twice)}"
        )
    return names


def current_assignment(zk: KazooClient, names: list[str]) -> Assignment:
    found: Assignment = {}
    for name in sorted(set(names)):
        topic = zookeeper.read_topic(zk, name)
        if topic is not None:
            found.update({(name, p): list(r) for p, r in topic.assignment.items()})
    return found


def check(zk: KazooClient, text: str) -> Assignment:
    """A reassignment to execute, with Kafka's checks (not empty, no partition twice, no broker
    twice in a partition, every partition existing) and tidelog's (no replica list empty);
    ReassignmentError otherwise. check_brokers then checks that every broker it names is
    registered (after the check for a reassignment under way, as Kafka orders them)."""
    parsed = parse_reassignment(text)
    if not parsed:
        raise ReassignmentError("Partition reassignment data file is empty")
    twice = sorted(key for key, count in Counter(key for key, _ in parsed).items() if count > 1)
    if twice:
        raise ReassignmentError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(f"[{t},{p}]" for t, p in twice)
        )
    repeated = [
        f"[{t},{p}] contains multiple entries for "
        + ",".join(str(r) for r, n in sorted(Counter(replicas).items()) if n > 1)
        for (t, p), replicas in parsed
        if len(set(replicas)) != len(replicas)
    ]
    if repeated:
        raise ReassignmentError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(repeated)
        )
    empty = [f"[{t},{p}]" for (t, p), replicas in parsed if not replicas]
    if empty:
        raise ReassignmentError(f"partitions {', '.join(empty)} are given no replicas")
    existing = current_assignment(zk, [t for (t, _), _ in parsed])
    missing = [f"[{t},{p}]" for (t, p), _ in parsed if (t, p) not in existing]
    if missing:
        raise ReassignmentError(
            "The proposed assignment contains non-existent partitions: " + ", ".join(missing)
        )
    return dict(parsed)


def check_brokers(zk: KazooClient, assignment: Assignment) -> None:
    """ReassignmentError unless every broker ``assignment`` names is registered."""
    live = set(zookeeper.read_brokers(zk))
    unknown = sorted({r for replicas in assignment.values() for r in replicas} - live)
    if unknown:
        raise ReassignmentError(
            f"brokers {unknown} are not registered (live brokers: {sorted(live)}): a "
            "reassignment moves replicas onto live brokers only"
        )


def execute(zk: KazooClient, assignment: Assignment) -> None:
    """Writes the reassignment for the controller; RuntimeError if one is under way."""
    zookeeper.request_reassignment(zk, assignment)


def generate(
    zk: KazooClient, names: list[str], brokers: list[int]
) -> tuple[Assignment, Assignment]:
    """(current, proposed): each topic's partitions spread over ``brokers`` at its replication
    factor, as Kafka's --generate does (AdminUtils.assignReplicasToBrokers)."""
    live = set(zookeeper.read_brokers(zk))
    unknown = sorted(set(brokers) - live)
    if unknown:
        raise ReassignmentError(f"brokers {unknown} in --broker-list are not registered")
    if len(set(brokers)) != len(brokers):
        twice = sorted(b for b, n in Counter(brokers).items() if n > 1)
        raise ReassignmentError(
            f"Broker list contains duplicate entries: {','.join(map(str, twice))}"
        )
    current = current_assignment(zk, names)
    absent = sorted(set(names) - {t for t, _ in current})
    if absent:
        raise ReassignmentError(f"no topic {', '.join(absent)}")
    proposed: Assignment = {}
    for name in sorted(set(names)):
        partitions = sorted(p for t, p in current if t == name)
        replication_factor = len(current[(name, partitions[0])])
        if replication_factor > len(brokers):
            raise ReassignmentError(
                f"topic {name}: replication factor {replication_factor} is larger than the "
                f"{len(brokers)} brokers of --broker-list"
            )
        spread = topics.assign_replicas(brokers, len(partitions), replication_factor)
        proposed.update({(name, p): spread[p] for p in partitions})
    return current, proposed


def status(zk: KazooClient, assignment: Assignment) -> dict[tuple[str, int], str]:
    """Kafka's --verify: per partition "in progress" (still in the znode), "completed" (the
    assignment is as asked) or "failed" (it is not, and nothing is moving it)."""
    moving = zookeeper.read_reassignment(zk)
    current = current_assignment(zk, [t for t, _ in assignment])
    found = {}
    for key, replicas in assignment.items():
        if key in moving:
            found[key] = "in progress"
        elif current.get(key) == replicas:
            found[key] = "completed"
        else:
            found[key] = "failed"
    return found


def _pairs(moves: dict[tuple[str, int], list[int]], topic: str) -> str:
    return ",".join(
        f"{p}:{b}" for (t, p), brokers in sorted(moves.items()) if t == topic for b in brokers
    )


def set_throttle(zk: KazooClient, current: Assignment, proposed: Assignment, rate: int) -> None:
    """KIP-73 as kafka-reassign-partitions.sh --throttle sets it: on each topic, the leader
    throttle on every pre-move replica of a moving partition (any may lead it) and the follower
    throttle on the replicas that move in; ``rate`` bytes a second on every broker involved."""
    set_throttle_rate(zk, current, proposed, rate)
    moving = {key: r for key, r in proposed.items() if set(r) - set(current[key])}
    leaders = {key: current[key] for key in moving}
    followers = {key: [b for b in r if b not in current[key]] for key, r in moving.items()}
    for topic in sorted({t for t, _ in proposed}):
        topics.alter_topic_config(
            zk,
            topic,
            {
                throttle.LEADER_REPLICAS: _pairs(leaders, topic),
                throttle.FOLLOWER_REPLICAS: _pairs(followers, topic),
            },
        )


def set_throttle_rate(
    zk: KazooClient, current: Assignment, proposed: Assignment, rate: int
) -> None:
    brokers = {b for r in (*current.values(), *proposed.values()) for b in r}
    for broker_id in sorted(brokers):
        zookeeper.change_broker_config(
            zk, broker_id, {throttle.LEADER_RATE: str(rate), throttle.FOLLOWER_RATE: str(rate)}
        )


def remove_throttle(zk: KazooClient, assignment: Assignment) -> bool:
    """Once every partition completed (as Kafka's --verify): the rates off every broker and
    the throttled replicas off the topics moved; whether anything was removed."""
    changed = False
    for broker_id in sorted(zookeeper.read_brokers(zk)):
        changed |= zookeeper.change_broker_config(
            zk, broker_id, {throttle.LEADER_RATE: None, throttle.FOLLOWER_RATE: None}
        )
    for topic in sorted({t for t, _ in assignment}):
        config = zookeeper.read_topic_config(zk, topic)
        if throttle.LEADER_REPLICAS in config or throttle.FOLLOWER_REPLICAS in config:
            topics.alter_topic_config(
                zk, topic, {throttle.LEADER_REPLICAS: None, throttle.FOLLOWER_REPLICAS: None}
            )
            changed = True
    return changed
