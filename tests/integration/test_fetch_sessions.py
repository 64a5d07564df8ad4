"""Incremental fetch sessions between brokers, end to end.

Followers hold one session per leader; a leader change, a follower restart and an eviction from
a leader's session cache each end sessions, and new ones are opened, without any partition left
behind: after each, every replica of every partition reaches its leader's log end offset.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import admin, wait_for_leaders
from tidelog.cluster import faults
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.controller import topics, zookeeper
from tidelog.perf.producer import ProducerSettings, run_producer

TOPIC = "sessions"
PARTITIONS = 24
SLOTS = "max.incremental.fetch.session.cache.slots"
ANSWER_BYTES = 16384


@pytest.fixture(scope="module")
def sessions_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("sessions"))
    # answers of 16 KiB: a follower behind by more needs many, each with partitions left out
    overrides = {**SCENARIO_OVERRIDES, "replica.fetch.response.max.bytes": str(ANSWER_BYTES)}
    cluster.up(3, overrides=overrides, progress=lambda _: None)
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    faults.wait_for_full_isr(cluster, TOPIC)
    wait_for_leaders(cluster, TOPIC, PARTITIONS)
    yield cluster
    cluster.down(progress=lambda _: None)


def produce_to_every_partition(cluster: LocalCluster, per_partition: int = 20) -> None:
    """acks=all batches round-robin over the partitions, so each partition gets appends."""
    settings = ProducerSettings(
        TOPIC, PARTITIONS * per_partition, 100, acks=-1, batch_size=100 * 10
    )
    _, errors = asyncio.run(
        run_producer(cluster.bootstrap_servers, settings, progress=lambda _: None)
    )
    assert not errors, errors


def log_end_offsets(cluster: LocalCluster) -> dict[int, dict[int, int]]:
    """partition -> {broker: log end offset} over the live brokers."""
    offsets: dict[int, dict[int, int]] = {}
    for broker_id in cluster.broker_ids:
        described = admin(cluster, broker_id, f"/topics/{TOPIC}")
        assert described is not None, f"broker {broker_id} does not answer"
        for partition in described["partitions"]:
            offsets.setdefault(partition["partition"], {})[broker_id] = partition.get(
                "log_end_offset", -1
            )
    return offsets


def wait_until_every_replica_is_level(cluster: LocalCluster) -> None:
    """Every replica of every partition has its leader's log end offset (> 0)."""

    def level() -> bool:
        offsets = log_end_offsets(cluster)
        return len(offsets) == PARTITIONS and all(
            len(set(ends.values())) == 1 and min(ends.values()) > 0 for ends in offsets.values()
        )

    try:
        wait_until(level, 60, "every replica of every partition to reach its leader's log end")
    except ClusterError:
        behind = {p: e for p, e in log_end_offsets(cluster).items() if len(set(e.values())) > 1}
        raise AssertionError(
            f"partitions left behind (partition: broker -> offset): {behind}"
        ) from None


def sessions(cluster: LocalCluster, broker_id: int) -> dict:
    answer = admin(cluster, broker_id, "/fetch-sessions")
    assert answer is not None, f"broker {broker_id} does not answer"
    return answer


def wait_until_sessions_cover_every_partition(cluster: LocalCluster) -> dict[int, dict]:
    """Each follower holds a session with each leader it follows, naming every partition it
    follows there, and each leader holds that session; returns the brokers' views."""

    def covered() -> dict[int, dict] | None:
        views = {b: sessions(cluster, b) for b in cluster.broker_ids}
        for broker_id, view in views.items():
            for leader, held in view["follower"].items():
                if held["following"] and (
                    held["session_id"] == 0 or held["partitions"] != held["following"]
                ):
                    return None
                ids = {
                    s["session_id"]: s
                    for s in views[int(leader)]["leader"]["sessions"]
                    if s["replica_id"] == broker_id
                }
                if held["following"] and held["session_id"] not in ids:
                    return None
        return views

    result: dict[int, dict] = {}

    def ready() -> bool:
        views = covered()
        if views is not None:
            result.update(views)
        return views is not None

    wait_until(ready, 30, "every follower to hold a session naming all partitions it follows")
    return result


def session_ids(views: dict[int, dict], follower: int) -> dict[str, int]:
    return {leader: held["session_id"] for leader, held in views[follower]["follower"].items()}


def test_followers_replicate_every_partition_through_sessions(sessions_cluster):
    produce_to_every_partition(sessions_cluster)
    wait_until_every_replica_is_level(sessions_cluster)
    views = wait_until_sessions_cover_every_partition(sessions_cluster)
    # every broker leads some partitions and follows the others' leaders in sessions
    for broker_id in sessions_cluster.broker_ids:
        assert len(views[broker_id]["leader"]["sessions"]) == 2, views[broker_id]


