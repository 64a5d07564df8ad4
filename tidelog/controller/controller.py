"""The controller: one broker at a time elects partition leaders when brokers come and go.

Every broker runs this; the one that creates the ephemeral ``/controller`` znode acts, with a
controller epoch one above the last (``/controller_epoch``). Whenever the cluster changes (the
broker's ZooKeeper watches fire) and on taking office, the controller reconciles the partitions
whose leader or ISR names a broker that is not alive:

- a partition whose leader is gone gets a new one, the first live replica (in assignment order)
  that is in the ISR, in a new leader epoch; with unclean.leader.election.enable a live replica
  outside the ISR may lead (and the log says so, since acknowledged messages can be lost);
  with no candidate the partition is offline (leader -1) until one returns;
- a dead broker is removed from the ISR of the partitions it followed, in a new leader epoch so
  that the leader takes the smaller ISR at once;
- on request (/admin/preferred_replica_election), a partition led by another replica goes back
  to its preferred (first) replica if that one is alive and in sync.

Every state is written with a compare-and-set on its znode version, so a write based on stale
state (a leader's ISR change, an older controller) fails and is redone from fresh state.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, PartitionState
from tidelog.controller import zookeeper

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """A partition state the controller wrote (``state`` None: only something to say)."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: PartitionState | None
    description: str


