"""A controller's answer to a controlled shutdown, when leaders change ISRs at the same moment
and when ZooKeeper drops.

In a rolling restart, the previous broker's departure makes leaders shrink their ISRs while the
next broker asks the controller to move its leaderships. Each of the controller's writes is a
compare-and-set on the partition's state; one that loses to a leader's ISR change is read and
decided again at once, as Kafka's controller does, instead of being answered as still to move
(the stopping broker would ask again only controlled.shutdown.retry.backoff.ms later, 5 s by
default), for as long as the controller gives it (half the time the stopping broker waits for
its answer). Against a real ZooKeeper."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from tidelog.broker.metadata import BrokerEndpoint, MetadataCache, PartitionState, TopicMetadata
from tidelog.config import broker_config
from tidelog.controller import controller, zookeeper
from tidelog.controller.broker_node import BrokerNode

REPLICAS = {0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 1, 2)}


@pytest.fixture(scope="module", autouse=True)
def three_brokers(connect_string: str) -> Iterator[None]:
    """Brokers 1, 2 and 3 registered (live) for the module's tests."""
    with zookeeper.session(connect_string) as zk:
        for broker_id in (1, 2, 3):
            zookeeper.register_broker(zk, BrokerEndpoint(broker_id, "127.0.0.1", 9090 + broker_id))
        yield


def race_before_first_write(monkeypatch, race: Callable[[KazooClient], object]) -> list:
    """zookeeper.write_states made to run ``race`` (another writer) once, just before the
    first writes of the code under test go out; the race's own writes go straight through.
    Returns the list its result is put in."""
    write_states, raced = zookeeper.write_states, []

    def racing(zk, writes):
        if not raced:
            raced.append(None)  # the race's own writes, through write_states, pass
            raced[0] = race(zk)
        return write_states(zk, writes)

    monkeypatch.setattr(zookeeper, "write_states", racing)
    return raced


def partitions_read(monkeypatch) -> list[int]:
    """zookeeper.read_states_and_versions made to note the partitions it is asked for, in the
    list returned."""
    read_states, read = zookeeper.read_states_and_versions, []

    def counted(zk, topic, numbers):
        read.extend(numbers)
        return read_states(zk, topic, numbers)

    monkeypatch.setattr(zookeeper, "read_states_and_versions", counted)
    return read


def cache_of(topic: str) -> MetadataCache:
    return MetadataCache(topics={topic: TopicMetadata(topic, dict(REPLICAS))})


def test_a_move_that_loses_to_a_leaders_isr_change_is_decided_again_on_the_new_state(
    connect_string, monkeypatch
):
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "rolling", {p: list(r) for p, r in REPLICAS.items()}, {})
        dropped = [("rolling", 0, 0, frozenset({1, 2}))]  # broker 3 out of 0's ISR
        raced = race_before_first_write(
            monkeypatch, lambda zk_: zookeeper.update_isrs(zk_, 1, dropped)
        )
        moves = controller.move_away_from(zk, 1, 1, cache_of("rolling"), {1}, time.monotonic() + 10)
        after = zookeeper.read_topic(zk, "rolling")

    assert raced == [[True]]
    assert moves.remaining == [] and moves.stuck == []
    assert after is not None
    # partition 0: led by 1, its ISR [1, 2] after the leader's change: moved to 2 on top of it
    assert (after.states[0].leader, after.states[0].isr) == (2, (2,))
    assert after.states[0].leader_epoch == 1
    # the others: broker 1 taken out of their ISRs, leaders unchanged
    assert [(after.states[p].leader, after.states[p].isr) for p in (1, 2)] == [
        (2, (2, 3)),
        (3, (2, 3)),
    ]
    assert sorted(c.partition for c in moves.changes) == [0, 1, 2]


