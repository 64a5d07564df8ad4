"""power_loss: brokers killed and their files cut back to what the kernel had written.

Kafka does not fsync by default and relies on replication, so a power loss of every replica of
a partition at once can take acknowledged acks=all messages (the "last replica standing" case of
KIP-966); fsyncing every message (flush.messages=1) keeps them, and so does replication when one
broker at a time loses power. One three-broker cluster serves the module.
"""

from __future__ import annotations

import asyncio

import pytest

from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario


@pytest.fixture(scope="module")
def cluster_on_disk(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("power-loss"))
    cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def power_loss(cluster, target, **settings):
    scenario = ScenarioSettings("power_loss", target, rate=100, settle_seconds=1.0, **settings)
    return asyncio.run(run_scenario(cluster, scenario, progress=lambda _: None))


def test_every_replica_losing_power_with_kafkas_defaults_loses_acknowledged_messages(
    cluster_on_disk,
):
    topic, report = power_loss(cluster_on_disk, "replicas", seed=7)

    assert report.lost, f"{topic}:\n{report.table()}"
    assert all("in no replica's log" in lost for lost in report.lost), report.lost
    assert report.diverged == [] and report.duplicates == [], report.table()
    # the consumer polling during the run had read some of them: the logs ended below where it
    # had been, and the offsets it read then hold other messages now
    assert report.nonmonotonic and report.inconsistent_offsets, report.table()


def test_every_replica_losing_power_loses_nothing_when_each_message_is_fsynced(cluster_on_disk):
    topic, report = power_loss(
        cluster_on_disk, "replicas", seed=7, topic_config={"flush.messages": "1"}
    )

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 100, report.table()


@pytest.mark.parametrize("message_format", ["0.9.0", "0.10.0"])
def test_the_leader_losing_power_loses_nothing_while_its_followers_run(
    cluster_on_disk, message_format
):
    topic, report = power_loss(cluster_on_disk, "leader", message_format=message_format)

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 100, report.table()
