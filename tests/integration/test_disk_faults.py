"""Disk faults: a broker's log dir on a small ext4 image that fills up under load (disk_full),
and its disk reads, writes or fsyncs failing with EIO through libfiu (disk_errors).

The broker halts on the write that fails (as Kafka 0.10 does on an unrecoverable I/O error),
its restart's recovery cuts the part of a message set the failed write left, and with the other
two replicas healthy nothing acknowledged with acks=all is lost. One cluster serves the module.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.conftest import wait_for_leaders
from tidelog.cluster import disks, faults
from tidelog.cluster.local import LocalCluster
from tidelog.cluster.scenario import SCENARIO_OVERRIDES, ScenarioSettings, run_scenario
from tidelog.controller import topics, zookeeper


@pytest.fixture(scope="module")
def cluster_on_disk(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("disk-full"))
    cluster.up(3, overrides=dict(SCENARIO_OVERRIDES), progress=lambda _: None)
    yield cluster
    cluster.down(progress=lambda _: None)


def halts(cluster: LocalCluster) -> int:
    """How many times the cluster's brokers have halted on an I/O error, by their logs."""
    return sum(
        cluster.broker(b).log_path.read_text(errors="replace").count(faults.HALTED)
        for b in cluster.broker_ids
    )


@pytest.mark.parametrize(
    ("target", "message_format"), [("leader", "0.10.0"), ("follower", "0.9.0")]
)
def test_a_broker_whose_disk_fills_halts_recovers_and_loses_nothing_acknowledged(
    cluster_on_disk, target, message_format
):
    halts_before = halts(cluster_on_disk)
    settings = ScenarioSettings("disk_full", target, message_format, rate=300, settle_seconds=1.0)
    topic, report = asyncio.run(run_scenario(cluster_on_disk, settings, progress=lambda _: None))

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 300, report.table()
    assert halts(cluster_on_disk) == halts_before + 1
    assert not (cluster_on_disk.directory / disks.DISKS_FILE).exists()
    assert not any(
        disks.mounted(cluster_on_disk.directory / f"broker-{b}" / "logs")
        for b in cluster_on_disk.broker_ids
    )


def test_a_small_disk_left_by_a_killed_command_is_released_with_its_contents(tmp_path):
    log_dir = tmp_path / "broker-1" / "logs"
    (log_dir / "t-0").mkdir(parents=True)
    (log_dir / "t-0" / "00000000000000000000.log").write_bytes(b"m" * 1000)
    disk = disks.make_small(tmp_path, log_dir, headroom=4096)
    assert disks.mounted(log_dir)
    (log_dir / "t-0" / "00000000000000001000.log").write_bytes(b"n" * 100)  # written there

    disks.release_all(tmp_path)  # what cluster down does

    assert not disks.mounted(log_dir)
    assert sorted(p.name for p in (log_dir / "t-0").iterdir()) == [
        "00000000000000000000.log",
        "00000000000000001000.log",
    ]
    assert not (log_dir / disks.BALLAST).exists()
    assert not (tmp_path / disks.DISKS_FILE).exists()
    assert not (tmp_path / "broker-1" / "small-disk.img").exists()
    assert disk.set_aside and not (tmp_path / "broker-1" / "logs.set-aside").exists()


@pytest.mark.parametrize(
    ("target", "message_format", "operations"),
    [("leader", "0.9.0", ("write",)), ("follower", "0.10.0", ("write", "fsync"))],
)
def test_a_broker_whose_disk_writes_fail_halts_recovers_and_loses_nothing_acknowledged(
    cluster_on_disk, target, message_format, operations
):
    halts_before = halts(cluster_on_disk)
    settings = ScenarioSettings(
        "disk_errors",
        target,
        message_format,
        rate=200,
        settle_seconds=1.0,
        disk_errors=faults.DiskErrorSettings(operations, probability=0.05),
    )
    topic, report = asyncio.run(run_scenario(cluster_on_disk, settings, progress=lambda _: None))

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 200, report.table()
    assert halts(cluster_on_disk) == halts_before + 1
    # it runs again without the preload
    for broker_id in cluster_on_disk.broker_ids:
        environment = Path(f"/proc/{cluster_on_disk.broker(broker_id).pid}/environ").read_bytes()
        assert b"LD_PRELOAD" not in environment


def test_a_leader_whose_disk_reads_fail_answers_with_an_error_keeps_serving_and_loses_nothing(
    cluster_on_disk,
):
    """Kafka 0.10 answers a fetch whose read failed with an error code and goes on (only a
    failed write or flush halts a broker): the followers and consumers fetch again, and once
    the reads work every acknowledged message is read back."""
    halts_before = halts(cluster_on_disk)
    errors_before = read_errors(cluster_on_disk)
    settings = ScenarioSettings(
        "disk_errors",
        "leader",
        "0.10.0",
        rate=200,
        settle_seconds=1.0,
        disk_errors=faults.DiskErrorSettings(("read",), probability=0.2),
    )
    topic, report = asyncio.run(run_scenario(cluster_on_disk, settings, progress=lambda _: None))

    assert report.ok, f"{topic}:\n{report.table()}"
    assert report.acked > 200, report.table()
    assert halts(cluster_on_disk) == halts_before
    assert read_errors(cluster_on_disk) > errors_before