def test_a_partition_whose_isr_became_the_stopping_broker_alone_is_stuck_not_moved(
    connect_string, monkeypatch
):
    """The state read again decides: a leader that shrank its ISR to itself meanwhile leaves
    no in-sync replica to take the partition."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "alone", {p: list(r) for p, r in REPLICAS.items()}, {})
        raced = race_before_first_write(
            monkeypatch,
            lambda zk_: zookeeper.update_isrs(zk_, 1, [("alone", 0, 0, frozenset({1}))]),
        )
        moves = controller.move_away_from(zk, 1, 1, cache_of("alone"), {1}, time.monotonic() + 10)
        after = zookeeper.read_topic(zk, "alone")

    assert raced == [[True]]
    assert moves.stuck == [("alone", 0)] and moves.remaining == []
    assert after is not None and (after.states[0].leader, after.states[0].isr) == (1, (1,))


def test_a_write_still_lost_when_the_time_is_up_is_left_to_the_brokers_next_attempt(
    connect_string, monkeypatch
):
    """With no time left to try again (or a leader that changes its ISR each time), the move
    is answered as remaining: the stopping broker asks again after its back-off."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "busy", {p: list(r) for p, r in REPLICAS.items()}, {})
        write_states = zookeeper.write_states
        raced = []

        def leader_changes_its_isr_each_time(zk_, writes):
            controllers = [w for w in writes if w[:2] == ("busy", 0) and w[2].leader_epoch > 0]
            if controllers:  # the controller's move (not the leader's own write, in epoch 0)
                raced.append(None)
                state = zookeeper.read_partition_state(zk_, "busy", 0)
                assert state is not None
                isr = frozenset({1, 2}) if 3 in state.isr else frozenset({1, 2, 3})
                zookeeper.update_isrs(zk_, 1, [("busy", 0, 0, isr)])
            return write_states(zk_, writes)

        monkeypatch.setattr(zookeeper, "write_states", leader_changes_its_isr_each_time)
        started = time.monotonic()
        moves = controller.move_away_from(zk, 1, 1, cache_of("busy"), {1}, started + 0.5)
        took = time.monotonic() - started
        after = zookeeper.read_topic(zk, "busy")

    assert moves.remaining == [("busy", 0)]
    assert len(raced) > 2  # tried again and again, then given up when the time was up
    assert 0.5 <= took < 5
    assert after is not None and after.states[0].leader == 1
    assert sorted(c.partition for c in moves.changes) == [1, 2]


def test_zookeeper_failing_a_later_round_keeps_what_the_earlier_rounds_wrote(
    connect_string, monkeypatch
):
    """Round one moves partitions 1 and 2 and loses 0; ZooKeeper then fails round two's read.
    Round one's writes are in ZooKeeper: they are answered (and so told to the brokers), and
    partition 0, still led by the stopping broker, is left to its next attempt."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "dropped", {p: list(r) for p, r in REPLICAS.items()}, {})
        raced = race_before_first_write(
            monkeypatch,
            lambda zk_: zookeeper.update_isrs(zk_, 1, [("dropped", 0, 0, frozenset({1, 2}))]),
        )
        read_states = zookeeper.read_states_and_versions

        def connection_drops_after_round_one(zk_, topic, numbers):
            if raced and raced[0] is not None:  # (not the leader's own read, in the race)
                raise ConnectionLoss()
            return read_states(zk_, topic, numbers)

        monkeypatch.setattr(zookeeper, "read_states_and_versions", connection_drops_after_round_one)
        moves = controller.move_away_from(zk, 1, 1, cache_of("dropped"), {1}, time.monotonic() + 10)

    assert sorted(c.partition for c in moves.changes) == [1, 2]
    assert moves.remaining == [("dropped", 0)]


def test_a_state_a_newer_controller_wrote_is_not_written_over(connect_string, monkeypatch):
    """A controller replaced while it answers (a newer controller epoch wrote partition 0
    between its read and its write) writes nothing over the newer controller's state, as
    Kafka's controllers check the epoch; the stopping broker asks the new controller next."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "replaced", {p: list(r) for p, r in REPLICAS.items()}, {})
        write_states = zookeeper.write_states

        def newer_controller_writes(zk_: KazooClient) -> list[bool]:
            state, version = zookeeper.read_states_and_versions(zk_, "replaced", [0])[0]
            newer = PartitionState(1, state.leader_epoch + 1, (1, 3), 2, version + 1)
            return write_states(zk_, [("replaced", 0, newer, version)])

        raced = race_before_first_write(monkeypatch, newer_controller_writes)
        moves = controller.move_away_from(
            zk, 1, 1, cache_of("replaced"), {1}, time.monotonic() + 10
        )
        after = zookeeper.read_topic(zk, "replaced")

    assert raced == [[True]]
    assert after is not None
    state = after.states[0]
    assert (state.leader, state.isr, state.controller_epoch) == (1, (1, 3), 2)
    assert moves.remaining == [("replaced", 0)]
    assert sorted(c.partition for c in moves.changes) == [1, 2]