def try_to_become_controller(zk: KazooClient, broker_id: int) -> int | None:
    """Creates /controller for ``broker_id`` and takes the next controller epoch; None if
    another broker is controller."""
    document = {"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))}
    try:
        zk.create(zookeeper.CONTROLLER, json.dumps(document).encode(), ephemeral=True)
    except NodeExistsError:
        return None
    while True:
        try:
            data, stat = zk.get(zookeeper.CONTROLLER_EPOCH)
        except NoNodeError:
            try:
                zk.create(zookeeper.CONTROLLER_EPOCH, b"1")
                return 1
            except NodeExistsError:
                continue
        epoch = int(data) + 1
        try:
            zk.set(zookeeper.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            return epoch
        except BadVersionError:
            continue


def elect(
    replicas: tuple[int, ...],
    state: PartitionState,
    live: set[int],
    unclean: bool,
    shutting_down: frozenset[int] = frozenset(),
) -> tuple[int, tuple[int, ...], bool]:
    """(leader, ISR, unclean?) for a partition whose leader is gone; leader -1 if none can lead.
    A broker in a controlled shutdown leads only if no other in-sync replica can."""
    in_sync = [r for r in replicas if r in state.isr and r in live]
    if in_sync:
        staying = [r for r in in_sync if r not in shutting_down] or in_sync
        return staying[0], tuple(in_sync), False
    alive = [r for r in replicas if r in live]
    if unclean and alive:
        return alive[0], (alive[0],), True
    return -1, state.isr, False


@dataclass(frozen=True)
class Reconciliation:
    """What a pass of the controller changed, and the live brokers as it read them."""

    changes: list[Change]
    brokers: dict[int, BrokerEndpoint]


def reconcile(
    zk: KazooClient,
    controller_epoch: int,
    unclean: bool,
    cache: MetadataCache,
    shutting_down: frozenset[int] = frozenset(),
) -> Reconciliation:
    """One pass over the partitions that may need a new leader or a smaller ISR; returns what
    it changed and the live brokers it read. ``cache`` (the broker's metadata, kept up to date
    by its watches) picks the candidates: those whose leader or an ISR member is not alive.
    Each is read again from ZooKeeper and written with a compare-and-set, all reads and then
    all writes sent at once.
    A candidate the cache missed (a state written since it was read) is caught on the next
    pass, which that state's watch brings. Called in a worker thread: ``cache`` must be a
    copy the event loop does not change meanwhile (MetadataCache.copy_of_topics)."""
    brokers = zookeeper.read_brokers(zk)
    live = set(brokers)
    candidates: dict[str, list[int]] = {}
    for name, topic in cache.topics.items():
        for number, state in topic.states.items():
            if state.leader not in live or any(r not in live for r in state.isr):
                candidates.setdefault(name, []).append(number)
    writes: list[tuple[str, int, PartitionState, int]] = []
    described: list[tuple[tuple[int, ...], str]] = []
    for name, numbers in sorted(candidates.items()):
        assignment = cache.topics[name].assignment
        current_states = zookeeper.read_states_and_versions(zk, name, numbers)
        for number in sorted(numbers):
            current = current_states.get(number)
            replicas = assignment.get(number)
            if current is None or replicas is None:
                continue
            state, version = current
            if state.leader in live:
                isr = tuple(r for r in state.isr if r in live)
                if isr == state.isr:
                    continue
                new_state = PartitionState(
                    state.leader, state.leader_epoch + 1, isr, controller_epoch, version + 1
                )
                what = f"{name}-{number}: ISR {list(state.isr)} -> {list(isr)} (brokers gone)"
            else:
                leader, isr, was_unclean = elect(replicas, state, live, unclean, shutting_down)
                if leader == state.leader:
                    continue  # still offline
                new_state = PartitionState(
                    leader, state.leader_epoch + 1, isr, controller_epoch, version + 1
                )
                what = (
                    f"{name}-{number}: leader {state.leader} -> {leader} in epoch "
                    f"{new_state.leader_epoch}, ISR {list(isr)}"
                )
                if was_unclean:
                    what += " (UNCLEAN: the new leader was not in sync; messages may be lost)"
                elif leader < 0:
                    what += " (offline: no in-sync replica is alive)"
            writes.append((name, number, new_state, version))
            described.append((replicas, what))
    changes = [
        Change(name, number, replicas, new_state, what)
        for (name, number, new_state, _), (replicas, what), written in zip(
            writes, described, zookeeper.write_states(zk, writes), strict=True
        )
        if written
    ]
    requested = zookeeper.take_preferred_leader_election(zk)
    if requested is not None:
        changes += elect_preferred_leaders(zk, requested, live, controller_epoch)
    return Reconciliation(changes, brokers)


def imbalanced_partitions(
    cache: MetadataCache,
    live: set[int],
    percentage: int,
    shutting_down: frozenset[int] = frozenset(),
) -> list[tuple[str, int]]:
    """Automatic leader rebalance as Kafka 0.10's controller decides it: for each live broker,
    of the partitions whose preferred (first) replica it is, the share it does not lead; when
    that share is above leader.imbalance.per.broker.percentage, every such partition is due a
    preferred leader election. Topics being deleted and brokers shutting down are left out."""
    due: list[tuple[str, int]] = []
    by_preferred: dict[int, list[tuple[str, int, int]]] = {}
    for name, topic in cache.topics.items():
        if name in cache.deleting:
            continue
        for number, replicas in topic.assignment.items():
            state = topic.states.get(number)
            if replicas and state is not None:
                by_preferred.setdefault(replicas[0], []).append((name, number, state.leader))
    for broker_id, partitions in sorted(by_preferred.items()):
        if broker_id not in live or broker_id in shutting_down:
            continue
        elsewhere = [(name, number) for name, number, leader in partitions if leader != broker_id]
        if len(elsewhere) * 100 > percentage * len(partitions):
            due += sorted(elsewhere)
    return due


def elect_preferred_leaders(
    zk: KazooClient, partitions: list[tuple[str, int]], live: set[int], controller_epoch: int
) -> list[Change]:
    """Gives each of ``partitions`` to its preferred (first) replica if that one is alive and
    in sync; returns what it changed, and why a partition was left. Each topic is read once,
    its states all at once, and every new state is written at once: until a partition's new
    state is written its old leader still leads it while its followers may already follow
    the new one, so acks=all produces to it wait. One by one (the topic, the state, the write:
    five round trips per partition) 20 of 60 partitions took 3.2 s to move on a loaded
    machine, and produce latency peaked at 3.1 s."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    assignments: dict[str, dict[int, tuple[int, ...]]] = {}
    current: dict[tuple[str, int], tuple[PartitionState, int]] = {}
    for topic, numbers in by_topic.items():
        metadata = zookeeper.read_topic(zk, topic)
        if metadata is None:
            continue
        assignments[topic] = metadata.assignment
        for number, state_and_version in zookeeper.read_states_and_versions(
            zk, topic, numbers
        ).items():
            current[(topic, number)] = state_and_version
    refused: list[Change] = []
    writes: list[tuple[str, int, PartitionState, int]] = []
    moved: list[tuple[tuple[int, ...], str]] = []
    for topic, partition in partitions:
        replicas = assignments.get(topic, {}).get(partition)
        found = current.get((topic, partition))
        if replicas is None or found is None:
            what = f"{topic}-{partition}: no such partition for a preferred leader election"
            refused.append(Change(topic, partition, (), None, what))
            continue
        state, version = found
        preferred = replicas[0]
        if state.leader == preferred:
            continue
        if preferred not in live or preferred not in state.isr:
            what = f"{topic}-{partition}: preferred replica {preferred} is not alive and in sync"
            refused.append(Change(topic, partition, replicas, None, what))
            continue
        new_state = PartitionState(
            preferred, state.leader_epoch + 1, state.isr, controller_epoch, version + 1
        )
        writes.append((topic, partition, new_state, version))
        moved.append(
            (
                replicas,
                f"{topic}-{partition}: leader {state.leader} -> {preferred} (preferred) in epoch "
                f"{new_state.leader_epoch}",
            )
        )
    written = zookeeper.write_states(zk, writes)
    return refused + [
        Change(topic, partition, replicas, new_state, what)
        for (topic, partition, new_state, _), (replicas, what), ok in zip(
            writes, moved, written, strict=True
        )
        if ok
    ]


@dataclass(frozen=True)
class ShutdownMoves:
    """What the controller did for a broker asking to shut down: the states it wrote
    (leaderships moved, the broker taken out of ISRs), the partitions the broker still leads
    that another in-sync replica could take (a write lost to a concurrent one: ask again), and
    those no other live in-sync replica can take."""

    changes: list[Change]
    remaining: list[tuple[str, int]]
    stuck: list[tuple[str, int]]
    brokers: dict[int, BrokerEndpoint]


def move_away_from(
    zk: KazooClient,
    broker_id: int,
    controller_epoch: int,
    cache: MetadataCache,
    shutting_down: set[int],
    retry_until: float = 0.0,
) -> ShutdownMoves:
    """Controlled shutdown of ``broker_id``, as Kafka 0.10's controller does it: each partition
    with more than one replica that the broker leads gets the first assigned replica that is
    live, in the ISR and not shutting down as leader, with the shutting-down brokers out of the
    ISR; each it follows loses it from the ISR. Every state goes in a new leader epoch (a
    compare-and-set, as every controller write).

    The first round decides from the cache's states, at the versions they were read or written
    at (as Kafka's controller decides from its context), and reads from ZooKeeper only the
    partitions the cache has no version of or says nothing is to be written for. A write lost
    to a concurrent change (a stale cached state; a leader shrinking its ISR as the previous
    broker of a rolling restart left) is read and decided again until ``retry_until``
    (time.monotonic(), checked after each round). Remaining, for the broker's next attempt: the
    leaderships still lost then, and those a newer controller has written (this one writes
    nothing over them). ZooKeeper failing a round after a write ends the call with what was
    written, which stands. Called in a worker thread with a copy of the cache
    (MetadataCache.copy_of_topics)."""
    brokers = zookeeper.read_brokers(zk)
    live = set(brokers)
    # the first round decides from the cache's states, at the versions they were read or
    # written at (a stale one loses its compare-and-set and is read); only a partition the
    # cache has no version of, or whose cached state says nothing is to be written, is read
    from_cache: dict[tuple[str, int], PartitionState] = {}
    to_read: dict[str, list[int]] = {}
    for name, topic in sorted(cache.topics.items()):
        for number, replicas in sorted(topic.assignment.items()):
            if broker_id not in replicas or len(replicas) < 2:
                continue
            cached = topic.states.get(number)
            if cached is not None and cached.zk_version >= 0:
                from_cache[(name, number)] = cached
            else:
                to_read.setdefault(name, []).append(number)
    changes: list[Change] = []
    reading_led: list[tuple[str, int]] = []  # leaderships this round reads to decide again
    given_up: list[tuple[str, int]] = []  # leaderships lost once the time was up
    fenced: list[tuple[str, int]] = []  # led here, but a newer controller has written them
    stuck: list[tuple[str, int]] = []
    rounds = retried_writes = 0
    while True:
        try:
            read = [
                ((name, number), state, True)
                for name, numbers in to_read.items()
                for number, (state, _) in sorted(
                    zookeeper.read_states_and_versions(zk, name, numbers).items()
                )
            ]
        except KazooException as error:
            if not changes:
                raise
            _round_failed(broker_id, rounds, error)
            return ShutdownMoves(changes, reading_led + given_up + fenced, stuck, brokers)
        decisions = [(key, state, False) for key, state in from_cache.items()] + read
        from_cache = {}
        round_ = _Round()
        for (name, number), state, verified in decisions:
            replicas = cache.topics[name].assignment[number]
            decided = _moved_away(
                broker_id, controller_epoch, state, state.zk_version, replicas, live,
                shutting_down, f"{name}-{number}",
            )  # fmt: skip
            key = (name, number)
            led = state.leader == broker_id
            if isinstance(decided, tuple):
                new_state, what = decided
                round_.writes.append((name, number, new_state, state.zk_version))
                round_.described.append((replicas, what, led, verified))
            elif not verified:  # the cache's word for it is not enough: read it
                round_.to_read.setdefault(name, []).append(number)
                if led:
                    round_.reading_led.append(key)
            elif decided == "stuck":
                round_.stuck.append(key)
            elif decided == "fenced" and led:
                round_.fenced.append(key)
        try:
            written = zookeeper.write_states(zk, round_.writes)
        except KazooException as error:
            if not changes:
                raise
            _round_failed(broker_id, rounds, error)
            # this round's leadership writes may or may not have been made: asked again
            attempted = [
                (name, number)
                for (name, number, _, _), (_, _, led, _) in zip(
                    round_.writes, round_.described, strict=True
                )
                if led
            ]
            remaining = attempted + given_up + fenced + round_.fenced + round_.reading_led
            return ShutdownMoves(changes, remaining, stuck + round_.stuck, brokers)
        rounds += 1
        stuck += round_.stuck
        fenced += round_.fenced
        to_read, reading_led = round_.to_read, round_.reading_led
        in_time = time.monotonic() < retry_until
        for (name, number, new_state, _), (replicas, what, led, verified), ok in zip(
            round_.writes, round_.described, written, strict=True
        ):
            if ok:
                changes.append(Change(name, number, replicas, new_state, what))
            elif in_time or not verified:  # a stale cached state is read in any case
                to_read.setdefault(name, []).append(number)
                retried_writes += 1
                if led:
                    reading_led.append((name, number))
            elif led:
                given_up.append((name, number))
        if not to_read:
            if retried_writes:
                log.info(
                    "controlled shutdown of broker %d: %d writes lost to concurrent changes "
                    "were read and decided again (%d rounds, %d leaderships still lost)",
                    broker_id,
                    retried_writes,
                    rounds,
                    len(given_up),
                )
            return ShutdownMoves(changes, given_up + fenced, stuck, brokers)


@dataclass
class _Round:
    """One round of move_away_from: the writes it decided (with their replicas, line, whether
    the stopping broker leads the partition, and whether the state was read from ZooKeeper
    rather than the cache) and what it found, merged into the call's figures once its writes
    are done."""

    writes: list[tuple[str, int, PartitionState, int]] = field(default_factory=list)
    described: list[tuple[tuple[int, ...], str, bool, bool]] = field(default_factory=list)
    to_read: dict[str, list[int]] = field(default_factory=dict)
    reading_led: list[tuple[str, int]] = field(default_factory=list)
    stuck: list[tuple[str, int]] = field(default_factory=list)
    fenced: list[tuple[str, int]] = field(default_factory=list)


def _round_failed(broker_id: int, rounds: int, error: Exception) -> None:
    log.warning(
        "controlled shutdown of broker %d: ZooKeeper failed round %d (%s); answering with what "
        "the earlier rounds wrote",
        broker_id,
        rounds + 1,
        type(error).__name__,
    )


def _moved_away(
    broker_id: int,
    controller_epoch: int,
    state: PartitionState,
    version: int,
    replicas: tuple[int, ...],
    live: set[int],
    shutting_down: set[int],
    name: str,
) -> tuple[PartitionState, str] | Literal["stuck", "unchanged", "fenced"]:
    """The state one partition gets from the controlled shutdown of ``broker_id``, and the
    line that says so; "stuck" if the broker leads it and no other live in-sync replica can
    take it, "unchanged" if there is nothing to write, "fenced" if a newer controller wrote
    the state (this one has been replaced and must not write over it, as Kafka's controllers
    check)."""
    if state.controller_epoch > controller_epoch:
        return "fenced"
    isr = tuple(r for r in state.isr if r not in shutting_down)
    if state.leader == broker_id:
        candidates = [r for r in replicas if r in isr and r in live]
        if not candidates:
            return "stuck"
        new_state = PartitionState(
            candidates[0], state.leader_epoch + 1, isr, controller_epoch, version + 1
        )
        return new_state, (
            f"{name}: leader {broker_id} -> {candidates[0]} in epoch "
            f"{new_state.leader_epoch}, ISR {list(isr)} (controlled shutdown of "
            f"broker {broker_id})"
        )
    if broker_id in state.isr and state.leader in live:
        isr = tuple(r for r in state.isr if r != broker_id)
        new_state = PartitionState(
            state.leader, state.leader_epoch + 1, isr, controller_epoch, version + 1
        )
        return new_state, (
            f"{name}: ISR {list(state.isr)} -> {list(isr)} (controlled shutdown of "
            f"broker {broker_id})"
        )
    return "unchanged"


@dataclass(frozen=True)
class ReassignmentStep:
    """What a pass over /admin/reassign_partitions did: the states written (``changes``), the
    old replicas to stop and delete (topic, partition, broker), the partitions whose move is
    finished or was dropped (with why), and those still under way."""

    changes: list[Change]
    retired: list[tuple[str, int, int]]
    finished: dict[tuple[str, int], str]
    moving: set[tuple[str, int]]


def advance_reassignments(
    zk: KazooClient, controller_epoch: int, live: set[int]
) -> ReassignmentStep:
    """Moves each partition of /admin/reassign_partitions one step along, as Kafka 0.10's
    controller (onPartitionReassignment), from ZooKeeper's state alone (so a new controller
    takes a move up where the last left it):

    1. the partition's replicas become the old ones followed by the new (RAR) ones, in a new
       leader epoch: the new replicas start and fetch from the leader (written only when every
       new replica is alive; otherwise the move is dropped, nothing changed);
    2. once every new replica is in the ISR: the replicas become RAR, the leader stays if it is
       in RAR (else the first live in-sync replica of RAR leads), the old replicas leave the
       ISR, in a new leader epoch; they are then stopped and their logs deleted, and the
       partition leaves the znode.

    Each topic's changes are one ZooKeeper transaction of compare-and-sets: a write that loses
    to another (a leader's ISR change) is redone on the next pass, which that write's watch
    brings."""
    requested = zookeeper.read_reassignment(zk)
    changes: list[Change] = []
    retired: list[tuple[str, int, int]] = []
    finished: dict[tuple[str, int], str] = {}
    moving: set[tuple[str, int]] = set()
    by_topic: dict[str, dict[int, list[int]]] = {}
    for (topic, partition), replicas in requested.items():
        by_topic.setdefault(topic, {})[partition] = replicas
    for topic, wanted in sorted(by_topic.items()):
        found = zookeeper.read_assignment_and_version(zk, topic)
        if found is None:
            finished.update({(topic, p): f"{topic}: no such topic" for p in wanted})
            continue
        assignment, version = found
        states = zookeeper.read_states_and_versions(zk, topic, list(wanted))
        new_assignment: dict[int, list[int]] = {}
        writes: list[tuple[int, PartitionState, int]] = []
        described: list[Change] = []
        done_here: dict[tuple[str, int], str] = {}
        retired_here: list[tuple[str, int, int]] = []
        for partition, target in sorted(wanted.items()):
            key = (topic, partition)
            current = assignment.get(partition)
            if current is None or partition not in states:
                finished[key] = f"{topic}-{partition}: no such partition"
                continue
            state, state_version = states[partition]
            if current == target:
                finished[key] = f"{topic}-{partition}: reassignment to {target} completed"
                continue
            moving.add(key)
            if not set(target) <= set(current):
                absent = sorted(set(target) - live)
                if absent:
                    finished[key] = (
                        f"{topic}-{partition}: reassignment to {target} dropped: brokers "
                        f"{absent} are not alive"
                    )
                    moving.discard(key)
                    continue
                union = current + [r for r in target if r not in current]
                new_state = PartitionState(
                    state.leader,
                    state.leader_epoch + 1,
                    state.isr,
                    controller_epoch,
                    state_version + 1,
                )
                new_assignment[partition] = union
                writes.append((partition, new_state, state_version))
                described.append(
                    Change(
                        topic,
                        partition,
                        tuple(union),
                        new_state,
                        f"{topic}-{partition}: reassigning {current} -> {target}: replicas "
                        f"{union} in epoch {new_state.leader_epoch}, new replicas catching up",
                    )
                )
                continue
            if not set(target) <= set(state.isr):
                continue  # the new replicas are catching up: their ISR writes bring the next pass
            if state.leader in target and state.leader in live:
                leader = state.leader
            else:
                candidates = [r for r in target if r in state.isr and r in live]
                if not candidates:
                    continue
                leader = candidates[0]
            isr = tuple(r for r in state.isr if r in target)
            new_state = PartitionState(
                leader, state.leader_epoch + 1, isr, controller_epoch, state_version + 1
            )
            new_assignment[partition] = list(target)
            writes.append((partition, new_state, state_version))
            described.append(
                Change(
                    topic,
                    partition,
                    tuple(target),
                    new_state,
                    f"{topic}-{partition}: reassigned {current} -> {target}: leader {leader} in "
                    f"epoch {new_state.leader_epoch}, ISR {list(isr)}",
                )
            )
            retired_here += [(topic, partition, r) for r in current if r not in target]
            done_here[key] = f"{topic}-{partition}: reassignment to {target} completed"
        if writes and zookeeper.write_assignment_and_states(
            zk, topic, new_assignment, version, writes
        ):
            changes += described
            retired += retired_here
            finished.update(done_here)
            moving.difference_update(done_here)
    if finished:
        zookeeper.finish_reassignments(zk, set(finished))
    return ReassignmentStep(changes, retired, finished, moving)
