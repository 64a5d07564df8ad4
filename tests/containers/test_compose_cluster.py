"""compose.yaml's cluster served from the host, through a hard kill, a restart and a partition."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import urllib.request

import pytest
from kafka import KafkaProducer

from tidelog.cluster import faults
from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.local import wait_until
from tidelog.cluster.scenario import ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper

_topics = itertools.count()


pytestmark = pytest.mark.containers


def create_topic(
    cluster: ComposeCluster, name: str, partitions: int = 3, config: dict[str, str] | None = None
) -> str:
    """A topic on all three brokers (min.insync.replicas 2, and ``config``), once every replica
    is in sync."""
    topic = f"{name}-{next(_topics)}"
    wait_until(
        lambda: cluster.registered_brokers() == set(cluster.broker_ids),
        60,
        "every broker of the compose cluster to be registered in ZooKeeper",
    )
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client, topic, partitions, 3, {"min.insync.replicas": "2", **(config or {})}
        )
    faults.wait_for_full_isr(cluster, topic)
    return topic


def produce(cluster: ComposeCluster, topic: str, values: list[bytes]) -> None:
    """Every value sent with kafka-python, acks=all, each acknowledged."""
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=5)
    try:
        for future in [producer.send(topic, value) for value in values]:
            future.get(timeout=30)
    finally:
        producer.close()


def consume_with_kcat(cluster: ComposeCluster, topic: str) -> list[bytes]:
    done = subprocess.run(
        ["kcat", "-b", cluster.bootstrap_servers, "-C", "-t", topic, "-e", "-q", "-f", "%s\n"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def partition_on(cluster: ComposeCluster, broker_id: int, topic: str) -> dict:
    """What broker ``broker_id`` says of partition 0 of ``topic`` (its admin API)."""
    port = cluster.broker(broker_id).admin_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics/{topic}", timeout=5) as reply:
        return json.loads(reply.read())["partitions"][0]


def test_serves_kcat_and_kafka_python_from_the_host(compose_cluster: ComposeCluster) -> None:
    listing = subprocess.run(
        ["kcat", "-b", compose_cluster.bootstrap_servers, "-L", "-J"],
        capture_output=True,
        timeout=30,
        check=True,
    )
    brokers = {b["id"]: b["name"] for b in json.loads(listing.stdout)["brokers"]}
    # the EXTERNAL listener's addresses, as a client on the host must be told
    assert brokers == {
        b.broker_id: f"127.0.0.1:{b.port}" for b in compose_cluster.state.brokers.values()
    }
    topic = create_topic(compose_cluster, "served")
    values = [b"value-%04d" % i for i in range(300)]
    produce(compose_cluster, topic, values)
    assert sorted(consume_with_kcat(compose_cluster, topic)) == values


def test_a_hard_killed_broker_comes_back_and_the_verdict_is_clean(
    compose_cluster: ComposeCluster,
) -> None:
    """The replication scenario with the leader's container killed (docker kill -s KILL) and
    started again while producing with acks=all: every acknowledged message is there."""
    settings = ScenarioSettings(failure="hard_bounce", target="leader", cycles=1, rate=100)
    lines: list[str] = []
    topic, report = asyncio.run(run_scenario(compose_cluster, settings, progress=lines.append))
    assert report.acked > 100, "\n".join(lines)
    assert report.ok, f"{topic}\n" + "\n".join(lines) + "\n" + report.table()


def test_data_survives_docker_compose_restart(compose_cluster: ComposeCluster) -> None:
    topic = create_topic(compose_cluster, "restarted")
    values = [b"kept-%04d" % i for i in range(200)]
    produce(compose_cluster, topic, values)
    compose_cluster.compose("restart")
    compose_cluster.wait_healthy()
    faults.wait_for_full_isr(compose_cluster, topic)
    assert sorted(consume_with_kcat(compose_cluster, topic)) == values


def test_a_partitioned_broker_leaves_the_isr_and_rejoins(compose_cluster: ComposeCluster) -> None:
    topic = create_topic(compose_cluster, "partitioned", partitions=1)
    follower = faults.pick_target(compose_cluster, topic, "follower")
    compose_cluster.partition_broker(follower)
    try:
        faults.wait_until_isr_size(compose_cluster, topic, 2)
        produce(compose_cluster, topic, [b"while-apart-%03d" % i for i in range(50)])
    finally:
        compose_cluster.heal_broker(follower)
    faults.wait_for_full_isr(compose_cluster, topic)
    wait_until(
        lambda: partition_on(compose_cluster, follower, topic).get("log_end_offset") == 50,
        60,
        f"broker {follower} to fetch what was produced while it was cut off",
    )
    compose_cluster.wait_healthy([follower])
    # its session expired while it was cut off: it is back once it has registered again
    wait_until(
        lambda: follower in compose_cluster.registered_brokers(),
        60,
        f"broker {follower} to register in ZooKeeper again",
    )
