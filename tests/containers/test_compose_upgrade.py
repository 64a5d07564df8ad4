"""`tidelog upgrade roll`: a compose cluster moved from one image to another, one broker service at
a time, while a producer sends with acks=all; the upgrade's checks after every broker, the
delivery oracle's verdict at the end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from tests.containers.conftest import produce_through
from tidelog.cluster import faults
from tidelog.cluster.compose import BROKERS, ComposeCluster
from tidelog.cluster.delivery import verify
from tidelog.cluster.scenario import SCENARIO_OVERRIDES
from tidelog.controller import topics, zookeeper
from tidelog.upgrade import checks

pytestmark = pytest.mark.containers

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "roll-old", "roll-new"


@pytest.fixture(scope="module")
def roll_images(docker_engine: None) -> None:
    """tidelog:roll-old, an older release as its image would be built (broker.protocol.max.version
    0.10.0 by default, in the image's environment), and tidelog:roll-new, today's image."""
    dockerfile = b"FROM tidelog:dev\nENV KAFKA_BROKER_PROTOCOL_MAX_VERSION=0.10.0\n"
    subprocess.run(
        ["docker", "build", "-q", "-t", f"tidelog:{OLD}", "-"],
        input=dockerfile,
        capture_output=True,
        check=True,
        timeout=300,
    )
    subprocess.run(["docker", "tag", "tidelog:dev", f"tidelog:{NEW}"], check=True, timeout=60)


def client_release(cluster: ComposeCluster, broker_id: int) -> tuple[int, ...]:
    """The release kafka-python infers from the broker's ApiVersions answer."""
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{cluster.broker(broker_id).port}")
    try:
        return tuple(consumer.config["api_version"][:3])
    finally:
        consumer.close()


def test_roll_moves_every_broker_to_another_image_under_a_producer(
    roll_images: None, tmp_path: Path
) -> None:
    cluster = ComposeCluster.create(
        tmp_path,
        ROOT / "compose.yaml",
        project=f"tidelog-roll-{os.getpid()}",
        settings=SCENARIO_OVERRIDES,
    )
    for broker_id in BROKERS:
        cluster.set_image_tag(broker_id, OLD)
    cluster.up(build=False, progress=lambda _: None)
    try:
        assert {client_release(cluster, b) for b in BROKERS} == {(0, 10, 0)}
        topic = "rolled"
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(client, topic, 3, 3, {"min.insync.replicas": "2"})
        faults.wait_for_full_isr(cluster, topic)
        # the upgrade's plan reads each broker's settings from its container, through the seam
        plan = subprocess.run(
            [
                *(sys.executable, "-m", "tidelog.cli", "upgrade", "plan"),
                *("--dir", str(tmp_path), "--to", "0.10.1"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert plan.returncode == 0, plan.stderr
        for broker_id in BROKERS:
            assert f"roll broker {broker_id} with broker.protocol.max.version=0.10.1" in plan.stdout
        roll = [
            *(sys.executable, "-m", "tidelog.cli", "upgrade", "roll"),
            *("--dir", str(tmp_path), "--image-tag", NEW),
        ]
        started = time.time()
        producer, done = asyncio.run(produce_through(cluster.bootstrap_servers, topic, roll))
        assert done.returncode == 0, done.stdout + done.stderr
        for broker_id in BROKERS:
            assert f"broker {broker_id} runs tidelog:{NEW}; back in every ISR" in done.stdout
        images = {cluster.inspect(f"broker-{b}")["Config"]["Image"] for b in BROKERS}
        assert images == {f"tidelog:{NEW}"}
        assert {client_release(cluster, b) for b in BROKERS} == {(0, 10, 1)}
        checks.wait_in_sync(cluster, 60)  # a follower of a moved leader may be a moment late
        during = [a for a in producer.acked if started < a.acked_at < time.time() - 2]
        assert len(during) > 100, f"{len(during)} acknowledged during the roll"
        report = asyncio.run(verify(cluster, topic, producer.acked))
        assert report.ok, report.table()
        # run again, the roll finds every broker there already
        again = subprocess.run(roll, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert again.stdout.count(f"runs tidelog:{NEW} already") == len(BROKERS)
    finally:
        cluster.down(progress=lambda _: None)


def test_upgrade_run_takes_a_compose_cluster_from_format_v0_to_v1_under_a_producer(
    docker_engine: None, tmp_path: Path
) -> None:
    """`tidelog upgrade run --dir DIR` on a compose cluster of 0.9.0 brokers: every phase's
    broker recreated with its new settings, the run's own checks of the new messages' format
    passed, every acknowledged message there once; the brokers answer as 0.10.0 at the end."""
    cluster = ComposeCluster.create(
        tmp_path,
        ROOT / "compose.yaml",
        project=f"tidelog-upgrade-{os.getpid()}",
        settings={**SCENARIO_OVERRIDES, "broker.protocol.max.version": "0.9.0"},
    )
    cluster.up(build=False, progress=lambda _: None)
    try:
        # (kafka-python cannot bootstrap from a 0.9 broker: it asks for ApiVersions first)
        assert {cluster.broker_settings(b)["broker.protocol.max.version"] for b in BROKERS} == {
            "0.9.0"
        }
        topic = "upgraded"
        with zookeeper.session(cluster.zookeeper) as client:
            topics.create_topic(client, topic, 3, 3, {"min.insync.replicas": "2"})
        faults.wait_for_full_isr(cluster, topic)
        upgrade = [
            *(sys.executable, "-m", "tidelog.cli", "upgrade", "run"),
            *("--dir", str(tmp_path), "--to", "0.10.0"),
        ]
        # a 0.9 producer (Produce v1, format v0 messages) throughout, as the old clients are
        producer, done = asyncio.run(
            produce_through(cluster.bootstrap_servers, topic, upgrade, produce_version=1)
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the cluster runs 0.10.0: every step done" in done.stdout
        # the run checked the messages appended after each phase; after the last, format v1
        assert "each in format v1 (topic overrides aside) as expected" in done.stdout, done.stdout
        journal = json.loads((tmp_path / "upgrade-journal.json").read_text())
        assert [s["status"] for s in journal["steps"]] == ["done"] * 9
        assert {client_release(cluster, b) for b in BROKERS} == {(0, 10, 0)}
        checks.wait_in_sync(cluster, 60)  # a follower of a moved leader may be a moment late
        report = asyncio.run(verify(cluster, topic, producer.acked))
        assert report.ok, report.table()
    finally:
        cluster.down(progress=lambda _: None)
