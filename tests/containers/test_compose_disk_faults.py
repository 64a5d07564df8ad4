"""The disk faults of a local cluster on compose.yaml's cluster: disk_errors (libfiu's POSIX
preload in the broker's container, switched on with fiu-ctrl through docker exec) and disk_full
(a small ext4 image mounted over the log dir in the container's mount namespace). Each runs
through the replication scenario with its delivery verdict, is seen to halt the broker while it
holds, and leaves no loop device, mount or fault variable behind."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

import pytest

from tests.containers.test_compose_network_faults import ClusterWatch, watching
from tidelog.cluster import disks, faults
from tidelog.cluster.compose import CONTAINER_LOG_DIR, ComposeCluster, run_docker
from tidelog.cluster.local import wait_until
from tidelog.cluster.scenario import ScenarioSettings, run_scenario

pytestmark = pytest.mark.containers

# docker/entrypoint.py's variables for the disk faults
FAULT_VARIABLES = ("TIDELOG_FIU_CONTROL=", "TIDELOG_WAIT_FOR_LOG_DIR_MOUNT=")


def scenario(cluster: ComposeCluster, settings: ScenarioSettings) -> tuple[int, ClusterWatch, str]:
    """The scenario; its target, what was seen while it ran, what it said."""
    lines: list[str] = []
    with watching(cluster) as watch:
        topic, report = asyncio.run(run_scenario(cluster, settings, progress=lines.append))
    said = "\n".join(lines)
    assert report.acked > 100, said
    assert report.ok, f"{topic}\n{said}\n{report.table()}"
    target = re.search(r"broker (\d)", said.split("cycle 1/1: ", 1)[-1])
    assert target is not None, said
    return int(target[1]), watch, said


def in_container(cluster: ComposeCluster, broker_id: int, argv: list[str]) -> str:
    return run_docker(cluster.exec_command(broker_id, argv), 60)


def nothing_left(cluster: ComposeCluster) -> None:
    """No fault variable in any broker's env file or container, no libfiu in any broker, no
    small disk recorded, attached, or mounted on the host or in a container."""
    for broker_id in cluster.broker_ids:
        assert cluster.fault_environment(broker_id) == {}, broker_id
        environment = cluster.inspect(cluster.broker(broker_id).service)["Config"]["Env"]
        assert not [v for v in environment if v.startswith(FAULT_VARIABLES)], environment
        assert "fiu" not in in_container(cluster, broker_id, ["cat", "/proc/1/maps"]), broker_id
        mounts = in_container(cluster, broker_id, ["cat", "/proc/1/mountinfo"])
        on_log_dir = [line for line in mounts.splitlines() if f" {CONTAINER_LOG_DIR} " in line]
        assert len(on_log_dir) == 1, on_log_dir  # the volume's alone
        assert disks.IN_CONTAINER_DEVICE not in on_log_dir[0], on_log_dir
    assert not (cluster.directory / disks.VOLUME_DISKS_FILE).exists()
    assert not list(cluster.directory.glob("*/small-disk.img"))
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(cluster.directory) not in attached, attached
    assert str(cluster.directory) not in Path("/proc/self/mounts").read_text()


def test_failing_disk_writes_halt_a_broker_and_lose_nothing_acknowledged(
    compose_cluster: ComposeCluster,
) -> None:
    settings = ScenarioSettings(
        "disk_errors",
        "leader",
        rate=100,
        settle_seconds=1.0,
        disk_errors=faults.DiskErrorSettings(("write",), 0.05),
    )
    target, watch, said = scenario(compose_cluster, settings)

    assert "halted on an I/O error" in said, said
    assert any(target not in seen for seen in watch.registered), said
    nothing_left(compose_cluster)


def test_a_full_disk_halts_a_broker_which_recovers_on_its_volume(
    compose_cluster: ComposeCluster,
) -> None:
    # v0 messages here, v1 in the disk_errors test: both formats, one run each
    settings = ScenarioSettings(
        "disk_full", "follower", message_format="0.9.0", rate=300, settle_seconds=1.0
    )
    target, watch, said = scenario(compose_cluster, settings)

    assert "halted on its I/O error" in said, said
    assert any(target not in seen for seen in watch.registered), said
    nothing_left(compose_cluster)


def test_a_removed_container_takes_its_small_disk_mount_and_loop_device_with_it(
    compose_cluster: ComposeCluster,
) -> None:
    """What `docker compose down` (or a killed scenario's teardown) does to a broker on a small
    disk: its container removed, the mount in its namespace and the loop device go with it; the
    image recorded in the cluster directory is then restored into the volume and removed."""
    broker_id = 3
    service = compose_cluster.broker(broker_id).service
    (volume,) = compose_cluster.log_dirs(broker_id)
    compose_cluster.stop_broker(broker_id)
    disk = disks.make_small_volume(compose_cluster.directory, service, volume, 1 << 20)
    compose_cluster.set_fault_environment(broker_id, {"TIDELOG_WAIT_FOR_LOG_DIR_MOUNT": "60"})
    try:
        compose_cluster.recreate_broker(broker_id, wait=False)
        pid = compose_cluster.broker_pid(broker_id)
        disks.mount_in_container(compose_cluster.directory, disk, pid, CONTAINER_LOG_DIR)
        assert disks.loops_of(disk.image), "the image is on a loop device while mounted"
        mounts = in_container(compose_cluster, broker_id, ["cat", "/proc/1/mountinfo"])
        on_log_dir = [line for line in mounts.splitlines() if f" {CONTAINER_LOG_DIR} " in line]
        assert disks.IN_CONTAINER_DEVICE in on_log_dir[-1], on_log_dir  # on top of the volume
        assert disk.image not in Path("/proc/self/mounts").read_text()  # not on the host

        compose_cluster.compose("rm", "--stop", "--force", service)

        wait_until(lambda: not disks.loops_of(disk.image), 30, "the loop device to be freed")
    finally:
        compose_cluster.set_fault_environment(broker_id, {})
        disks.release_volume_disks(compose_cluster.directory)
        compose_cluster.recreate_broker(broker_id)
    nothing_left(compose_cluster)
