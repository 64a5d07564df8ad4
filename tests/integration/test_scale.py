"""Correctness at scale: a topic of a thousand partitions, replication factor 3, on a cluster of
its own (a thousand partitions would slow every other test sharing a cluster with it)."""

from __future__ import annotations

import asyncio

import pytest

from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario


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
