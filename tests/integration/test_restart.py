"""Brokers stopped mid-produce: cleanly (SIGTERM) nothing acknowledged is lost; killed (SIGKILL)
the log recovers to a consistent state whose indexes verify."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from tests.integration.conftest import wait_for_leaders
from tests.integration.test_kafka_python import consume_all
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.processes import processes_with
from tidelog.controller import topics, zookeeper


@pytest.fixture
def single_broker(tmp_path):
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(
        1,
        overrides={"log.segment.bytes": "4000", "log.index.interval.bytes": "512"},
        progress=lambda _: None,
    )
    with zookeeper.session(cluster.zookeeper) as client:
        topics.create_topic(client, "events", 2, 1)
    wait_for_leaders(cluster, "events", 2)
    yield cluster
    cluster.down(progress=lambda _: None)


class BackgroundProducer:
    """Produces numbered messages with acks=1 until stopped, remembering each acknowledged one."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers,
            api_version=(0, 10, 1),
            acks=1,
            retries=0,
            max_block_ms=2000,
            request_timeout_ms=2000,
        )
        self.acked: list[bytes] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        number = 0
        while not self._stop.is_set():
            value = b"message-%06d" % number
            number += 1
            try:
                self.producer.send("events", key=value, value=value).get(timeout=3)
                self.acked.append(value)
            except Exception:
                self.failed += 1
                time.sleep(0.05)

    def wait_for(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} messages acknowledged"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.producer.close(timeout=5)


def segment_files(cluster: LocalCluster) -> list[Path]:
    return sorted(Path(cluster.directory).glob("broker-1/logs/events-*/*"))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_broker_stopped_mid_produce_keeps_what_it_acknowledged(single_broker, how):
    producer = BackgroundProducer(single_broker)
    producer.wait_for(300)

    single_broker.signal_broker(1, signal.Signals[how])
    time.sleep(0.5)
    single_broker.start_broker(1)
    wait_for_leaders(single_broker, "events", 2)
    producer.wait_for(len(producer.acked) + 100)
    producer.stop()

    consumed = [r.value for r in consume_all(single_broker, "events")]
    assert set(producer.acked) <= set(consumed)
    assert len(consumed) == len(set(consumed))  # acks=1 without retries: no duplicates

    single_broker.stop_broker(1)
    files = [str(p) for p in segment_files(single_broker) if p.suffix in (".index", ".timeindex")]
    logs = [str(p) for p in segment_files(single_broker) if p.suffix == ".log"]
    assert len(logs) > 2  # the run rolled segments
    verified = subprocess.run(
        [sys.executable, "-m", "tidelog.cli", "dump-log", "--verify-index", *files, *logs],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr
    broker_log = (Path(single_broker.directory) / "broker-1" / "broker.log").read_text()
    if how == "SIGTERM":
        assert "after a clean shutdown" in broker_log
    else:
        assert "after an unclean shutdown" in broker_log


def test_down_stops_a_broker_that_another_command_restarted(tmp_path):
    """A cluster object read its state before a command (another object, as every `tidelog`
    command is) restarted a broker: its ``down`` stops the broker running now, not the one it
    remembers (a canary test left such a broker running after its cluster was gone)."""
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(1, progress=lambda _: None)
    command = LocalCluster(tmp_path / "cluster")
    try:
        command.stop_broker(1)
        command.start_broker(1)
        restarted = command.broker(1).pid
        assert restarted is not None
    finally:
        cluster.down(progress=lambda _: None)

    assert LocalCluster(tmp_path / "cluster").broker(1).pid is None
    stat = Path(f"/proc/{restarted}/stat")  # exited: gone, or a zombie until its parent reaps it
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_broker_a_killed_command_did_not_record_is_stopped_by_the_next_start_and_by_down(
    tmp_path,
):
    """A command killed between starting a broker and saving the cluster's state leaves the
    broker running and unrecorded (a canary test's resumed command then started a second one,
    which failed on the taken port, and the first outlived the cluster): the next start stops
    it first, and so does down."""
    cluster = LocalCluster(tmp_path / "cluster")
    cluster.up(1, progress=lambda _: None)
    config = cluster.broker(1).config

    def forget_broker_1() -> int:
        running = cluster.broker(1).pid
        cluster.broker(1).process = None  # the state the killed command saved
        cluster._save()
        return running

    def brokers_serving_it() -> list[int]:
        return processes_with(f"--config {config}")

    try:
        orphan = forget_broker_1()
        cluster.start_broker(1)
        assert brokers_serving_it() == [cluster.broker(1).pid]
        assert orphan not in brokers_serving_it()

        forget_broker_1()
    finally:
        cluster.down(progress=lambda _: None)
    assert brokers_serving_it() == []