def test_a_follower_far_behind_catches_up_on_every_partition_with_no_further_appends(
    sessions_cluster,
):
    follower = sessions_cluster.broker_ids[-1]
    sessions_cluster.stop_broker(follower)
    try:
        # about 40 answers' worth: each fills up, and the partitions it has no room for must
        # stay to be read by the next one (nothing is appended once the follower is back)
        produce_to_every_partition(sessions_cluster, per_partition=280)
    finally:
        sessions_cluster.start_broker(follower)
    wait_until_every_replica_is_level(sessions_cluster)
    faults.wait_for_full_isr(sessions_cluster, TOPIC)  # the next tests stop a leader


def test_a_leader_change_moves_partitions_to_sessions_with_the_new_leaders(sessions_cluster):
    wait_until_sessions_cover_every_partition(sessions_cluster)
    leaving = 1
    sessions_cluster.stop_broker(leaving)  # a clean shutdown hands its leadership over
    try:
        faults.wait_until_leader(
            sessions_cluster, TOPIC, lambda leader: leader not in (-1, leaving)
        )
        produce_to_every_partition(sessions_cluster)
    finally:
        sessions_cluster.start_broker(leaving)
    faults.wait_for_full_isr(sessions_cluster, TOPIC)
    produce_to_every_partition(sessions_cluster)
    wait_until_every_replica_is_level(sessions_cluster)
    wait_until_sessions_cover_every_partition(sessions_cluster)


def test_a_restarted_follower_opens_new_sessions(sessions_cluster):
    before = wait_until_sessions_cover_every_partition(sessions_cluster)
    follower = 2
    # session ids are numbered by each leader: compared leader by leader
    old = {str(b): {s["session_id"] for s in before[b]["leader"]["sessions"]} for b in (1, 3)}
    sessions_cluster.stop_broker(follower)
    try:
        produce_to_every_partition(sessions_cluster)
    finally:
        sessions_cluster.start_broker(follower)
    faults.wait_for_full_isr(sessions_cluster, TOPIC)
    produce_to_every_partition(sessions_cluster)
    wait_until_every_replica_is_level(sessions_cluster)
    after = wait_until_sessions_cover_every_partition(sessions_cluster)
    new = {leader: id for leader, id in session_ids(after, follower).items() if id}
    assert new and all(id not in old[leader] for leader, id in new.items()), (before, after)


def test_evicted_sessions_are_opened_again_and_replication_goes_on(sessions_cluster):
    """Broker 3 restarted with one session slot: its two followers evict each other's
    session over and over, fall back to a full fetch each time, and still keep up."""
    leader = 3
    config = Path(sessions_cluster.broker(leader).config)
    original = config.read_text()
    sessions_cluster.stop_broker(leader)
    config.write_text(original + f"\n{SLOTS}=1\n")
    try:
        sessions_cluster.start_broker(leader)
        faults.wait_for_full_isr(sessions_cluster, TOPIC)
        # leadership comes back to broker 3 for the partitions it prefers
        topics_cli_elect(sessions_cluster)
        wait_until_every_broker_knows_the_preferred_leaders(sessions_cluster)
        produce_to_every_partition(sessions_cluster)
        wait_until_every_replica_is_level(sessions_cluster)
        wait_until(
            lambda: sessions(sessions_cluster, leader)["leader"]["evictions"] > 0,
            30,
            "broker 3 to evict a session",
        )
        assert len(sessions(sessions_cluster, leader)["leader"]["sessions"]) == 1
    finally:
        sessions_cluster.stop_broker(leader)
        config.write_text(original)
        sessions_cluster.start_broker(leader)
    faults.wait_for_full_isr(sessions_cluster, TOPIC)
    produce_to_every_partition(sessions_cluster)
    wait_until_every_replica_is_level(sessions_cluster)


def wait_until_every_broker_knows_the_preferred_leaders(cluster: LocalCluster) -> None:
    def known() -> bool:
        for broker_id in cluster.broker_ids:
            described = admin(cluster, broker_id, f"/topics/{TOPIC}")
            if described is None or any(
                p["leader"] != p["replicas"][0] for p in described["partitions"]
            ):
                return False
        return True

    wait_until(known, 30, "every broker to know each partition's preferred leader leads it")


def topics_cli_elect(cluster: LocalCluster) -> None:
    asked = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "topic", "preferred-leader-election",
         "--dir", str(cluster.directory), "--topic", TOPIC],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
