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
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidelog import rundata
from tidelog.cluster import faults, netfaults
from tidelog.cluster.availability import availability
from tidelog.cluster.delivery import (
    Acked,
    DeliveryConsumer,
    DeliveryProducer,
    DeliveryReport,
    verify,
)
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
    link_rate: str = "1mbit"  # degraded: tc's rate
    link_loss: float = 0.05  # degraded: the probability a packet is dropped, each way
    topic_config: dict[str, str] = field(default_factory=dict)  # the topic's own settings
    seed: int | None = None  # power_loss: where in each file's unwritten part it is cut
    disk_errors: faults.DiskErrorSettings = field(default_factory=faults.DiskErrorSettings)
    compacted: bool = False  # a compacted topic, keyed messages, the per-key audit
    # an idempotent producer (format 2.1): every message retried until acknowledged, and the
    # verdict's duplicates and order checks hold across the faults (KIP-98's promise)
    idempotent: bool = False


# Broker settings that make failures quick to detect in a scenario.
SCENARIO_OVERRIDES = {
    "zookeeper.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "3000",
    "log.segment.bytes": "65536",
    # a follower whose leader went away tries the next one after half a second (Kafka: 1 s),
    # in step with the short session and lag times above
    "replica.fetch.backoff.ms": "500",
}
# --format 2.1: brokers of Kafka 2.1's protocol, followers replicating by it
RELEASE_2_1 = {"broker.protocol.max.version": "2.1", "inter.broker.protocol.version": "2.1"}
# Failures that need more of the cluster and the topic: wipe_and_rebuild runs with tiered
# storage, so that the rebuilt broker replicates only the local part.
FAILURE_BROKER_OVERRIDES: dict[str, dict[str, str]] = {
    "wipe_and_rebuild": {
        "remote.log.storage.system.enable": "true",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
    },
}
# A compacted topic whose cleaner runs during the faults: small segments roll often, and a log
# a fifth dirty is cleaned (the brokers' log.cleaner.backoff.ms: COMPACTED_BROKER_OVERRIDES).
COMPACTED_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.2",
}
COMPACTED_BROKER_OVERRIDES = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.dedupe.buffer.size": "1048576",
}
COMPACTED_KEYS = 20  # per partition: each key written again every 20 messages
FAILURE_TOPIC_CONFIG: dict[str, dict[str, str]] = {
    "wipe_and_rebuild": {
        "remote.storage.enable": "true",
        "segment.bytes": "4096",  # small: the scenario's messages are a few dozen bytes
        "local.retention.bytes": "4096",
    },
}


def create_topic(cluster: faults.Cluster, settings: ScenarioSettings) -> str:
    name = f"scenario-{settings.failure.replace('_', '-')}-{int(time.time())}-{next(_topics)}"
    replication_factor = min(3, len(cluster.broker_ids))
    config = {
        "min.insync.replicas": str(min(2, replication_factor)),
        "message.format.version": settings.message_format,
    }
    if settings.failure == "clock_skew" and settings.message_format != "0.9.0":
        config["message.timestamp.type"] = "LogAppendTime"
    config.update(FAILURE_TOPIC_CONFIG.get(settings.failure, {}))
    if settings.compacted:
        config.update(COMPACTED_TOPIC_CONFIG)
    config.update(settings.topic_config)
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, name, settings.partitions, replication_factor, config)
    faults.wait_for_full_isr(cluster, name)
    return name


def write_run(
    run_dir: Path,
    settings: ScenarioSettings,
    topic: str,
    report: DeliveryReport,
    acked: list[Acked],
    events: list[rundata.Event],
    started_at: str,
    profile: dict,
) -> None:
    """The scenario's run directory (tidelog/rundata.py): its acknowledgements, the faults
    injected, what the check consumed, and the verdict in metadata.json."""
    rundata.write_table(
        run_dir,
        "acks",
        {
            "acked_at": [rundata.epoch_microseconds(a.acked_at) for a in acked],
            "latency_ms": [a.latency_ms for a in acked],
            "partition": [a.partition for a in acked],
            "offset": [a.offset for a in acked],
            "bytes": [len(a.value) for a in acked],
            "message": [a.value.decode() for a in acked],
        },
    )
    rundata.write_events(run_dir, events)
    received = [(p, o, v) for p, messages in sorted(report.received.items()) for o, v in messages]
    rundata.write_table(
        run_dir,
        "consumed",
        {
            "partition": [p for p, _, _ in received],
            "offset": [o for _, o, _ in received],
            "message": [
                None if v is None else v.decode("utf-8", "replace") for _, _, v in received
            ],
        },
    )
    metadata = rundata.RunMetadata(
        kind="scenario-replication",
        case=settings.failure,
        workload=rundata.WORKLOADS[settings.acks],
        started_at=started_at,
        ended_at=rundata.now(),
        settings=asdict(settings) | {"topic": topic},
        profile=profile,
        verdict=report.as_dict(),
    )
    rundata.write_metadata(run_dir, metadata)


