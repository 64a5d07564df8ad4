"""The clusters the cases run on: the brokers' settings, the cases' topic and its settings, and
its history, loaded and settled on every replica (and, with the tier, moved there) before the
first case starts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from pathlib import Path

from tidelog.cluster import faults
from tidelog.cluster.local import ClusterError, LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.perf.cases.profiles import MB, Profile
from tidelog.perf.producer import ProducerSettings, run_producer
from tidelog.records.format import Codec
from tidelog.replication import throttle

TOPIC = "tiered-storage"
REPLICATION_FACTOR = 3


# Both clusters: the remote tier on every broker (only the topic says whether it is used), and
# failure detection quick enough for a rebuild in a test.
BROKER_OVERRIDES = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "10000",
}


def topic_config(profile: Profile, tiered: bool, loading: bool = False) -> dict[str, str]:
    """The topic's settings in the cases; ``loading``: while the history goes in, with the tier
    but no local retention yet (see load_history)."""
    config = {"min.insync.replicas": "2", "segment.bytes": str(profile.segment_bytes)}
    if tiered:
        config["remote.storage.enable"] = "true"
        if not loading:
            config["local.retention.bytes"] = str(profile.local_retention_bytes)
    return config


def create_topic(cluster: LocalCluster, profile: Profile, tiered: bool) -> None:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client,
            TOPIC,
            profile.partitions,
            REPLICATION_FACTOR,
            topic_config(profile, tiered, loading=True),
        )
    faults.wait_for_full_isr(cluster, TOPIC)


def local_bytes(cluster: LocalCluster, broker_id: int) -> int:
    """The bytes of the topic's segments on the broker's disk (retention deletes meanwhile)."""
    logs = Path(cluster.broker(broker_id).config).parent / "logs"
    total = 0
    for path in logs.glob(f"{TOPIC}-*/*.log"):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


NUDGE_INTERVAL = 2.0


async def settle_history(cluster: LocalCluster, profile: Profile, seed: int, progress) -> None:
    """Waits until every replica holds the whole history. Meanwhile one record goes to every
    partition every NUDGE_INTERVAL seconds: after a burst, followers of some partitions were
    seen to stop thousands of offsets behind their leader until the leader appended again
    (runs on 2 cores, 60 partitions; broker logs in /work/runs/s5-trial-stuck-*), and the
    cases' traffic would otherwise start with those followers still catching up."""
    deadline = time.monotonic() + profile.rebuild_timeout_s
    nudge = ProducerSettings(
        topic=TOPIC,
        num_records=profile.partitions,
        record_size=profile.record_size,
        acks=1,
        batch_size=1,  # one record per produce request; the requests go round the partitions
        seed=seed + 2,
    )
    nudges = 0
    while not await asyncio.to_thread(replicas_caught_up, cluster):
        if time.monotonic() > deadline:
            raise ClusterError(
                f"timed out after {profile.rebuild_timeout_s} s waiting for every replica of "
                f"{TOPIC} to hold what its leader holds"
            )
        await run_producer(cluster.bootstrap_servers, nudge, progress=lambda _: None)
        nudges += 1
        await asyncio.sleep(NUDGE_INTERVAL)
    if nudges:
        progress(f"history: every replica caught up, after {nudges} records to each partition")


def replicas_caught_up(cluster: LocalCluster) -> bool:
    """Every replica of the topic ends where its leader's log ends, as each broker's admin API
    says: more than a full ISR, which keeps a follower up to replica.lag.time.max.ms behind."""
    ends: dict[int, list[int]] = {}
    for broker_id in cluster.broker_ids:
        port = cluster.broker(broker_id).admin_port
        try:
            url = f"http://127.0.0.1:{port}/topics/{TOPIC}"
            with urllib.request.urlopen(url, timeout=10) as reply:
                described = json.loads(reply.read())
        except (OSError, ValueError):
            return False  # not up, or not serving the topic yet
        for entry in described["partitions"]:
            if broker_id in entry["replicas"]:
                ends.setdefault(entry["partition"], []).append(entry.get("log_end_offset", -1))
    return bool(ends) and all(
        len(offsets) == REPLICATION_FACTOR and len(set(offsets)) == 1 for offsets in ends.values()
    )


