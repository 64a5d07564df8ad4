"""Correctness at scale: topics of a thousand partitions, replication factor 3, on a cluster of
its own (a thousand partitions would slow every other test sharing a cluster with it)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.integration.conftest import admin
from tidelog.broker.metadata import PartitionState
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper
from tidelog.perf.producer import ProducerSettings, run_producer


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("large"))
    cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def test_a_thousand_partitions_survive_a_hard_bounce_of_a_leader(large):
    """The killed broker comes back to a thousand logs to recover, truncate and catch up in
    fetch sessions, and nothing acknowledged is lost."""
    settings = ScenarioSettings(failure="hard_bounce", target="leader", partitions=1000, rate=300)
    topic, report = asyncio.run(run_scenario(large, settings, progress=lambda _: None))
    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 100, report.table()  # one message at a time, acks=all


def views_agree_with_zookeeper(cluster: LocalCluster, topics_: list[str]) -> bool:
    """Every broker's metadata holds, for each partition of ``topics_``, the leader, leader
    epoch and ISR that ZooKeeper holds, and each topic's config."""
    with zookeeper.session(cluster.zookeeper) as client:
        truth = {name: zookeeper.read_topic(client, name) for name in topics_}
    for broker_id in cluster.broker_ids:
        for name, metadata in truth.items():
            assert metadata is not None, f"{name} is not in ZooKeeper"
            described = admin(cluster, broker_id, f"/topics/{name}")
            if described is None or described["config"] != metadata.config:
                return False
            seen = {
                p["partition"]: (p["leader"], p["leader_epoch"], sorted(p["isr"]))
                for p in described["partitions"]
            }
            expected = {
                number: (state.leader, state.leader_epoch, sorted(state.isr))
                for number, state in metadata.states.items()
            }
            if seen != expected:
                return False
    return True


def produce_one_batch_to_every_partition(cluster: LocalCluster, topic: str, count: int) -> None:
    settings = ProducerSettings(topic, count, 100, acks=-1, batch_size=150)
    summary, errors = asyncio.run(
        run_producer(cluster.bootstrap_servers, settings, progress=lambda _: None)
    )
    assert not errors, errors
    assert summary.records == count


def test_a_thousand_partitions_created_in_one_batch_are_led_replicated_and_producible(large):
    """One ZooKeeper transaction writes the topic and its thousand states; each broker reads
    the new topic once (not the cluster on every watch) and opens its logs: every partition
    gets a leader, a full ISR and a log on every replica, and takes an acks=all write."""
    start = time.monotonic()
    with zookeeper.session(large.zookeeper) as client:
        topics.create_topic(client, "batch", 1000, 3, {"min.insync.replicas": "2"})
    faults.wait_for_full_isr(large, "batch", timeout=120)
    produce_one_batch_to_every_partition(large, "batch", 1000)
    wait_until(
        lambda: views_agree_with_zookeeper(large, ["batch"]),
        60,
        "every broker's metadata of batch to match ZooKeeper",
    )
    print(f"created, served and written once in {time.monotonic() - start:.1f} s")


def test_brokers_reading_only_changed_nodes_end_with_zookeepers_state_after_a_watch_storm(large):
    """Leaders moved five times over every partition at once, a config changed and a topic
    created in the middle: brokers read only the nodes whose watches fired, and each still ends
    with ZooKeeper's leader, epoch and ISR of every partition, and serves as that says."""
    with zookeeper.session(large.zookeeper) as client:
        topics.create_topic(client, "storm", 60, 3, {"min.insync.replicas": "2"})
    faults.wait_for_full_isr(large, "storm")
    with zookeeper.session(large.zookeeper) as client:
        for round_ in range(5):
            current = zookeeper.read_states_and_versions(client, "storm", list(range(60)))
            assignment = zookeeper.read_topic(client, "storm").assignment  # type: ignore[union-attr]
            writes = []
            for number, (state, version) in current.items():
                replicas = assignment[number]
                leader = replicas[(replicas.index(state.leader) + 1) % len(replicas)]
                moved = PartitionState(leader, state.leader_epoch + 1, replicas, 0)
                writes.append(("storm", number, moved, version))
            zookeeper.write_states(client, writes)
            if round_ == 2:
                topics.create_topic(client, "storm-late", 30, 3, {"min.insync.replicas": "2"})
                topics.alter_topic_config(client, "storm", {"retention.ms": "3600000"})
    faults.wait_for_full_isr(large, "storm")
    faults.wait_for_full_isr(large, "storm-late")
    wait_until(
        lambda: views_agree_with_zookeeper(large, ["storm", "storm-late"]),
        60,
        "every broker's metadata of storm and storm-late to match ZooKeeper",
    )
    produce_one_batch_to_every_partition(large, "storm", 60)
    produce_one_batch_to_every_partition(large, "storm-late", 30)