async def run_scenario(
    cluster: faults.Cluster,
    settings: ScenarioSettings,
    progress: Callable[[str], None] = print,
    run_dir: Path | None = None,
) -> tuple[str, DeliveryReport]:
    """Runs the scenario; with ``run_dir``, also leaves its run directory there."""
    started_at = rundata.now()
    events: list[rundata.Event] = []
    full_isr_after: list[float] = []  # per fault: from its end to a full ISR again
    topic = await asyncio.to_thread(create_topic, cluster, settings)
    progress(f"topic {topic}: {settings.partitions} partitions, format {settings.message_format}")
    producer = DeliveryProducer(
        cluster.bootstrap_servers,
        topic,
        settings.acks,
        settings.rate,
        keys=COMPACTED_KEYS if settings.compacted else 0,
        produce_version=3 if settings.message_format == "2.1" else 2,
        idempotent=settings.idempotent,
    )
    stop = asyncio.Event()
    producing_from = time.time()
    producing = asyncio.create_task(producer.run(stop))
    consumer = DeliveryConsumer(cluster.bootstrap_servers, topic, compacted=settings.compacted)
    consuming = asyncio.create_task(consumer.run(stop))
    session_timeout = int(SCENARIO_OVERRIDES["zookeeper.session.timeout.ms"]) / 1000
    lag = int(SCENARIO_OVERRIDES["replica.lag.time.max.ms"]) / 1000
    try:
        await asyncio.sleep(settings.settle_seconds)
        for cycle in range(1, settings.cycles + 1):
            injected_at = time.time()
            target = "leader, follower, paused follower"
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
                if settings.failure == "wipe_and_rebuild" and isinstance(cluster, LocalCluster):
                    # the rebuild is to skip the remote part: there is one before the wipe
                    await asyncio.to_thread(faults.wait_for_offload, cluster, topic)
                brokers = await asyncio.to_thread(
                    faults.pick_targets, cluster, topic, settings.target
                )
                target = f"broker {brokers[0]}" if len(brokers) == 1 else f"brokers {brokers}"
                if settings.failure == "power_loss":
                    done = await asyncio.to_thread(
                        faults.power_loss,
                        cluster,
                        brokers,
                        session_timeout_s=session_timeout,
                        rng=random.Random(None if settings.seed is None else settings.seed + cycle),
                    )
                elif settings.failure == "disk_errors":
                    done = await asyncio.to_thread(
                        faults.disk_errors,
                        cluster,
                        brokers[0],
                        topic,
                        settings.disk_errors,
                        hold_s=session_timeout * 3,
                    )
                else:
                    done = await asyncio.to_thread(
                        faults.inject,
                        cluster,
                        settings.failure,
                        brokers[0],
                        session_timeout_s=session_timeout,
                        lag_s=lag,
                        link=faults.LinkSettings(settings.link_rate, settings.link_loss),
                    )
            healed_at = time.time()
            await asyncio.to_thread(faults.wait_for_full_isr, cluster, topic)
            full_isr_after.append(time.time() - healed_at)
            duration_ms = (time.time() - injected_at) * 1000
            events.append(rundata.Event(injected_at, settings.failure, target, duration_ms, done))
            progress(
                f"cycle {cycle}/{settings.cycles}: {done}; recovered "
                f"({len(producer.acked)} acknowledged, {producer.failed} failed so far)"
            )
            await asyncio.sleep(settings.settle_seconds)
    finally:
        stop.set()
        await producing
        producing_until = time.time()
        await consuming
        # an interrupted network fault is undone here, whatever its thread is still doing
        if isinstance(cluster, LocalCluster) and cluster.network is not None:
            await asyncio.to_thread(netfaults.heal, cluster.network)
    progress(
        f"produced {producer.sent}: {len(producer.acked)} acknowledged, {producer.failed} failed"
    )
    report = await verify(
        cluster, topic, producer.acked, consumer, producer, compacted=settings.compacted
    )
    report.availability = availability(
        [(a.partition, a.acked_at) for a in producer.acked],
        range(settings.partitions),
        [event.at for event in events],
        producing_from,
        producing_until,
        full_isr_after,
    )
    if run_dir is not None:
        profile = {
            "brokers": len(cluster.state.brokers),  # type: ignore[union-attr]
            "broker_overrides": SCENARIO_OVERRIDES,
        }
        write_run(run_dir, settings, topic, report, producer.acked, events, started_at, profile)
    return topic, report
