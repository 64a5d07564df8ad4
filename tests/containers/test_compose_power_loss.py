"""power_loss on compose.yaml's cluster: the brokers' containers killed by the engine and their
volumes' files cut back to what the host's kernel had written. With Kafka's defaults a power
loss of every replica at once loses acknowledged messages (as on a local cluster,
tests/integration/test_power_loss.py); fsyncing every message keeps them."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.scenario import ScenarioSettings, run_scenario

pytestmark = pytest.mark.containers


def power_loss(cluster: ComposeCluster, **settings):
    scenario = ScenarioSettings(
        "power_loss", "replicas", rate=100, settle_seconds=1.0, seed=7, **settings
    )
    lines: list[str] = []
    topic, report = asyncio.run(run_scenario(cluster, scenario, progress=lines.append))
    return topic, report, "\n".join(lines)


def test_every_replica_losing_power_with_kafkas_defaults_loses_acknowledged_messages(
    compose_cluster: ComposeCluster,
) -> None:
    topic, report, said = power_loss(compose_cluster)

    assert "files cut back to what was on the disk" in said, said
    assert report.lost, f"{topic}\n{said}\n{report.table()}"
    assert all("in no replica's log" in lost for lost in report.lost), report.lost


def test_every_replica_losing_power_loses_nothing_when_each_message_is_fsynced(
    compose_cluster: ComposeCluster,
) -> None:
    topic, report, said = power_loss(compose_cluster, topic_config={"flush.messages": "1"})

    assert report.ok, f"{topic}\n{said}\n{report.table()}"
    assert report.acked > 100, report.table()
