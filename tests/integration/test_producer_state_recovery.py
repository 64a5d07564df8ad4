"""Where a broker's producer state comes from when it has no snapshot of its own. After a crash
it reads a log only if the log can hold producer batches (Kafka 2.1's shortcut): the broker opens
each log with its topic's settings from ZooKeeper, so a topic kept at format v1 on brokers whose
default is v2 is not read, however large, while a v2 topic is rebuilt (test_idempotent_producers'
SIGKILL step)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.conftest import wait_for_leaders
from tests.integration.test_idempotent_producers import leader_of
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
}
SEGMENT_BYTES = 16 * 1024 * 1024
LOG_BYTES = 256 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    local = LocalCluster(tmp_path_factory.mktemp("producer-state-recovery"))
    local.up(1, overrides=OVERRIDES, progress=lambda _: None)
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
