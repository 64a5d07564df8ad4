"""Replication under failure, in the style of Kafka's replication system test.

A three-broker cluster with failure detection tuned for tests; each scenario produces with
acks=all to a topic with replication factor 3 and min.insync.replicas 2, injects a fault, waits
for recovery, and hands everything to the delivery oracle: nothing acknowledged may be lost and
no two replicas may diverge.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.integration.conftest import admin, wait_for_leaders
from tests.integration.test_bad_input import connect, produce_body, request
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("replicated"))
    cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def scenario(cluster, **settings):
    topic, report = asyncio.run(
        run_scenario(cluster, ScenarioSettings(rate=100, **settings), progress=lambda _: None)
    )
    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 100, report.table()
    return report


def served_topic(cluster, name, partitions=1, replication_factor=3, config=None):
    """Creates a topic and waits until every replica is in sync and every leader serves it;
    returns its replica assignment."""
    with zookeeper.session(cluster.zookeeper) as client:
        assignment = topics.create_topic(client, name, partitions, replication_factor, config)
    faults.wait_for_full_isr(cluster, name)
    wait_for_leaders(cluster, name, partitions)
    return assignment


def acks_all_produce(topic, timeout_ms):
    """A Produce v2 body of one message to partition 0, acks=all."""
    records = build_message_set([Record(b"k", b"v", 0)], magic=1)
    return produce_body(topic, records, acks=-1, timeout=timeout_ms)


@pytest.mark.parametrize(
    ("failure", "target", "message_format"),
    [
        ("hard_bounce", "leader", "0.9.0"),
        ("hard_bounce", "leader", "0.10.0"),
        ("clean_shutdown", "leader", "0.10.0"),
        ("hard_shutdown", "follower", "0.9.0"),
        ("hard_shutdown", "controller", "0.10.0"),
        ("pause", "follower", "0.10.0"),
        ("zk_session_expiry", "leader", "0.10.0"),
        ("clean_bounce", "follower", "0.9.0"),
        ("truncation_failover", "leader", "0.10.0"),
    ],
)
def test_no_acknowledged_message_is_lost_and_no_replica_diverges(
    replicated, failure, target, message_format
):
    scenario(replicated, failure=failure, target=target, message_format=message_format, cycles=1)


def test_log_append_time_stays_monotonic_when_a_slower_clock_takes_over(replicated):
    report = scenario(replicated, failure="clock_skew", target="leader", cycles=1)

    assert report.timestamps_backwards == []


def test_acks_all_is_refused_when_too_few_replicas_are_in_sync(replicated):
    served_topic(replicated, "strict", config={"min.insync.replicas": "3"})
    follower = faults.pick_target(replicated, "strict", "follower")
    body = acks_all_produce("strict", 5000)

    leader = faults.pick_target(replicated, "strict", "leader")
    with connect(replicated, leader) as connection:
        accepted = request(connection, ApiKey.PRODUCE, 2, body)
    replicated.signal_broker(follower, signal.SIGKILL)
    try:
        wait_until(  # the leader itself has taken the smaller ISR, not only ZooKeeper
            lambda: len(admin(replicated, leader, "/topics/strict")["partitions"][0]["isr"]) == 2,
            30,
            "the leader of strict-0 to see its ISR shrink",
        )
        with connect(replicated, leader) as connection:
            refused = request(connection, ApiKey.PRODUCE, 2, body)
    finally:
        replicated.start_broker(follower)
        faults.wait_for_full_isr(replicated, "strict")

    assert accepted["responses"][0]["partition_responses"][0]["error_code"] == 0
    assert (
        refused["responses"][0]["partition_responses"][0]["error_code"] == 19
    )  # NOT_ENOUGH_REPLICAS


def test_acks_all_fails_after_the_append_when_the_isr_shrinks_below_the_minimum(replicated):
    served_topic(replicated, "shrinking", config={"min.insync.replicas": "2"})
    leader = faults.pick_target(replicated, "shrinking", "leader")
    followers = [b for b in (1, 2, 3) if b != leader]
    body = acks_all_produce("shrinking", 20000)

    for follower in followers:  # in the ISR when the message is appended, then dropped from it
        replicated.signal_broker(follower, signal.SIGSTOP)
    try:
        with connect(replicated, leader) as connection:
            connection.settimeout(25)
            answer = request(connection, ApiKey.PRODUCE, 2, body)
    finally:
        for follower in followers:
            replicated.signal_broker(follower, signal.SIGCONT)
    faults.wait_for_full_isr(replicated, "shrinking")

    partition = answer["responses"][0]["partition_responses"][0]
    assert partition["error_code"] == 20  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert partition["base_offset"] == 0  # it was appended: the ISR was full then


def test_a_preferred_leader_election_gives_leadership_back_to_the_first_replica(replicated):
    preferred = served_topic(replicated, "preferred")[0][0]
    replicated.stop_broker(preferred)
    faults.wait_until_leader(replicated, "preferred", lambda leader: leader not in (-1, preferred))
    replicated.start_broker(preferred)
    faults.wait_for_full_isr(replicated, "preferred")

    asked = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "preferred-leader-election",
         "--dir", str(replicated.directory), "--topic", "preferred"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert asked.returncode == 0, asked.stderr
    faults.wait_until_leader(replicated, "preferred", lambda leader: leader == preferred)


def control(cluster, broker_id: int, kind: str, body: dict) -> dict:
    port = cluster.broker(broker_id).admin_port
    request_ = urllib.request.Request(
        f"http://127.0.0.1:{port}/control/{kind}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request_, timeout=5) as reply:
        return json.loads(reply.read())


def test_control_requests_from_an_older_controller_or_epoch_are_refused(replicated):
    with zookeeper.session(replicated.zookeeper) as client:
        assignment = topics.create_topic(client, "fenced", 1, 3)
        controller_epoch = int(client.get(zookeeper.CONTROLLER_EPOCH)[0])
    faults.wait_for_full_isr(replicated, "fenced")
    wait_for_leaders(replicated, "fenced", 1)
    replicas = assignment[0]
    follower = replicas[1]
    stale_partition = {
        "topic": "fenced", "partition": 0, "leader": follower, "leader_epoch": -5,
        "isr": replicas, "replicas": replicas,
    }  # fmt: skip

    def leader_and_isr(epoch: int) -> dict:
        body = {"controller_id": 99, "controller_epoch": epoch, "partitions": [stale_partition]}
        return control(replicated, follower, "leader-and-isr", body)

    old_controller = leader_and_isr(controller_epoch - 1)
    old_epoch = leader_and_isr(controller_epoch)

    assert old_controller["error_code"] == 11  # STALE_CONTROLLER_EPOCH
    assert old_epoch["error_code"] == 0
    assert old_epoch["partitions"] == [{"topic": "fenced", "partition": 0, "error_code": 11}]


def test_the_controller_tells_brokers_of_a_new_leader_over_the_control_plane(replicated):
    served_topic(replicated, "told")
    leader = faults.pick_target(replicated, "told", "leader")

    replicated.stop_broker(leader)
    faults.wait_until_leader(replicated, "told", lambda new: new not in (-1, leader))
    replicated.start_broker(leader)
    faults.wait_for_full_isr(replicated, "told")

    logs = "".join(
        (replicated.directory / f"broker-{b}" / "broker.log").read_text() for b in (1, 2, 3)
    )
    assert "LeaderAndIsr from controller" in logs


def test_a_deleted_topic_leaves_zookeeper_and_every_replica_deletes_its_data(replicated):
    served_topic(replicated, "doomed", partitions=2)
    directories = list(replicated.directory.glob("broker-*/logs/doomed-*"))
    assert len(directories) == 6

    asked = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "delete", "--dir", str(replicated.directory),
         "--topic", "doomed"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip

    assert asked.returncode == 0, asked.stderr
    wait_until(
        lambda: not any(d.exists() for d in directories),
        30,
        "every replica of doomed to delete its log",
    )
    with zookeeper.session(replicated.zookeeper) as client:
        # The request goes last, so that a new controller would finish a deletion cut short.
        wait_until(
            lambda: (
                zookeeper.read_topic(client, "doomed") is None
                and zookeeper.pending_topic_deletions(client) == []
            ),
            30,
            "the controller to remove doomed and its deletion request from ZooKeeper",
        )


def test_acks_all_times_out_while_an_in_sync_follower_does_not_fetch(replicated):
    served_topic(replicated, "slow", config={"min.insync.replicas": "2"})
    leader = faults.pick_target(replicated, "slow", "leader")
    follower = faults.pick_target(replicated, "slow", "follower")
    body = acks_all_produce("slow", 500)

    replicated.signal_broker(follower, signal.SIGSTOP)  # still in the ISR for a while
    try:
        with connect(replicated, leader) as connection:
            timed_out = request(connection, ApiKey.PRODUCE, 2, body)
    finally:
        replicated.signal_broker(follower, signal.SIGCONT)
    faults.wait_for_full_isr(replicated, "slow")

    assert (
        timed_out["responses"][0]["partition_responses"][0]["error_code"] == 7
    )  # REQUEST_TIMED_OUT


@pytest.fixture(scope="module")
def unclean(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("unclean"))
    overrides = {**SCENARIO_OVERRIDES, "unclean.leader.election.enable": "true"}
    cluster.up(3, overrides=overrides, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


@pytest.mark.parametrize("allowed", [False, True], ids=["clean-only", "unclean-allowed"])
def test_an_out_of_sync_replica_leads_only_when_unclean_election_is_enabled(
    replicated, unclean, allowed
):
    cluster = unclean if allowed else replicated
    topic = f"last-replica-{allowed}"
    with zookeeper.session(cluster.zookeeper) as client:
        leader, follower = topics.create_topic(client, topic, 1, 2)[0]
    faults.wait_for_full_isr(cluster, topic)

    cluster.stop_broker(follower)  # the ISR shrinks to the leader alone
    faults.wait_until_isr_size(cluster, topic, 1)
    cluster.stop_broker(leader)  # no in-sync replica is left
    faults.wait_until_leader(cluster, topic, lambda current: current == -1)
    cluster.start_broker(follower)
    try:
        if allowed:
            faults.wait_until_leader(cluster, topic, lambda current: current == follower)

            def controller_logs() -> str:  # written once the controller's whole round is done
                return "".join(
                    (cluster.directory / f"broker-{b}" / "broker.log").read_text()
                    for b in (1, 2, 3)
                )

            wait_until(
                lambda: f"{topic}-0: leader -1 -> {follower}" in controller_logs(),
                30,
                "the controller's log line for the election",
            )
            assert "UNCLEAN" in controller_logs()
        else:
            time.sleep(3)  # the controller has seen the follower return and left it out
            faults.wait_until_leader(cluster, topic, lambda current: current == -1, timeout=1)
    finally:
        cluster.start_broker(leader)
    faults.wait_until_leader(cluster, topic, lambda current: current >= 0)


@pytest.fixture(scope="module")
def truncating_to_high_watermark(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("high-watermark"))
    overrides = {
        **SCENARIO_OVERRIDES,
        "replica.truncation.mode": "high-watermark",
        # a wider window in which followers have not yet heard of the last acknowledgement
        "replica.fetch.wait.max.ms": "2000",
    }
    cluster.up(3, overrides=overrides, progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def test_truncating_to_the_high_watermark_loses_acknowledged_messages(
    truncating_to_high_watermark,
):
    # The same scenario passes by leader epoch (the matrix above): this is what KIP-101 fixed.
    _, report = asyncio.run(
        run_scenario(
            truncating_to_high_watermark,
            ScenarioSettings(failure="truncation_failover", rate=100),
            progress=lambda _: None,
        )
    )

    assert report.lost, report.table()