def test_the_first_round_decides_from_the_cache_and_reads_only_what_it_must(
    connect_string, monkeypatch
):
    """The controller's cache holds each state at the version it was read at, so the first
    round writes without reading: a cached state that is stale (partition 0's leader shrank
    its ISR since) loses its compare-and-set and is read; one after which the cache says
    nothing is to be written (partition 2's ISR without the stopping broker, which its leader
    has since taken back) is read to be sure. The outcome is the one from ZooKeeper's states."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "cached", {p: list(r) for p, r in REPLICAS.items()}, {})
        assert zookeeper.update_isrs(zk, 3, [("cached", 2, 0, frozenset({2, 3}))]) == [True]
        seen = zookeeper.read_topic(zk, "cached")
        assert seen is not None
        cache = MetadataCache(
            topics={"cached": TopicMetadata("cached", dict(REPLICAS), seen.states)}
        )
        assert zookeeper.update_isrs(zk, 1, [("cached", 0, 0, frozenset({1, 2}))]) == [True]
        assert zookeeper.update_isrs(zk, 3, [("cached", 2, 0, frozenset({1, 2, 3}))]) == [True]
        read = partitions_read(monkeypatch)
        moves = controller.move_away_from(zk, 1, 1, cache, {1}, time.monotonic() + 10)
        monkeypatch.undo()
        after = zookeeper.read_topic(zk, "cached")

    assert sorted(read) == [0, 2]
    assert moves.remaining == [] and moves.stuck == []
    assert after is not None
    assert [(after.states[p].leader, after.states[p].isr) for p in (0, 1, 2)] == [
        (2, (2,)),
        (2, (2, 3)),
        (3, (2, 3)),
    ]


FOUR = {0: (1, 2, 3), 1: (2, 1, 3), 2: (3, 1, 2), 3: (1, 2, 3)}


def moves_when_the_second_writes_fail(
    zk, monkeypatch, topic: str, race
) -> controller.ShutdownMoves:
    """move_away_from over FOUR with ``race`` run before the first round's writes, and
    ZooKeeper failing the second round's writes."""
    zookeeper.create_topic_nodes(zk, topic, {p: list(r) for p, r in FOUR.items()}, {})
    write_states, rounds, inside = zookeeper.write_states, [], []

    def racing_then_failing(zk_, writes):
        if inside:  # the race's own writes
            return write_states(zk_, writes)
        rounds.append(writes)
        if len(rounds) == 1:
            inside.append(None)
            race(zk_, write_states)
            inside.clear()
            return write_states(zk_, writes)
        raise ConnectionLoss()

    monkeypatch.setattr(zookeeper, "write_states", racing_then_failing)
    cache = MetadataCache(topics={topic: TopicMetadata(topic, dict(FOUR))})
    moves = controller.move_away_from(zk, 1, 1, cache, {1}, time.monotonic() + 10)
    monkeypatch.undo()
    assert len(rounds) == 2
    return moves


def test_a_round_that_fails_counts_each_partition_once(connect_string, monkeypatch):
    """Round one loses partitions 0 and 3 (their leader shrank their ISRs, 0's to itself);
    round two finds 0 stuck and fails writing 3. Partition 0 is stuck, not also remaining;
    3, whose write may or may not have been made, is remaining."""

    def leader_shrinks(zk_, _write_states):
        shrunk = [("once", 0, 0, frozenset({1})), ("once", 3, 0, frozenset({1, 2}))]
        assert zookeeper.update_isrs(zk_, 1, shrunk) == [True, True]

    with zookeeper.session(connect_string) as zk:
        moves = moves_when_the_second_writes_fail(zk, monkeypatch, "once", leader_shrinks)

    assert moves.stuck == [("once", 0)]
    assert moves.remaining == [("once", 3)]
    assert sorted(c.partition for c in moves.changes) == [1, 2]