def read_errors(cluster: LocalCluster) -> int:
    """The brokers' logged EIO errors (errno 5, 'Input/output error')."""
    return sum(
        cluster.broker(b).log_path.read_text(errors="replace").count("Input/output error")
        for b in cluster.broker_ids
    )


def a_volume(tmp_path: Path) -> Path:
    """A compose broker's log volume as this host sees it, with one segment."""
    volume = tmp_path / "volumes" / "broker-1" / "_data"
    (volume / "t-0").mkdir(parents=True)
    (volume / "t-0" / "00000000000000000000.log").write_bytes(b"m" * 1000)
    return volume


def test_a_compose_brokers_small_disk_goes_with_its_mount_namespace_and_keeps_what_was_written(
    tmp_path,
):
    """The small disk of disk_full on a compose cluster, with a mount namespace of its own
    (``unshare``) for the container's: the mount is not the host's, the namespace's end frees
    the loop device, and what was written there goes back into the volume."""
    volume = a_volume(tmp_path)
    disk = disks.make_small_volume(tmp_path, "broker-1", volume, headroom=4096)
    target = tmp_path / "log-dir-in-the-container"
    target.mkdir()
    container = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "60"])
    try:
        time.sleep(0.5)  # unshare has made its namespace and exec'd sleep
        disks.mount_in_container(tmp_path, disk, container.pid, str(target))
        assert disks.loops_of(disk.image) and not disks.mounted(target)  # not the host's
        written = target / "t-0" / "00000000000000001000.log"
        subprocess.run(
            [
                "nsenter",
                f"--mount=/proc/{container.pid}/ns/mnt",
                "--",
                "sh",
                "-c",
                f"printf nnnn > {written}",
            ],
            check=True,
        )
    finally:
        container.kill()
        container.wait()

    disks.release_volume_disks(tmp_path)  # what ComposeCluster.down and the fault's end do

    assert not disks.loops_of(disk.image)
    assert sorted(p.name for p in (volume / "t-0").iterdir()) == [
        "00000000000000000000.log",
        "00000000000000001000.log",
    ]
    assert not (volume / disks.BALLAST).exists() and not (volume / "lost+found").exists()
    assert not (tmp_path / disks.VOLUME_DISKS_FILE).exists()
    assert not Path(disk.image).exists()


def test_a_small_disk_no_container_was_given_leaves_the_volume_as_it_was(tmp_path):
    """A command killed after it made the image and before a container had it: the image may
    hold a part of a copy, so nothing of it goes back into the volume."""
    volume = a_volume(tmp_path)
    disk = disks.make_small_volume(tmp_path, "broker-1", volume, headroom=4096)
    (volume / "t-0" / "00000000000000000000.log").write_bytes(b"v" * 10)  # not on the image

    disks.release_volume_disks(tmp_path)

    assert (volume / "t-0" / "00000000000000000000.log").read_bytes() == b"v" * 10
    assert not Path(disk.image).exists() and not disks.loops_of(disk.image)
    assert not (tmp_path / disks.VOLUME_DISKS_FILE).exists()


def test_a_broker_under_libfius_preload_loads_no_shared_object_once_its_threads_run(
    cluster_on_disk,
):
    """libfiu's preload can hang a process that loads a shared object while its other threads
    make their first calls (tidelog.fault_preload): a broker under it, serving producers and
    consumers of every codec as leader and follower, loads all of its before it starts a
    thread. The dynamic loader says what it loads (LD_DEBUG=files) in the broker's log."""
    broker_id = 3
    log_path = cluster_on_disk.broker(broker_id).log_path
    prefix = Path(cluster_on_disk.broker(broker_id).config).parent / "fiu-ctrl"
    cluster_on_disk.stop_broker(broker_id)
    written_before = log_path.stat().st_size
    try:
        cluster_on_disk.start_broker(
            broker_id, launcher=["env", "LD_DEBUG=files", "fiu-run", "-x", "-f", str(prefix)]
        )
        topic = f"preloaded-{time.time_ns()}"
        with zookeeper.session(cluster_on_disk.zookeeper) as client:
            topics.create_topic(client, topic, 3, 3, {"message.format.version": "2.1"})
        wait_for_leaders(cluster_on_disk, topic, 3)
        servers = cluster_on_disk.bootstrap_servers
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            producer = Producer({"bootstrap.servers": servers, "compression.type": codec})
            for n in range(30):
                producer.produce(topic, key=b"%d" % n, value=codec.encode() * 20, partition=n % 3)
            assert producer.flush(30) == 0, codec
        del producer
        consumer = Consumer(
            {"bootstrap.servers": servers, "group.id": topic, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + 60
        while read < 120 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            read += message is not None and message.error() is None
        consumer.close()
        assert read == 120
    finally:
        try:
            if cluster_on_disk.broker(broker_id).alive:
                cluster_on_disk.stop_broker(broker_id)
        finally:
            cluster_on_disk.start_broker(broker_id)

    written = log_path.read_bytes()[written_before:].decode(errors="replace").splitlines()
    started = next(
        (i for i, line in enumerate(written) if f"broker {broker_id} starting" in line), None
    )
    assert started is not None, "\n".join(written[-20:])
    loaded_later = [line for line in written[started:] if "dynamically loaded by" in line]
    assert any("dynamically loaded by" in line for line in written[:started])  # it says so
    assert loaded_later == []