def set_rebuild_throttle(cluster: LocalCluster, mb_per_s: float | None) -> None:
    """KIP-73's throttle on the topic's replicas out of the ISR (the rebuilding ones: a replica
    in sync is never throttled), ``mb_per_s`` on every broker, as kafka-configs.sh sets it;
    None removes it."""
    rate = None if mb_per_s is None else str(int(mb_per_s * MB))
    replicas = None if mb_per_s is None else "*"
    with zookeeper.session(cluster.zookeeper) as client:
        for broker_id in cluster.broker_ids:
            zookeeper.change_broker_config(
                client, broker_id, {throttle.LEADER_RATE: rate, throttle.FOLLOWER_RATE: rate}
            )
        topics.alter_topic_config(
            client,
            TOPIC,
            {throttle.LEADER_REPLICAS: replicas, throttle.FOLLOWER_REPLICAS: replicas},
        )


def set_local_retention(cluster: LocalCluster, profile: Profile) -> None:
    with zookeeper.session(cluster.zookeeper) as client:
        topics.alter_topic_config(
            client, TOPIC, {"local.retention.bytes": str(profile.local_retention_bytes)}
        )


def offloaded(cluster: LocalCluster, profile: Profile) -> bool:
    """Whether each broker is down to what local retention keeps for good: per partition, its
    local.retention.bytes and the active segment. The older data is in the tier and its local
    files are gone, so the history's last copies and deletions are not measured as part of
    the first case."""
    per_broker = profile.partitions * REPLICATION_FACTOR / profile.brokers
    limit = per_broker * (profile.local_retention_bytes + profile.segment_bytes)
    return all(local_bytes(cluster, b) <= limit for b in cluster.broker_ids)


async def load_history(
    cluster: LocalCluster, profile: Profile, tiered: bool, seed: int, progress
) -> None:
    """Fills the topic with ``history_mb_per_broker`` (acks=1, as fast as it goes); with the
    tier, then sets the topic's local retention and waits until the old segments have moved
    there and local retention removed them. Local retention starts only once every replica holds
    the whole history (a full ISR is not enough): a follower that falls behind the leader's
    local log start during a load as fast as the cluster takes is started again at it, and such
    followers took minutes to be back in the ISR, or did not come back; the cases start from the
    same state either way."""
    topic_bytes = profile.history_mb_per_broker * MB * profile.brokers / REPLICATION_FACTOR
    settings = ProducerSettings(
        topic=TOPIC,
        num_records=int(topic_bytes / profile.record_size),
        record_size=profile.record_size,
        acks=1,
        codec=Codec.SNAPPY,
        batch_size=256 * 1024,
        seed=seed + 1,
        keys=profile.keys,
    )
    summary, errors = await run_producer(cluster.bootstrap_servers, settings, progress=progress)
    if errors:
        raise RuntimeError(f"loading the history failed: {errors}")
    progress(f"history: {summary.line('records loaded')}")
    await settle_history(cluster, profile, seed, progress)
    await asyncio.to_thread(faults.wait_for_full_isr, cluster, TOPIC, profile.rebuild_timeout_s)
    if tiered:
        await asyncio.to_thread(set_local_retention, cluster, profile)
        await asyncio.to_thread(
            wait_until,
            lambda: offloaded(cluster, profile),
            profile.rebuild_timeout_s,
            "the history's old segments to move to the tier (local retention)",
            0.5,
        )
        sizes = ", ".join(f"{local_bytes(cluster, b) / MB:.1f}" for b in cluster.broker_ids)
        progress(f"history moved to the tier; local MB per broker: {sizes}")