def test_a_round_that_fails_counts_a_fenced_partition_once(connect_string, monkeypatch):
    def newer_controller_and_leader(zk_, write_states):
        state, version = zookeeper.read_states_and_versions(zk_, "fenced", [0])[0]
        newer = PartitionState(1, state.leader_epoch + 1, (1, 3), 2, version + 1)
        assert write_states(zk_, [("fenced", 0, newer, version)]) == [True]
        assert zookeeper.update_isrs(zk_, 1, [("fenced", 3, 0, frozenset({1, 2}))]) == [True]

    with zookeeper.session(connect_string) as zk:
        moves = moves_when_the_second_writes_fail(
            zk, monkeypatch, "fenced", newer_controller_and_leader
        )

    assert sorted(moves.remaining) == [("fenced", 0), ("fenced", 3)]
    assert moves.stuck == []


def test_a_stale_cached_state_is_read_even_when_the_time_is_up(connect_string):
    """A write decided from the cache that loses is not a concurrent change but the cache
    being behind: it is read and decided again whatever time is left, so the outcome is the
    one a decision from ZooKeeper gives. Lost writes of followed partitions are never
    remaining (only leaderships are, as Kafka's partitionsRemaining)."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "behind", {p: list(r) for p, r in REPLICAS.items()}, {})
        seen = zookeeper.read_topic(zk, "behind")
        assert seen is not None
        cache = MetadataCache(
            topics={"behind": TopicMetadata("behind", dict(REPLICAS), seen.states)}
        )
        assert zookeeper.update_isrs(zk, 1, [("behind", 0, 0, frozenset({1, 2}))]) == [True]
        assert zookeeper.update_isrs(zk, 2, [("behind", 1, 0, frozenset({1, 2}))]) == [True]
        moves = controller.move_away_from(zk, 1, 1, cache, {1}, time.monotonic() - 1)
        after = zookeeper.read_topic(zk, "behind")

    assert moves.remaining == []
    assert after is not None
    assert [(after.states[p].leader, after.states[p].isr) for p in (0, 1)] == [(2, (2,)), (2, (2,))]


def test_a_cached_state_without_a_version_is_read_not_written_blind(connect_string, monkeypatch):
    """A state whose version the cache does not know (-1) is read first: written with -1, the
    compare-and-set would check nothing (ZooKeeper takes -1 as any version)."""
    with zookeeper.session(connect_string) as zk:
        zookeeper.create_topic_nodes(zk, "unknown", {p: list(r) for p, r in REPLICAS.items()}, {})
        seen = zookeeper.read_topic(zk, "unknown")
        assert seen is not None
        states = dict(seen.states)
        states[1] = dataclasses.replace(states[1], zk_version=-1)
        cache = MetadataCache(topics={"unknown": TopicMetadata("unknown", dict(REPLICAS), states)})
        read = partitions_read(monkeypatch)
        moves = controller.move_away_from(zk, 1, 1, cache, {1}, time.monotonic() + 10)

    assert read == [1]
    assert sorted(c.partition for c in moves.changes) == [0, 1, 2]


def test_a_controllers_own_answer_failed_by_zookeeper_is_no_answer_not_a_crash(tmp_path):
    """A controller stopping as ZooKeeper goes: the request its own answer makes as the
    connection drops fails at once (ConnectionLoss; later ones wait). That attempt has no
    answer, as from a controller that did not answer, and the broker goes on to its next
    attempt; the error used to escape the broker's stop, which then never ended."""
    node = BrokerNode(
        broker_config(
            {
                "broker.id": "1",
                "log.dirs": str(tmp_path),
                "zookeeper.connect": "127.0.0.1:1",
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "admin.listener": "127.0.0.1:0",
            }
        )
    )

    async def zookeeper_fails(_broker_id: int) -> dict:
        raise ConnectionLoss()

    async def ask() -> dict | None:
        node.metadata.controller_id = 1  # itself
        node._answer_controlled_shutdown = zookeeper_fails  # type: ignore[method-assign]
        return await node._ask_for_controlled_shutdown()

    assert asyncio.run(ask()) is None
