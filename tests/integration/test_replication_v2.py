"""The chaos scenarios on message format v2: brokers of release 2.1 replicating by its protocol,
a topic of record batches produced to with Produce v3, the delivery check reading them back.
Nothing acknowledged is lost, no replica diverges, and LogAppendTime (stamped into batch
headers) never runs backwards when a slower clock takes over."""

from __future__ import annotations

import pytest

from tests.integration.test_replication import scenario
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import RELEASE_2_1, SCENARIO_OVERRIDES


@pytest.fixture(scope="module")
def replicated_2_1(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("replicated-2-1"))
    cluster.up(3, overrides={**SCENARIO_OVERRIDES, **RELEASE_2_1}, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


@pytest.mark.parametrize("failure", ["hard_bounce", "truncation_failover"])
def test_no_acknowledged_batch_is_lost_and_no_replica_diverges(replicated_2_1, failure):
    scenario(replicated_2_1, failure=failure, target="leader", message_format="2.1", cycles=1)


@pytest.mark.parametrize(
    "failure", ["hard_bounce", "clean_bounce", "truncation_failover", "zk_session_expiry"]
)
def test_an_idempotent_producer_retrying_through_leader_failures_gets_no_duplicates(
    replicated_2_1, failure
):
    report = scenario(
        replicated_2_1,
        failure=failure,
        target="leader",
        message_format="2.1",
        cycles=1,
        idempotent=True,
    )

    assert report.duplicates == [] and report.out_of_order == []
    assert report.sequence_refusals == []


def test_log_append_time_in_batches_stays_monotonic_under_a_slower_clock(replicated_2_1):
    report = scenario(
        replicated_2_1, failure="clock_skew", target="leader", message_format="2.1", cycles=1
    )

    assert report.timestamps_backwards == []
