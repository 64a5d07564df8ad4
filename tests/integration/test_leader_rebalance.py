"""Automatic leader rebalance, as Kafka 0.10's controller does it: once a broker comes back, the
partitions whose preferred replica it is go back to it within leader.imbalance.check.interval
(1 s here), when more than leader.imbalance.per.broker.percentage of them are led elsewhere."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import wait_for_leaders
from tidelog.broker.metadata import MetadataCache, PartitionState, TopicMetadata
from tidelog.cluster.faults import wait_for_full_isr
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import controller, topics, zookeeper

TOPIC = "rebalanced"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("rebalance"))
    cluster.up(
        3,
        overrides={
            "leader.imbalance.check.interval.seconds": "1",
            "controlled.shutdown.retry.backoff.ms": "200",
        },
        progress=lambda _: None,
    )
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, PARTITIONS, 3)
    wait_for_leaders(cluster, TOPIC, PARTITIONS)
    yield cluster
    cluster.down(progress=lambda _: None)


def not_on_preferred(cluster: LocalCluster) -> list[int]:
    with zookeeper.session(cluster.zookeeper) as client:
        found = zookeeper.read_topic(client, TOPIC)
    assert found is not None
    return [p for p, replicas in found.assignment.items() if found.states[p].leader != replicas[0]]


def test_leadership_goes_back_to_the_preferred_replicas_after_a_bounce(cluster):
    wait_for_full_isr(cluster, TOPIC)
    assert not_on_preferred(cluster) == []

    cluster.stop_broker(2)
    assert not_on_preferred(cluster) != []  # what broker 2 led moved away
    cluster.start_broker(2)
    wait_for_full_isr(cluster, TOPIC)
    back_in_sync = time.monotonic()

    wait_until(
        lambda: not_on_preferred(cluster) == [],
        15,
        "leadership back on the preferred replicas",
    )
    # within a few check intervals of the replica being back in sync
    assert time.monotonic() - back_in_sync < 10

    def logs() -> str:
        return "".join(
            (cluster.directory / f"broker-{b}" / "broker.log").read_text() for b in (1, 2, 3)
        )

    # by the automatic rebalance, which logs once its ZooKeeper writes (seen above) are back
    wait_until(lambda: "automatic leader rebalance moved" in logs(), 10, "the rebalance's log line")


def cache_of(assignment: dict[int, tuple[int, ...]], leaders: dict[int, int]) -> MetadataCache:
    states = {p: PartitionState(leaders[p], 1, assignment[p]) for p in assignment}
    return MetadataCache(topics={"t": TopicMetadata("t", assignment, states)})


def test_a_broker_is_rebalanced_only_above_the_imbalance_percentage():
    # broker 1 is preferred for 10 partitions and leads 9 of them: 10% elsewhere
    assignment = {p: (1, 2) for p in range(10)}
    leaders = {p: 1 for p in range(9)} | {9: 2}
    cache = cache_of(assignment, leaders)

    assert controller.imbalanced_partitions(cache, {1, 2}, 10) == []
    assert controller.imbalanced_partitions(cache, {1, 2}, 9) == [("t", 9)]
    assert controller.imbalanced_partitions(cache, {2}, 0) == []  # broker 1 is not alive
    assert controller.imbalanced_partitions(cache, {1, 2}, 0, frozenset({1})) == []
    cache.deleting = {"t"}
    assert controller.imbalanced_partitions(cache, {1, 2}, 0) == []
