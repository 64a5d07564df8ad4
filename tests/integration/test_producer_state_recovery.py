"""Where a broker's producer state comes from when it has no snapshot of its own. After a crash
it reads a log only if the log can hold producer batches (Kafka 2.1's shortcut): the broker opens
each log with its topic's settings from ZooKeeper, so a topic kept at format v1 on brokers whose
default is v2 is not read, however large, while a v2 topic is rebuilt (test_idempotent_producers'
SIGKILL step). A follower that starts at its leader's local log start (KIP-405) takes the state
of the remote segment below it from the tier, where each segment went with its snapshot."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

import pytest

from tests.integration.conftest import admin, wait_for_leaders
from tests.integration.test_idempotent_producers import (
    init_producer_id,
    leader_of,
    offset_of,
    produce,
)
from tidelog.cluster import faults
from tidelog.cluster.local import LocalCluster, wait_until
from tidelog.controller import topics, zookeeper
from tidelog.log.checkpoint import read_checkpoint
from tidelog.log.manager import RECOVERY_POINT_CHECKPOINT
from tidelog.perf.producer import ProducerSettings, run_producer

OVERRIDES = {
    "broker.protocol.max.version": "2.1",
    "inter.broker.protocol.version": "2.1",
    # the brokers' default format is v2: the v1 topic's own setting must be the one used
    "log.message.format.version": "2.1",
    "log.flush.offset.checkpoint.interval.ms": "200",
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "300",
    "log.retention.check.interval.ms": "300",
}
SEGMENT_BYTES = 16 * 1024 * 1024
LOG_BYTES = 256 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("producer-state-recovery"))
    local.up(2, overrides=OVERRIDES, progress=lambda _: None)
    yield local
    local.down(progress=lambda _: None)


def bytes_read(pid: int) -> int:
    """What the process has read through system calls so far (page cache hits included)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no rchar in /proc/{pid}/io")


def test_a_crashed_broker_does_not_read_a_large_v1_log_for_producer_state(cluster):
    topic = "old-format"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client,
            topic,
            1,
            1,
            {"message.format.version": "0.10.0", "segment.bytes": str(SEGMENT_BYTES)},
        )
    wait_for_leaders(cluster, topic, 1)
    broker = leader_of(cluster, topic)
    record_size = 512 * 1024
    settings = ProducerSettings(
        topic, LOG_BYTES // record_size, record_size, acks=1, batch_size=2 * record_size
    )
    summary, errors = asyncio.run(
        run_producer(cluster.bootstrap_servers, settings, progress=lambda _: None)
    )
    assert errors == {} and summary.records == LOG_BYTES // record_size
    directory = Path(cluster.directory) / f"broker-{broker}" / "logs"
    segments = sorted((directory / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 15
    last_base = int(segments[-1].name.split(".")[0])
    wait_until(
        lambda: (
            read_checkpoint(directory / RECOVERY_POINT_CHECKPOINT).get((topic, 0), 0) >= last_base
        ),
        30,
        "the recovery point checkpoint to reach the active segment",
    )

    cluster.signal_broker(broker, signal.SIGKILL)
    # as a release before producer state left it: no snapshot to start from
    for snapshot in (directory / f"{topic}-0").glob("*.snapshot"):
        snapshot.unlink()
    cluster.start_broker(broker)
    wait_for_leaders(cluster, topic, 1)

    read = bytes_read(cluster.broker(broker).pid)
    log_size = sum(path.stat().st_size for path in (directory / f"{topic}-0").glob("*.log"))
    assert log_size >= LOG_BYTES
    # the active segment's recovery and the broker's own start; the old rebuild read it all
    assert read < log_size // 4, f"the broker read {read} bytes of a {log_size}-byte log"
    assert sorted((directory / f"{topic}-0").glob("*.snapshot"))  # the next start needs none


def leader_view(cluster: LocalCluster, topic: str) -> dict:
    leader = leader_of(cluster, topic)
    described = admin(cluster, leader, f"/topics/{topic}") or {"partitions": [{}]}
    return described["partitions"][0]


def test_a_follower_rebuilt_from_the_tier_answers_a_retry_of_a_batch_only_the_tier_holds(
    cluster,
):
    topic = "tiered-idempotent"
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(
            client,
            topic,
            1,
            2,
            {
                "message.format.version": "2.1",
                "remote.storage.enable": "true",
                "segment.bytes": "16384",
                "local.retention.bytes": "16384",  # about one rolled segment stays local
            },
        )
    wait_for_leaders(cluster, topic, 1)
    faults.wait_for_full_isr(cluster, topic)
    leader = leader_of(cluster, topic)
    answer = init_producer_id(cluster, leader)
    producer = (answer["producer_id"], answer["producer_epoch"])
    assert offset_of(produce(cluster, topic, producer, 0)) == 0
    assert offset_of(produce(cluster, topic, producer, 2)) == 2
    # others' records push the producer's batches out of the leader's local log
    settings = ProducerSettings(topic, 2000, 100, acks=-1, batch_size=4000, message_format=2)
    summary, errors = asyncio.run(
        run_producer(cluster.bootstrap_servers, settings, progress=lambda _: None)
    )
    assert errors == {} and summary.records == 2000
    wait_until(
        lambda: leader_view(cluster, topic).get("local_log_start_offset", 0) > 4,
        60,
        f"{topic}'s leader to keep its first segments only in the tier",
    )

    follower = next(b for b in cluster.state.brokers if b != leader)
    cluster.stop_broker(follower)
    shutil.rmtree(Path(cluster.directory) / f"broker-{follower}" / "logs" / f"{topic}-0")
    cluster.start_broker(follower)
    faults.wait_for_full_isr(cluster, topic)
    cluster.stop_broker(leader)  # the rebuilt follower leads, with no local copy of offset 2
    try:
        faults.wait_until_leader(cluster, topic, lambda now: now == follower)
        wait_until(
            lambda: leader_view(cluster, topic).get("log_start_offset") == 0,
            30,
            f"broker {follower} to take {topic}'s log start from the tier",
        )
        assert leader_view(cluster, topic)["local_log_start_offset"] > 4
        assert offset_of(produce(cluster, topic, producer, 2)) == 2  # a duplicate
        assert offset_of(produce(cluster, topic, producer, 4)) == 2004
    finally:
        cluster.start_broker(leader)
        faults.wait_for_full_isr(cluster, topic)
