"""The network faults of a local cluster in namespaces, on compose.yaml's cluster: rules in the
containers' network namespaces (partition_zookeeper, partition_one_way, partition_halves) and a
slow link (degraded), each through the replication scenario with its delivery verdict, each seen
to take effect while it holds, and each leaving nothing behind."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from tests.containers.test_compose_cluster import create_topic
from tidelog import runtime
from tidelog.cluster import faults, netfaults
from tidelog.cluster.compose import ComposeCluster
from tidelog.cluster.container_network import ContainerNetwork
from tidelog.cluster.local import wait_until
from tidelog.cluster.scenario import ScenarioSettings, run_scenario
from tidelog.controller import zookeeper
from tidelog.protocol.client import Client
from tidelog.protocol.schemas import ApiKey
from tidelog.records.format import Record, build_message_set

pytestmark = pytest.mark.containers

MEMBERS = ("zookeeper", "broker-1", "broker-2", "broker-3")


@dataclass
class ClusterWatch:
    """Samples every 0.2 s the brokers registered in ZooKeeper and whether any partition of any
    topic had an ISR short of its replicas."""

    cluster: ComposeCluster
    registered: list[set[int]] = field(default_factory=list)
    short_isr: list[bool] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with zookeeper.session(self.cluster.zookeeper) as client:
            while not self.done.wait(0.2):
                self.registered.append(set(zookeeper.read_brokers(client)))
                self.short_isr.append(_any_short_isr(client))


def _any_short_isr(client) -> bool:
    for topic in client.get_children("/brokers/topics"):
        metadata = zookeeper.read_topic(client, topic)
        if metadata is None:
            continue
        for number, replicas in metadata.assignment.items():
            state = metadata.states.get(number)
            if state is not None and set(state.isr) != set(replicas):
                return True
    return False


@contextmanager
def watching(cluster: ComposeCluster) -> Iterator[ClusterWatch]:
    watch = ClusterWatch(cluster)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.done.set()
        thread.join(10)


def nothing_left(cluster: ComposeCluster) -> None:
    network = ContainerNetwork(cluster)
    for member in MEMBERS:
        assert netfaults.rules(network, member) == [], member
        assert netfaults.qdiscs(network, member) == [], member
    assert network.faults == []


def scenario(cluster: ComposeCluster, failure: str) -> tuple[int, ClusterWatch, list[str]]:
    """The scenario with ``failure`` on the leader; its target, what was seen, its lines."""
    lines: list[str] = []
    settings = ScenarioSettings(failure=failure, target="leader", cycles=1, rate=100)
    with watching(cluster) as watch:
        topic, report = asyncio.run(run_scenario(cluster, settings, progress=lines.append))
    said = "\n".join(lines)
    assert report.acked > 100, said
    assert report.ok, f"{topic}\n{said}\n{report.table()}"
    target = re.search(r"broker-(\d)", said)
    assert target is not None, said
    return int(target[1]), watch, lines


def test_a_broker_cut_from_zookeeper_loses_its_registration_and_nothing_acknowledged(
    compose_cluster: ComposeCluster,
) -> None:
    target, watch, lines = scenario(compose_cluster, "partition_zookeeper")
    assert any(target not in seen for seen in watch.registered), lines
    nothing_left(compose_cluster)


def test_one_way_loss_from_a_broker_shrinks_an_isr_but_not_its_registration(
    compose_cluster: ComposeCluster,
) -> None:
    target, watch, lines = scenario(compose_cluster, "partition_one_way")
    assert any(watch.short_isr), lines
    assert all(target in seen for seen in watch.registered), lines  # ZooKeeper still hears it
    nothing_left(compose_cluster)


def test_the_half_without_zookeeper_loses_its_registrations(
    compose_cluster: ComposeCluster,
) -> None:
    target, watch, lines = scenario(compose_cluster, "partition_halves")
    others = set(compose_cluster.broker_ids) - {target}
    assert any(not (others & seen) for seen in watch.registered), lines
    assert all(target in seen for seen in watch.registered), lines
    nothing_left(compose_cluster)


def test_a_degraded_link_slows_what_crosses_it_and_is_then_removed(
    compose_cluster: ComposeCluster,
) -> None:
    """Half a megabyte produced (acks=1) to a partition broker 1 leads crosses its link in well
    under a second; limited to 2 mbit/s, it takes at least about two."""
    topic = create_topic(compose_cluster, "degraded")

    def produce_seconds() -> float:
        async def produce() -> float:
            client = Client(compose_cluster.bootstrap_servers)
            try:
                leaders = await client.partitions(topic)
                number = next(p.partition for p in leaders if p.leader == 1)
                connection = await client.connection(1)
                records = build_message_set([Record(None, bytes(512 * 1024), 0)], magic=1)
                body = {
                    "acks": 1,
                    "timeout": 30000,
                    "topic_data": [
                        {"topic": topic, "data": [{"partition": number, "record_set": records}]}
                    ],
                }
                started = time.perf_counter()
                answer = await connection.request(ApiKey.PRODUCE, 2, body)
                seconds = time.perf_counter() - started
                (partition,) = answer["responses"][0]["partition_responses"]
                assert partition["error_code"] == 0, partition
                return seconds
            finally:
                await client.close()

        return runtime.run(produce())

    unshaped = produce_seconds()
    link = faults.LinkSettings(rate="2mbit", loss=0.0)
    holding = threading.Thread(
        target=faults.inject_network,
        args=(compose_cluster, "degraded", 1),
        kwargs={"hold_s": 8.0, "link": link},
    )
    holding.start()
    network = ContainerNetwork(compose_cluster)
    wait_until(lambda: len(netfaults.qdiscs(network, "broker-1")) == 2, 10, "both qdiscs")
    shaped = produce_seconds()
    holding.join(30)
    assert unshaped < 0.5 and shaped > 1.5, (unshaped, shaped)
    nothing_left(compose_cluster)
