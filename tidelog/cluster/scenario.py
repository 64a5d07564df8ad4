"""``tidelog scenario replication``: produce steadily, break the cluster N times, check delivery.

A scenario in the style of Kafka's replication system test: a topic with replication factor 3
(or as many brokers as there are) and min.insync.replicas 2, messages produced at a steady rate
with every acknowledged offset recorded, a fault injected ``cycles`` times on the leader, a
follower or the controller (waiting each time until every partition has a leader and a full
ISR again), then every message consumed and checked by the delivery oracle. For
truncation_failover the producer holds while the fault goes in, so that it lands right after an
acknowledgement.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.cluster import faults
from tidelog.cluster.delivery import DeliveryProducer, DeliveryReport, verify
from tidelog.cluster.local import LocalCluster
from tidelog.controller import topics, zookeeper

_topics = itertools.count()


@dataclass(frozen=True)
class ScenarioSettings:
    failure: str
    target: str = "leader"
    message_format: str = "0.10.0"
    acks: int = -1
    cycles: int = 1
    rate: float = 200.0
    partitions: int = 3
    settle_seconds: float = 2.0


# Broker settings that make failures quick to detect in a scenario.
SCENARIO_OVERRIDES = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "log.segment.bytes": "65536",
}
# Failures that need more of the cluster and the topic: wipe_and_rebuild runs with tiered
# storage, so that the rebuilt broker replicates only the local part.
FAILURE_BROKER_OVERRIDES: dict[str, dict[str, str]] = {
    "wipe_and_rebuild": {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
    },
}
FAILURE_TOPIC_CONFIG: dict[str, dict[str, str]] = {
    "wipe_and_rebuild": {
        "remote.storage.enable": "true",
        "segment.bytes": "4096",  # small: the scenario's messages are a few dozen bytes
        "local.retention.bytes": "4096",
    },
}


def create_topic(cluster: LocalCluster, settings: ScenarioSettings) -> str:
    name = f"scenario-{settings.failure.replace('_', '-')}-{int(time.time())}-{next(_topics)}"
    replication_factor = min(3, len(cluster.state.brokers))  # type: ignore[union-attr]
    config = {
        "min.insync.replicas": str(min(2, replication_factor)),
        "message.format.version": settings.message_format,
    }
    if settings.failure == "clock_skew" and settings.message_format != "0.9.0":
        config["message.timestamp.type"] = "LogAppendTime"
    config.update(FAILURE_TOPIC_CONFIG.get(settings.failure, {}))
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, settings.partitions, replication_factor, config)
    faults.wait_for_full_isr(cluster, name)
    return name


async def run_scenario(
    cluster: LocalCluster,
    settings: ScenarioSettings,
    progress: Callable[[str], None] = print,
) -> tuple[str, DeliveryReport]:
    topic = await asyncio.to_thread(create_topic, cluster, settings)
    progress(f"topic {topic}: {settings.partitions} partitions, format {settings.message_format}")
    producer = DeliveryProducer(cluster.bootstrap_servers, topic, settings.acks, settings.rate)
    stop = asyncio.Event()
    producing = asyncio.create_task(producer.run(stop))
    session_timeout = int(SCENARIO_OVERRIDES["zookeeper.session.timeout.ms"]) / 1000
    lag = int(SCENARIO_OVERRIDES["replica.lag.time.max.ms"]) / 1000
    try:
        await asyncio.sleep(settings.settle_seconds)
        for cycle in range(1, settings.cycles + 1):
            if settings.failure == "truncation_failover":
                roles = await asyncio.to_thread(faults.truncation_roles, cluster, topic)
                await producer.hold()  # right after an acknowledgement, nothing more in flight
                try:
                    done = await asyncio.to_thread(
                        faults.truncation_failover,
                        cluster,
                        topic,
                        roles,
                        session_timeout_s=session_timeout,
                    )
                finally:
                    producer.resume()
            else:
                broker = await asyncio.to_thread(
                    faults.pick_target, cluster, topic, settings.target
                )
                done = await asyncio.to_thread(
                    faults.inject,
                    cluster,
                    settings.failure,
                    broker,
                    session_timeout_s=session_timeout,
                    lag_s=lag,
                )
            await asyncio.to_thread(faults.wait_for_full_isr, cluster, topic)
            progress(
                f"cycle {cycle}/{settings.cycles}: {done}; recovered "
                f"({len(producer.acked)} acknowledged, {producer.failed} failed so far)"
            )
            await asyncio.sleep(settings.settle_seconds)
    finally:
        stop.set()
        await producing
    progress(
        f"produced {producer.sent}: {len(producer.acked)} acknowledged, {producer.failed} failed"
    )
    report = await verify(cluster, topic, producer.acked)
    return topic, report
